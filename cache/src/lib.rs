//! HTTP caching for ktls-proxy: RFC 9111 semantics and a byte-bounded,
//! sharded, process-wide store. Knows nothing of sockets or of the
//! proxy's configuration types: the proxy passes plain inputs (a
//! [`Policy`], [`Request`]/[`Response`] views over its header slices, and
//! times from its own clock) and every call returns immediately.
//!
//! Event-loop use, per request:
//!
//! 1. `cache.lookup(&policy, &req, now, waiter)`:
//!    - [`Lookup::Hit`]: `entry.reply_kind(&req)`, then write
//!      `reply_parts(kind).0`, an Age chunk from `entry.write_age(now, buf)`,
//!      and `reply_parts(kind).1` (empty unless a full response).
//!    - [`Lookup::Miss`]: forward (without the client's conditional
//!      fields); on the response call `guard.store(...)` once the body is
//!      buffered, `guard.not_storable(.., NotStoredReason::TooLarge, ..)`
//!      when it is streamed instead, `guard.fail()` (or drop) on errors.
//!    - [`Lookup::Revalidate`]: forward with `entry.validators()`; on 304
//!      `guard.not_modified(...)`, on 200 `guard.store(...)`, on error
//!      `guard.serve_stale(&policy, status)` or `guard.fail()`.
//!    - [`Lookup::Wait`]: park the request; the waiter callback delivers
//!      a [`WaitOutcome`] once (`cache.cancel_wait(ticket)` on timeout).
//!    - [`Lookup::StaleWhileRevalidate`] (only with
//!      `Policy::background_revalidation`): answer from the entry now, as a
//!      hit, and revalidate in the background as for `Revalidate`.
//!    - [`Lookup::Pass`]: forward and do not store.
//!
//! 2. Answering from an entry (a hit, or after a 304 or a stale answer):
//!    `let answer = entry.answer(&req)` evaluates the client's preconditions
//!    and Range (RFC 9110 §13.2.2, §14); `entry.reply(&answer)` is either
//!    [`Reply::Stored`]`(kind)` (the stored bytes, as `reply_kind` gave
//!    before) or [`Reply::Composed`] (206, multipart/byteranges, 412, 416):
//!    `write_head`, the Age chunk, then `body_parts()`, whose
//!    [`BodyPart::Stored`] ranges are slices of the shared `entry.body()`.
//! 3. Around the exchange: after a response to an unsafe method,
//!    `cache.invalidate_after_unsafe(..)` then `cache.store_post_response(..)`
//!    (RFC 9110 §9.3.3); a 200 to a forwarded HEAD, `cache.update_from_head`
//!    (§4.3.5); a forwarded response with an Age field gets
//!    [`forwarded_age`] (§4.2.3); fields for which `policy.is_targeted_field`
//!    holds (CDN-Cache-Control, RFC 9213) are not forwarded downstream.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::SystemTime;
//! use cache::{Cache, CacheLimits, ExchangeTimes, Lookup, Policy, Request, Response};
//!
//! let cache = Cache::new(CacheLimits::default()); // one per process, cloned per worker
//! let policy = Policy::default(); // from the config snapshot
//! let headers: [(&str, &[u8]); 1] = [("Accept", b"*/*")];
//! let req = Request {
//!     vhost: "default", scheme: "https", authority: b"example.com",
//!     method: "GET", uri: b"/", headers: &headers[..],
//! };
//! let now = SystemTime::now();
//! // The waiter would push the outcome to this worker's queue and wake its mio::Waker.
//! match cache.lookup(&policy, &req, now, |_outcome| {}) {
//!     Lookup::Miss(guard) => {
//!         // ... forward to the origin; the response arrives:
//!         let resp_headers: [(&str, &[u8]); 1] = [("Cache-Control", b"max-age=60")];
//!         let resp = Response { status: 200, reason: b"OK", headers: &resp_headers[..], body_len: 2 };
//!         let times = ExchangeTimes { request_time: now, response_time: now };
//!         let stored = guard.store(&policy, &req, &resp, Arc::from(&b"hi"[..]), times);
//!         assert!(stored.is_ok());
//!     }
//!     _ => unreachable!("empty cache"),
//! }
//! if let Lookup::Hit(entry) = cache.lookup(&policy, &req, now, |_| {}) {
//!     let kind = entry.reply_kind(&req);
//!     let mut age = Vec::new();
//!     entry.write_age(now, &mut age);
//!     let (head, body) = entry.reply_parts(kind);
//!     // writev([head, &age, body]) on the client socket
//!     assert!(head.starts_with(b"HTTP/1.1 200 OK\r\n") && age.ends_with(b"\r\n\r\n") && body == b"hi");
//! }
//! ```

#![forbid(unsafe_code)]

mod cache;
mod conditional;
mod entry;
mod flight;
mod freshness;
pub mod headers;
pub mod httpdate;
mod invalidation;
mod key;
mod message;
mod metrics;
mod policy;
mod post;
pub mod range;
mod reply;
mod shard;
mod storability;
mod targeted;
mod update;
mod vary;

pub use cache::{Cache, CacheLimits, Lookup};
pub use conditional::{decide, strong_match, weak_match, Answer, Representation};
pub use entry::{Entry, ReplyKind};
pub use flight::{FetchGuard, WaitOutcome, WaitTicket, WaiterFn};
pub use freshness::Freshness;
pub use headers::{CacheControl, HeaderPair};
pub use invalidation::is_unsafe_method;
pub use key::{normalise_authority, Key};
pub use message::{standard_reason, ExchangeTimes, Request, Response};
pub use metrics::MetricsSnapshot;
pub use policy::{
    CacheAction, CacheRules, Heuristic, IgnoredDirectives, Policy, PolicyError, PurgeMode,
    StatusPattern, UriMatcher, DEFAULT_MAX_OBJECT_SIZE, DEFAULT_TOTAL_BYTES, TEMPESTA_DEFAULT_TTL,
};
pub use range::{ByteRange, RangeResolution};
pub use reply::{BodyPart, ComposedReply, Reply};
pub use shard::{ENTRY_OVERHEAD, PASS_MARKERS, SLOT_OVERHEAD};
pub use storability::{cacheable_by_default, check_storable, NotStoredReason, Storability};
pub use targeted::{parse_targeted, targeted_directives, DEFAULT_TARGETED_FIELDS};
pub use update::{forwarded_age, HeadUpdate};

/// Request fields the proxy removes before a cache-filling fetch, so the
/// origin answers with a full, storable response.
pub const CLIENT_CONDITIONAL_FIELDS: [&str; 4] = [
    "if-none-match",
    "if-modified-since",
    "if-match",
    "if-unmodified-since",
];
