//! Caching policy: the plain inputs the proxy fills from its configuration
//! (Tempesta's `cache_*` directives). Passed by reference to every call, so
//! a configuration reload only changes what the proxy passes next.

use std::fmt;
use std::time::{Duration, SystemTime};

/// Default total byte budget, Tempesta's `cache_size` default (256 MiB).
pub const DEFAULT_TOTAL_BYTES: usize = 256 * 1024 * 1024;
/// Default largest response body stored; larger ones are only streamed.
pub const DEFAULT_MAX_OBJECT_SIZE: usize = 8 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// `cache 0` disables caching entirely.
    pub enabled: bool,
    /// `cache_methods`: upper-case method names whose responses are cached.
    /// HEAD is answered from the GET entry whenever GET is cacheable.
    pub methods: Vec<String>,
    /// `cache_ttl`: freshness lifetime given to a storable response with no
    /// explicit one (no s-maxage, max-age or Expires). Zero means none: such
    /// a response is stored only if it can be revalidated or served stale.
    pub default_ttl: Duration,
    /// The lifetime of a response with no explicit freshness, no `cache_ttl` and no
    /// Last-Modified to base a heuristic on. Tempesta gives such a response its
    /// `cache_ttl` default, 2147483647 s ([`TEMPESTA_DEFAULT_TTL`], what the proxy sets);
    /// zero (the default here) leaves it without freshness, stored only if it can be
    /// revalidated or served stale.
    pub unset_ttl: Duration,
    /// `cache_control_ignore`: response Cache-Control directives to ignore.
    pub ignore: IgnoredDirectives,
    /// `cache_use_stale`: origin status codes (or failures mapped by the
    /// proxy to the 502/504 it would send) for which a stale entry is served.
    pub use_stale: Vec<StatusPattern>,
    /// `cache_resp_hdr_del`: header names removed from stored responses
    /// (the response that filled the cache is forwarded unchanged).
    pub resp_hdr_del: Vec<String>,
    /// Responses with a larger body are not stored.
    pub max_object_size: usize,
    /// `cache_purge`: what a PURGE does to the entry.
    pub purge_mode: PurgeMode,
    /// Hit-for-pass: after the origin sends an unstorable response for a
    /// key (private, no-store, Set-Cookie, too large...), requests for it
    /// go straight to the origin for this long instead of waiting for one
    /// another's fetches. Zero disables. Not a Tempesta directive.
    pub hit_for_pass: Duration,
    /// Heuristic freshness (RFC 9111 §4.2.2) for responses with
    /// Last-Modified and no explicit lifetime, when `default_ttl` is zero;
    /// `None` turns it off.
    pub heuristic: Option<Heuristic>,
    /// RFC 9213 target list: response fields whose directives replace
    /// Cache-Control and Expires for this cache, first valid one wins
    /// (default `CDN-Cache-Control`; empty disables targeted fields).
    /// The proxy should not forward them downstream
    /// ([`Policy::is_targeted_field`]).
    pub targeted_fields: Vec<String>,
    /// Serve a stale entry within its `stale-while-revalidate` window and
    /// revalidate it in the background (RFC 5861 §3):
    /// [`crate::Lookup::StaleWhileRevalidate`]. Off by default: only a
    /// caller that can revalidate without a client may turn it on (the
    /// proxy does); when off, such entries revalidate in the foreground
    /// (always allowed).
    pub background_revalidation: bool,
}

/// Tempesta's `cache_ttl` default (`fw/cache.c`: 2147483647 seconds, about 68 years): the
/// lifetime it gives a response without explicit freshness.
pub const TEMPESTA_DEFAULT_TTL: Duration = Duration::from_secs(2_147_483_647);

/// A fraction of the time since Last-Modified, capped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heuristic {
    /// Percent of (Date − Last-Modified), 1..=100.
    pub percent: u32,
    /// The longest heuristic lifetime.
    pub max: Duration,
}

impl Default for Heuristic {
    /// 10 % (the figure §4.2.2 mentions), at most one day (Apache Traffic
    /// Server's default cap): a week-old file is fresh for ~17 hours.
    fn default() -> Self {
        Heuristic {
            percent: 10,
            max: Duration::from_secs(86_400),
        }
    }
}

impl Heuristic {
    /// The lifetime for a response dated `date`, last modified at
    /// `last_modified`; zero when Last-Modified is not before Date.
    pub fn lifetime(&self, date: SystemTime, last_modified: SystemTime) -> Duration {
        let since = date.duration_since(last_modified).unwrap_or(Duration::ZERO);
        let secs = since
            .as_secs()
            .saturating_mul(u64::from(self.percent.min(100)))
            / 100;
        Duration::from_secs(secs).min(self.max)
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            enabled: true,
            methods: vec!["GET".into(), "HEAD".into()],
            default_ttl: Duration::ZERO,
            unset_ttl: Duration::ZERO,
            ignore: IgnoredDirectives::default(),
            use_stale: Vec::new(),
            resp_hdr_del: Vec::new(),
            max_object_size: DEFAULT_MAX_OBJECT_SIZE,
            purge_mode: PurgeMode::Invalidate,
            hit_for_pass: Duration::from_secs(10),
            heuristic: Some(Heuristic::default()),
            targeted_fields: crate::targeted::DEFAULT_TARGETED_FIELDS
                .iter()
                .map(|f| (*f).to_owned())
                .collect(),
            background_revalidation: false,
        }
    }
}

impl Policy {
    pub fn method_cacheable(&self, method: &str) -> bool {
        self.methods.iter().any(|m| m.eq_ignore_ascii_case(method))
    }

    /// Whether a stale entry may be sent instead of this origin status
    /// (`cache_use_stale`). For connect failures and timeouts the proxy
    /// passes the 502/504 it would otherwise answer with.
    pub fn stale_allowed_for(&self, status: u16) -> bool {
        self.use_stale.iter().any(|p| p.matches(status))
    }

    /// Whether `name` is on the targeted-field list (RFC 9213): a field
    /// this cache consumes, which the proxy removes from what it forwards.
    pub fn is_targeted_field(&self, name: &[u8]) -> bool {
        self.targeted_fields
            .iter()
            .any(|f| f.as_bytes().eq_ignore_ascii_case(name))
    }

    pub(crate) fn deletes_header(&self, name: &[u8]) -> bool {
        self.resp_hdr_del
            .iter()
            .any(|d| d.as_bytes().eq_ignore_ascii_case(name))
    }
}

/// `cache_purge invalidate` (default) marks entries stale so the next
/// request revalidates them; `immediate` removes them at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PurgeMode {
    #[default]
    Invalidate,
    Immediate,
}

/// Configuration values the policy types refuse, with the offending text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyError {
    UnknownDirective(String),
    BadStatusPattern(String),
    UnknownMatchOp(String),
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::UnknownDirective(d) => write!(
                f,
                "unknown Cache-Control directive {d:?} (expected no-cache, no-store, private, \
                 public, max-age, s-maxage, must-revalidate or proxy-revalidate)"
            ),
            PolicyError::BadStatusPattern(p) => {
                write!(
                    f,
                    "bad status pattern {p:?} (expected a code such as 502, or 4*, 5*)"
                )
            }
            PolicyError::UnknownMatchOp(op) => {
                write!(
                    f,
                    "unknown match operator {op:?} (expected eq, prefix, suffix or *)"
                )
            }
        }
    }
}

impl std::error::Error for PolicyError {}

/// Response Cache-Control directives treated as absent (`cache_control_ignore`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IgnoredDirectives {
    pub no_cache: bool,
    pub no_store: bool,
    pub private: bool,
    pub public: bool,
    pub max_age: bool,
    pub s_maxage: bool,
    pub must_revalidate: bool,
    pub proxy_revalidate: bool,
}

impl IgnoredDirectives {
    /// From the directive names of `cache_control_ignore`, case-insensitive.
    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Self, PolicyError> {
        let mut ignored = IgnoredDirectives::default();
        for name in names {
            let flag = match name.to_ascii_lowercase().as_str() {
                "no-cache" => &mut ignored.no_cache,
                "no-store" => &mut ignored.no_store,
                "private" => &mut ignored.private,
                "public" => &mut ignored.public,
                "max-age" => &mut ignored.max_age,
                "s-maxage" => &mut ignored.s_maxage,
                "must-revalidate" => &mut ignored.must_revalidate,
                "proxy-revalidate" => &mut ignored.proxy_revalidate,
                _ => return Err(PolicyError::UnknownDirective(name.to_owned())),
            };
            *flag = true;
        }
        Ok(ignored)
    }

    /// Clears the ignored directives from a parsed response Cache-Control.
    pub fn apply(&self, cc: &mut crate::headers::CacheControl) {
        cc.no_cache &= !self.no_cache;
        cc.no_store &= !self.no_store;
        cc.private &= !self.private;
        cc.public &= !self.public;
        cc.must_revalidate &= !self.must_revalidate;
        cc.proxy_revalidate &= !self.proxy_revalidate;
        if self.max_age {
            cc.max_age = None;
        }
        if self.s_maxage {
            cc.s_maxage = None;
        }
    }
}

/// A `cache_use_stale` argument: an exact code or a class such as `5*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusPattern {
    Exact(u16),
    Class(u8),
}

impl StatusPattern {
    pub fn parse(raw: &str) -> Result<Self, PolicyError> {
        let bad = || PolicyError::BadStatusPattern(raw.to_owned());
        match raw.as_bytes() {
            [d @ b'1'..=b'5', b'*'] => Ok(StatusPattern::Class(d - b'0')),
            [b'1'..=b'5', b'0'..=b'9', b'0'..=b'9'] => {
                raw.parse().map(StatusPattern::Exact).map_err(|_| bad())
            }
            _ => Err(bad()),
        }
    }

    pub fn matches(&self, status: u16) -> bool {
        match *self {
            StatusPattern::Exact(code) => code == status,
            StatusPattern::Class(class) => status / 100 == u16::from(class),
        }
    }
}

/// Tempesta's `OP "PATTERN"` URI match (`cache_fulfill`, `cache_bypass`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UriMatcher {
    Eq(Box<[u8]>),
    Prefix(Box<[u8]>),
    Suffix(Box<[u8]>),
    Any,
}

impl UriMatcher {
    pub fn parse(op: &str, pattern: &str) -> Result<Self, PolicyError> {
        let p = || pattern.as_bytes().into();
        match op {
            "eq" => Ok(UriMatcher::Eq(p())),
            "prefix" => Ok(UriMatcher::Prefix(p())),
            "suffix" => Ok(UriMatcher::Suffix(p())),
            "*" => Ok(UriMatcher::Any),
            _ => Err(PolicyError::UnknownMatchOp(op.to_owned())),
        }
    }

    pub fn matches(&self, uri: &[u8]) -> bool {
        match self {
            UriMatcher::Eq(p) => uri == &p[..],
            UriMatcher::Prefix(p) => uri.starts_with(p),
            UriMatcher::Suffix(p) => uri.ends_with(p),
            UriMatcher::Any => true,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheAction {
    Fulfill,
    Bypass,
}

/// The ordered `cache_fulfill` / `cache_bypass` rules of a vhost or
/// location. The first matching rule decides; with none matching the
/// request bypasses the cache, as in Tempesta (nothing is cached unless a
/// `cache_fulfill` rule says so).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheRules {
    rules: Vec<(CacheAction, UriMatcher)>,
}

impl CacheRules {
    pub fn push(&mut self, action: CacheAction, matcher: UriMatcher) {
        self.rules.push((action, matcher));
    }

    pub fn decide(&self, uri: &[u8]) -> CacheAction {
        self.rules
            .iter()
            .find(|(_, m)| m.matches(uri))
            .map_or(CacheAction::Bypass, |(action, _)| *action)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_patterns() {
        let five = StatusPattern::parse("5*").unwrap();
        assert!(five.matches(502) && five.matches(599) && !five.matches(404));
        assert!(StatusPattern::parse("404").unwrap().matches(404));
        for bad in ["", "5", "6*", "50", "5000", "abc", "**"] {
            assert!(StatusPattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ignored_directives_parse_and_reject_unknown() {
        let ig = IgnoredDirectives::parse(["No-Cache", "max-age"]).unwrap();
        assert!(ig.no_cache && ig.max_age && !ig.private);
        assert_eq!(
            IgnoredDirectives::parse(["nope"]),
            Err(PolicyError::UnknownDirective("nope".into()))
        );
    }

    #[test]
    fn rules_first_match_wins_default_bypass() {
        let mut rules = CacheRules::default();
        rules.push(
            CacheAction::Bypass,
            UriMatcher::parse("prefix", "/api/").unwrap(),
        );
        rules.push(
            CacheAction::Fulfill,
            UriMatcher::parse("suffix", ".jpg").unwrap(),
        );
        rules.push(CacheAction::Fulfill, UriMatcher::parse("eq", "/").unwrap());
        assert_eq!(rules.decide(b"/api/x.jpg"), CacheAction::Bypass);
        assert_eq!(rules.decide(b"/img/x.jpg"), CacheAction::Fulfill);
        assert_eq!(rules.decide(b"/"), CacheAction::Fulfill);
        assert_eq!(rules.decide(b"/index.html"), CacheAction::Bypass);
        assert!(UriMatcher::parse("*", "*").unwrap().matches(b"/anything"));
        assert!(UriMatcher::parse("regex", "x").is_err());
    }
}
