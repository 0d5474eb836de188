//! Invalidation by unsafe methods (RFC 9111 §4.4): a non-error response to
//! a request whose method is not safe (RFC 9110 §9.2.1) invalidates what is
//! stored for its target URI, and for the `Location` and `Content-Location`
//! URIs when they have the same origin. Invalidation here removes the key
//! with all its variants (the RFC allows removing or marking stale; removal
//! frees the memory at once and a removed entry can never be served).

use crate::cache::Cache;
use crate::headers::{self, HeaderPair};
use crate::key::{normalise_authority, Key};
use crate::message::Request;

/// Methods RFC 9110 §9.2.1 defines as safe; every other method, known or
/// not, is unsafe for §4.4.
const SAFE_METHODS: [&str; 4] = ["GET", "HEAD", "OPTIONS", "TRACE"];

/// Whether a response to `method` invalidates stored responses (§4.4).
pub fn is_unsafe_method(method: &str) -> bool {
    !SAFE_METHODS.iter().any(|m| m.eq_ignore_ascii_case(method))
}

impl Cache {
    /// Applies §4.4 for a response with `status` and fields `resp_headers`
    /// to `req`: when the method is unsafe and the status is 2xx or 3xx,
    /// removes the stored responses for the target and for same-origin
    /// `Location` / `Content-Location` URIs. Returns how many keys held
    /// something. Called even when the request was not cacheable itself.
    pub fn invalidate_after_unsafe<Q: HeaderPair, R: HeaderPair>(
        &self,
        req: &Request<'_, Q>,
        status: u16,
        resp_headers: &[R],
    ) -> usize {
        if !is_unsafe_method(req.method) || !(200..400).contains(&status) {
            return 0;
        }
        let mut removed = usize::from(self.remove_target(req, req.authority, req.uri));
        for field in ["location", "content-location"] {
            let Some(reference) = headers::first(resp_headers, field) else {
                continue;
            };
            if let Some((authority, path)) = same_origin_target(req, reference) {
                // Resolved relative references need an owned path.
                removed += usize::from(self.remove_target(req, authority, &path));
            }
        }
        removed
    }

    fn remove_target<Q: HeaderPair>(
        &self,
        req: &Request<'_, Q>,
        authority: &[u8],
        target: &[u8],
    ) -> bool {
        let key = Key::new(req.vhost, req.scheme, authority, "GET", target);
        self.remove_key(&key)
    }
}

/// The authority and target (path and query) a `Location` or
/// `Content-Location` value refers to, resolved against the request
/// (RFC 3986 §5.2), when it has the request's origin (scheme, host and
/// port, RFC 6454); `None` for another origin or an unusable value.
pub(crate) fn same_origin_target<'r, Q: HeaderPair>(
    req: &Request<'r, Q>,
    reference: &'r [u8],
) -> Option<(&'r [u8], Vec<u8>)> {
    let reference = strip_fragment(reference);
    if reference.is_empty() || reference.iter().any(|&b| b <= b' ' || b == 0x7f) {
        return None;
    }
    if let Some((scheme, rest)) = split_scheme(reference) {
        if !scheme.eq_ignore_ascii_case(req.scheme.as_bytes()) {
            return None;
        }
        return network_path(req, rest.strip_prefix(b"//")?);
    }
    if let Some(after) = reference.strip_prefix(b"//") {
        return network_path(req, after);
    }
    if reference.first() == Some(&b'/') {
        return Some((req.authority, reference.to_vec()));
    }
    // A relative path: replace the last segment of the request's path.
    let path = req.uri.split(|&b| b == b'?').next().unwrap_or_default();
    let dir = path
        .iter()
        .rposition(|&b| b == b'/')
        .map_or(&b"/"[..], |i| &path[..=i]);
    let mut resolved = dir.to_vec();
    if reference.first() == Some(&b'?') {
        resolved = path.to_vec();
    }
    resolved.extend_from_slice(reference);
    Some((req.authority, resolved))
}

/// `(scheme, rest)` when `reference` starts with a URI scheme and a colon
/// (RFC 3986 §3.1).
fn split_scheme(reference: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = reference.iter().position(|&b| b == b':')?;
    let scheme = reference.get(..colon)?;
    let first_alpha = scheme.first().is_some_and(u8::is_ascii_alphabetic);
    let valid = scheme
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    let rest = reference.get(colon + 1..).unwrap_or_default();
    (first_alpha && valid).then_some((scheme, rest))
}

/// `authority/path` after `//`: same origin when the authority normalises
/// to the request's (case-insensitive).
fn network_path<'r, Q: HeaderPair>(
    req: &Request<'r, Q>,
    after: &'r [u8],
) -> Option<(&'r [u8], Vec<u8>)> {
    let end = after
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(after.len());
    let (authority, path) = after.split_at(end);
    if authority.contains(&b'@') {
        return None;
    }
    let theirs = normalise_authority(req.scheme, authority);
    let ours = normalise_authority(req.scheme, req.authority);
    if !theirs.eq_ignore_ascii_case(ours) {
        return None;
    }
    let mut target = Vec::with_capacity(path.len() + 1);
    if path.first() != Some(&b'/') {
        target.push(b'/');
    }
    target.extend_from_slice(path);
    Some((authority, target))
}

fn strip_fragment(reference: &[u8]) -> &[u8] {
    let reference = reference.trim_ascii();
    let end = reference
        .iter()
        .position(|&b| b == b'#')
        .unwrap_or(reference.len());
    reference.get(..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(scheme: &str, authority: &str, uri: &str, reference: &str) -> Option<String> {
        let req: Request<'_, (&str, &str)> = Request {
            vhost: "v",
            scheme,
            authority: authority.as_bytes(),
            method: "POST",
            uri: uri.as_bytes(),
            headers: &[],
        };
        same_origin_target(&req, reference.as_bytes()).map(|(a, p)| {
            format!(
                "{}{}",
                String::from_utf8_lossy(a),
                String::from_utf8_lossy(&p)
            )
        })
    }

    /// RFC 9111 §4.4 same-origin rule with RFC 3986 §5.2 resolution.
    #[test]
    fn location_references_resolve_within_the_origin_only() {
        let cases: [(&str, &str, &str, &str, Option<&str>); 13] = [
            ("https", "a.example", "/x/y", "/z", Some("a.example/z")),
            ("https", "a.example", "/x/y", "z?q", Some("a.example/x/z?q")),
            (
                "https",
                "a.example",
                "/x/y?o",
                "?q",
                Some("a.example/x/y?q"),
            ),
            (
                "https",
                "a.example",
                "/x",
                "https://A.example:443/n#f",
                Some("A.example:443/n"),
            ),
            // A trailing dot names another cache authority (see normalise_authority).
            ("https", "a.example", "/x", "//a.example./n", None),
            (
                "https",
                "a.example.",
                "/x",
                "//A.example./n",
                Some("A.example./n"),
            ),
            (
                "https",
                "a.example",
                "/x",
                "https://a.example",
                Some("a.example/"),
            ),
            ("https", "a.example", "/x", "http://a.example/n", None),
            ("https", "a.example", "/x", "https://b.example/n", None),
            ("https", "a.example", "/x", "https://a.example:8443/n", None),
            ("https", "a.example", "/x", "https://u@a.example/n", None),
            ("https", "a.example", "/x", "mailto:a@a.example", None),
            ("https", "a.example", "/x", "/a b", None),
        ];
        for (scheme, authority, uri, reference, want) in cases {
            assert_eq!(
                resolve(scheme, authority, uri, reference).as_deref(),
                want,
                "{reference}"
            );
        }
    }

    #[test]
    fn safe_methods_per_rfc9110_9_2_1() {
        for m in ["GET", "head", "OPTIONS", "TRACE"] {
            assert!(!is_unsafe_method(m), "{m}");
        }
        for m in ["POST", "PUT", "DELETE", "PATCH", "PURGE", "FROB"] {
            assert!(is_unsafe_method(m), "{m}");
        }
    }
}
