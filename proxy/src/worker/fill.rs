//! An origin fetch that fills or refreshes a cache entry from the streamed response: the
//! response head as sent to the client and the decoded body are buffered while storable,
//! then stored when the response completes; a 304 to a revalidation refreshes the entry; a
//! response to an unsafe method invalidates instead (RFC 9111 §4.4).

use std::sync::Arc;
use std::time::SystemTime;

use cache::{Entry, ExchangeTimes, FetchGuard, NotStoredReason, ReplyKind};

use super::request::Request;
use crate::runtime::CacheRt;

/// A response head as the origin sent it: the parsed head and the bytes it refers to.
#[derive(Clone, Copy)]
pub struct Origin<'a> {
    pub head: &'a http1::ResponseHead,
    pub input: &'a [u8],
}

/// An origin fetch that fills (or refreshes) a cache entry.
pub struct Fill {
    guard: Option<FetchGuard>,
    /// The vhost's cache policy.
    cache: Arc<CacheRt>,
    /// The process-wide store, for invalidation.
    store: cache::Cache,
    vhost: String,
    /// `https` or `http`: how the client connection came (part of the key).
    scheme: &'static str,
    method: String,
    /// The client's request head, kept to give the cache its fields when the response ends.
    request: Request,
    pub revalidating: Option<Arc<Entry>>,
    request_time: SystemTime,
    response_time: SystemTime,
    status: u16,
    /// The response head's pieces as sent to the client (header edits applied), and the
    /// decoded body.
    response_head: http1::ResponseFields,
    body: Vec<u8>,
    storing: bool,
    /// The request's method is unsafe: its response invalidates instead of filling
    /// (RFC 9111 §4.4).
    invalidating: bool,
}

/// Runs `f` with the cache view of the fill's request.
fn with_request<R>(
    fill: &Fill,
    f: impl FnOnce(&cache::Request<'_, (&[u8], &[u8])>) -> R,
) -> Option<R> {
    let request = &fill.request;
    // The fields the origin received, as the cache crate takes them.
    let pairs: Vec<_> = request.forwarded_fields().collect();
    Some(f(&cache::Request {
        vhost: &fill.vhost,
        scheme: fill.scheme,
        authority: request.authority().unwrap_or_default(),
        method: &fill.method,
        uri: request.path(),
        headers: &pairs,
    }))
}

impl Fill {
    /// A fill for `request`: storing into `guard`'s reservation (revalidating `revalidating`
    /// when set), or, with no guard and `invalidating`, only watching the response to an
    /// unsafe method.
    pub fn new(
        guard: Option<FetchGuard>,
        cache: Arc<CacheRt>,
        store: cache::Cache,
        vhost: &str,
        request: &Request,
        revalidating: Option<Arc<Entry>>,
    ) -> Box<Fill> {
        let now = SystemTime::now();
        let invalidating = guard.is_none();
        Box::new(Fill {
            guard,
            cache,
            store,
            vhost: vhost.to_string(),
            scheme: request.scheme().as_str(),
            method: request.cache_method().to_string(),
            request: request.clone(),
            revalidating,
            request_time: now,
            response_time: now,
            status: 0,
            response_head: http1::ResponseFields::new(),
            body: Vec::new(),
            storing: false,
            invalidating,
        })
    }

    /// The stale entry to serve instead of the origin's `status` (an error for which
    /// `cache_use_stale` or the entry's own `stale-if-error` allows it; 502/504 stand for
    /// connect failures and timeouts). The guard stays for any other status.
    pub fn stale_instead(&mut self, status: u16) -> Option<Arc<Entry>> {
        let now = SystemTime::now();
        let stale = self.revalidating.as_ref()?;
        if !self.cache.policy.stale_allowed_for(status) && !stale.stale_if_error_allows(status, now)
        {
            return None;
        }
        let guard = self.guard.take()?;
        guard.serve_stale_at(&self.cache.policy, status, now)
    }

    /// How a stored entry answers this fill's client request: its preconditions and Range
    /// evaluated against the entry (full, head only, 304, 206, 412, 416).
    pub fn answer(&self, entry: &Entry) -> cache::Answer {
        with_request(self, |req| entry.answer(req))
            .unwrap_or(cache::Answer::Stored(ReplyKind::Full))
    }

    /// Where the pieces of the response head as sent to the client go (emptied first), for
    /// [`Fill::begin_store`].
    pub fn head_sink(&mut self) -> &mut http1::ResponseFields {
        self.response_head.clear();
        &mut self.response_head
    }

    /// The response head arrived (its pieces as sent to the client in the
    /// [`Fill::head_sink`], `origin` as received): buffer the body for storing unless it is
    /// known to be too large.
    pub fn begin_store(&mut self, status: u16, origin: Origin<'_>) {
        self.response_time = SystemTime::now();
        self.status = status;
        let max = self.cache.policy.max_object_size as u64;
        let too_large = origin.head.content_length().is_some_and(|n| n > max);
        if self.invalidating {
            self.invalidate(status);
            // A POST response may become the GET entry (RFC 9110 §9.3.3): keep its body.
            let post = self.method.eq_ignore_ascii_case("POST")
                && self.cache.policy.method_cacheable("POST");
            if !post || too_large {
                return;
            }
        } else if too_large {
            self.give_up(NotStoredReason::TooLarge);
            return;
        }
        self.storing = true;
        self.keep_targeted_fields(origin);
    }

    /// The targeted cache fields (RFC 9213) are not forwarded to the client, but the cache
    /// reads them: they go back into the head the entry is built from (which does not
    /// store them).
    fn keep_targeted_fields(&mut self, origin: Origin<'_>) {
        use http1::FieldSink as _;
        let policy = &self.cache.policy;
        let targeted = origin
            .head
            .headers()
            .fields(origin.input)
            .filter(|(name, _)| policy.is_targeted_field(name));
        for (name, value) in targeted {
            self.response_head.field(name, value);
        }
    }

    /// The response head as the cache reads it: None when its HTTP/1.1 form would be over
    /// the default parsing limits (the form the cache was filled from until issue 31 was
    /// parsed back with those, and such a head was neither stored nor invalidated by).
    fn stored_head(&self) -> Option<&http1::ResponseFields> {
        let head = &self.response_head;
        head.measure().check(&http1::Limits::default()).ok()?;
        Some(head)
    }

    /// The origin's 304 answered our revalidation: refresh the entry.
    pub fn not_modified(&mut self, fields_304: &[(&[u8], &[u8])]) -> Option<Arc<Entry>> {
        self.response_time = SystemTime::now();
        let guard = self.guard.take()?;
        let times = ExchangeTimes {
            request_time: self.request_time,
            response_time: self.response_time,
        };
        let policy = &self.cache.policy;
        with_request(self, |req| {
            guard.not_modified(policy, req, fields_304, times)
        })
        .flatten()
    }

    /// RFC 9111 §4.2.3, §5.1: a forwarded response that carried an `Age` (it came through
    /// another cache) goes on with its corrected age, the time in transit and here counted.
    /// Returns `edits` with that `Age` set, or None when the response had no Age.
    pub fn age_edits(
        &self,
        head: &http1::ResponseHead,
        input: &[u8],
        edits: &http1::HeaderEdits,
    ) -> Option<http1::HeaderEdits> {
        head.header(input, "age")?;
        let fields: Vec<(&[u8], &[u8])> = head.headers().fields(input).collect();
        let now = SystemTime::now();
        let times = ExchangeTimes {
            request_time: self.request_time,
            response_time: now,
        };
        let age = cache::forwarded_age(&fields, times, now)?;
        let mut with_age = edits.clone();
        with_age
            .set(b"Age", age.as_secs().to_string().as_bytes())
            .ok()?;
        Some(with_age)
    }

    /// Whether the body is still wanted: buffered for storing (false once the fill gave up,
    /// as when the body passed `cache_max_object_size`).
    pub fn storing(&self) -> bool {
        self.storing
    }

    /// Decoded body bytes of the response, while it is still storable.
    pub fn push_body(&mut self, data: &[u8]) {
        if !self.storing {
            return;
        }
        if self.body.len() + data.len() > self.cache.policy.max_object_size {
            self.give_up(NotStoredReason::TooLarge);
            return;
        }
        self.body.extend_from_slice(data);
    }

    /// The response is complete: store it (waiters get it, or go to the origin).
    pub fn complete(mut self) {
        if self.invalidating {
            return self.store_post();
        }
        let Some(guard) = self.guard.take() else {
            return;
        };
        // A 304 or 412 to a fill answers the client's own conditional fields: it says nothing
        // of the resource's cacheability (no hit-for-pass), and the next unconditional
        // request fills the entry.
        if !self.storing || matches!(self.status, 304 | 412) {
            return guard.fail();
        }
        let times = self.times();
        if self.method.eq_ignore_ascii_case("HEAD") {
            // RFC 9111 §4.3.5: a HEAD response has no body to store, but it updates (or
            // marks stale) the GET entry it describes. Waiters look up again.
            let (store, policy) = (&self.store, &self.cache.policy);
            self.with_response(|req, resp, fields| {
                store.update_from_head(policy, req, resp.status, fields, times)
            });
            return guard.fail();
        }
        let body: Arc<[u8]> = Arc::from(std::mem::take(&mut self.body));
        let policy = &self.cache.policy;
        // An unparsable buffered head drops the guard: its waiters go to the origin.
        let _ = self.with_response(|req, resp, _| guard.store(policy, req, resp, body, times));
    }

    /// RFC 9110 §9.3.3: a response to POST with explicit freshness and a Content-Location
    /// naming its own target becomes the GET entry (where `cache_methods` lists POST), after
    /// the invalidation §4.4 asks for.
    fn store_post(mut self) {
        if !self.storing {
            return;
        }
        let times = self.times();
        let body: Arc<[u8]> = Arc::from(std::mem::take(&mut self.body));
        let (store, policy) = (&self.store, &self.cache.policy);
        let _ = self.with_response(|req, resp, _| {
            store.store_post_response(policy, req, resp, body, times)
        });
    }

    fn times(&self) -> ExchangeTimes {
        ExchangeTimes {
            request_time: self.request_time,
            response_time: self.response_time,
        }
    }

    /// Runs `f` with the cache's views of the request, of the buffered response (without
    /// framing and connection fields: the cache writes its own, connection management is
    /// per client), and of all the response's fields.
    fn with_response<R>(
        &self,
        f: impl FnOnce(
            &cache::Request<'_, (&[u8], &[u8])>,
            &cache::Response<'_, (&[u8], &[u8])>,
            &[(&[u8], &[u8])],
        ) -> R,
    ) -> Option<R> {
        let head = self.stored_head()?;
        let all: Vec<(&[u8], &[u8])> = head.fields().collect();
        let resp_fields: Vec<(&[u8], &[u8])> = all
            .iter()
            .copied()
            .filter(|(n, _)| {
                !n.eq_ignore_ascii_case(b"content-length")
                    && !n.eq_ignore_ascii_case(b"transfer-encoding")
                    && !n.eq_ignore_ascii_case(b"connection")
            })
            .collect();
        let resp = cache::Response {
            status: head.status(),
            reason: head.reason(),
            headers: &resp_fields,
            body_len: self.body.len(),
        };
        with_request(self, |req| f(req, &resp, &all))
    }

    /// RFC 9111 §4.4: a non-error response to an unsafe method removes the stored responses
    /// for the target and for same-origin Location / Content-Location URIs.
    fn invalidate(&self, status: u16) {
        let Some(head) = self.stored_head() else {
            return;
        };
        let resp_fields: Vec<(&[u8], &[u8])> = head.fields().collect();
        let store = &self.store;
        with_request(self, |req| {
            store.invalidate_after_unsafe(req, status, &resp_fields)
        });
    }

    fn give_up(&mut self, reason: NotStoredReason) {
        self.storing = false;
        self.body = Vec::new();
        if let Some(guard) = self.guard.take() {
            let policy = &self.cache.policy;
            let now = SystemTime::now();
            let _ = with_request(self, |req| guard.not_storable(policy, req, reason, now));
        }
    }
}
