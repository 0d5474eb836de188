//! Server groups and their servers (`srv_group`, `server`, `sched`, the `server_*` settings,
//! `health`), as validation resolved them.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model_serde::secs;
use crate::model_sticky::GroupSticky;

/// A `srv_group` (or the implicit `default` group).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerGroup {
    pub name: String,
    pub servers: Vec<Server>,
    pub sched: Scheduler,
    /// `server_forward_retries` (default 5).
    pub forward_retries: u32,
    /// `server_forward_timeout` (default 60 s).
    #[serde(with = "secs")]
    pub forward_timeout: Duration,
    /// `server_connect_retries` (default 10).
    pub connect_retries: u32,
    /// `server_queue_size` (default 1000).
    pub queue_size: u32,
    /// `server_retry_nonidempotent`.
    pub retry_nonidempotent: bool,
    /// `health NAME`: the `health_check` monitor applied to this group.
    pub health: Option<String>,
    /// `sticky_sessions [allow_failover]` / `learn name=C` in the group.
    pub sticky: Option<GroupSticky>,
    /// Extension `server_tls on;` and its options: TLS to the group's servers (None:
    /// cleartext HTTP/1.1).
    pub tls: Option<ServerTls>,
    /// Extension `server_proto http1|h2` (default http1): the HTTP version spoken to the
    /// group's servers.
    pub proto: ServerProto,
}

/// Extension `server_proto`: which HTTP the proxy speaks to a group's servers. Named after
/// the `proto=` of Tempesta's `listen` (whose `h2` token it shares): what the listener
/// speaks to clients, this speaks to servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerProto {
    /// HTTP/1.1 (with `server_tls on`, ALPN offers `http/1.1` only).
    #[default]
    Http1,
    /// HTTP/2: with `server_tls on`, ALPN offers `h2,http/1.1` and the connection speaks
    /// what the server chose; without TLS, h2c with prior knowledge (RFC 9113 §3.3).
    H2,
}

/// TLS to a group's servers (an extension: Tempesta has no TLS to origins).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerTls {
    /// `server_tls_ca FILE`: the certificates that sign the servers' (None: the system's
    /// store).
    pub ca: Option<PathBuf>,
    /// `server_tls_verify on|off` (default on): the server's certificate must chain to `ca`
    /// and name `sni` (or the server's IP address when `sni` is unset).
    pub verify: bool,
    /// `server_tls_sni NAME`: the name sent as SNI and checked in the certificate (None: no
    /// SNI, the certificate must name the server's IP address).
    pub sni: Option<String>,
    /// `server_tls_cert CERT KEY`: the proxy's client certificate and key (mutual TLS).
    pub cert: Option<(PathBuf, PathBuf)>,
}

impl Default for ServerTls {
    fn default() -> Self {
        ServerTls {
            ca: None,
            verify: true,
            sni: None,
            cert: None,
        }
    }
}

impl Default for ServerGroup {
    fn default() -> Self {
        ServerGroup {
            name: String::new(),
            servers: Vec::new(),
            sched: Scheduler::default(),
            forward_retries: 5,
            forward_timeout: Duration::from_secs(60),
            connect_retries: 10,
            queue_size: 1000,
            retry_nonidempotent: false,
            health: None,
            sticky: None,
            tls: None,
            proto: ServerProto::Http1,
        }
    }
}

/// One `server ADDR [conns_n=N] [weight=N] [backup]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Server {
    /// Port defaults to 80.
    pub addr: SocketAddr,
    /// Persistent connections in the pool (default 32).
    pub conns_n: u32,
    /// Static weight 1..=100 (default 50).
    pub weight: u32,
    /// Extension flag: used only when no other server of the group is up.
    pub backup: bool,
    /// Extension: the DNS name the line gave instead of an address (`model_resolver.rs`).
    /// Until the proxy's loader resolves it, `addr` is `0.0.0.0` with the line's port.
    pub name: Option<crate::model_resolver::ServerName>,
}

impl Default for Server {
    fn default() -> Self {
        Server {
            addr: SocketAddr::new(IpAddr::from([127, 0, 0, 1]), 80),
            conns_n: 32,
            weight: 50,
            backup: false,
            name: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheduler {
    /// Weighted round robin.
    Ratio(RatioMode),
    /// URI/Host hash.
    Hash,
}

impl Default for Scheduler {
    fn default() -> Self {
        Scheduler::Ratio(RatioMode::Static)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RatioMode {
    Static,
    Dynamic(DynamicWeight),
    Predict(Prediction),
}

/// Which response-time statistic a dynamic ratio weight follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DynamicWeight {
    Minimum,
    Maximum,
    Average,
    /// One of 50, 75, 90, 95, 99 (default 90).
    Percentile(u8),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prediction {
    pub weight: DynamicWeight,
    #[serde(with = "secs")]
    pub past: Duration,
    /// Samples per second.
    pub rate: u32,
    #[serde(with = "secs")]
    pub ahead: Duration,
}
