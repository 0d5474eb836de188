//! Why tls-perf cannot start. Each message says what to change. Failures during the run
//! (refused connections, resets, handshake alerts) are never errors of this kind: they are
//! counted and reported.

use std::fmt;
use std::io;
use std::path::PathBuf;

use openssl::error::ErrorStack;

#[derive(Debug)]
pub enum StartError {
    /// `-c` named nothing OpenSSL knows for the chosen TLS version.
    Ciphers {
        list: String,
        reason: String,
    },
    /// `-C` named a group OpenSSL does not know.
    Curves {
        list: String,
        reason: ErrorStack,
    },
    /// Building the OpenSSL client context failed.
    Tls(ErrorStack),
    KeyLog {
        path: PathBuf,
        source: io::Error,
    },
    /// More peers than the process may hold descriptors for.
    Descriptors {
        needed: u64,
        soft: u64,
        hard: u64,
    },
    ServerPid {
        pid: u32,
        source: io::Error,
    },
    Thread(io::Error),
    Signals(io::Error),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Ciphers { list, reason } => write!(
                f,
                "cannot use cipher list '{list}': {reason}; list valid names with \
                 `openssl ciphers -v` (TLS 1.3 suites start with TLS_)"
            ),
            StartError::Curves { list, reason } => write!(
                f,
                "cannot use curves '{list}' ({reason}); try X25519, P-256 or P-384 \
                 (`openssl ecparam -list_curves`)"
            ),
            StartError::Tls(e) => write!(f, "cannot set up the OpenSSL client context: {e}"),
            StartError::KeyLog { path, source } => write!(
                f,
                "cannot open key log file {}: {source}; pass a writable path to --keylogfile",
                path.display()
            ),
            StartError::Descriptors { needed, soft, hard } => write!(
                f,
                "{needed} file descriptors are needed (-l × -t peers plus a few for the tool), \
                 but this process may open only {soft} (RLIMIT_NOFILE soft {soft}, hard {hard}); \
                 lower -l or -t, or raise the hard limit (ulimit -Hn, limits.conf)"
            ),
            StartError::ServerPid { pid, source } => write!(
                f,
                "cannot read /proc/{pid}/stat for --server-pid {pid}: {source}; pass the pid \
                 of a running server (e.g. nginx's master process)"
            ),
            StartError::Thread(e) => write!(f, "cannot start a worker thread: {e}"),
            StartError::Signals(e) => write!(f, "cannot install the SIGINT handler: {e}"),
        }
    }
}

impl std::error::Error for StartError {}
