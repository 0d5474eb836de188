//! Process-wide parts of the model: block actions, access log, health
//! monitors, byte ranges, HTTP methods.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::{ByteSet, StatusPattern};
use crate::model_serde::secs;

/// `block_action error|attack drop|reply [nolog]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BlockActions {
    /// Malformed messages (default reply).
    pub error: BlockAction,
    /// Malicious messages (default drop).
    pub attack: BlockAction,
}

impl Default for BlockActions {
    fn default() -> Self {
        BlockActions {
            error: BlockAction {
                reply: true,
                log: true,
            },
            attack: BlockAction {
                reply: false,
                log: true,
            },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockAction {
    /// `reply` sends an error status; `drop` closes silently.
    pub reply: bool,
    /// False with `nolog`.
    pub log: bool,
}

/// `access_log off|on|dmesg|mmap [logger_config=FILE]` plus the extension
/// `access_log_file PATH`. Empty destinations: disabled.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccessLog {
    pub destinations: Vec<AccessLogDestination>,
    pub logger_config: Option<PathBuf>,
    /// Extension `access_log_format tempesta|json`: how each line is written.
    pub format: AccessLogFormat,
}

/// The layout of an access log line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessLogFormat {
    /// Tempesta's line: `ip "vhost" "METHOD uri HTTP/x" status bytes "referer" "user-agent"`.
    #[default]
    Tempesta,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Where the process id is written, for `proxy -s SIGNAL` and service managers
/// (extension `pid PATH|off`, as in nginx).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PidFile {
    /// No `pid` directive: a file of this configuration's own in [`DEFAULT_PID_DIR`]
    /// ([`default_pid_path`]), written when the process may (a run without permission to
    /// write `/run` only warns).
    #[default]
    Default,
    /// `pid off`: no pid file.
    Off,
    /// `pid PATH`: this file; failing to write it fails the start.
    Path(PathBuf),
}

/// The directory of the pid files used without a `pid` directive.
pub const DEFAULT_PID_DIR: &str = "/run";

impl PidFile {
    /// The file to write or read for the configuration at `config`, if any.
    pub fn path_for(&self, config: &Path) -> Option<PathBuf> {
        match self {
            PidFile::Default => Some(default_pid_path(config)),
            PidFile::Off => None,
            PidFile::Path(p) => Some(p.clone()),
        }
    }
}

/// The pid file of a configuration without a `pid` directive:
/// `/run/ktls-proxy-STEM-HASH.pid`, STEM the file's name without its extension and HASH a
/// hash of its canonical path. One file per configuration, so that `proxy -s reload -c
/// other.conf` never signals the instance of another configuration, and the same file
/// whichever relative or linked name `-c` was given.
pub fn default_pid_path(config: &Path) -> PathBuf {
    let canonical = std::fs::canonicalize(config).unwrap_or_else(|_| {
        std::env::current_dir()
            .map(|cwd| cwd.join(config))
            .unwrap_or_else(|_| config.to_path_buf())
    });
    let stem: String = canonical
        .file_stem()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    let hash = fnv1a(canonical.as_os_str().as_encoded_bytes());
    Path::new(DEFAULT_PID_DIR).join(format!("ktls-proxy-{stem}-{hash:016x}.pid"))
}

/// FNV-1a, 64 bits: stable across builds and versions (a pid file name must not change
/// with the compiler, as `DefaultHasher`'s may).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl AccessLog {
    pub fn enabled(&self) -> bool {
        !self.destinations.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessLogDestination {
    /// Tempesta's kernel log (0.7 `access_log on`); here: stderr.
    Dmesg,
    /// Tempesta's ClickHouse mmap buffer; accepted, not implemented.
    Mmap,
    /// Extension: append lines to this file.
    File(PathBuf),
}

/// `health_check NAME { ... }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthCheck {
    pub name: String,
    /// Raw request sent to probe a server.
    pub request: String,
    /// Client requests to this URL also count as probes.
    pub request_url: String,
    /// Statuses meaning "alive" (default 200).
    pub resp_codes: Vec<u16>,
    pub resp_crc32: Option<u32>,
    /// `resp_crc32 auto` (Tempesta: only in the monitor named `auto`, which has it when it is
    /// not defined at all): the CRC32 of the first non-empty body becomes the expected one.
    pub resp_crc32_auto: bool,
    #[serde(with = "secs")]
    pub timeout: Duration,
}

impl Default for HealthCheck {
    fn default() -> Self {
        HealthCheck {
            name: String::new(),
            request: "GET / HTTP/1.0\r\n\r\n".to_string(),
            request_url: "/".to_string(),
            resp_codes: vec![200],
            resp_crc32: None,
            resp_crc32_auto: false,
            timeout: Duration::from_secs(10),
        }
    }
}

/// `server_failover_http CODE COUNT TIMEFRAME`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailoverHttp {
    pub code: u16,
    pub count: u32,
    #[serde(with = "secs")]
    pub timeframe: Duration,
}

/// `response_body CODE FILE`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponseBody {
    pub status: StatusPattern,
    pub path: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientMem {
    pub soft: u64,
    /// Default twice `soft`.
    pub hard: u64,
}

/// `http_*_brange` directives.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ByteRanges {
    pub uri: Option<ByteSet>,
    pub token: Option<ByteSet>,
    pub qetoken: Option<ByteSet>,
    pub nctl: Option<ByteSet>,
    pub ctext_vchar: Option<ByteSet>,
    pub xff: Option<ByteSet>,
    pub user_agent: Option<ByteSet>,
    pub cookie: Option<ByteSet>,
    pub etag: Option<ByteSet>,
}

/// HTTP methods Tempesta knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    Copy,
    Delete,
    Get,
    Head,
    Lock,
    Mkcol,
    Move,
    Options,
    Patch,
    Post,
    Propfind,
    Proppatch,
    Put,
    Trace,
    Unlock,
    Purge,
}

impl Method {
    pub const ALL: [Method; 16] = [
        Method::Copy,
        Method::Delete,
        Method::Get,
        Method::Head,
        Method::Lock,
        Method::Mkcol,
        Method::Move,
        Method::Options,
        Method::Patch,
        Method::Post,
        Method::Propfind,
        Method::Proppatch,
        Method::Put,
        Method::Trace,
        Method::Unlock,
        Method::Purge,
    ];

    /// The method token as it appears on the request line.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Copy => "COPY",
            Method::Delete => "DELETE",
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Lock => "LOCK",
            Method::Mkcol => "MKCOL",
            Method::Move => "MOVE",
            Method::Options => "OPTIONS",
            Method::Patch => "PATCH",
            Method::Post => "POST",
            Method::Propfind => "PROPFIND",
            Method::Proppatch => "PROPPATCH",
            Method::Put => "PUT",
            Method::Trace => "TRACE",
            Method::Unlock => "UNLOCK",
            Method::Purge => "PURGE",
        }
    }

    /// Case-insensitive, as Tempesta's configuration is.
    pub fn parse(text: &str) -> Option<Method> {
        Method::ALL
            .into_iter()
            .find(|m| m.as_str().eq_ignore_ascii_case(text))
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
