//! The configuration snapshot workers serve with: the validated `Config` plus everything
//! derived from it once (TLS contexts, the compiled HTTP table, header edits, limits).
//! SIGHUP builds a new one and swaps it in; connections keep the one they started with.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use config::{Config, HeaderOp, HeaderRule, Scheduler, UrlMatchOp};
use http1::HeaderEdits;

use crate::router::Router;
use crate::tls_setup::{self, TlsContexts, TlsSetupError};

/// Held while a runtime is built and installed in place of the one in force (a reload, the
/// ACME client's certificate swap), so that one never installs a runtime built from the
/// configuration the other has just replaced.
pub static REPLACING: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub struct Runtime {
    pub config: Config,
    pub tls: Option<TlsContexts>,
    /// QUIC's server configuration (rustls, `tls_quic.rs`), when an `h3` listener exists.
    pub quic: Option<Arc<quinn_proto::ServerConfig>>,
    pub router: Router,
    /// Index 0 is the default vhost, then `config.vhosts` in order.
    pub vhosts: Vec<VhostRt>,
    /// The configured server groups, then the cache tier's internal group of each peer.
    pub groups: Vec<GroupRt>,
    /// `cluster { peer ...; self ...; }`: the cache tier (`None` without peers).
    pub tier: Option<crate::fleet::tier::Tier>,
    pub limits: http1::Limits,
    /// What a forwarded head must fit (`Limits::for_forwarding`): larger heads get 431/502.
    pub forward_limits: http1::Limits,
    pub ktls_mode: ktls::offload::KtlsMode,
    /// Per-client frang accounting; a reload starts it afresh with the new limits.
    pub frang: Arc<crate::frang::Frang>,
    /// Sticky cookies, the challenge and sessions; a reload starts miss counts and sessions
    /// afresh, like frang's tables.
    pub sticky: crate::sticky::runtime::StickyRt,
    /// `response_body`: the bodies of the proxy's own error responses.
    pub error_pages: crate::error_pages::ErrorPages,
    /// `tft`, `tfh` and `tf_blocklist`; a reload starts the counts afresh and reads the
    /// blocklist again.
    pub fingerprints: Arc<crate::fingerprint::Fingerprints>,
    /// The ACME vhosts' certificate files as they were when this was built (`acme::Stored`):
    /// when one changes, the ACME thread builds the runtime again.
    pub acme_files: crate::acme::Stored,
    /// The servers given by name and what they stand for (`resolve/`); `None` when every
    /// server is an address. `config` is the expansion of its template.
    pub resolved: Option<Arc<crate::resolve::Resolved>>,
}

pub struct VhostRt {
    pub name: String,
    /// Caching of this vhost; `None` when `cache 0` or no `cache_fulfill` rule applies.
    pub cache: Option<Arc<CacheRt>>,
    /// Server group index (and backup group index).
    pub proxy_pass: Option<(usize, Option<usize>)>,
    pub locations: Vec<LocationRt>,
    pub via: Option<Vec<u8>>,
    pub request_edits: HeaderEdits,
    pub response_edits: HeaderEdits,
}

/// What a location's URI must be (`location OP "PATTERN"`).
pub enum LocationMatch {
    Any,
    Eq(Vec<u8>),
    Prefix(Vec<u8>),
    Suffix(Vec<u8>),
    /// `location regex`/`~`: the model holds it already translated from Tempesta's
    /// `/PATTERN/FLAGS` form, case as the flags say.
    Regex(regex::bytes::Regex),
}

/// The same location in two configurations (a reload keeps an exchange's location by this).
impl PartialEq for LocationMatch {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (LocationMatch::Any, LocationMatch::Any) => true,
            (LocationMatch::Eq(a), LocationMatch::Eq(b))
            | (LocationMatch::Prefix(a), LocationMatch::Prefix(b))
            | (LocationMatch::Suffix(a), LocationMatch::Suffix(b)) => a == b,
            (LocationMatch::Regex(a), LocationMatch::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl LocationMatch {
    fn new(op: UrlMatchOp, pattern: &str) -> Result<LocationMatch, regex::Error> {
        let bytes = || pattern.as_bytes().to_vec();
        Ok(match op {
            UrlMatchOp::Any => LocationMatch::Any,
            UrlMatchOp::Eq => LocationMatch::Eq(bytes()),
            UrlMatchOp::Prefix => LocationMatch::Prefix(bytes()),
            UrlMatchOp::Suffix => LocationMatch::Suffix(bytes()),
            UrlMatchOp::Regex => LocationMatch::Regex(regex::bytes::Regex::new(pattern)?),
        })
    }

    /// Tempesta compares the plain operators without regard to case (tfw_str_eq_cstr with
    /// TFW_STR_EQ_CASEI), and a regex as its flags say.
    fn matches(&self, uri: &[u8]) -> bool {
        match self {
            LocationMatch::Any => true,
            LocationMatch::Eq(p) => uri.eq_ignore_ascii_case(p),
            LocationMatch::Prefix(p) => {
                uri.len() >= p.len() && uri[..p.len()].eq_ignore_ascii_case(p)
            }
            LocationMatch::Suffix(p) => {
                uri.len() >= p.len() && uri[uri.len() - p.len()..].eq_ignore_ascii_case(p)
            }
            LocationMatch::Regex(r) => r.is_match(uri),
        }
    }
}

pub struct LocationRt {
    pub cache: Option<Arc<CacheRt>>,
    pub matcher: LocationMatch,
    pub proxy_pass: Option<(usize, Option<usize>)>,
    pub request_edits: HeaderEdits,
    pub response_edits: HeaderEdits,
}

pub struct GroupRt {
    pub name: String,
    pub servers: Vec<ServerRt>,
    pub hash: bool,
    pub forward_timeout: Duration,
    pub forward_retries: u32,
    pub connect_retries: u32,
    /// Requests that may wait for a connection of the group: `server_queue_size` for each of
    /// its servers' `conns_n` connections. Tempesta bounds the forwarding queue of every
    /// server connection; the proxy sends one request per connection at a time and keeps
    /// the waiting ones in one queue per group, so the same total applies to that queue.
    pub queue_limit: usize,
    /// The `health` monitor of the group: servers are checked with its request every
    /// `timeout` and suspended while its answer is wrong.
    pub health: Option<Arc<crate::health_monitor::HealthMonitor>>,
    /// `server_tls on` (an extension): the client context its connections start from.
    pub tls: Option<Arc<crate::upstream_tls::UpstreamTls>>,
    /// `server_proto h2` (an extension): HTTP/2 to its servers (`worker/upstream/h2_conn.rs`).
    pub h2: bool,
}

pub struct ServerRt {
    pub addr: SocketAddr,
    pub weight: u32,
    pub conns_n: usize,
    pub backup: bool,
    /// `server_failover_http` counters, for a server of a group with a health monitor.
    pub failover: Option<crate::health_monitor::Failover>,
}

/// How one vhost (or location) caches, in the cache crate's terms.
pub struct CacheRt {
    pub policy: cache::Policy,
    pub rules: cache::CacheRules,
    /// `cache_purge`: PURGE requests evict (else they are forwarded like any method).
    pub purge: Option<cache::PurgeMode>,
    pub purge_acl: Vec<config::IpPrefix>,
}

#[derive(Debug)]
pub enum RuntimeError {
    Tls(Vec<TlsSetupError>),
    Regex(regex::Error),
    Header {
        vhost: String,
        name: String,
        reason: String,
    },
    Cache {
        vhost: String,
        reason: String,
    },
    Sticky(crate::sticky::runtime::StickyRtError),
    ErrorPage(crate::error_pages::PageError),
    /// `tf_blocklist`: the file could not be read or a line is not a fingerprint.
    Fingerprint(String),
    /// `server_tls`: the group's TLS context could not be built.
    UpstreamTls {
        group: String,
        reason: String,
    },
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeError::Tls(errors) => {
                for (i, e) in errors.iter().enumerate() {
                    if i > 0 {
                        writeln!(f)?;
                    }
                    match e.written_at() {
                        Some(at) => write!(f, "{at}: error: {e}")?,
                        None => write!(f, "error: {e}")?,
                    }
                }
                Ok(())
            }
            RuntimeError::Regex(e) => write!(f, "error: regular expression: {e}"),
            RuntimeError::Sticky(e) => write!(f, "error: {e}"),
            RuntimeError::ErrorPage(e) => write!(f, "error: {e}"),
            RuntimeError::Fingerprint(e) => write!(f, "error: {e}"),
            RuntimeError::UpstreamTls { group, reason } => {
                write!(
                    f,
                    "error: srv_group `{group}`: TLS to its servers: {reason}"
                )
            }
            RuntimeError::Cache { vhost, reason } => {
                write!(f, "error: vhost `{vhost}`: cache settings: {reason}")
            }
            RuntimeError::Header {
                vhost,
                name,
                reason,
            } => {
                write!(
                    f,
                    "error: vhost `{vhost}`: header `{name}` cannot be set or added: {reason}"
                )
            }
        }
    }
}

impl Runtime {
    /// Derives everything workers need from a validated configuration: loads and checks
    /// certificates, compiles rules. Binds nothing.
    pub fn build(config: Config) -> Result<Arc<Runtime>, RuntimeError> {
        let acme_files = crate::acme::Stored::of(&config);
        let mut tls = tls_setup::build(&config).map_err(RuntimeError::Tls)?;
        let needs_tls = config.effective_listeners().iter().any(|l| l.is_tls());
        if needs_tls && tls.is_none() {
            return Err(RuntimeError::Tls(vec![TlsSetupError::NoCertificate]));
        }
        let quic = match config.effective_listeners().iter().any(|l| l.is_h3()) {
            true => {
                let mut files = Vec::new();
                let quic = crate::tls_quic::build(&config, &mut files)
                    .map_err(|reason| RuntimeError::Tls(vec![TlsSetupError::Quic(reason)]))?;
                // QUIC has certificates only where TCP's contexts do.
                if let Some(tls) = tls.as_mut() {
                    tls.ticket_files.append(&mut files);
                }
                quic
            }
            false => None,
        };
        let router = Router::new(&config).map_err(RuntimeError::Regex)?;
        let vhosts = vhosts(&config)?;
        let mut groups = groups(&config)?;
        let cluster = config.cluster.as_ref();
        let tier = cluster
            .and_then(|c| Some((c.tier()?, c.peer_probe())))
            .map(|(peers, probe)| {
                // Once its head came, a peer's answer may go as slowly as the slowest origin's.
                let relay = groups.iter().map(|g| g.forward_timeout).max();
                let relay = relay.unwrap_or(Duration::from_secs(60));
                let (tier, peer_groups) =
                    crate::fleet::tier::Tier::build(peers, groups.len(), (&probe, relay));
                groups.extend(peer_groups);
                tier
            });
        let limits = limits(&config);
        let ktls_mode = match config.tls.ktls {
            config::KtlsMode::Auto => ktls::offload::KtlsMode::Auto,
            config::KtlsMode::On => ktls::offload::KtlsMode::On,
            config::KtlsMode::User => ktls::offload::KtlsMode::User,
            config::KtlsMode::Off => ktls::offload::KtlsMode::Off,
        };
        let mut frang = crate::frang::Frang::new(&config.frang, config.client_lru_size as usize)
            .with_client_mem(config.client_mem.as_ref().map(|m| m.hard))
            .with_rate_time_frames(
                config.frang.request_rate_frame,
                config.frang.tcp_connection_rate_frame,
            );
        if let Some(cluster) = config.cluster.as_ref().filter(|c| c.redis.is_some()) {
            frang = frang.with_fleet(cluster.on_redis_failure == config::RedisFailure::Closed);
        }
        let frang = Arc::new(frang);
        let sticky =
            crate::sticky::runtime::StickyRt::build(&config).map_err(RuntimeError::Sticky)?;
        let error_pages =
            crate::error_pages::ErrorPages::load(&config).map_err(RuntimeError::ErrorPage)?;
        let fingerprints =
            crate::fingerprint::Fingerprints::build(&config).map_err(RuntimeError::Fingerprint)?;
        Ok(Arc::new(Runtime {
            fingerprints: Arc::new(fingerprints),
            acme_files,
            sticky,
            error_pages,
            config,
            tls,
            quic,
            router,
            vhosts,
            groups,
            tier,
            forward_limits: limits.for_forwarding(),
            limits,
            ktls_mode,
            frang,
            resolved: None,
        }))
    }
}

/// Every vhost (the default one first) with its locations' upstream groups, header edits and
/// cache rules resolved.
fn vhosts(config: &Config) -> Result<Vec<VhostRt>, RuntimeError> {
    let group_index = |name: &str| config.server_groups.iter().position(|g| g.name == name);
    let pass = |p: &Option<config::ProxyPass>| {
        p.as_ref().and_then(|p| {
            group_index(&p.group).map(|g| (g, p.backup.as_deref().and_then(group_index)))
        })
    };
    let mut vhosts = Vec::with_capacity(config.vhosts.len() + 1);
    let alt_svc = alt_svc(config);
    for v in std::iter::once(&config.default_vhost).chain(config.vhosts.iter()) {
        let edits = |rules: &[HeaderRule]| {
            let mut edits = header_edits(&v.name, rules)?;
            if let Some(value) = &alt_svc {
                // A valid field (built here); an origin's own Alt-Svc names its services,
                // not this proxy's.
                let _ = edits.set(b"alt-svc", value.as_bytes());
            }
            Ok(edits)
        };
        let vhost_cache = cache_rt(config, &v.name, &v.cache)?;
        let mut locations = Vec::with_capacity(v.locations.len());
        for l in &v.locations {
            let location_cache = if l.cache.rules.is_empty() {
                vhost_cache.clone()
            } else {
                cache_rt(config, &v.name, &l.cache)?
            };
            locations.push(LocationRt {
                matcher: LocationMatch::new(l.op, &l.pattern).map_err(RuntimeError::Regex)?,
                proxy_pass: pass(&l.proxy_pass).or(pass(&v.proxy_pass)),
                request_edits: edits(if l.headers.request.is_empty() {
                    &v.headers.request
                } else {
                    &l.headers.request
                })?,
                response_edits: without_targeted(
                    edits(if l.headers.response.is_empty() {
                        &v.headers.response
                    } else {
                        &l.headers.response
                    })?,
                    location_cache.as_deref(),
                ),
                cache: location_cache,
            });
        }
        vhosts.push(VhostRt {
            name: v.name.clone(),
            proxy_pass: pass(&v.proxy_pass),
            locations,
            via: v.hdr_via.as_ref().map(|t| t.as_bytes().to_vec()),
            request_edits: edits(&v.headers.request)?,
            response_edits: without_targeted(edits(&v.headers.response)?, vhost_cache.as_deref()),
            cache: vhost_cache,
        });
    }
    Ok(vhosts)
}

/// Every server group with its servers and its health monitor (one per monitor name, shared
/// by the groups that name it).
fn groups(config: &Config) -> Result<Vec<GroupRt>, RuntimeError> {
    use crate::health_monitor::HealthMonitor;
    let mut monitors: Vec<Arc<HealthMonitor>> = Vec::new();
    let mut monitor = |name: &str| {
        if let Some(m) = monitors.iter().find(|m| m.name == name) {
            return m.clone();
        }
        // `auto` is Tempesta's built-in monitor: the defaults, unless redefined.
        let defined = config.health_checks.iter().find(|h| h.name == name);
        let check = defined.cloned().unwrap_or_else(|| config::HealthCheck {
            name: name.to_string(),
            ..Default::default()
        });
        let m = Arc::new(HealthMonitor::new(check, defined.is_none()));
        monitors.push(m.clone());
        m
    };
    let tls = |g: &config::ServerGroup| -> Result<_, RuntimeError> {
        let Some(t) = g.tls.as_ref() else {
            return Ok(None);
        };
        let built = crate::upstream_tls::UpstreamTls::build(g, t);
        built
            .map(|t| Some(Arc::new(t)))
            .map_err(|reason| RuntimeError::UpstreamTls {
                group: g.name.clone(),
                reason,
            })
    };
    config
        .server_groups
        .iter()
        .map(|g| -> Result<GroupRt, RuntimeError> {
            Ok(GroupRt {
                h2: g.proto == config::ServerProto::H2,
                tls: tls(g)?,
                name: g.name.clone(),
                servers: g
                    .servers
                    .iter()
                    .map(|s| ServerRt {
                        addr: s.addr,
                        weight: s.weight.max(1),
                        conns_n: s.conns_n.max(1) as usize,
                        backup: s.backup,
                        failover: g.health.as_ref().and_then(|_| {
                            crate::health_monitor::Failover::new(&config.server_failover_http)
                        }),
                    })
                    .collect(),
                hash: matches!(g.sched, Scheduler::Hash),
                forward_timeout: g.forward_timeout,
                forward_retries: g.forward_retries,
                connect_retries: g.connect_retries,
                queue_limit: (g.queue_size as usize)
                    .saturating_mul(g.servers.iter().map(|s| s.conns_n.max(1) as usize).sum()),
                health: g.health.as_deref().map(&mut monitor),
            })
        })
        .collect()
}

/// The `Alt-Svc` value advertising the `h3` listeners' ports (`h3_alt_svc`), if any.
fn alt_svc(config: &Config) -> Option<String> {
    let max_age = config.h3_alt_svc?;
    let mut ports: Vec<u16> = (config.listeners.iter())
        .filter(|l| l.is_h3())
        .map(|l| l.addr.port())
        .collect();
    ports.dedup();
    let alternatives: Vec<String> = (ports.iter())
        .map(|port| format!("h3=\":{port}\"; ma={max_age}"))
        .collect();
    (!alternatives.is_empty()).then(|| alternatives.join(", "))
}

fn header_edits(vhost: &str, rules: &[HeaderRule]) -> Result<HeaderEdits, RuntimeError> {
    let mut edits = HeaderEdits::new();
    for rule in rules {
        let name = rule.name.as_bytes();
        // `*_hdr_set NAME;` without a value removes every field of that name, as in Tempesta.
        let result = match (rule.op, rule.value.as_deref()) {
            (HeaderOp::Set, Some(value)) => edits.set(name, value.as_bytes()).map(|_| ()),
            (HeaderOp::Set, None) => edits.remove(name).map(|_| ()),
            (HeaderOp::Add, value) => edits.add(name, value.unwrap_or("").as_bytes()).map(|_| ()),
        };
        result.map_err(|e| RuntimeError::Header {
            vhost: vhost.to_string(),
            name: rule.name.clone(),
            reason: e.to_string(),
        })?;
    }
    Ok(edits)
}

/// Response edits that also drop the targeted cache fields (RFC 9213, `CDN-Cache-Control`
/// by default) where this proxy caches: they were meant for this cache, which consumes them.
fn without_targeted(mut edits: HeaderEdits, cache: Option<&CacheRt>) -> HeaderEdits {
    for name in cache.map_or(&[][..], |c| &c.policy.targeted_fields) {
        // The names were checked as tokens when the configuration was read.
        let _ = edits.remove(name.as_bytes());
    }
    edits
}

/// The cache policy of a vhost or location, or `None` when nothing there is cached.
fn cache_rt(
    config: &Config,
    vhost: &str,
    p: &config::CachePolicy,
) -> Result<Option<Arc<CacheRt>>, RuntimeError> {
    let err = |e: cache::PolicyError| RuntimeError::Cache {
        vhost: vhost.to_string(),
        reason: format!("{e:?}"),
    };
    if !config.cache.mode.enabled() || p.rules.is_empty() {
        return Ok(None);
    }
    let mut rules = cache::CacheRules::default();
    for rule in &p.rules {
        let action = match rule.action {
            config::CacheAction::Fulfill => cache::CacheAction::Fulfill,
            config::CacheAction::Bypass => cache::CacheAction::Bypass,
        };
        let op = match rule.op {
            UrlMatchOp::Any => "*",
            UrlMatchOp::Eq => "eq",
            UrlMatchOp::Prefix => "prefix",
            UrlMatchOp::Suffix => "suffix",
            // The cache crate matches no regular expressions; such rules never match.
            UrlMatchOp::Regex => continue,
        };
        for pattern in &rule.patterns {
            rules.push(action, cache::UriMatcher::parse(op, pattern).map_err(err)?);
        }
    }
    let use_stale = p
        .use_stale
        .iter()
        .map(|s| match s {
            config::StatusPattern::Exact(code) => cache::StatusPattern::Exact(*code),
            config::StatusPattern::Class(class) => cache::StatusPattern::Class(*class),
        })
        .collect();
    let purge_mode = match p.purge {
        Some(config::PurgeMode::Immediate) => cache::PurgeMode::Immediate,
        _ => cache::PurgeMode::Invalidate,
    };
    let policy = cache::Policy {
        enabled: true,
        methods: config
            .cache
            .methods
            .iter()
            .map(|m| m.as_str().to_string())
            .collect(),
        default_ttl: config.cache.ttl.unwrap_or(Duration::ZERO),
        unset_ttl: cache::TEMPESTA_DEFAULT_TTL,
        ignore: cache::IgnoredDirectives::parse(p.control_ignore.iter().map(String::as_str))
            .map_err(err)?,
        use_stale,
        resp_hdr_del: p.resp_hdr_del.clone(),
        max_object_size: usize::try_from(config.cache.max_object_size).unwrap_or(usize::MAX),
        purge_mode,
        heuristic: config.cache.heuristic.map(|h| cache::Heuristic {
            percent: h.percent,
            max: Duration::from_secs(h.max_secs),
        }),
        targeted_fields: config.cache.targeted_fields.clone(),
        // Stale-while-revalidate entries are served at once and revalidated by an exchange
        // without a client (worker/background.rs).
        background_revalidation: true,
        ..cache::Policy::default()
    };
    Ok(Some(Arc::new(CacheRt {
        policy,
        rules,
        purge: p.purge.map(|_| purge_mode),
        purge_acl: p.purge_acl.clone(),
    })))
}

/// Parser limits from the configuration's frang limits and byte ranges.
fn limits(config: &Config) -> http1::Limits {
    let mut l = http1::Limits::default();
    if let Some(n) = config.frang.http_header_cnt {
        l.max_headers = n as usize;
    }
    if let Some(n) = config.frang.http_hdr_len {
        l.max_field_bytes = n as usize;
    }
    if let Some(n) = config.default_vhost.frang.http_uri_len {
        l.max_uri_bytes = n as usize;
    }
    l.max_body_bytes = config.default_vhost.frang.http_body_len;
    let to_set = |s: &config::ByteSet| {
        let mut set = http1::ByteSet::new();
        for b in 0..=255u8 {
            if s.contains(b) {
                set.insert(b);
            }
        }
        set
    };
    l.uri_bytes = config.byte_ranges.uri.as_ref().map(to_set);
    l.header_value_bytes = config.byte_ranges.ctext_vchar.as_ref().map(to_set);
    l.xff_bytes = config.byte_ranges.xff.as_ref().map(to_set);
    l.allow_content_type_without_body = config.http_allow_empty_body_content_type;
    l
}

impl VhostRt {
    /// The location serving `uri`, if any matches (first match in file order).
    pub fn location(&self, uri: &[u8]) -> Option<&LocationRt> {
        self.locations.iter().find(|l| l.matcher.matches(uri))
    }
}
