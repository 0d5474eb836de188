//! A stored response, ready to write: the status line and header fields
//! are serialised once at store time, the body is shared bytes. A hit
//! clones an `Arc<Entry>` under the shard lock and writes outside it:
//! `head()`, then a per-hit chunk from [`Entry::write_age`], then `body()`.
//!
//! The same entry serves any codec: [`Entry::status`], [`Entry::fields`]
//! (name/value views into the stored head, indexed once at store time, no
//! second copy of the bytes) and [`Entry::body`] are what an HTTP/2 codec
//! encodes; the HTTP/1 rendering is the cached head itself.

use std::io::Write;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::freshness::{current_age, Freshness};
use crate::headers::{self, HeaderPair};
use crate::httpdate::{parse_http_date, write_http_date};
use crate::message::{standard_reason, ExchangeTimes, Request, Response};
use crate::policy::Policy;
use crate::storability::{analyze, NotStoredReason};
use crate::vary::{self, vary_fields, VaryField};

/// Fields the cache itself manages, that belong to one connection (RFC
/// 9110 §7.6.1), or that are specific to the proxy the cache forwards
/// through (RFC 9111 §3.1 MUST NOT: Proxy-Authenticate,
/// Proxy-Authentication-Info, Proxy-Authorization); never stored even if
/// the proxy forgot to remove them.
pub(crate) const NEVER_STORED: [&str; 12] = [
    "content-length",
    "age",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authenticate",
    "proxy-authentication-info",
    "proxy-authorization",
];

/// Fields a 304 repeats from the 200 it stands for (RFC 9110 §15.4.5).
pub(crate) const NOT_MODIFIED_FIELDS: [&str; 7] = [
    "cache-control",
    "content-location",
    "date",
    "etag",
    "expires",
    "last-modified",
    "vary",
];

#[derive(Debug)]
pub struct Entry {
    /// Status line and header fields, each ending in CRLF, without the
    /// empty line that ends the head (Age goes before it).
    head: Box<[u8]>,
    /// The same for the 304 answer to a matching conditional request.
    not_modified_head: Box<[u8]>,
    body: Arc<[u8]>,
    status: u16,
    /// Where each field's name and value lie in `head`.
    fields: Box<[FieldSpan]>,
    etag: Option<Range<usize>>,
    last_modified: Option<Range<usize>>,
    /// Last-Modified parsed once at store time (None: absent or invalid).
    last_modified_at: Option<SystemTime>,
    /// The response's Date, or when it was received if it had none.
    date: SystemTime,
    response_time: SystemTime,
    lifetime: Duration,
    corrected_initial_age: Duration,
    no_cache: bool,
    must_revalidate: bool,
    /// RFC 5861 `stale-if-error`: how long past its lifetime the entry may
    /// stand in for an origin error (zero: not at all).
    stale_if_error: Duration,
    /// RFC 5861 `stale-while-revalidate`: how long past its lifetime the
    /// entry may be served while a background revalidation runs.
    stale_while_revalidate: Duration,
    vary: Box<[VaryField]>,
    /// Set by `cache_purge invalidate`: stale from now on.
    invalidated: AtomicBool,
}

/// One header field of the stored head: byte offsets of its name and value
/// (u32: a head is far below 4 GiB; 16 bytes per field).
#[derive(Debug, Clone, Copy)]
struct FieldSpan {
    name: (u32, u32),
    value: (u32, u32),
}

/// What to send for a hit; the bytes come from [`Entry::reply_parts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind {
    /// Full response: head, Age chunk, body.
    Full,
    /// HEAD request: head and Age chunk, no body.
    HeadOnly,
    /// The client's conditional request matched: 304 head and Age chunk.
    NotModified,
}

impl Entry {
    /// Builds an entry from an origin response if it is storable.
    /// `body` is the decoded body (no chunked framing).
    pub fn build<Q: HeaderPair, R: HeaderPair>(
        policy: &Policy,
        req: &Request<'_, Q>,
        resp: &Response<'_, R>,
        body: Arc<[u8]>,
        times: ExchangeTimes,
    ) -> Result<Entry, NotStoredReason> {
        let resp = Response {
            body_len: body.len(),
            ..*resp
        };
        let meta = analyze(policy, req, &resp, times)?;
        let mut head = Vec::with_capacity(256);
        write_status_line(&mut head, &resp);
        let (etag, last_modified) = write_stored_fields(&mut head, policy, &resp);
        if !meta.date_present {
            // Age calculations downstream need a Date (RFC 9110 §6.6.1).
            head.extend_from_slice(b"Date: ");
            write_http_date(meta.date, &mut head);
            head.extend_from_slice(b"\r\n");
        }
        if resp.status != 204 {
            let _ = write!(head, "Content-Length: {}\r\n", body.len());
        }
        let last_modified_at = last_modified
            .clone()
            .and_then(|r| head.get(r))
            .and_then(parse_http_date);
        let not_modified_head = build_not_modified_head(&head);
        let fields = field_spans(&head);
        let vary = vary_fields(req, &resp);
        Ok(Entry {
            head: head.into(),
            not_modified_head,
            body,
            status: resp.status,
            fields,
            etag,
            last_modified,
            last_modified_at,
            date: meta.date,
            response_time: times.response_time,
            lifetime: meta.lifetime,
            corrected_initial_age: meta.corrected_initial_age,
            no_cache: meta.no_cache,
            must_revalidate: meta.must_revalidate,
            stale_if_error: meta.stale_if_error,
            stale_while_revalidate: meta.stale_while_revalidate,
            vary,
            invalidated: AtomicBool::new(false),
        })
    }

    /// Status line and header fields, without the final empty line.
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    pub fn body(&self) -> &Arc<[u8]> {
        &self.body
    }

    pub fn status(&self) -> u16 {
        self.status
    }

    /// The stored ETag field value, if any.
    pub fn etag(&self) -> Option<&[u8]> {
        self.etag.clone().and_then(|r| self.head.get(r))
    }

    /// The stored Last-Modified field value, if any.
    pub fn last_modified(&self) -> Option<&[u8]> {
        self.last_modified.clone().and_then(|r| self.head.get(r))
    }

    /// Last-Modified, else Date: what If-Modified-Since is compared with
    /// (RFC 9111 §4.3.2).
    pub(crate) fn modified_at(&self) -> SystemTime {
        self.last_modified_at.unwrap_or(self.date)
    }

    /// The stored Last-Modified as a time, if present and valid.
    pub fn last_modified_at(&self) -> Option<SystemTime> {
        self.last_modified_at
    }

    /// The stored Date (the cache wrote one at store time if the origin
    /// sent none).
    pub fn date(&self) -> SystemTime {
        self.date
    }

    /// Head bytes and body bytes to write for `kind`; the Age chunk from
    /// [`Entry::write_age`] goes between them.
    pub fn reply_parts(&self, kind: ReplyKind) -> (&[u8], &[u8]) {
        match kind {
            ReplyKind::Full => (&self.head, &self.body),
            ReplyKind::HeadOnly => (&self.head, &[]),
            ReplyKind::NotModified => (&self.not_modified_head, &[]),
        }
    }

    /// Appends `Age: N\r\n\r\n`: the per-hit end of the head (into a `Vec`, or a stack
    /// buffer through `io::Cursor`: at most 31 bytes).
    #[inline]
    pub fn write_age(&self, now: SystemTime, out: &mut impl std::io::Write) {
        let mut digits = [0u8; 20];
        let _ = out.write_all(b"Age: ");
        let _ = out.write_all(self.age_value(now, &mut digits));
        let _ = out.write_all(b"\r\n\r\n");
    }

    /// The Age value of a hit at `now` in decimal, in `digits` (§5.1: at most 2^31; by
    /// hand: `write!` through `core::fmt` cost a hit ~300 instructions).
    pub fn age_value<'d>(&self, now: SystemTime, digits: &'d mut [u8; 20]) -> &'d [u8] {
        let age = self
            .current_age(now)
            .as_secs()
            .min(headers::DELTA_SECONDS_MAX);
        decimal(age, digits)
    }

    /// RFC 9111 §4.2.3 current age.
    pub fn current_age(&self, now: SystemTime) -> Duration {
        current_age(self.corrected_initial_age, self.response_time, now)
    }

    /// How long the entry stays fresh from `now`: zero when stale, and
    /// always zero for no-cache or purged entries (revalidate every use).
    pub fn remaining_freshness(&self, now: SystemTime) -> Duration {
        self.freshness_left_at(self.current_age(now))
    }

    /// [`Entry::remaining_freshness`] for a current age already computed (a lookup needs
    /// both, and the clock arithmetic once).
    pub(crate) fn freshness_left_at(&self, age: Duration) -> Duration {
        if self.no_cache || self.invalidated.load(Ordering::Relaxed) {
            return Duration::ZERO;
        }
        self.lifetime.saturating_sub(age)
    }

    pub fn has_validators(&self) -> bool {
        self.etag.is_some() || self.last_modified.is_some()
    }

    /// Fresh, or stale (no-cache, purged, or past its lifetime).
    pub fn freshness(&self, now: SystemTime) -> Freshness {
        if self.remaining_freshness(now).is_zero() {
            Freshness::Stale {
                has_validators: self.has_validators(),
            }
        } else {
            Freshness::Fresh
        }
    }

    /// Whether this stale entry may stand in for a failed origin
    /// (`cache_use_stale`); must-revalidate forbids it (RFC 9111 §4.2.4).
    pub fn may_serve_stale(&self) -> bool {
        !self.must_revalidate && !self.no_cache
    }

    /// Whether this stale entry may answer a request carrying
    /// `max-stale=max` (§5.2.1.2) without revalidation: not past its
    /// lifetime by more than `max`, and not forbidden by must-revalidate,
    /// proxy-revalidate, s-maxage or no-cache (§4.2.4), nor purged.
    pub fn within_max_stale(&self, now: SystemTime, max: Duration) -> bool {
        let staleness = self.current_age(now).saturating_sub(self.lifetime);
        self.may_serve_stale() && !self.invalidated.load(Ordering::Relaxed) && staleness <= max
    }

    /// RFC 5861 §4: whether the response's own `stale-if-error=N` lets
    /// this stale entry answer instead of an origin error (500, 502, 503,
    /// 504; the proxy maps connect failures and timeouts to 502/504) at
    /// `now`. must-revalidate and the like still forbid it (§4.2.4).
    pub fn stale_if_error_allows(&self, origin_status: u16, now: SystemTime) -> bool {
        matches!(origin_status, 500 | 502 | 503 | 504)
            && !self.stale_if_error.is_zero()
            && self.within_max_stale(now, self.stale_if_error)
    }

    /// RFC 5861 §3: whether this entry, stale at `now`, is still within
    /// its own `stale-while-revalidate=N` window, and nothing forbids
    /// serving it stale (must-revalidate and the like, RFC 9111 §4.2.4;
    /// purged). A fresh entry answers `false`: it needs no revalidation.
    pub fn stale_while_revalidate_allows(&self, now: SystemTime) -> bool {
        !self.stale_while_revalidate.is_zero()
            && self.remaining_freshness(now).is_zero()
            && self.within_max_stale(now, self.stale_while_revalidate)
    }

    /// Stale from now on (RFC 9111 §4.3.5: a HEAD response that does not
    /// match it); the next use revalidates.
    pub(crate) fn mark_stale(&self) {
        self.invalidate();
    }

    pub(crate) fn invalidate(&self) {
        self.invalidated.store(true, Ordering::Relaxed);
    }

    /// Whether the request carries the same values for every field the
    /// stored response's Vary names ([`crate::vary`]).
    pub fn vary_matches<H: HeaderPair>(&self, req_headers: &[H]) -> bool {
        vary::matches(&self.vary, req_headers)
    }

    /// Whether two entries are the same variant (their Vary tags match).
    pub(crate) fn same_variant(&self, other: &Entry) -> bool {
        self.vary.len() == other.vary.len()
            && self
                .vary
                .iter()
                .zip(other.vary.iter())
                .all(|(a, b)| a.name == b.name && a.value == b.value)
    }

    /// Header fields as stored (after `cache_resp_hdr_del`, with the
    /// Date and Content-Length the cache wrote), name and value, in order;
    /// connection-specific fields are never among them. Age is per hit:
    /// [`Entry::current_age`].
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let part = |(from, to): (u32, u32)| {
            self.head
                .get(from as usize..to as usize)
                .unwrap_or_default()
        };
        self.fields
            .iter()
            .map(move |f| (part(f.name), part(f.value)))
    }

    /// The same as [`Entry::fields`] (kept for existing callers).
    pub fn stored_fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields()
    }

    /// Conditional header fields for revalidating with the origin:
    /// If-None-Match from ETag and If-Modified-Since from Last-Modified.
    /// The proxy drops the client's own conditional fields and adds these.
    pub fn validators(&self) -> impl Iterator<Item = (&'static str, &[u8])> {
        let inm = self.etag().map(|v| ("If-None-Match", v));
        let ims = self.last_modified().map(|v| ("If-Modified-Since", v));
        inm.into_iter().chain(ims)
    }

    /// The entry rebuilt with `fields` as its stored header fields (an
    /// update from a 304 or a HEAD response, RFC 9111 §3.2): same status,
    /// reason, Vary tags and shared body; freshness recomputed from `times`.
    pub(crate) fn rebuilt_with<Q: HeaderPair>(
        &self,
        policy: &Policy,
        req: &Request<'_, Q>,
        fields: &[(&[u8], &[u8])],
        times: ExchangeTimes,
    ) -> Result<Entry, NotStoredReason> {
        let reason = status_reason(&self.head);
        // Vary values are re-derived from the stored tags: the request that
        // revalidated this entry matched them, so they are its values too.
        let vary_headers: Vec<(&[u8], &[u8])> = self
            .vary
            .iter()
            .filter_map(|f| f.value.as_deref().map(|v| (f.name.as_bytes(), v)))
            .collect();
        let req: Request<'_, (&[u8], &[u8])> = Request {
            vhost: req.vhost,
            scheme: req.scheme,
            authority: req.authority,
            // A HEAD request may revalidate the GET entry it is served from.
            method: if req.is_head() { "GET" } else { req.method },
            uri: req.uri,
            headers: &vary_headers[..],
        };
        let resp = Response {
            status: self.status,
            reason,
            headers: fields,
            body_len: self.body.len(),
        };
        Entry::build(policy, &req, &resp, Arc::clone(&self.body), times)
    }

    /// Bytes this entry accounts for, without fixed per-entry overhead.
    pub(crate) fn payload_bytes(&self) -> usize {
        let vary: usize = self
            .vary
            .iter()
            .map(|f| {
                f.name.len()
                    + f.value.as_ref().map_or(0, |v| v.len())
                    + std::mem::size_of::<VaryField>()
            })
            .sum();
        self.head.len()
            + self.not_modified_head.len()
            + self.body.len()
            + vary
            + self.fields.len() * std::mem::size_of::<FieldSpan>()
    }
}

fn storable_field(policy: &Policy, name: &[u8], value: &[u8]) -> bool {
    // CR or LF inside a field would split the stored response.
    let injects = |s: &[u8]| s.iter().any(|&b| b == b'\r' || b == b'\n');
    !name.is_empty()
        && !injects(name)
        && !injects(value)
        && !NEVER_STORED
            .iter()
            .any(|n| n.as_bytes().eq_ignore_ascii_case(name))
        && !policy.deletes_header(name)
        // Targeted fields (RFC 9213) are read for freshness, not sent on to clients.
        && !policy.is_targeted_field(name)
}

/// Fields named by Connection are hop-by-hop (RFC 9110 §7.6.1) and, like
/// Connection itself, are not stored (RFC 9111 §3.1).
fn listed_in_connection<H: HeaderPair>(resp_headers: &[H], name: &[u8]) -> bool {
    headers::list_elements(resp_headers, "connection").any(|n| n.eq_ignore_ascii_case(name))
}

/// Name and value offsets of every field line of `head` (built by `build`:
/// `Name: value\r\n` lines after the status line).
fn field_spans(head: &[u8]) -> Box<[FieldSpan]> {
    let base = head.as_ptr() as usize;
    let offset =
        |s: &[u8]| u32::try_from((s.as_ptr() as usize).saturating_sub(base)).unwrap_or(u32::MAX);
    let span = |s: &[u8]| {
        let from = offset(s);
        (
            from,
            from.saturating_add(u32::try_from(s.len()).unwrap_or(0)),
        )
    };
    fields_of(head)
        .map(|(name, value)| FieldSpan {
            name: span(name),
            value: span(value),
        })
        .collect()
}

fn fields_of(head: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    head.split(|&b| b == b'\n').skip(1).filter_map(|line| {
        let line = line.strip_suffix(b"\r")?;
        let colon = line.iter().position(|&b| b == b':')?;
        let (name, value) = line.split_at(colon);
        Some((name, value.get(1..).unwrap_or_default().trim_ascii()))
    })
}

fn status_reason(head: &[u8]) -> &[u8] {
    let status_line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    // "HTTP/1.1 200 OK": the reason follows the second space.
    status_line.get(13..).unwrap_or_default()
}

/// The stored status line: the origin's reason phrase, or the standard one
/// when it is empty or would inject a line.
fn write_status_line<R: HeaderPair>(head: &mut Vec<u8>, resp: &Response<'_, R>) {
    let injects = resp.reason.iter().any(|&b| b == b'\r' || b == b'\n');
    let reason = if resp.reason.is_empty() || injects {
        standard_reason(resp.status).as_bytes()
    } else {
        resp.reason
    };
    let _ = write!(head, "HTTP/1.1 {} ", resp.status);
    head.extend_from_slice(reason);
    head.extend_from_slice(b"\r\n");
}

/// The response's fields worth storing, each on its line; answers where the
/// first ETag's and the first Last-Modified's values are in `head`.
fn write_stored_fields<R: HeaderPair>(
    head: &mut Vec<u8>,
    policy: &Policy,
    resp: &Response<'_, R>,
) -> (Option<Range<usize>>, Option<Range<usize>>) {
    let mut etag = None;
    let mut last_modified = None;
    for h in resp.headers {
        let (name, value) = (h.name(), h.value().trim_ascii());
        if !storable_field(policy, name, value) || listed_in_connection(resp.headers, name) {
            continue;
        }
        head.extend_from_slice(name);
        head.extend_from_slice(b": ");
        let start = head.len();
        head.extend_from_slice(value);
        if name.eq_ignore_ascii_case(b"etag") && etag.is_none() {
            etag = Some(start..head.len());
        } else if name.eq_ignore_ascii_case(b"last-modified") && last_modified.is_none() {
            last_modified = Some(start..head.len());
        }
        head.extend_from_slice(b"\r\n");
    }
    (etag, last_modified)
}

fn build_not_modified_head(head: &[u8]) -> Box<[u8]> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"HTTP/1.1 304 Not Modified\r\n");
    for (name, value) in fields_of(head) {
        if crate::reply::kept_in_not_modified(name) {
            out.extend_from_slice(name);
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
    }
    out.into()
}

/// `n` in decimal, written backwards into `digits` (u64::MAX has 20); the digits' slice.
fn decimal(mut n: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut start = digits.len();
    for slot in digits.iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        start -= 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    digits.get(start..).unwrap_or(&[])
}

#[cfg(test)]
mod decimal_tests {
    use super::decimal;

    #[test]
    fn decimal_matches_display() {
        for n in [0, 1, 9, 10, 99, 100, 2_147_483_648, u64::MAX - 1, u64::MAX] {
            let mut digits = [0u8; 20];
            assert_eq!(decimal(n, &mut digits), n.to_string().as_bytes());
        }
    }
}
