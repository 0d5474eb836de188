//! Reading header fields handed over by the proxy: lookup by name, list
//! splitting and the Cache-Control directives this cache acts upon.
//!
//! The proxy passes headers as slices of `(name, value)` pairs in whatever
//! byte-ish types its parser produces; [`HeaderPair`] abstracts over them so
//! no per-request conversion or allocation is needed.

/// One header field as the proxy holds it: `(&str, &[u8])`, `(&[u8], &[u8])`,
/// `(String, Vec<u8>)`… anything whose parts are byte slices.
pub trait HeaderPair {
    fn name(&self) -> &[u8];
    fn value(&self) -> &[u8];
}

impl<N: AsRef<[u8]>, V: AsRef<[u8]>> HeaderPair for (N, V) {
    fn name(&self) -> &[u8] {
        self.0.as_ref()
    }
    fn value(&self) -> &[u8] {
        self.1.as_ref()
    }
}

/// Values of every field called `name` (case-insensitive), in order.
pub fn values<'h, H: HeaderPair>(
    headers: &'h [H],
    name: &'h str,
) -> impl Iterator<Item = &'h [u8]> {
    headers
        .iter()
        .filter(move |h| h.name().eq_ignore_ascii_case(name.as_bytes()))
        .map(HeaderPair::value)
}

/// The first value of `name`, trimmed.
pub fn first<'h, H: HeaderPair>(headers: &'h [H], name: &'h str) -> Option<&'h [u8]> {
    values(headers, name).next().map(<[u8]>::trim_ascii)
}

pub fn has<H: HeaderPair>(headers: &[H], name: &str) -> bool {
    values(headers, name).next().is_some()
}

/// Elements of a comma-separated list spread over every field called
/// `name`: trimmed, empty elements skipped, commas inside quoted strings
/// kept (entity-tags and `no-cache="a, b"` contain them).
pub fn list_elements<'h, H: HeaderPair>(
    headers: &'h [H],
    name: &'h str,
) -> impl Iterator<Item = &'h [u8]> {
    values(headers, name).flat_map(split_list)
}

/// Splits one field value on commas outside quoted strings.
pub fn split_list(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = value;
    std::iter::from_fn(move || loop {
        if rest.is_empty() {
            return None;
        }
        let mut in_quotes = false;
        let mut escaped = false;
        let mut end = rest.len();
        for (i, &b) in rest.iter().enumerate() {
            if escaped {
                escaped = false;
            } else if in_quotes && b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_quotes = !in_quotes;
            } else if b == b',' && !in_quotes {
                end = i;
                break;
            }
        }
        let (element, tail) = rest.split_at(end);
        rest = tail.get(1..).unwrap_or_default();
        let element = element.trim_ascii();
        if !element.is_empty() {
            return Some(element);
        }
    })
}

/// Delta-seconds beyond this are clamped (RFC 9111 §1.2.2).
pub const DELTA_SECONDS_MAX: u64 = 2_147_483_648;

/// Parses delta-seconds; `None` if not a non-empty run of digits.
pub fn delta_seconds(raw: &[u8]) -> Option<u64> {
    let raw = raw.trim_ascii();
    if raw.is_empty() || !raw.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(raw.iter().fold(0u64, |acc, &d| {
        acc.saturating_mul(10)
            .saturating_add(u64::from(d - b'0'))
            .min(DELTA_SECONDS_MAX)
    }))
}

/// The Cache-Control directives this cache understands, from either a
/// request or a response. Unknown extensions are ignored (RFC 9111 §5.2.3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheControl {
    pub no_store: bool,
    pub no_cache: bool,
    pub private: bool,
    pub public: bool,
    pub must_revalidate: bool,
    pub proxy_revalidate: bool,
    pub only_if_cached: bool,
    /// Response `must-understand` (§5.2.2.3).
    pub must_understand: bool,
    pub max_age: Option<u64>,
    pub s_maxage: Option<u64>,
    pub min_fresh: Option<u64>,
    /// Request `max-stale`: `Some(DELTA_SECONDS_MAX)` without an argument
    /// (any staleness is acceptable).
    pub max_stale: Option<u64>,
    /// Response `stale-if-error=N` (RFC 5861 §4).
    pub stale_if_error: Option<u64>,
    /// Response `stale-while-revalidate=N` (RFC 5861 §3).
    pub stale_while_revalidate: Option<u64>,
}

impl CacheControl {
    /// Collects directives from every Cache-Control field. A request
    /// without Cache-Control but with `Pragma: no-cache` is read as
    /// `no-cache` (RFC 9111 §5.4 compatibility).
    pub fn parse<H: HeaderPair>(headers: &[H]) -> Self {
        let mut cc = CacheControl::default();
        let mut seen = false;
        for directive in list_elements(headers, "cache-control") {
            seen = true;
            cc.apply(directive);
        }
        if !seen && list_elements(headers, "pragma").any(|p| p.eq_ignore_ascii_case(b"no-cache")) {
            cc.no_cache = true;
        }
        cc
    }

    fn apply(&mut self, directive: &[u8]) {
        // `token [ "=" ( token / quoted-string ) ]` (§5.2): no whitespace
        // around "=", so `max-age =3` and `max-age= 3` are malformed.
        let (name, arg) = match directive.iter().position(|&b| b == b'=') {
            Some(eq) => {
                let (n, a) = directive.split_at(eq);
                (n, Some(unquote(a.get(1..).unwrap_or_default())))
            }
            None => (directive, None),
        };
        // Whitespace before "=" makes the argument invalid (read as 0 below).
        let arg = match arg {
            Some(_) if name.last().is_some_and(u8::is_ascii_whitespace) => Some(&b""[..]),
            other => other,
        };
        let name = name.trim_ascii();
        let is = |known: &str| name.eq_ignore_ascii_case(known.as_bytes());
        if is("no-store") {
            self.no_store = true;
        } else if is("no-cache") {
            // The qualified form `no-cache="field"` is treated as
            // unqualified, which RFC 9111 §5.2.2.4 allows.
            self.no_cache = true;
        } else if is("private") {
            self.private = true;
        } else if is("public") {
            self.public = true;
        } else if is("must-revalidate") {
            self.must_revalidate = true;
        } else if is("proxy-revalidate") {
            self.proxy_revalidate = true;
        } else if is("only-if-cached") {
            self.only_if_cached = true;
        } else if is("must-understand") {
            self.must_understand = true;
        } else if is("max-age") {
            self.max_age = Some(seconds(self.max_age, arg));
        } else if is("s-maxage") {
            self.s_maxage = Some(seconds(self.s_maxage, arg));
        } else if is("min-fresh") {
            self.min_fresh = Some(seconds(self.min_fresh, arg));
        } else if is("stale-if-error") {
            self.stale_if_error = Some(seconds(self.stale_if_error, arg));
        } else if is("stale-while-revalidate") {
            self.stale_while_revalidate = Some(seconds(self.stale_while_revalidate, arg));
        } else if is("max-stale") {
            // Without an argument any staleness is acceptable (§5.2.1.2);
            // a malformed one accepts none.
            self.max_stale = Some(match arg {
                None => DELTA_SECONDS_MAX,
                Some(_) => seconds(self.max_stale, arg),
            });
        }
    }
}

/// A seconds argument, combined with an earlier occurrence of the same
/// directive. RFC 9111 §4.2.1: invalid freshness information (`100a`,
/// `1.5`, `-1`, empty, whitespace) is read as 0, i.e. stale; a repeated
/// directive with a different value makes the response stale too (the RFC
/// allows the first or stale; stale is the safer choice for a shared cache).
fn seconds(prev: Option<u64>, arg: Option<&[u8]>) -> u64 {
    let parsed = arg.and_then(delta_seconds_strict).unwrap_or(0);
    match prev {
        Some(p) if p != parsed => 0,
        _ => parsed,
    }
}

/// delta-seconds exactly (§1.2.2): one or more digits, nothing else;
/// values over 2^31 are 2^31.
fn delta_seconds_strict(raw: &[u8]) -> Option<u64> {
    if raw.first().is_some_and(u8::is_ascii_whitespace)
        || raw.last().is_some_and(u8::is_ascii_whitespace)
    {
        return None;
    }
    delta_seconds(raw)
}

/// The value of a directive argument: a quoted-string's content (§5.2
/// asks recipients to accept `max-age="5"`), else the token as is.
fn unquote(raw: &[u8]) -> &[u8] {
    raw.strip_prefix(b"\"")
        .and_then(|r| r.strip_suffix(b"\""))
        .unwrap_or(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cc(values: &[&str]) -> CacheControl {
        let headers: Vec<(&str, &[u8])> = values
            .iter()
            .map(|v| ("Cache-Control", v.as_bytes()))
            .collect();
        CacheControl::parse(&headers)
    }

    #[test]
    fn splits_lists_respecting_quotes() {
        let parts: Vec<&[u8]> = split_list(br#" a , "b,c" ,, W/"d\",e" ,"#).collect();
        assert_eq!(parts, [&b"a"[..], br#""b,c""#, br#"W/"d\",e""#]);
    }

    #[test]
    fn parses_directives_across_fields() {
        let c = cc(&[
            "Public, MAX-AGE=60",
            "s-maxage=\"30\", no-cache=\"Set-Cookie, X\"",
        ]);
        assert!(c.public && c.no_cache && !c.no_store);
        assert_eq!(c.max_age, Some(60));
        assert_eq!(c.s_maxage, Some(30));
    }

    /// RFC 9111 §1.2.2, §4.2.1, §5.2: exact delta-seconds, table-driven.
    #[test]
    fn max_age_forms() {
        let cases: [(&str, Option<u64>); 16] = [
            ("max-age=100", Some(100)),
            ("MAX-AGE=100", Some(100)),
            ("max-age=\"100\"", Some(100)),
            ("max-age=100a", Some(0)),
            ("max-age=1.5", Some(0)),
            ("max-age=-1", Some(0)),
            ("max-age=", Some(0)),
            ("max-age", Some(0)),
            ("max-age =3", Some(0)),
            ("max-age= 3", Some(0)),
            ("max-age=\"3\"x", Some(0)),
            ("max-age=100, max-age=10", Some(0)),
            ("max-age=10, max-age=10", Some(10)),
            ("max-age=2147483648", Some(DELTA_SECONDS_MAX)),
            ("max-age=99999999999999999999999", Some(DELTA_SECONDS_MAX)),
            ("no-cache", None),
        ];
        for (value, want) in cases {
            assert_eq!(cc(&[value]).max_age, want, "{value}");
        }
    }

    #[test]
    fn max_stale_forms_rfc9111_5_2_1_2() {
        assert_eq!(cc(&["max-stale"]).max_stale, Some(DELTA_SECONDS_MAX));
        assert_eq!(cc(&["max-stale=30"]).max_stale, Some(30));
        assert_eq!(cc(&["max-stale=x"]).max_stale, Some(0));
        assert_eq!(cc(&["no-cache"]).max_stale, None);
    }

    #[test]
    fn malformed_or_conflicting_ages_are_conservative() {
        assert_eq!(cc(&["max-age=abc"]).max_age, Some(0));
        assert_eq!(cc(&["s-maxage=5", "s-maxage=6"]).s_maxage, Some(0));
        assert_eq!(
            cc(&["max-age=99999999999999999999999"]).max_age,
            Some(DELTA_SECONDS_MAX)
        );
    }

    #[test]
    fn pragma_no_cache_only_without_cache_control() {
        let pragma: [(&str, &[u8]); 1] = [("Pragma", b"no-cache")];
        assert!(CacheControl::parse(&pragma).no_cache);
        let both: [(&str, &[u8]); 2] = [("Pragma", b"no-cache"), ("Cache-Control", b"max-age=5")];
        assert!(!CacheControl::parse(&both).no_cache);
    }
}
