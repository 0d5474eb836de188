//! The HTTP table (`http_chain`), compiled once per configuration and evaluated per request
//! without allocating: which vhost serves a request, or whether it is blocked or redirected.
//!
//! Comparisons are case-insensitive, as in Tempesta; `~` regular expressions are applied as
//! written (add `(?i)` for case-insensitive ones). Netfilter marks do not exist here: a
//! `-> mark = N` action sets a per-request mark that later `mark ==` conditions see.

use std::time::Duration;

use config::{Action, Config, Field, HttpChain, Pattern, UrlTemplate};
use regex::bytes::Regex;

/// What a request looks like to the rules.
pub trait RequestView {
    /// Path and query, as sent.
    fn uri(&self) -> &[u8];
    /// Host from an absolute URI, else the Host header; empty if none.
    fn host(&self) -> &[u8];
    fn method(&self) -> &[u8];
    /// `http` or `https`: the client's connection, for `scheme ==` conditions.
    fn scheme(&self) -> &[u8];
    /// Calls `f` with the value of each field named `name` (case-insensitive), in order,
    /// until it returns true; returns whether it did. Every field is seen: a rule must not
    /// be bypassed by sending a second field of the same name.
    fn any_header(&self, name: &str, f: &mut dyn FnMut(&[u8]) -> bool) -> bool;
}

#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// Serve with vhost index `vhost` (0 is the default vhost).
    Vhost {
        vhost: usize,
        cache: CacheOverride,
    },
    Block,
    Redirect {
        status: u16,
        url: UrlTemplate,
    },
    /// No rule matched (or the chain is empty): no vhost, which Tempesta answers 403 as an
    /// error, not a block.
    NoMatch,
}

/// Cache settings changed by `cache_ttl` / `cache_disable` actions on the way.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CacheOverride {
    pub ttl: Option<Duration>,
    pub disable: Option<bool>,
}

enum Matcher {
    Any,
    Exact(Vec<u8>),
    Prefix(Vec<u8>),
    Suffix(Vec<u8>),
    Regex(Regex),
    Method(&'static str),
    Mark(u32),
}

enum Subject {
    Uri,
    Host,
    Header(String),
    Cookie(CookieName),
    Method,
    Mark,
    Scheme,
}

struct Cond {
    subject: Subject,
    negate: bool,
    matcher: Matcher,
}

enum Act {
    Vhost(usize),
    Chain(usize),
    Block,
    Mark(u32),
    Redirect(u16, UrlTemplate),
    CacheTtl(Duration),
    CacheDisable(bool),
}

struct Rule {
    cond: Option<Cond>,
    act: Act,
}

pub struct Router {
    /// Named chains in definition order, then the main chain last.
    chains: Vec<Vec<Rule>>,
}

/// Jumps followed at most per request (chains can only jump backwards, so this is a guard).
const MAX_JUMPS: usize = 64;

impl Router {
    /// Compiles the tables of a validated `config`. Names were checked by validation; a name
    /// that does not resolve (impossible after validation) makes the rule never match.
    pub fn new(config: &Config) -> Result<Router, regex::Error> {
        let vhost_index = |name: &str| -> Option<usize> {
            if name == config.default_vhost.name {
                Some(0)
            } else {
                config
                    .vhosts
                    .iter()
                    .position(|v| v.name == name)
                    .map(|i| i + 1)
            }
        };
        let tables = &config.http_tables;
        let chain_index = |name: &str| {
            tables
                .chains
                .iter()
                .position(|c| c.name.as_deref() == Some(name))
        };
        let compile = |chain: &HttpChain| -> Result<Vec<Rule>, regex::Error> {
            let mut rules = Vec::with_capacity(chain.rules.len());
            for rule in &chain.rules {
                let act = match &rule.action {
                    Action::Vhost(name) => match vhost_index(name) {
                        Some(i) => Act::Vhost(i),
                        None => continue,
                    },
                    Action::Chain(name) => match chain_index(name) {
                        Some(i) => Act::Chain(i),
                        None => continue,
                    },
                    Action::Block => Act::Block,
                    Action::Mark(m) => Act::Mark(*m),
                    Action::Redirect { status, url } => Act::Redirect(*status, url.clone()),
                    Action::CacheTtl(d) => Act::CacheTtl(*d),
                    Action::CacheDisable(b) => Act::CacheDisable(*b),
                };
                let cond = match &rule.condition {
                    None => None,
                    Some(c) => Some(Cond {
                        subject: match &c.field {
                            Field::Uri => Subject::Uri,
                            Field::Host => Subject::Host,
                            Field::Header(n) => Subject::Header(n.clone()),
                            Field::Cookie(n) => Subject::Cookie(CookieName::new(n)),
                            Field::Method => Subject::Method,
                            Field::Mark => Subject::Mark,
                            Field::Scheme => Subject::Scheme,
                        },
                        negate: c.negate,
                        matcher: match &c.pattern {
                            Pattern::Any => Matcher::Any,
                            Pattern::Exact(s) => Matcher::Exact(s.as_bytes().to_vec()),
                            Pattern::Prefix(s) => Matcher::Prefix(s.as_bytes().to_vec()),
                            Pattern::Suffix(s) => Matcher::Suffix(s.as_bytes().to_vec()),
                            Pattern::Regex(r) => Matcher::Regex(Regex::new(r)?),
                            Pattern::Method(m) => Matcher::Method(m.as_str()),
                            Pattern::Mark(m) => Matcher::Mark(*m),
                        },
                    }),
                };
                rules.push(Rule { cond, act });
            }
            Ok(rules)
        };
        let mut chains = Vec::with_capacity(tables.chains.len() + 1);
        for chain in &tables.chains {
            chains.push(compile(chain)?);
        }
        chains.push(compile(&tables.main)?);
        Ok(Router { chains })
    }

    /// Where `req` goes.
    pub fn route(&self, req: &impl RequestView) -> Route {
        let mut chain = self.chains.len() - 1;
        let mut rule = 0;
        let mut mark = 0u32;
        let mut cache = CacheOverride::default();
        let mut jumps = 0;
        loop {
            let Some(r) = self.chains.get(chain).and_then(|c| c.get(rule)) else {
                return Route::NoMatch;
            };
            rule += 1;
            if let Some(cond) = &r.cond {
                if cond.matches(req, mark) == cond.negate {
                    continue;
                }
            }
            match &r.act {
                Act::Vhost(v) => return Route::Vhost { vhost: *v, cache },
                Act::Block => return Route::Block,
                Act::Redirect(status, url) => {
                    return Route::Redirect {
                        status: *status,
                        url: url.clone(),
                    }
                }
                Act::Chain(c) => {
                    jumps += 1;
                    if jumps > MAX_JUMPS {
                        return Route::NoMatch;
                    }
                    chain = *c;
                    rule = 0;
                }
                Act::Mark(m) => mark = *m,
                Act::CacheTtl(d) => cache.ttl = Some(*d),
                Act::CacheDisable(b) => cache.disable = Some(*b),
            }
        }
    }
}

impl Cond {
    /// Whether the request matches: for header and cookie conditions, whether any field
    /// (any cookie of the name, in any Cookie field) matches.
    fn matches(&self, req: &impl RequestView, mark: u32) -> bool {
        match &self.subject {
            Subject::Uri => self.matches_value(req.uri()),
            Subject::Host => self.matches_value(req.host()),
            Subject::Method => self.matches_value(req.method()),
            Subject::Scheme => self.matches_value(req.scheme()),
            Subject::Header(name) => req.any_header(name, &mut |v| self.matches_value(v)),
            Subject::Cookie(name) => req.any_header("cookie", &mut |c| {
                cookie_values(c, name).any(|v| self.matches_value(v))
            }),
            Subject::Mark => match self.matcher {
                Matcher::Mark(m) => m == mark,
                Matcher::Any => true,
                _ => false,
            },
        }
    }

    fn matches_value(&self, value: &[u8]) -> bool {
        match &self.matcher {
            Matcher::Any => true,
            Matcher::Exact(s) => value.eq_ignore_ascii_case(s),
            Matcher::Prefix(s) => {
                value.len() >= s.len() && value[..s.len()].eq_ignore_ascii_case(s)
            }
            Matcher::Suffix(s) => {
                value.len() >= s.len() && value[value.len() - s.len()..].eq_ignore_ascii_case(s)
            }
            Matcher::Regex(re) => re.is_match(value),
            Matcher::Method(m) => value.eq_ignore_ascii_case(m.as_bytes()),
            Matcher::Mark(_) => false,
        }
    }
}

/// The name a `cookie "NAME"` condition looks for: exact, `*` any, `prefix*` or `*suffix`,
/// as Tempesta's tfw_http_val_adjust reads it. Cookie names are case-sensitive (RFC 6265).
enum CookieName {
    Any,
    Exact(Vec<u8>),
    Prefix(Vec<u8>),
    Suffix(Vec<u8>),
}

impl CookieName {
    fn new(name: &str) -> CookieName {
        let bytes = name.as_bytes();
        match bytes {
            b"*" => CookieName::Any,
            [rest @ .., b'*'] => CookieName::Prefix(rest.to_vec()),
            [b'*', rest @ ..] => CookieName::Suffix(rest.to_vec()),
            _ => CookieName::Exact(bytes.to_vec()),
        }
    }

    fn matches(&self, name: &[u8]) -> bool {
        match self {
            CookieName::Any => true,
            CookieName::Exact(n) => name == n.as_slice(),
            CookieName::Prefix(p) => name.starts_with(p),
            CookieName::Suffix(s) => name.ends_with(s),
        }
    }
}

/// The values of every cookie whose name `name` matches in a Cookie header
/// (`a=1; b=2; a=3`).
fn cookie_values<'a>(header: &'a [u8], name: &'a CookieName) -> impl Iterator<Item = &'a [u8]> {
    header.split(|&b| b == b';').filter_map(move |pair| {
        let pair = trim(pair);
        let eq = pair.iter().position(|&b| b == b'=')?;
        name.matches(trim(&pair[..eq]))
            .then(|| trim(&pair[eq + 1..]))
    })
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Req {
        uri: &'static str,
        host: &'static str,
        method: &'static str,
        scheme: &'static str,
        headers: Vec<(&'static str, &'static str)>,
    }

    impl RequestView for Req {
        fn uri(&self) -> &[u8] {
            self.uri.as_bytes()
        }
        fn host(&self) -> &[u8] {
            self.host.as_bytes()
        }
        fn method(&self) -> &[u8] {
            self.method.as_bytes()
        }
        fn scheme(&self) -> &[u8] {
            self.scheme.as_bytes()
        }
        fn any_header(&self, name: &str, f: &mut dyn FnMut(&[u8]) -> bool) -> bool {
            self.headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                .any(|(_, v)| f(v.as_bytes()))
        }
    }

    fn req(uri: &'static str, host: &'static str) -> Req {
        Req {
            uri,
            host,
            method: "GET",
            scheme: "http",
            headers: vec![],
        }
    }

    #[test]
    fn cookie_value_lists() {
        let first = |h: &'static [u8], n: &str| {
            let name = CookieName::new(n);
            let value = cookie_values(h, &name).next().map(<[u8]>::to_vec);
            value
        };
        assert_eq!(
            first(b"a=1; session = xyz ;b=2", "session"),
            Some(b"xyz".to_vec())
        );
        assert_eq!(first(b"a=1", "b"), None);
        assert_eq!(first(b"novalue; a=1", "a"), Some(b"1".to_vec()));
        let user = CookieName::new("user");
        let all: Vec<&[u8]> = cookie_values(&b"user=guest; a=1; user=admin"[..], &user).collect();
        assert_eq!(all, vec![&b"guest"[..], &b"admin"[..]]);
        // Name wildcards, as Tempesta's `cookie "*suffix"` / `"prefix*"` / `"*"`.
        let h = b"aaa_good_suffix_1=x; bbb_good_suffix=y; good_prefix_1=z";
        assert_eq!(first(h, "*good_suffix"), Some(b"y".to_vec()));
        assert_eq!(first(h, "good_prefix*"), Some(b"z".to_vec()));
        assert_eq!(first(h, "*"), Some(b"x".to_vec()));
        // Names are case-sensitive.
        assert_eq!(first(h, "BBB_good_suffix"), None);
    }

    /// A second field (or a second cookie) of the same name must not hide the one a block
    /// rule looks for (security issue, item 8).
    #[test]
    fn every_field_and_cookie_of_a_name_is_matched() {
        let text = r#"
            srv_group default { server 127.0.0.1:8000; }
            vhost site { proxy_pass default; }
            http_chain {
                hdr "X-Role" == "admin" -> block;
                cookie "user" == "admin" -> block;
                -> site;
            }
        "#;
        let loaded =
            config::parse_str("t.conf", text, std::path::Path::new("/")).expect("config loads");
        let router = Router::new(&loaded.config).expect("router");
        let mut r = req("/", "site.example");
        r.headers.push(("X-Role", "user"));
        r.headers.push(("x-role", "admin"));
        assert_eq!(router.route(&r), Route::Block);
        let mut r = req("/", "site.example");
        r.headers.push(("Cookie", "user=guest"));
        r.headers.push(("Cookie", "user=admin"));
        assert_eq!(router.route(&r), Route::Block);
        let mut r = req("/", "site.example");
        r.headers.push(("Cookie", "user=guest; user=admin"));
        assert_eq!(router.route(&r), Route::Block);
        let mut r = req("/", "site.example");
        r.headers.push(("X-Role", "user"));
        assert!(matches!(router.route(&r), Route::Vhost { .. }));
    }

    #[test]
    fn reference_chain_routes_redirects_and_blocks() {
        let text = r#"
            srv_group default { server 127.0.0.1:8000; }
            vhost site { proxy_pass default; }
            vhost other { proxy_pass default; }
            http_chain redirection_chain {
                uri == "/blog" -> 301 = /blog/1;
                uri == "/old*" -> 308 = https://$host/new$request_uri;
                hdr "X-Test" == "*yes" -> other;
                cookie "user" == "admin" -> block;
                -> site;
            }
            http_chain {
                host == "site.example" -> redirection_chain;
                method == post -> block;
                uri ~ "/^\/re[0-9]+$/" -> other;
                -> mark = 5;
                mark == 5 -> other;
            }
        "#;
        let loaded =
            config::parse_str("t.conf", text, std::path::Path::new("/")).expect("config loads");
        let router = Router::new(&loaded.config).expect("router");
        let site = 1;
        let other = 2;
        assert!(matches!(
            router.route(&req("/blog", "site.example")),
            Route::Redirect { status: 301, .. }
        ));
        assert!(matches!(
            router.route(&req("/BLOG", "SITE.example")),
            Route::Redirect { status: 301, .. }
        ));
        assert!(
            matches!(router.route(&req("/blog/", "site.example")), Route::Vhost { vhost, .. } if vhost == site)
        );
        match router.route(&req("/old/x?q=1", "site.example")) {
            Route::Redirect { status: 308, url } => {
                assert_eq!(
                    url.render("site.example", "/old/x?q=1"),
                    "https://site.example/new/old/x?q=1"
                )
            }
            other => panic!("unexpected {other:?}"),
        }
        let mut r = req("/", "site.example");
        r.headers.push(("x-test", "say yes"));
        assert!(matches!(router.route(&r), Route::Vhost { vhost, .. } if vhost == other));
        let mut r = req("/", "site.example");
        r.headers.push(("Cookie", "a=b; user=admin"));
        assert_eq!(router.route(&r), Route::Block);
        let mut r = req("/", "elsewhere");
        r.method = "POST";
        assert_eq!(router.route(&r), Route::Block);
        assert!(
            matches!(router.route(&req("/re42", "elsewhere")), Route::Vhost { vhost, .. } if vhost == other)
        );
        // The mark set by a default rule is seen by the next condition.
        assert!(
            matches!(router.route(&req("/x", "elsewhere")), Route::Vhost { vhost, .. } if vhost == other)
        );
    }

    #[test]
    fn no_match_is_reported() {
        let text = r#"
            srv_group default { server 127.0.0.1:8000; }
            vhost site { proxy_pass default; }
            http_chain { host == "a" -> site; }
        "#;
        let loaded =
            config::parse_str("t.conf", text, std::path::Path::new("/")).expect("config loads");
        let router = Router::new(&loaded.config).expect("router");
        assert_eq!(router.route(&req("/", "b")), Route::NoMatch);
        assert!(matches!(
            router.route(&req("/", "A")),
            Route::Vhost { vhost: 1, .. }
        ));
    }

    #[test]
    fn scheme_conditions_see_the_clients_connection() {
        let text = r#"
            srv_group default { server 127.0.0.1:8000; }
            vhost site { proxy_pass default; }
            http_chain {
                scheme == "http" -> 301 = https://$host$request_uri;
                -> site;
            }
        "#;
        let loaded =
            config::parse_str("t.conf", text, std::path::Path::new("/")).expect("config loads");
        let router = Router::new(&loaded.config).expect("router");
        assert!(matches!(
            router.route(&req("/a?b", "site")),
            Route::Redirect { status: 301, .. }
        ));
        let mut tls = req("/a?b", "site");
        tls.scheme = "https";
        assert!(matches!(router.route(&tls), Route::Vhost { vhost: 1, .. }));
    }
}
