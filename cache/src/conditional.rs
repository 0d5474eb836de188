//! Answering a client's conditional request from a stored entry
//! (RFC 9111 §4.3.2, RFC 9110 §13): If-None-Match, else If-Modified-Since.

use crate::entry::{Entry, ReplyKind};
use crate::headers::{self, HeaderPair};
use crate::httpdate::parse_http_date;
use crate::message::Request;

impl Entry {
    /// What to send for a hit on this entry: a 304 when the client's
    /// validators match, the head alone for HEAD, else the full response.
    pub fn reply_kind<H: HeaderPair>(&self, req: &Request<'_, H>) -> ReplyKind {
        if self.not_modified_for(req.headers) {
            ReplyKind::NotModified
        } else if req.is_head() {
            ReplyKind::HeadOnly
        } else {
            ReplyKind::Full
        }
    }

    /// Whether the request's preconditions say the client's copy is
    /// current. Preconditions only apply when the answer would be 2xx
    /// (RFC 9110 §13.2.1); If-None-Match takes precedence, so
    /// If-Modified-Since is ignored whenever it is present.
    pub fn not_modified_for<H: HeaderPair>(&self, req_headers: &[H]) -> bool {
        if !(200..300).contains(&self.status()) {
            return false;
        }
        if headers::has(req_headers, "if-none-match") {
            return headers::list_elements(req_headers, "if-none-match").any(|tag| {
                tag == b"*" || self.etag().is_some_and(|stored| weak_match(tag, stored))
            });
        }
        match headers::first(req_headers, "if-modified-since").and_then(parse_http_date) {
            Some(since) => self.modified_at() <= since,
            None => false,
        }
    }
}

/// Weak comparison (RFC 9110 §8.8.3.2): opaque tags equal, W/ ignored.
pub fn weak_match(a: &[u8], b: &[u8]) -> bool {
    let (a, b) = (opaque_tag(a), opaque_tag(b));
    a.len() >= 2 && a.first() == Some(&b'"') && a == b
}

fn opaque_tag(tag: &[u8]) -> &[u8] {
    let tag = tag.trim_ascii();
    tag.strip_prefix(b"W/").unwrap_or(tag)
}
