//! The typed, validated configuration that the rest of the project programs
//! against.
//!
//! Everything here is plain immutable data: validation (see `validate/`)
//! resolves Tempesta's inheritance rules (global directives forming the
//! `default` vhost and defaults for other vhosts) so a consumer reads the
//! effective value of a setting directly from the vhost or location it
//! serves, never from a chain of fallbacks.
//!
//! The same structs deserialize from TOML (`#[serde(default)]` everywhere,
//! unknown keys refused), durations as whole seconds, byte sets, address
//! prefixes and URL templates as the strings a Tempesta config would contain.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::model_acme::*;
pub use crate::model_chain::*;
pub use crate::model_cluster::*;
pub use crate::model_fingerprint::*;
pub use crate::model_frang::*;
pub use crate::model_global::*;
pub use crate::model_h3::*;
pub use crate::model_resolver::*;
use crate::model_serde::{opt_secs, secs};
pub use crate::model_servers::*;
pub use crate::model_sticky::*;
pub use crate::model_types::{ByteSet, IpPrefix, StatusPattern, UrlPart, UrlTemplate};

/// Name of the implicit server group holding servers declared at top level,
/// and of the implicit vhost formed by directives outside any `vhost`.
pub const DEFAULT_NAME: &str = "default";

/// The whole validated configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `listen` entries in file order. Default (no `listen` at all): port 80
    /// on all IPv4 addresses, plain HTTP.
    pub listeners: Vec<Listener>,
    /// Server groups in definition order; the implicit `default` group (if
    /// any servers were declared at top level) comes first.
    pub server_groups: Vec<ServerGroup>,
    /// The `default` vhost: directives given outside any `vhost` block.
    pub default_vhost: Vhost,
    /// Named vhosts in definition order, with inherited settings resolved.
    pub vhosts: Vec<Vhost>,
    /// The HTTP table: named chains and the main chain.
    pub http_tables: HttpTables,
    /// Client-level frang limits (top-level `frang_limits` only).
    pub frang: FrangGlobal,
    pub block_action: BlockActions,
    pub tls: GlobalTls,
    pub cache: CacheGlobal,
    /// Zero disables keep-alive for client connections (Tempesta semantics).
    #[serde(with = "secs")]
    pub keepalive_timeout: Duration,
    pub max_concurrent_streams: u32,
    pub access_log: AccessLog,
    pub health_checks: Vec<HealthCheck>,
    pub server_failover_http: Vec<FailoverHttp>,
    /// `http_*_brange`: allowed byte sets; `None` means Tempesta's built-in set.
    pub byte_ranges: ByteRanges,
    /// `whitelist_mark`: requests with these netfilter marks skip frang.
    pub whitelist_marks: Vec<u32>,
    /// `response_body CODE FILE`: custom bodies for generated responses.
    pub response_bodies: Vec<ResponseBody>,
    /// `client_mem SOFT [HARD]` in bytes.
    pub client_mem: Option<ClientMem>,
    /// `http_max_header_list_size` in bytes (HTTP/2); `None`: unlimited.
    pub http_max_header_list_size: Option<u32>,
    /// `ctrl_frame_rate_multiplier N` (HTTP/2): control frames per second a connection may
    /// send, as a multiple of `max_concurrent_streams`. Default 16.
    pub ctrl_frame_rate_multiplier: u32,
    /// `window_update_frame_rate_multiplier N` (HTTP/2): WINDOW_UPDATE frames per second, as
    /// a multiple of `max_concurrent_streams`. Default 4.
    pub window_update_frame_rate_multiplier: u32,
    /// Extension `h2_stall_timeout N` (HTTP/2): a stream whose send window stays shut, or a
    /// client that reads nothing, for this long loses the stream / the connection. 30 s.
    #[serde(with = "secs")]
    pub h2_stall_timeout: Duration,
    pub http_allow_empty_body_content_type: bool,
    /// Extension: number of worker processes sharing the listeners.
    pub worker_processes: u32,
    /// Extension: worker threads per process; `None` = one per core.
    pub worker_threads: Option<u32>,
    /// `client_lru_size N`: most clients tracked for frang limits (least recently seen are
    /// forgotten beyond it); bounds that memory whatever the number of source addresses.
    pub client_lru_size: u32,
    /// Extension: address of the plain-text statistics endpoint.
    pub stats_listen: Option<SocketAddr>,
    /// Extension `pid PATH|off`: the pid file.
    pub pid: PidFile,
    /// `grace_shutdown_time N`: servers removed by a reload finish their
    /// sessions and requests within this time, getting no new ones (0).
    #[serde(with = "secs")]
    pub grace_shutdown_time: Duration,
    /// `client_ws_timeout N`: idle timeout of a WebSocket tunnel (3600 s;
    /// 0 in the file: none).
    #[serde(with = "opt_secs")]
    pub client_ws_timeout: Option<Duration>,
    /// Extension `cluster { ... }`: frang state shared with other instances through Redis;
    /// `None`: a lone proxy.
    pub cluster: Option<Cluster>,
    /// Extension `acme { ... }`: the ACME server of the vhosts with `tls_certificate acme`.
    pub acme: Option<Acme>,
    /// `tft { ... }`: limits per TLS fingerprint.
    pub tft: Option<FingerprintLimits>,
    /// `tfh { ... }`: limits per HTTP fingerprint.
    pub tfh: Option<FingerprintLimits>,
    /// Extension `tf_blocklist PATH;`: a file of fingerprints to refuse, re-read on reload.
    pub tf_blocklist: Option<std::path::PathBuf>,
    /// Extension `resolver ...;`: the DNS servers of the `resolve` servers.
    pub resolver: Option<Resolver>,
    /// Extension `h3_alt_svc off | max_age=SECONDS`: the `Alt-Svc: h3=":PORT"; ma=N` field
    /// TCP listeners' responses carry when an `h3` listener exists. `None`: off. 86400.
    pub h3_alt_svc: Option<u32>,
    /// Extension `h3_*` bounds of the QUIC side (handshakes, windows, QPACK).
    pub h3: H3Limits,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listeners: Vec::new(),
            server_groups: Vec::new(),
            default_vhost: Vhost::named(DEFAULT_NAME),
            vhosts: Vec::new(),
            http_tables: HttpTables::default(),
            frang: FrangGlobal::default(),
            block_action: BlockActions::default(),
            tls: GlobalTls::default(),
            cache: CacheGlobal::default(),
            keepalive_timeout: Duration::from_secs(75),
            max_concurrent_streams: 100,
            access_log: AccessLog::default(),
            health_checks: Vec::new(),
            server_failover_http: Vec::new(),
            byte_ranges: ByteRanges::default(),
            whitelist_marks: Vec::new(),
            response_bodies: Vec::new(),
            client_mem: None,
            http_max_header_list_size: None,
            ctrl_frame_rate_multiplier: 16,
            window_update_frame_rate_multiplier: 4,
            h2_stall_timeout: Duration::from_secs(30),
            http_allow_empty_body_content_type: false,
            worker_processes: 1,
            worker_threads: None,
            client_lru_size: 8000,
            stats_listen: None,
            pid: PidFile::Default,
            grace_shutdown_time: Duration::ZERO,
            client_ws_timeout: Some(Duration::from_secs(3600)),
            cluster: None,
            acme: None,
            h3_alt_svc: Some(86_400),
            h3: H3Limits::default(),
            tft: None,
            tfh: None,
            tf_blocklist: None,
            resolver: None,
        }
    }
}

impl Config {
    /// Looks a vhost up by name, `default` included.
    pub fn vhost(&self, name: &str) -> Option<&Vhost> {
        if name == self.default_vhost.name {
            return Some(&self.default_vhost);
        }
        self.vhosts.iter().find(|v| v.name == name)
    }

    pub fn server_group(&self, name: &str) -> Option<&ServerGroup> {
        self.server_groups.iter().find(|g| g.name == name)
    }

    /// The listeners to open: the configured ones, or Tempesta's default
    /// `listen 80;` when there are none.
    pub fn effective_listeners(&self) -> Vec<Listener> {
        if self.listeners.is_empty() {
            vec![Listener {
                addr: SocketAddr::new(IpAddr::from([0, 0, 0, 0]), 80),
                protos: vec![Proto::Http],
            }]
        } else {
            self.listeners.clone()
        }
    }
}

// ---------------------------------------------------------------- listen

/// One `listen` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listener {
    /// `listen PORT` means 0.0.0.0:PORT (IPv4 any, as Tempesta does);
    /// `listen IP` means port 80.
    pub addr: SocketAddr,
    /// Sorted, without duplicates, never empty (default `[http]`).
    pub protos: Vec<Proto>,
}

impl Listener {
    /// True when connections on this listener start with a TLS handshake (QUIC's, for h3).
    pub fn is_tls(&self) -> bool {
        self.protos
            .iter()
            .any(|p| matches!(p, Proto::Https | Proto::H2 | Proto::H3))
    }

    /// True when the listener accepts TCP connections (every protocol but `h3`).
    pub fn is_tcp(&self) -> bool {
        self.protos.iter().any(|p| *p != Proto::H3)
    }

    /// True when the listener also serves HTTP/3 on the same address over UDP.
    pub fn is_h3(&self) -> bool {
        self.protos.contains(&Proto::H3)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// HTTP/1.1 over TCP.
    Http,
    /// HTTP/1.1 over TLS.
    Https,
    /// HTTP/2 over TLS (ALPN `h2`).
    H2,
    /// HTTP/2 over TCP by prior knowledge (an extension: Tempesta has no cleartext HTTP/2).
    H2c,
    /// HTTP/3 over QUIC on the same address's UDP port (an extension: Tempesta has no
    /// HTTP/3). Alone (`proto=h3`) the listener is UDP only; beside `https` or `h2` it serves
    /// both.
    H3,
}

// ---------------------------------------------------------------- vhosts

/// A vhost with every inherited setting resolved.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Vhost {
    pub name: String,
    /// `None` only for an implicit default vhost without servers.
    pub proxy_pass: Option<ProxyPass>,
    pub locations: Vec<Location>,
    pub tls: VhostTls,
    pub headers: HeaderRules,
    pub cache: CachePolicy,
    pub frang: FrangHttp,
    /// `hdr_via [TEXT]`: the pseudonym in added `Via` headers.
    pub hdr_via: Option<String>,
    pub nonidempotent: Vec<NonIdempotent>,
    pub http_post_validate: bool,
    /// `sticky { ... }`, the top-level one filling in what is not set.
    pub sticky: Sticky,
}

impl Vhost {
    pub fn named(name: &str) -> Vhost {
        Vhost {
            name: name.to_string(),
            ..Vhost::default()
        }
    }
}

/// `proxy_pass GROUP [backup=GROUP]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyPass {
    pub group: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
}

/// `location OP "PATTERN" { ... }`; unset settings inherited from the vhost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Location {
    pub op: UrlMatchOp,
    pub pattern: String,
    pub proxy_pass: Option<ProxyPass>,
    pub headers: HeaderRules,
    pub cache: CachePolicy,
    pub frang: FrangHttp,
    pub nonidempotent: Vec<NonIdempotent>,
    pub http_post_validate: bool,
}

impl Default for Location {
    fn default() -> Self {
        Location {
            op: UrlMatchOp::Prefix,
            pattern: String::new(),
            proxy_pass: None,
            headers: HeaderRules::default(),
            cache: CachePolicy::default(),
            frang: FrangHttp::default(),
            nonidempotent: Vec::new(),
            http_post_validate: false,
        }
    }
}

/// The URL match operators of `location`, `cache_fulfill`, `cache_bypass`
/// and `nonidempotent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UrlMatchOp {
    /// `*`: every URL.
    Any,
    Eq,
    Prefix,
    Suffix,
    /// Case-sensitive regular expression (current Tempesta).
    Regex,
}

/// `nonidempotent METHOD OP "STRING"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NonIdempotent {
    /// `None` for `*` (any method).
    pub method: Option<Method>,
    pub op: UrlMatchOp,
    pub pattern: String,
}

/// Header rewriting: `req_hdr_set/add`, `resp_hdr_set/add`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeaderRules {
    pub request: Vec<HeaderRule>,
    pub response: Vec<HeaderRule>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderRule {
    pub op: HeaderOp,
    pub name: String,
    /// `None` with `Set` removes the header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeaderOp {
    /// Replace (or remove, without value).
    Set,
    /// Append.
    Add,
}

// ---------------------------------------------------------------- TLS

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VhostTls {
    /// Certificate/key pairs (e.g. one RSA and one ECDSA), resolved paths.
    /// Inherited from the global ones when the vhost has none.
    pub certificates: Vec<CertificatePair>,
    pub tickets: TlsTickets,
    /// Extension `tls_certificate acme;`: `certificates` is the one the ACME client keeps
    /// under `acme.state_dir`.
    pub acme: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificatePair {
    pub certificate: PathBuf,
    pub key: PathBuf,
    /// Where the pair was written, for the errors only loading the files finds (a PEM block
    /// that is not base64, a key that does not match): none from TOML or for ACME's pair.
    #[serde(skip)]
    pub written_at: Option<WrittenAt>,
}

/// The pair is the same pair wherever it was written: a reload that only moves the lines
/// changes nothing.
impl PartialEq for CertificatePair {
    fn eq(&self, other: &Self) -> bool {
        self.certificate == other.certificate && self.key == other.key
    }
}

impl Eq for CertificatePair {}

/// `FILE:LINE:COL` of a pair's `tls_certificate` and of its `tls_certificate_key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenAt {
    pub certificate: String,
    pub key: String,
}

/// `tls_tickets [enable|disable] [secret=S | keys=FILE] [lifetime=N]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsTickets {
    pub enabled: bool,
    /// Master secret for deterministic ticket keys; `None`: random at start.
    pub secret: Option<String>,
    /// Extension `keys=FILE`: a key ring file (`ticket_keys`), re-read on reload and on
    /// change; excludes `secret`.
    pub keys: Option<PathBuf>,
    /// Key rotation period (default 3600 s) of `secret`'s keys; the session lifetime.
    #[serde(with = "secs")]
    pub lifetime: Duration,
}

impl Default for TlsTickets {
    fn default() -> Self {
        TlsTickets {
            enabled: true,
            secret: None,
            keys: None,
            lifetime: Duration::from_secs(3600),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GlobalTls {
    /// `tls_match_any_server_name`: unknown or missing SNI -> default vhost.
    pub match_any_server_name: bool,
    /// Extension `tls_ktls auto|on|user|off`.
    pub ktls: KtlsMode,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KtlsMode {
    /// Use kTLS when the kernel offers it, the proxy's own record layer otherwise.
    #[default]
    Auto,
    /// Refuse to start when the kernel cannot do kTLS.
    On,
    /// Never the kernel: always the proxy's own record layer.
    User,
    /// OpenSSL's record layer for the life of each connection.
    Off,
}

// ---------------------------------------------------------------- cache

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheGlobal {
    pub mode: CacheMode,
    /// `cache_methods` (default GET).
    pub methods: Vec<Method>,
    /// `cache_ttl`: lifetime of responses without explicit freshness;
    /// `None` (or 0 in the file) means such responses are not cached fresh.
    #[serde(with = "opt_secs")]
    pub ttl: Option<Duration>,
    /// `cache_size` in bytes (default 256 MiB).
    pub size: u64,
    /// Extension: larger responses are streamed, not stored (default 8 MiB).
    pub max_object_size: u64,
    /// Extension `cache_heuristic PERCENT [MAX_SECONDS] | off`: heuristic
    /// freshness (RFC 9111 §4.2.2) for responses with Last-Modified and no
    /// explicit lifetime when `cache_ttl` is not set; `None` is off.
    pub heuristic: Option<CacheHeuristic>,
    /// Extension `cache_targeted_fields NAME... | off`: the RFC 9213 target list, response
    /// fields whose directives replace Cache-Control for this cache and are not forwarded
    /// (default `CDN-Cache-Control`; empty: none).
    pub targeted_fields: Vec<String>,
}

/// Heuristic freshness: `percent` of the time since Last-Modified, at most
/// `max_secs` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheHeuristic {
    pub percent: u32,
    pub max_secs: u64,
}

/// 10 % capped at one day, as Apache Traffic Server's defaults.
pub const DEFAULT_CACHE_HEURISTIC: CacheHeuristic = CacheHeuristic {
    percent: 10,
    max_secs: 86_400,
};

pub const DEFAULT_CACHE_SIZE: u64 = 256 * 1024 * 1024;
pub const DEFAULT_CACHE_MAX_OBJECT_SIZE: u64 = 8 * 1024 * 1024;

impl Default for CacheGlobal {
    fn default() -> Self {
        CacheGlobal {
            mode: CacheMode::Replicated,
            methods: vec![Method::Get],
            ttl: None,
            size: DEFAULT_CACHE_SIZE,
            max_object_size: DEFAULT_CACHE_MAX_OBJECT_SIZE,
            heuristic: Some(DEFAULT_CACHE_HEURISTIC),
            targeted_fields: vec!["CDN-Cache-Control".to_string()],
        }
    }
}

/// `cache 0|1|2`. Both 1 and 2 mean "on" in this single-node proxy; the
/// NUMA distinction is kept so `-t` can echo the configuration faithfully.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheMode {
    Off,
    Sharded,
    Replicated,
}

impl CacheMode {
    pub fn enabled(self) -> bool {
        self != CacheMode::Off
    }
}

/// Per-vhost (and per-location) caching policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CachePolicy {
    /// `cache_fulfill` / `cache_bypass` rules in file order; first match wins.
    pub rules: Vec<CacheRule>,
    /// `cache_control_ignore`: Cache-Control directives to disregard.
    pub control_ignore: Vec<String>,
    /// `cache_use_stale`: statuses for which a stale entry may be served.
    pub use_stale: Vec<StatusPattern>,
    /// `cache_resp_hdr_del`: headers removed before storing.
    pub resp_hdr_del: Vec<String>,
    /// `cache_purge [invalidate|immediate]`; `None`: PURGE not allowed.
    pub purge: Option<PurgeMode>,
    /// `cache_purge_acl`: clients allowed to PURGE.
    pub purge_acl: Vec<IpPrefix>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheRule {
    pub action: CacheAction,
    pub op: UrlMatchOp,
    /// One or more patterns (`cache_fulfill suffix ".jpg" ".png"`); `["*"]`
    /// for `*`.
    pub patterns: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheAction {
    Fulfill,
    Bypass,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PurgeMode {
    /// Mark stale, keep for `cache_use_stale`.
    Invalidate,
    /// Remove at once.
    Immediate,
}
