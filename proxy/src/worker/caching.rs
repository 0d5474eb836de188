//! The cache on the request path: look a request up, answer hits with one write of the
//! stored bytes (head copied, body shared), reserve the single origin fetch on a miss and
//! fill the entry from the streamed response, revalidate stale entries, park requests that
//! wait for another request's fetch, and evict on PURGE.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use cache::{Entry, ExchangeTimes, FetchGuard, Lookup, NotStoredReason, ReplyKind, WaitTicket};
use http1::{HeaderEdits, RequestHead, Version};

use super::client::Stage;
use super::exchange::ReqState;
use super::{client_token, Worker};
use crate::router::CacheOverride;
use crate::runtime::CacheRt;
use crate::transport::Transport;

/// Clients whose cache wait ended, by (slab index, connection id); filled by the thread that
/// completed the fetch, drained by this worker when its waker fires.
pub type Inbox = Arc<Mutex<Vec<(usize, u64)>>>;

/// What the cache decided for a request.
pub enum CacheStep {
    /// Answered from the cache (or refused): nothing to forward.
    Served,
    /// Forward; fill or revalidate the entry from the response when `fill` is set, sending
    /// `edits` (the stored validators) upstream.
    Forward {
        fill: Option<Box<Fill>>,
        edits: Option<HeaderEdits>,
    },
    /// Another request is fetching this key; wait for it.
    Parked(WaitTicket),
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

impl Worker {
    /// Decides what the cache does for a request routed to a vhost with caching.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn cache_step(
        &mut self,
        ci: usize,
        head: &RequestHead,
        buf: &[u8],
        rt_cache: &Arc<CacheRt>,
        vhost: &str,
        overrides: CacheOverride,
        after_wait: bool,
    ) -> CacheStep {
        let uri = head.path(buf);
        let forward = CacheStep::Forward {
            fill: None,
            edits: None,
        };
        // A parsed method is a token: ASCII.
        let method = std::str::from_utf8(head.method_bytes(buf)).unwrap_or("");
        if cache::is_unsafe_method(method) {
            // Even when the request itself is not cacheable (§4.4).
            return CacheStep::Forward {
                fill: Some(self.invalidating_fill(ci, head, buf, rt_cache, vhost)),
                edits: None,
            };
        }
        if overrides.disable == Some(true)
            || rt_cache.rules.decide(uri) == cache::CacheAction::Bypass
        {
            self.shared.cache.count_bypass();
            return forward;
        }
        let pairs = fields(head, buf);
        let scheme = self.client_scheme(ci);
        let req = cache::Request {
            vhost,
            scheme,
            authority: head.host(buf).unwrap_or_default(),
            method,
            uri,
            headers: &pairs,
        };
        let ttl_policy;
        let policy = match overrides.ttl {
            Some(ttl) => {
                ttl_policy = cache::Policy {
                    default_ttl: ttl,
                    ..rt_cache.policy.clone()
                };
                &ttl_policy
            }
            None => &rt_cache.policy,
        };
        let now = SystemTime::now();
        let waiter = {
            let inbox = self.inbox.clone();
            let waker = self.waker.clone();
            let id = self.clients.get(ci).map_or(0, |c| c.id);
            move |_outcome: cache::WaitOutcome| {
                // The parked request is simply processed again: the lookup then finds the
                // stored entry, or goes to the origin itself.
                inbox
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((ci, id));
                let _ = waker.wake();
            }
        };
        let fill = |guard: FetchGuard, revalidating: Option<Arc<Entry>>| {
            Box::new(Fill {
                guard: Some(guard),
                cache: rt_cache.clone(),
                store: self.shared.cache.clone(),
                vhost: vhost.to_string(),
                scheme,
                method: method.to_string(),
                request: buf.get(..head.head_len()).unwrap_or(&[]).to_vec(),
                revalidating,
                request_time: now,
                response_time: now,
                status: 0,
                response_head: Vec::new(),
                body: Vec::new(),
                storing: false,
                invalidating: false,
            })
        };
        match self.shared.cache.lookup(policy, &req, now, waiter) {
            Lookup::Hit(entry) => {
                let kind = entry.reply_kind(&req);
                let close = !head.keep_alive()
                    || self.rt.config.keepalive_timeout.is_zero()
                    || head.framing().has_body();
                let http10 = head.version() == Version::Http10;
                self.serve_entry(ci, &entry, kind, close, http10);
                CacheStep::Served
            }
            Lookup::Miss(guard) => CacheStep::Forward {
                fill: Some(fill(guard, None)),
                edits: None,
            },
            Lookup::Revalidate { entry, guard } => {
                let mut edits = HeaderEdits::new();
                for (name, value) in entry.validators() {
                    let _ = edits.set(name.as_bytes(), value);
                }
                CacheStep::Forward {
                    fill: Some(fill(guard, Some(entry))),
                    edits: Some(edits),
                }
            }
            Lookup::Wait(ticket) if after_wait => {
                // Waited once already: do not queue behind another fetch again.
                self.shared.cache.cancel_wait(ticket);
                forward
            }
            Lookup::Wait(ticket) => CacheStep::Parked(ticket),
            Lookup::Pass => forward,
            Lookup::OnlyIfCachedMiss => {
                self.answer_status(ci, 504);
                CacheStep::Served
            }
        }
    }

    /// A fill that only watches the response to an unsafe method, to invalidate (§4.4).
    fn invalidating_fill(
        &self,
        ci: usize,
        head: &RequestHead,
        buf: &[u8],
        rt_cache: &Arc<CacheRt>,
        vhost: &str,
    ) -> Box<Fill> {
        let now = SystemTime::now();
        Box::new(Fill {
            guard: None,
            cache: rt_cache.clone(),
            store: self.shared.cache.clone(),
            vhost: vhost.to_string(),
            scheme: self.client_scheme(ci),
            method: String::from_utf8_lossy(head.method_bytes(buf)).into_owned(),
            request: buf.get(..head.head_len()).unwrap_or(&[]).to_vec(),
            revalidating: None,
            request_time: now,
            response_time: now,
            status: 0,
            response_head: Vec::new(),
            body: Vec::new(),
            storing: false,
            invalidating: true,
        })
    }

    /// Writes a stored response for the request whose head is the first `consumed` bytes of
    /// the client's buffer: the stored head (copied, small), this client's connection field
    /// and the Age, then the body shared without copying.
    pub(super) fn serve_entry(
        &mut self,
        ci: usize,
        entry: &Arc<Entry>,
        kind: ReplyKind,
        close: bool,
        http10: bool,
    ) {
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        let (head, body) = entry.reply_parts(kind);
        // Consecutive pushes land in one outbox segment: one copy of the (small) head.
        c.out.push(head);
        if close {
            c.out.push(b"Connection: close\r\n");
        } else if http10 {
            c.out.push(b"Connection: keep-alive\r\n");
        }
        self.scratch.clear();
        entry.write_age(SystemTime::now(), &mut self.scratch);
        c.out.push(&self.scratch);
        if !body.is_empty() {
            c.out.push_shared(entry.body().clone());
        }
        c.close_after_flush |= close;
        c.req = ReqState::Head;
        c.limits.reset_for_next_request();
        let status = if kind == ReplyKind::NotModified {
            304
        } else {
            entry.status()
        };
        self.metrics().count_status(status);
        let idle = self.idle_timeout();
        self.arm_client_timer(ci, idle);
        self.dirty.push_back(client_token(ci));
    }

    /// Parked clients whose fetch finished: process their request again.
    pub(super) fn drain_inbox(&mut self) {
        let ready: Vec<(usize, u64)> =
            std::mem::take(&mut *self.inbox.lock().unwrap_or_else(|e| e.into_inner()));
        for (ci, id) in ready {
            let Some(c) = self.clients.get_mut(ci) else {
                continue;
            };
            if c.id != id || !matches!(c.req, ReqState::CacheWait(_)) {
                continue;
            }
            c.req = ReqState::Head;
            c.cache_after_wait = true;
            self.dirty.push_back(client_token(ci));
        }
    }

    /// A parked client waited too long: stop waiting and go to the origin.
    pub(super) fn cache_wait_expired(&mut self, ci: usize) {
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        if let ReqState::CacheWait(ticket) = std::mem::replace(&mut c.req, ReqState::Head) {
            self.shared.cache.cancel_wait(ticket);
            c.cache_after_wait = true;
            self.dirty.push_back(client_token(ci));
        }
    }

    /// The scheme of the client connection, for the cache key: `https` over TLS.
    fn client_scheme(&self, ci: usize) -> &'static str {
        match self.clients.get(ci).map(|c| &c.stage) {
            Some(Stage::Open(Transport::Plain)) | None => "http",
            Some(_) => "https",
        }
    }

    /// PURGE of the request's target on a vhost with `cache_purge`: 200 from an allowed
    /// address (the entries for its Host, under either scheme, are evicted or marked
    /// stale), 403 from others.
    pub(super) fn purge(
        &mut self,
        ci: usize,
        rt_cache: &CacheRt,
        vhost: &str,
        head: &RequestHead,
        buf: &[u8],
    ) {
        let Some(c) = self.clients.get(ci) else {
            return;
        };
        let ip = c.peer.ip();
        let allowed = rt_cache.purge_acl.iter().any(|p| p.contains(ip));
        if !allowed {
            self.answer_status(ci, 403);
            return;
        }
        let mode = rt_cache.purge.unwrap_or(cache::PurgeMode::Invalidate);
        let req = cache::Request {
            vhost,
            scheme: self.client_scheme(ci),
            authority: head.host(buf).unwrap_or_default(),
            method: "GET",
            uri: head.path(buf),
            headers: &[] as &[(&[u8], &[u8])],
        };
        self.shared.cache.purge(mode, &req);
        self.answer_status(ci, 200);
    }

    /// A small fixed response (the request head is consumed by the caller).
    fn answer_status(&mut self, ci: usize, status: u16) {
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        if status == 200 {
            c.out
                .push(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nServer: ktls-proxy\r\n\r\n");
        } else {
            c.out.push(http1::error_response(status, false));
        }
        c.req = ReqState::Head;
        self.metrics().count_status(status);
        self.dirty.push_back(client_token(ci));
    }
}
