//! Running as a service: the pid file (`pid` directive) that `proxy -s SIGNAL` reads, and
//! systemd's readiness protocol (`Type=notify`), spoken by hand: one datagram per state
//! change to the socket named by `$NOTIFY_SOCKET`, nothing at all when it is unset.

use std::fs;
use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

use config::PidFile;

#[derive(Debug)]
pub enum ServiceError {
    /// `pid PATH` names a file this process cannot write.
    WritePid { path: PathBuf, reason: io::Error },
    /// `proxy -s`: no pid file to read.
    ReadPid { path: PathBuf, reason: io::Error },
    /// `proxy -s`: the pid file holds no process id.
    BadPid { path: PathBuf },
    /// `proxy -s`: `pid off` in the configuration.
    NoPidFile,
    /// `proxy -s`: the signal could not be delivered.
    Signal { pid: i32, reason: io::Error },
    /// A live instance holds the pid file of this configuration.
    AlreadyRunning { path: PathBuf, pid: Option<i32> },
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceError::WritePid { path, reason } => write!(
                f,
                "cannot write the pid file {}: {reason} (create its directory, run with permission to write it, or set `pid off;`)",
                path.display()
            ),
            ServiceError::ReadPid { path, reason } => write!(
                f,
                "cannot read the pid file {}: {reason} (is the proxy running with this configuration? `-c` names it)",
                path.display()
            ),
            ServiceError::BadPid { path } => write!(
                f,
                "the pid file {} does not hold a process id; remove it and signal the process by hand",
                path.display()
            ),
            ServiceError::NoPidFile => f.write_str(
                "the configuration says `pid off;`: no pid file names the running process; signal it with kill",
            ),
            ServiceError::Signal { pid, reason } => write!(
                f,
                "cannot signal process {pid}: {reason} (a stale pid file? a process of another user?)"
            ),
            ServiceError::AlreadyRunning { path, pid } => write!(
                f,
                "another instance{} is running with this configuration (its pid file {} is locked); \
                 not starting beside it: stop it first (`proxy -s quit -c CONFIG`), or start with \
                 --upgrade to take over from it (a hot binary upgrade: start the new binary with \
                 --upgrade, then `proxy -s quit` the old one)",
                pid.map_or_else(String::new, |p| format!(" (pid {p})")),
                path.display()
            ),
        }
    }
}

/// The process id in the pid file at `path`.
pub(crate) fn read_pid(path: &Path) -> Result<i32, ServiceError> {
    let text = fs::read_to_string(path).map_err(|reason| ServiceError::ReadPid {
        path: path.to_path_buf(),
        reason,
    })?;
    text.trim()
        .parse::<i32>()
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| ServiceError::BadPid {
            path: path.to_path_buf(),
        })
}

/// What `proxy -s NAME` asks of the running process, and the signal that carries it (the
/// same meanings as nginx's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Command {
    /// Re-read the configuration (SIGHUP).
    Reload,
    /// Stop: finish requests in flight, at most 10 s (SIGTERM).
    Stop,
    /// Stop the same graceful way (SIGQUIT), as nginx's `quit`.
    Quit,
    /// Reopen the access log files (SIGUSR1), after logrotate moved them.
    Reopen,
}

impl Command {
    fn signal(self) -> rustix::process::Signal {
        use rustix::process::Signal;
        match self {
            Command::Reload => Signal::HUP,
            Command::Stop => Signal::TERM,
            Command::Quit => Signal::QUIT,
            Command::Reopen => Signal::USR1,
        }
    }
}

/// Sends `command` to the process named by the pid file of `pid` for the configuration at
/// `config`; returns its id.
pub fn send(pid: &PidFile, config: &Path, command: Command) -> Result<i32, ServiceError> {
    let path = pid.path_for(config).ok_or(ServiceError::NoPidFile)?;
    let id = read_pid(&path)?;
    let target = rustix::process::Pid::from_raw(id).ok_or(ServiceError::BadPid { path })?;
    rustix::process::kill_process(target, command.signal()).map_err(|e| ServiceError::Signal {
        pid: id,
        reason: e.into(),
    })?;
    Ok(id)
}

/// Tells the service manager about a state change (`READY=1`, `RELOADING=1`, `STOPPING=1`,
/// ...). Without `$NOTIFY_SOCKET` (not started by systemd) this does nothing; a failure is
/// logged once per message and never stops the proxy.
pub fn notify(state: &str) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(e) = send_notification(Path::new(&socket), state) {
        crate::warn!("cannot notify the service manager ({state:?}): {e}");
    }
}

fn send_notification(socket: &Path, state: &str) -> io::Result<()> {
    let sender = UnixDatagram::unbound()?;
    // A manager that does not read its queue must never block the proxy.
    sender.set_nonblocking(true)?;
    let bytes = socket.as_os_str().as_encoded_bytes();
    // A name starting with '@' is in the abstract namespace (sd_notify(3)).
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        sender.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        sender.send_to(state.as_bytes(), socket)?;
    }
    Ok(())
}

/// `MONOTONIC_USEC=...`, which systemd wants beside `RELOADING=1`.
pub fn monotonic_usec() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (ts.tv_sec as u64) * 1_000_000 + (ts.tv_nsec as u64) / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_reach_a_datagram_socket() {
        let dir = std::env::temp_dir().join(format!("ktls-notify-{}", std::process::id()));
        let _ = fs::create_dir_all(&dir);
        let path = dir.join("notify.sock");
        let _ = fs::remove_file(&path);
        let receiver = UnixDatagram::bind(&path).unwrap();
        send_notification(&path, "READY=1\nMAINPID=7").unwrap();
        let mut buf = [0u8; 64];
        let n = receiver.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nMAINPID=7");
        let _ = fs::remove_dir_all(&dir);
    }
}
