//! Primary cache keys (RFC 9111 §2): vhost, scheme, normalised authority,
//! method class and target. The vhost stays in the key so two vhosts that
//! accept the same Host never share entries; scheme and authority keep two
//! Host values routed to one vhost apart (an origin's answer for
//! `Host: attacker.example` is never served for `Host: example.com`).
//!
//! The authority is normalised without allocating: lower case (compared and
//! hashed case-insensitively), the scheme's default port removed (also an
//! empty port). A trailing dot stays: the origin sees the Host as sent, and
//! `a.example.` is a name it may answer differently (issue 30). GET and HEAD share the
//! GET class so HEAD is answered from the GET entry. Shards and the LRU are
//! indexed by a keyed 64-bit hash; the full key is kept beside the stored
//! data and compared, so a hash collision is a miss, never a wrong response.

use std::hash::{BuildHasher, Hash, Hasher};

/// A key borrowed from the request being served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key<'a> {
    pub vhost: &'a str,
    /// `http` or `https`, as the client connection was (lower case).
    pub scheme: &'a str,
    /// Authority with the default port removed; upper-case
    /// letters may remain (they compare equal to lower case).
    pub authority: &'a [u8],
    pub class: &'a str,
    pub uri: &'a [u8],
}

impl<'a> Key<'a> {
    pub fn new(
        vhost: &'a str,
        scheme: &'a str,
        authority: &'a [u8],
        method: &'a str,
        uri: &'a [u8],
    ) -> Self {
        let class = if method.eq_ignore_ascii_case("HEAD") || method.eq_ignore_ascii_case("GET") {
            "GET"
        } else {
            method
        };
        let scheme = if scheme.eq_ignore_ascii_case("https") {
            "https"
        } else {
            "http"
        };
        Key {
            vhost,
            scheme,
            authority: normalise_authority(scheme, authority),
            class,
            uri,
        }
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.vhost.len()
            + self.scheme.len()
            + self.authority.len()
            + self.class.len()
            + self.uri.len()
    }

    pub(crate) fn hash_with(&self, hasher: &impl BuildHasher) -> u64 {
        let mut h = hasher.build_hasher();
        // Length prefixes keep ("ab", "c") and ("a", "bc") apart.
        self.vhost.len().hash(&mut h);
        self.vhost.hash(&mut h);
        self.scheme.hash(&mut h);
        self.authority.len().hash(&mut h);
        // Lower-cased through a small stack buffer: no allocation per lookup.
        let mut lower = [0u8; 64];
        for chunk in self.authority.chunks(lower.len()) {
            let part = &mut lower[..chunk.len()];
            part.copy_from_slice(chunk);
            part.make_ascii_lowercase();
            h.write(part);
        }
        self.class.hash(&mut h);
        self.uri.hash(&mut h);
        h.finish()
    }
}

/// The authority compared for the key: the default port of `scheme` (80
/// for http, 443 for https, also written with leading zeros) or an empty
/// port removed (`Example.COM:443` → `Example.COM` for https). A trailing
/// dot is kept: the proxy forwards the Host field as received, so
/// `example.com.` is what the origin answered for, and sharing its entry
/// with `example.com` would serve one name's answer for the other. IPv6
/// literals keep their brackets; case is left to the comparison.
pub fn normalise_authority<'b>(scheme: &str, authority: &'b [u8]) -> &'b [u8] {
    let default_port: u32 = if scheme.eq_ignore_ascii_case("https") {
        443
    } else {
        80
    };
    // The port follows the last colon, unless that colon is inside an IPv6 literal.
    let Some(colon) = authority.iter().rposition(|&b| b == b':') else {
        return authority;
    };
    let port = authority.get(colon + 1..).unwrap_or_default();
    let before = authority.get(..colon).unwrap_or_default();
    let inside_literal = before.starts_with(b"[") && !before.ends_with(b"]");
    // parse_port takes digits only: checked first.
    let digits = !inside_literal && port.iter().all(u8::is_ascii_digit);
    if digits && (port.is_empty() || parse_port(port) == Some(default_port)) {
        before
    } else {
        authority
    }
}

fn parse_port(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0u32, |n, &d| {
        n.checked_mul(10)?.checked_add(u32::from(d - b'0'))
    })
}

/// A key owned by stored data or a pending fetch: one allocation holding
/// vhost, scheme, authority (lower case), class and URI back to back.
#[derive(Debug)]
pub(crate) struct OwnedKey {
    bytes: Box<[u8]>,
    /// Lengths of vhost, scheme, authority and class; the URI is the rest.
    lens: [usize; 4],
}

impl OwnedKey {
    pub fn from_key(key: &Key<'_>) -> Self {
        let mut bytes = Vec::with_capacity(key.heap_bytes());
        bytes.extend_from_slice(key.vhost.as_bytes());
        bytes.extend_from_slice(key.scheme.as_bytes());
        let at = bytes.len();
        bytes.extend_from_slice(key.authority);
        if let Some(authority) = bytes.get_mut(at..) {
            authority.make_ascii_lowercase();
        }
        bytes.extend_from_slice(key.class.as_bytes());
        bytes.extend_from_slice(key.uri);
        OwnedKey {
            bytes: bytes.into(),
            lens: [
                key.vhost.len(),
                key.scheme.len(),
                key.authority.len(),
                key.class.len(),
            ],
        }
    }

    pub fn matches(&self, key: &Key<'_>) -> bool {
        let [v, s, a, c] = self.lens;
        let part = |from: usize, len: usize| self.bytes.get(from..from + len);
        v == key.vhost.len()
            && s == key.scheme.len()
            && a == key.authority.len()
            && c == key.class.len()
            && self.bytes.len() == key.heap_bytes()
            && part(0, v) == Some(key.vhost.as_bytes())
            && part(v, s) == Some(key.scheme.as_bytes())
            && part(v + s, a).is_some_and(|stored| stored.eq_ignore_ascii_case(key.authority))
            && part(v + s + a, c) == Some(key.class.as_bytes())
            && self.bytes.get(v + s + a + c..) == Some(key.uri)
    }

    pub fn heap_bytes(&self) -> usize {
        self.bytes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::RandomState;

    #[test]
    fn authority_normalisation_rfc3986_6_2_3() {
        let cases: [(&str, &str, &str); 11] = [
            ("https", "Example.COM", "Example.COM"),
            ("https", "example.com:443", "example.com"),
            // The origin saw the dot: another name (issue 30).
            ("https", "example.com.:443", "example.com."),
            ("https", "example.com.", "example.com."),
            ("http", "example.com.:8080", "example.com.:8080"),
            ("https", "example.com:", "example.com"),
            ("https", "example.com:0443", "example.com"),
            ("https", "example.com:80", "example.com:80"),
            ("http", "example.com:80", "example.com"),
            ("http", "[::1]:80", "[::1]"),
            ("http", "[::1]", "[::1]"),
        ];
        for (scheme, input, want) in cases {
            let got = normalise_authority(scheme, input.as_bytes());
            assert_eq!(got, want.as_bytes(), "{scheme} {input}");
        }
    }

    #[test]
    fn equal_keys_hash_and_match_alike() {
        let h = RandomState::new();
        let a = Key::new("v", "https", b"TEMPESTA-tech.com:443", "HEAD", b"/");
        let b = Key::new("v", "https", b"tempesta-tech.com", "GET", b"/");
        assert_eq!(a.hash_with(&h), b.hash_with(&h));
        assert!(OwnedKey::from_key(&b).matches(&a));
        let other_host = Key::new("v", "https", b"attacker.example", "GET", b"/");
        let other_scheme = Key::new("v", "http", b"tempesta-tech.com", "GET", b"/");
        let other_port = Key::new("v", "https", b"tempesta-tech.com:8443", "GET", b"/");
        let dotted = Key::new("v", "https", b"tempesta-tech.com.", "GET", b"/");
        for k in [other_host, other_scheme, other_port, dotted] {
            assert!(!OwnedKey::from_key(&b).matches(&k), "{k:?}");
        }
    }
}
