//! Answering a client's request from a stored entry (RFC 9111 §4.3.2,
//! RFC 9110 §13 and §14): preconditions in the order of RFC 9110 §13.2.2,
//! then Range with If-Range. [`decide`] is a pure function over the
//! request's method and fields and a [`Representation`] (what the cache
//! knows about the stored response); [`Entry::answer`] applies it.

use std::time::{Duration, SystemTime};

use crate::entry::{Entry, ReplyKind};
use crate::headers::{self, HeaderPair};
use crate::httpdate::parse_http_date;
use crate::message::Request;
use crate::range::{resolve_field, ByteRange, RangeResolution};

/// What the cache knows about a stored response when it evaluates a
/// request's preconditions and Range.
#[derive(Debug, Clone, Copy)]
pub struct Representation<'a> {
    pub status: u16,
    /// The stored ETag field value, as received.
    pub etag: Option<&'a [u8]>,
    /// The stored Last-Modified, if present and a valid HTTP-date.
    pub last_modified: Option<SystemTime>,
    /// The stored Date (the cache adds one when the origin sent none).
    pub date: SystemTime,
    /// Body length in bytes.
    pub len: usize,
}

/// How to answer a request from a stored entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The stored response as is: full, head only, or its 304
    /// ([`Entry::reply_parts`]).
    Stored(ReplyKind),
    /// 412: If-Match or If-Unmodified-Since evaluated false (§13.2.2
    /// steps 1-2) against the stored representation.
    PreconditionFailed,
    /// 206 with these ranges (one: single part; more: multipart/byteranges).
    Partial(Vec<ByteRange>),
    /// 416 with `Content-Range: bytes */len`.
    RangeNotSatisfiable,
}

impl Entry {
    /// What to send for a hit on this entry: a 304 when the client's
    /// validators match, the head alone for HEAD, else the full response.
    /// Kept for callers that do not answer ranges or 412 yet; new callers
    /// use [`Entry::answer`].
    pub fn reply_kind<H: HeaderPair>(&self, req: &Request<'_, H>) -> ReplyKind {
        if self.not_modified_for(req.headers) {
            ReplyKind::NotModified
        } else if req.is_head() {
            ReplyKind::HeadOnly
        } else {
            ReplyKind::Full
        }
    }

    /// Whether the request's If-None-Match / If-Modified-Since say the
    /// client's copy is current (§13.2.2 steps 3-4, for GET and HEAD, the
    /// only methods answered from cache).
    #[inline]
    pub fn not_modified_for<H: HeaderPair>(&self, req_headers: &[H]) -> bool {
        (200..300).contains(&self.status())
            && has_conditions(req_headers)
            && not_modified(req_headers, &self.representation(), self.modified_at())
    }

    /// The full decision for this request (RFC 9110 §13.2.2, §14.2).
    pub fn answer<H: HeaderPair>(&self, req: &Request<'_, H>) -> Answer {
        // A plain hit (no `If-*`, no Range) costs one pass over the field names; the
        // representation is built only for a request that has something to evaluate.
        if !has_conditions(req.headers) {
            return Answer::Stored(if req.is_head() {
                ReplyKind::HeadOnly
            } else {
                ReplyKind::Full
            });
        }
        decide_at(
            req.method,
            req.headers,
            &self.representation(),
            self.modified_at(),
        )
    }

    /// This entry as [`decide`] sees it.
    pub fn representation(&self) -> Representation<'_> {
        Representation {
            status: self.status(),
            etag: self.etag(),
            last_modified: self.last_modified_at(),
            date: self.date(),
            len: self.body().len(),
        }
    }
}

/// RFC 9110 §13.2.2 then §14.2, for a request answered from a stored
/// representation:
/// 1. If-Match false → 412; 2. else If-Unmodified-Since false → 412;
/// 3. If-None-Match false → 304 (GET/HEAD) or 412; 4. else, for GET/HEAD,
///    If-Modified-Since false → 304 (compared with Last-Modified, else Date,
///    RFC 9111 §4.3.2);
/// 5. GET with Range, and If-Range absent or true → 206 / 416;
/// 6. the stored response (head only for HEAD).
///
/// Preconditions and Range are ignored when the stored status is not 2xx
/// (§13.2.1); Range only applies to a 200.
pub fn decide<H: HeaderPair>(method: &str, req_headers: &[H], rep: &Representation<'_>) -> Answer {
    let modified_at = rep.last_modified.unwrap_or(rep.date);
    decide_at(method, req_headers, rep, modified_at)
}

fn decide_at<H: HeaderPair>(
    method: &str,
    req_headers: &[H],
    rep: &Representation<'_>,
    modified_at: SystemTime,
) -> Answer {
    let head = method.eq_ignore_ascii_case("HEAD");
    let get = method.eq_ignore_ascii_case("GET");
    let plain = Answer::Stored(if head {
        ReplyKind::HeadOnly
    } else {
        ReplyKind::Full
    });
    if !(200..300).contains(&rep.status) || !has_conditions(req_headers) {
        return plain;
    }
    if precondition_failed(req_headers, rep) {
        return Answer::PreconditionFailed;
    }
    if headers::has(req_headers, "if-none-match") {
        if none_match_false(req_headers, rep) {
            return if get || head {
                Answer::Stored(ReplyKind::NotModified)
            } else {
                Answer::PreconditionFailed
            };
        }
    } else if (get || head) && modified_since_false(req_headers, modified_at) {
        return Answer::Stored(ReplyKind::NotModified);
    }
    if get && rep.status == 200 {
        if let Some(answer) = range_answer(req_headers, rep) {
            return answer;
        }
    }
    plain
}

/// Whether the request has any `If-*` or `Range` field: one pass, so a
/// plain hit does not scan the fields once per precondition.
fn has_conditions<H: HeaderPair>(req_headers: &[H]) -> bool {
    req_headers.iter().any(|h| {
        let name = h.name();
        name.get(..3)
            .is_some_and(|p| p.eq_ignore_ascii_case(b"if-"))
            || name.eq_ignore_ascii_case(b"range")
    })
}

/// Steps 3-4 alone (the 304 decision).
fn not_modified<H: HeaderPair>(
    req_headers: &[H],
    rep: &Representation<'_>,
    modified_at: SystemTime,
) -> bool {
    if headers::has(req_headers, "if-none-match") {
        none_match_false(req_headers, rep)
    } else {
        modified_since_false(req_headers, modified_at)
    }
}

/// Steps 1-2: If-Match (strong comparison, `*` true since a representation
/// is stored), else If-Unmodified-Since (only with a valid single date and
/// a stored Last-Modified, §13.1.4).
fn precondition_failed<H: HeaderPair>(req_headers: &[H], rep: &Representation<'_>) -> bool {
    if headers::has(req_headers, "if-match") {
        let matched = headers::list_elements(req_headers, "if-match")
            .any(|tag| tag == b"*" || rep.etag.is_some_and(|stored| strong_match(tag, stored)));
        return !matched;
    }
    match (
        single_date(req_headers, "if-unmodified-since"),
        rep.last_modified,
    ) {
        (Some(since), Some(modified)) => modified > since,
        _ => false,
    }
}

/// If-None-Match evaluates false: `*` (a representation exists) or a
/// listed tag matches by weak comparison (§13.1.2).
fn none_match_false<H: HeaderPair>(req_headers: &[H], rep: &Representation<'_>) -> bool {
    headers::list_elements(req_headers, "if-none-match")
        .any(|tag| tag == b"*" || rep.etag.is_some_and(|stored| weak_match(tag, stored)))
}

/// If-Modified-Since evaluates false: a valid single date not earlier than
/// the modification time (§13.1.3; invalid dates and lists are ignored).
fn modified_since_false<H: HeaderPair>(req_headers: &[H], modified_at: SystemTime) -> bool {
    single_date(req_headers, "if-modified-since").is_some_and(|since| modified_at <= since)
}

/// Step 5: a single Range field on a GET of a 200, If-Range permitting.
/// `None`: answer without ranges.
fn range_answer<H: HeaderPair>(req_headers: &[H], rep: &Representation<'_>) -> Option<Answer> {
    let mut ranges = headers::values(req_headers, "range");
    let range = ranges.next()?;
    if ranges.next().is_some() {
        // Range is a singleton field; two of them are not a valid request.
        return None;
    }
    if let Some(if_range) = single_value(req_headers, "if-range") {
        if !if_range_true(if_range, rep) {
            return None;
        }
    } else if headers::has(req_headers, "if-range") {
        return None;
    }
    match resolve_field(range, rep.len) {
        RangeResolution::Ignore => None,
        RangeResolution::Satisfiable(parts) => Some(Answer::Partial(parts)),
        RangeResolution::NotSatisfiable => Some(Answer::RangeNotSatisfiable),
    }
}

/// §13.1.5: an entity-tag must match the stored ETag by strong comparison;
/// an HTTP-date must equal the stored Last-Modified and be a strong
/// validator, which an intermediary cache may assume when it is at least
/// 60 s before the stored Date (§8.8.2.2). Anything else is false, so the
/// whole representation is sent.
fn if_range_true(value: &[u8], rep: &Representation<'_>) -> bool {
    let value = value.trim_ascii();
    if value.starts_with(b"\"") || value.starts_with(b"W/") {
        return rep.etag.is_some_and(|stored| strong_match(value, stored));
    }
    let Some(date) = parse_http_date(value) else {
        return false;
    };
    let strong = |modified: SystemTime| {
        modified
            .checked_add(Duration::from_secs(60))
            .is_some_and(|limit| limit <= rep.date)
    };
    rep.last_modified
        .is_some_and(|modified| modified == date && strong(modified))
}

/// The value of a field that must appear once: `None` when absent or
/// repeated (a repeated date is a list, which §13.1.3-4 say to ignore).
fn single_value<'h, H: HeaderPair>(req_headers: &'h [H], name: &'h str) -> Option<&'h [u8]> {
    let mut values = headers::values(req_headers, name);
    let first = values.next()?;
    values.next().is_none().then_some(first)
}

fn single_date<H: HeaderPair>(req_headers: &[H], name: &str) -> Option<SystemTime> {
    single_value(req_headers, name).and_then(parse_http_date)
}

/// Weak comparison (RFC 9110 §8.8.3.2): the opaque tags are equal, W/
/// ignored. Malformed tags (unquoted, unterminated) never match.
pub fn weak_match(a: &[u8], b: &[u8]) -> bool {
    match (opaque_tag(a), opaque_tag(b)) {
        (Some((_, a)), Some((_, b))) => a == b,
        _ => false,
    }
}

/// Strong comparison (RFC 9110 §8.8.3.2): neither tag weak, opaque tags
/// equal. Malformed tags never match.
pub fn strong_match(a: &[u8], b: &[u8]) -> bool {
    match (opaque_tag(a), opaque_tag(b)) {
        (Some((false, a)), Some((false, b))) => a == b,
        _ => false,
    }
}

/// `(weak, opaque-tag)` of an entity-tag (§8.8.3): `[ "W/" ] DQUOTE
/// *etagc DQUOTE`; `None` if it is not one.
fn opaque_tag(tag: &[u8]) -> Option<(bool, &[u8])> {
    let tag = tag.trim_ascii();
    let (weak, opaque) = match tag.strip_prefix(b"W/") {
        Some(rest) => (true, rest),
        None => (false, tag),
    };
    let inner = opaque.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    // etagc = %x21 / %x23-7E / obs-text: no DQUOTE, no controls, no space.
    inner
        .iter()
        .all(|&b| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80)
        .then_some((weak, opaque))
}
