//! An origin fetch that fills or refreshes a cache entry from the streamed response: the
//! response head as sent to the client and the decoded body are buffered while storable,
//! then stored when the response completes; a 304 to a revalidation refreshes the entry; a
//! response to an unsafe method invalidates instead (RFC 9111 §4.4).

use std::sync::Arc;
use std::time::SystemTime;

use cache::{Entry, ExchangeTimes, FetchGuard, NotStoredReason, ReplyKind};
use http1::RequestHead;

use crate::runtime::CacheRt;

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
    request: Vec<u8>,
    pub revalidating: Option<Arc<Entry>>,
    request_time: SystemTime,
    response_time: SystemTime,
    status: u16,
    /// The response head as sent to the client (header edits applied), and the decoded body.
    response_head: Vec<u8>,
    body: Vec<u8>,
    storing: bool,
    /// The request's method is unsafe: its response invalidates instead of filling
    /// (RFC 9111 §4.4).
    invalidating: bool,
}

/// The request's fields as the cache crate takes them.
fn fields<'b>(head: &RequestHead, buf: &'b [u8]) -> Vec<(&'b [u8], &'b [u8])> {
    head.headers().fields(buf).collect()
}

/// Runs `f` with the cache view of a request head kept as bytes.
fn with_request<R>(
    fill: &Fill,
    f: impl FnOnce(&cache::Request<'_, (&[u8], &[u8])>) -> R,
) -> Option<R> {
    let (head, _) = http1::parse_request(&fill.request, &http1::Limits::default()).ok()??;
    let pairs = fields(&head, &fill.request);
    let uri = head.path(&fill.request);
    Some(f(&cache::Request {
        vhost: &fill.vhost,
        scheme: fill.scheme,
        authority: head.host(&fill.request).unwrap_or_default(),
        method: &fill.method,
        uri,
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
        request: &super::request::Request,
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
            method: String::from_utf8_lossy(request.method_bytes()).into_owned(),
            request: request.bytes().to_vec(),
            revalidating,
            request_time: now,
            response_time: now,
            status: 0,
            response_head: Vec::new(),
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

    /// How a stored entry answers this fill's client request (full, head only, or 304).
    pub fn reply_kind(&self, entry: &Entry) -> ReplyKind {
        with_request(self, |req| entry.reply_kind(req)).unwrap_or(ReplyKind::Full)
    }

    /// The response head (as sent to the client) arrived: buffer the body for storing
    /// unless it is known to be too large.
    pub fn begin_store(&mut self, status: u16, client_head: &[u8], length: Option<u64>) {
        self.response_time = SystemTime::now();
        self.status = status;
        if self.invalidating {
            return self.invalidate(status, client_head);
        }
        let max = self.cache.policy.max_object_size as u64;
        if length.is_some_and(|n| n > max) {
            self.give_up(NotStoredReason::TooLarge);
            return;
        }
        self.storing = true;
        self.response_head = client_head.to_vec();
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
        let Some(guard) = self.guard.take() else {
            return;
        };
        if !self.storing {
            return guard.fail();
        }
        let Ok(Some((head, _))) =
            http1::parse_response(&self.response_head, &http1::Limits::default(), false)
        else {
            return guard.fail();
        };
        // The cache writes its own framing; connection management is per client.
        let resp_fields: Vec<(&[u8], &[u8])> = head
            .headers()
            .fields(&self.response_head)
            .filter(|(n, _)| {
                !n.eq_ignore_ascii_case(b"content-length")
                    && !n.eq_ignore_ascii_case(b"transfer-encoding")
                    && !n.eq_ignore_ascii_case(b"connection")
            })
            .collect();
        let resp = cache::Response {
            status: head.status(),
            reason: head.reason(&self.response_head),
            headers: &resp_fields,
            body_len: self.body.len(),
        };
        let times = ExchangeTimes {
            request_time: self.request_time,
            response_time: self.response_time,
        };
        let body: Arc<[u8]> = Arc::from(std::mem::take(&mut self.body));
        let policy = &self.cache.policy;
        let stored = with_request(&self, |req| guard.store(policy, req, &resp, body, times));
        let _ = stored;
    }

    /// RFC 9111 §4.4: a non-error response to an unsafe method removes the stored responses
    /// for the target and for same-origin Location / Content-Location URIs.
    fn invalidate(&self, status: u16, response_head: &[u8]) {
        let Ok(Some((head, _))) =
            http1::parse_response(response_head, &http1::Limits::default(), false)
        else {
            return;
        };
        let resp_fields: Vec<(&[u8], &[u8])> = head.headers().fields(response_head).collect();
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
