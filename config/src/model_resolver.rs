//! Extension: servers named by DNS names (`server NAME[:PORT] [resolve]`) and the DNS
//! servers that answer for them again while the proxy runs (`resolver`). Tempesta takes only
//! IP addresses; nginx's `server ... resolve` and `resolver` are the model.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model_serde::{opt_secs, secs};

/// `resolver ADDR[:PORT]... [valid=SECONDS] [timeout=SECONDS];`: the DNS servers asked (over
/// UDP, in turn) for the addresses of the `resolve` servers, at load and again when an
/// answer's time to live (or `valid`) runs out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Resolver {
    pub servers: Vec<SocketAddr>,
    /// How long an answer holds, whatever its TTL says; `None`: the TTL (at least 1 s).
    #[serde(with = "opt_secs")]
    pub valid: Option<Duration>,
    /// How long one DNS server gets to answer before the next is asked (5 s).
    #[serde(with = "secs")]
    pub timeout: Duration,
}

impl Default for Resolver {
    fn default() -> Self {
        Resolver {
            servers: Vec::new(),
            valid: None,
            timeout: Duration::from_secs(5),
        }
    }
}

/// A `server` given by name: the addresses it stands for are found when the configuration
/// loads (one server each, with the line's `conns_n`, `weight` and `backup`), and again while
/// the proxy runs when `resolve` is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerName {
    /// Lower case, without a trailing dot.
    pub host: String,
    pub port: u16,
    /// Asked again through the `resolver` while the proxy runs.
    pub resolve: bool,
    /// `service=NAME`: the servers are the targets of the SRV records of
    /// `_NAME._tcp.HOST`, each with its port; those of the lowest priority are the
    /// primaries, the others backups; the records' weights are the servers' (1 to 100).
    pub service: Option<String>,
    /// Where the line is (`file:line:col`), for the messages about it.
    pub at: String,
}

impl Default for ServerName {
    fn default() -> Self {
        ServerName {
            host: String::new(),
            port: 80,
            resolve: false,
            service: None,
            at: String::new(),
        }
    }
}

impl ServerName {
    /// The name the DNS question is about: `_SERVICE._tcp.HOST` with `service`, else the host.
    pub fn question(&self) -> String {
        match &self.service {
            Some(service) => format!("_{service}._tcp.{}", self.host),
            None => self.host.clone(),
        }
    }
}

/// The host name in `text` (`NAME` or `NAME:PORT`, NAME with at least one letter so that it
/// is not an address), lower case and without a trailing dot, and the port; `None` when
/// `text` is not a DNS name (RFC 1123 labels: letters, digits, hyphens, 1-63 bytes, 253 in
/// all).
pub fn parse_host_port(text: &str, default_port: u16) -> Option<(String, u16)> {
    let (host, port) = match text.rsplit_once(':') {
        Some((h, p)) => (h, p.parse::<u16>().ok().filter(|&p| p != 0)?),
        None => (text, default_port),
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    let ok = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(label_ok)
        && host.bytes().any(|b| b.is_ascii_alphabetic());
    ok.then(|| (host.to_ascii_lowercase(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_and_ports() {
        let p = |t: &str| parse_host_port(t, 80);
        assert_eq!(p("Backend.Example"), Some(("backend.example".into(), 80)));
        assert_eq!(p("origin:8080"), Some(("origin".into(), 8080)));
        assert_eq!(p("a-1.b.:443"), Some(("a-1.b".into(), 443)));
        for bad in [
            "127.0.0.1",
            "1.2.3",
            "-a.b",
            "a-.b",
            "a..b",
            "a_b",
            "a:0",
            "a:x",
            ":80",
            "",
        ] {
            assert_eq!(p(bad), None, "{bad}");
        }
        assert_eq!(p(&"a".repeat(64)), None);
        assert_eq!(p(&["a"; 128].join(".")), None, "255 bytes");
    }
}
