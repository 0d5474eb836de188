//! One request at a time per client connection: parse the head, route it, answer locally
//! (errors, redirects, blocks) or forward it to an upstream connection, stream the request
//! body up and the response back, then take the next (pipelined) request. Responses thus
//! leave in request order.

use std::io::Write as _;
use std::time::{Duration, Instant};

use http1::{BodyDecoder, ConnectionOption, Forwarding, ParseError, RequestHead, Version};

use super::caching::{CacheStep, Fill};
use super::client::Stage;
use super::upstream::{request_key, Pick, UpPhase};
use super::{client_token, upstream_token, Worker};
use crate::access_log::RequestRecord as AccessRecord;
use crate::metrics::bump;
use crate::router::{CacheOverride, RequestView, Route};

pub enum ReqState {
    /// Waiting for a request head.
    Head,
    /// Forwarded to upstream connection `Exchange::up`.
    Upstream(Box<Exchange>),
    /// Waiting for a free upstream connection of `Exchange::group`.
    Queued(Box<Exchange>),
    /// Waiting for another request's fetch of the same cache key; the request head stays
    /// unconsumed in the client's buffer and is processed again when the wait ends.
    CacheWait(cache::WaitTicket),
    /// The exchange ended before its request body was read: the rest is discarded.
    Drain(super::lifecycle::Drain),
}

pub(super) enum RespPhase {
    AwaitHead,
    Body(BodyDecoder),
}

/// A request on its way through an upstream.
pub struct Exchange {
    pub up: usize,
    pub(super) group: usize,
    pub(super) vhost: usize,
    pub(super) location: Option<usize>,
    /// The upstream request head; kept while the request may still be replayed.
    pub(super) head: Vec<u8>,
    /// No body and idempotent: may be sent again on another connection.
    pub(super) replayable: bool,
    pub(super) req_body: BodyDecoder,
    pub(super) req_body_done: bool,
    pub(super) resp: RespPhase,
    pub(super) is_head: bool,
    pub(super) keep_alive: bool,
    pub(super) http10: bool,
    pub(super) attempts: u32,
    pub(super) hash_key: u64,
    /// Response bytes already queued for the client (nothing can be retried after that).
    pub(super) sent_to_client: bool,
    pub(super) status: u16,
    pub(super) body_bytes: u64,
    pub(super) log: Option<Box<AccessRecord>>,
    /// Filling or revalidating a cache entry from this response.
    pub(super) fill: Option<Box<Fill>>,
    /// The proxy sent `100 Continue` to the client itself.
    pub(super) continue_sent: bool,
    /// Forward only the data of a chunked response (to an HTTP/1.0 client).
    pub(super) dechunk: bool,
    /// The client's request head, kept for a chunked body only: its field names decide
    /// `http_trailer_split_allowed` once the trailer arrives.
    pub(super) chunked_head: Option<Box<[u8]>>,
    /// Interim (1xx) responses received so far.
    pub(super) interim: u32,
    /// The response was to HEAD and announced a body: a faulty server may still send it.
    pub(super) body_may_follow: bool,
}

impl Exchange {
    /// The whole request body has been passed upstream.
    pub fn req_body_done(&self) -> bool {
        self.req_body_done
    }

    /// What the upstream connection's state is when this exchange ends with its response
    /// read to the end (`response_complete`) or not.
    pub(super) fn upstream_end(&self, response_complete: bool) -> super::lifecycle::UpstreamEnd {
        super::lifecycle::UpstreamEnd {
            request_sent: self.req_body_done,
            response_complete,
            body_may_follow: self.body_may_follow,
        }
    }

    /// The request body's decoder if the client has not sent all of it yet.
    pub(super) fn unread_body(self) -> Option<BodyDecoder> {
        (!self.req_body_done).then_some(self.req_body)
    }
}

/// Why an exchange could not complete.
pub enum Failure {
    Connect,
    /// The connection failed before a response byte arrived.
    Reset,
    Timeout,
    BadResponse,
}

struct View<'a> {
    head: &'a RequestHead,
    buf: &'a [u8],
}

impl RequestView for View<'_> {
    fn uri(&self) -> &[u8] {
        self.head.path(self.buf)
    }
    fn host(&self) -> &[u8] {
        normalized_host(self.head.host(self.buf).unwrap_or(b""))
    }
    fn method(&self) -> &[u8] {
        self.head.method_bytes(self.buf)
    }
    fn any_header(&self, name: &str, f: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        self.head
            .headers()
            .fields(self.buf)
            .filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .any(|(_, v)| f(v))
    }
}

/// What a refusal is, for `block_action`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A malformed request (`block_action error`).
    Error,
    /// A blocked request (`block_action attack`).
    Attack,
}

impl Worker {
    /// Moves the current request forward. True if anything changed.
    pub(super) fn process_client(&mut self, ci: usize) -> bool {
        let Some(c) = self.clients.get(ci) else {
            return false;
        };
        match c.req {
            ReqState::Head => self.try_request(ci),
            ReqState::Upstream(_) => self.pump_request_body(ci),
            ReqState::Drain(_) => self.discard_body(ci),
            ReqState::Queued(_) | ReqState::CacheWait(_) => false,
        }
    }

    fn try_request(&mut self, ci: usize) -> bool {
        let Some(c) = self.clients.get_mut(ci) else {
            return false;
        };
        // No new request while the answers already queued are over the outbox bound: a
        // client that pipelines without reading stops being read (its socket buffer, then
        // its TCP window, fill up) instead of growing the proxy.
        if c.close_after_flush || !matches!(c.stage, Stage::Open(_)) || !c.out.has_room() {
            return false;
        }
        let Some(rbuf) = c.rbuf.as_mut() else {
            return false;
        };
        if rbuf.is_empty() {
            return false;
        }
        match http1::parse_request(rbuf.bytes(), &self.rt.limits) {
            Ok(Some((head, len))) => {
                self.handle_request(ci, head, len);
                true
            }
            Ok(None) if rbuf.is_full() => {
                self.refuse(ci, 431, Refusal::Error);
                true
            }
            Ok(None) => false,
            Err(e) => {
                self.parse_refused(ci, &e);
                true
            }
        }
    }

    pub(super) fn parse_refused(&mut self, ci: usize, e: &ParseError) {
        // A size limit set by frang_limits is a frang block (403, `block_action attack`,
        // ip_block), as in Tempesta; the parser's own defaults are plain errors.
        if let Some(limit) = self.frang_limit_of(e) {
            let v = crate::frang::Violation {
                limit,
                detail: e.to_string(),
                status: crate::frang::FRANG_BLOCK_STATUS,
            };
            self.frang_violation(ci, &v, "-");
            return;
        }
        bump(&self.metrics().parse_errors);
        if self.rt.config.block_action.error.log {
            let peer = self.clients.get(ci).map(|c| c.peer);
            crate::warn!("refused request from {:?}: {} ({})", peer, e, e.status());
        }
        self.refuse(ci, e.status(), Refusal::Error);
    }

    /// The frang directive behind a parser limit error, when frang configured that limit.
    fn frang_limit_of(&self, e: &ParseError) -> Option<&'static str> {
        let global = &self.rt.config.frang;
        let vhost = &self.rt.config.default_vhost.frang;
        match e {
            ParseError::UriTooLong if vhost.http_uri_len.is_some() => Some("http_uri_len"),
            ParseError::HeaderFieldTooLong if global.http_hdr_len.is_some() => Some("http_hdr_len"),
            ParseError::TooManyHeaders if global.http_header_cnt.is_some() => {
                Some("http_header_cnt")
            }
            ParseError::BodyTooLarge if vhost.http_body_len.is_some() => Some("http_body_len"),
            _ => None,
        }
    }

    /// Answers a refused request per `block_action` and closes the connection.
    pub(super) fn refuse(&mut self, ci: usize, status: u16, kind: Refusal) {
        let action = match kind {
            Refusal::Error => self.rt.config.block_action.error,
            Refusal::Attack => self.rt.config.block_action.attack,
        };
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        c.close_after_flush = true;
        if action.reply {
            c.out.push(http1::error_response(status, true));
            self.metrics().count_status(status);
        } else {
            c.out.clear();
            if kind == Refusal::Attack {
                // A dropped attacker gets a reset, not a polite FIN.
                let _ = socket2::SockRef::from(&c.sock).set_linger(Some(std::time::Duration::ZERO));
            }
        }
    }

    fn handle_request(&mut self, ci: usize, head: RequestHead, head_len: usize) {
        bump(&self.metrics().workers[self.id].requests);
        let now = Instant::now();
        if let Some(c) = self.clients.get_mut(ci) {
            // Frang's per-request counters start over; a body's timeout runs from here.
            c.limits.reset_for_next_request();
            if head.framing().has_body() {
                c.limits.on_head_complete(now);
            }
            if let Err(v) = self.rt.frang.on_request(c.peer.ip(), now) {
                self.frang_violation(ci, &v, "-");
                return;
            }
            // The body's first piece may never come: its deadline runs from now.
            if head.framing().has_body() {
                self.arm_frang_deadline(ci);
            }
        }
        // The buffer leaves the client while the request is handled, so that the head can be
        // read while the worker changes; each branch says how much of it was consumed.
        let Some(rbuf) = self.clients.get_mut(ci).and_then(|c| c.rbuf.take()) else {
            return;
        };
        let consumed = self.route_request(ci, &head, head_len, rbuf.bytes());
        let mut rbuf = rbuf;
        rbuf.consume(consumed);
        match self.clients.get_mut(ci) {
            Some(c) => c.rbuf = Some(rbuf),
            None => self.bufs.give(rbuf),
        }
    }

    /// Routes one request whose head is `buf[..head_len]`; returns the bytes consumed (0 when
    /// the request waits for a cache fill and will be processed again).
    fn route_request(
        &mut self,
        ci: usize,
        head: &RequestHead,
        head_len: usize,
        buf: &[u8],
    ) -> usize {
        let rt = self.rt.clone();
        let Some(peer) = self.clients.get(ci).map(|c| c.peer) else {
            return head_len;
        };
        let view = View { head, buf };
        let keep_alive = head.keep_alive() && !rt.config.keepalive_timeout.is_zero();
        let log = rt
            .config
            .access_log
            .enabled()
            .then(|| access_record(peer, head, buf));
        match rt.router.route(&view) {
            Route::NoMatch | Route::Block => {
                if rt.config.block_action.attack.log {
                    crate::warn!(
                        "http_chain blocked {} {:?}",
                        peer.ip(),
                        String::from_utf8_lossy(view.uri())
                    );
                }
                self.access_log(log.as_deref(), "-", 403, 0);
                self.refuse(ci, 403, Refusal::Attack);
                head_len
            }
            Route::Redirect { status, url } => {
                // `$host` keeps the port the client used.
                let host = String::from_utf8_lossy(head.host(buf).unwrap_or(b"")).into_owned();
                let uri = String::from_utf8_lossy(view.uri()).into_owned();
                let location = url.render(&host, &uri);
                let close = !keep_alive || head.framing().has_body();
                let date = self.date.now().to_string();
                let mut out = Vec::with_capacity(160 + location.len());
                http1::write_status_line(&mut out, status, http1::reason_phrase(status).as_bytes());
                http1::write_field(&mut out, b"Location", location.as_bytes());
                http1::write_field(&mut out, b"Content-Length", b"0");
                http1::write_field(&mut out, b"Date", date.as_bytes());
                http1::write_field(&mut out, b"Server", b"ktls-proxy");
                if close {
                    http1::write_field(&mut out, b"Connection", b"close");
                } else if head.version() == Version::Http10 {
                    http1::write_field(&mut out, b"Connection", b"keep-alive");
                }
                out.extend_from_slice(b"\r\n");
                if let Some(c) = self.clients.get_mut(ci) {
                    c.out.push(&out);
                    c.close_after_flush |= close;
                    c.limits.reset_for_next_request();
                }
                self.metrics().count_status(status);
                self.access_log(log.as_deref(), "-", status, 0);
                head_len
            }
            Route::Vhost { vhost, cache } => {
                self.forward(ci, head, head_len, buf, vhost, cache, keep_alive, log)
            }
        }
    }

    /// Serves a request routed to `vhost`: from the cache, or through its server group.
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &mut self,
        ci: usize,
        head: &RequestHead,
        head_len: usize,
        buf: &[u8],
        vhost: usize,
        overrides: CacheOverride,
        keep_alive: bool,
        log: Option<Box<AccessRecord>>,
    ) -> usize {
        let rt = self.rt.clone();
        let Some(v) = rt.vhosts.get(vhost) else {
            return head_len;
        };
        let uri = head.path(buf);
        let (location, loc) = match v.location(uri) {
            Some(l) => (v.locations.iter().position(|x| std::ptr::eq(x, l)), Some(l)),
            None => (None, None),
        };
        if !self.frang_request(ci, head, buf, vhost, location) {
            return head_len;
        }
        let close_on_error = !keep_alive || head.framing().has_body();
        let Some((group, _backup)) = loc.map_or(v.proxy_pass, |l| l.proxy_pass) else {
            self.local_error(ci, 502, log.as_deref(), &v.name, close_on_error);
            return head_len;
        };
        let vhost_cache = loc.map_or(&v.cache, |l| &l.cache);
        let after_wait = self
            .clients
            .get_mut(ci)
            .is_some_and(|c| std::mem::take(&mut c.cache_after_wait));
        let (mut fill, mut validators) = (None, None);
        if let Some(rc) = vhost_cache {
            if head.method_bytes(buf) == b"PURGE" && rc.purge.is_some() {
                self.purge(ci, rc, &v.name, head, buf);
                self.answered_locally(ci, head, keep_alive);
                return head_len;
            }
            match self.cache_step(ci, head, buf, rc, &v.name, overrides, after_wait) {
                CacheStep::Served => {
                    self.access_log(log.as_deref(), &v.name, 200, 0);
                    self.answered_locally(ci, head, keep_alive);
                    return head_len;
                }
                CacheStep::Parked(ticket) => {
                    let timeout = rt
                        .groups
                        .get(group)
                        .map_or(Duration::from_secs(60), |g| g.forward_timeout);
                    if let Some(c) = self.clients.get_mut(ci) {
                        c.req = ReqState::CacheWait(ticket);
                    }
                    self.arm_client_timer(ci, timeout);
                    return 0;
                }
                CacheStep::Forward { fill: f, edits } => {
                    fill = f;
                    validators = edits;
                }
            }
        }
        let configured = loc.map_or(&v.request_edits, |l| &l.request_edits);
        let edits = match &mut validators {
            Some(extra) => {
                extra.extend(configured);
                &*extra
            }
            None => configured,
        };
        let Some(peer) = self.clients.get(ci).map(|c| c.peer.ip()) else {
            return head_len;
        };
        // The address as text without allocating (at most 45 bytes for IPv6).
        let mut ip_text = [0u8; 48];
        let ip_len = {
            let mut cursor = std::io::Cursor::new(&mut ip_text[..]);
            let _ = write!(cursor, "{peer}");
            cursor.position() as usize
        };
        let peer_ip = ip_text.get(..ip_len).unwrap_or(&[]);
        self.scratch.clear();
        let written = http1::write_request_head(
            &mut self.scratch,
            head,
            buf,
            &Forwarding {
                forwarded_for: Some(peer_ip),
                via: Some(v.via.as_deref().unwrap_or(b"ktls-proxy")),
                edits,
                framing: head.framing(),
                connection: ConnectionOption::Default,
                limits: &rt.forward_limits,
            },
        );
        // With the proxy's own fields the head would exceed what a peer parsing like this proxy
        // accepts (`Limits::for_forwarding`): refuse it here rather than send it.
        if let Err(oversized) = written {
            bump(&self.metrics().parse_errors);
            if rt.config.block_action.error.log {
                crate::warn!("refused request from {peer}: {oversized}");
            }
            self.access_log(log.as_deref(), &v.name, oversized.request_status(), 0);
            self.refuse(ci, oversized.request_status(), Refusal::Error);
            return head_len;
        }
        let replayable = !head.framing().has_body() && head.method().is_idempotent();
        let ex = Box::new(Exchange {
            up: usize::MAX,
            group,
            vhost,
            location,
            head: self.scratch.clone(),
            replayable,
            req_body: BodyDecoder::new(head.framing(), &rt.limits),
            req_body_done: !head.framing().has_body(),
            resp: RespPhase::AwaitHead,
            is_head: head.method() == http1::Method::Head,
            keep_alive,
            http10: head.version() == Version::Http10,
            attempts: 0,
            hash_key: if rt.groups.get(group).is_some_and(|g| g.hash) {
                request_key(head.host(buf).unwrap_or(b""), uri)
            } else {
                0
            },
            sent_to_client: false,
            status: 0,
            body_bytes: 0,
            log,
            fill,
            continue_sent: false,
            dechunk: false,
            chunked_head: matches!(head.framing(), http1::BodyFraming::Chunked)
                .then(|| buf.get(..head_len).unwrap_or(&[]).into()),
            interim: 0,
            body_may_follow: false,
        });
        let mut ex = ex;
        // `Expect: 100-continue`: tell the client to send its body now, as nginx does, rather
        // than let it wait for the origin's answer (or its own timer).
        if head.expect_continue() && head.framing().has_body() && !ex.http10 {
            if let Some(c) = self.clients.get_mut(ci) {
                c.out.push(b"HTTP/1.1 100 Continue\r\n\r\n");
                ex.continue_sent = true;
            }
        }
        self.dispatch(ci, ex);
        head_len
    }

    /// Sends `ex` on a connection of its group: pooled, new, or queued for one.
    pub(super) fn dispatch(&mut self, ci: usize, mut ex: Box<Exchange>) {
        let mut avoid = None;
        loop {
            match self.pick(ex.group, ex.hash_key, avoid) {
                Pick::Pooled(ui) => return self.attach(ci, ui, ex),
                Pick::Connect(server) => {
                    match self.connect(ex.group, server, UpPhase::Connecting) {
                        Ok(ui) => return self.attach(ci, ui, ex),
                        Err(_) => {
                            bump(&self.metrics().upstream_connect_errors);
                            self.mark_down(ex.group, server);
                            avoid = Some(server);
                            ex.attempts += 1;
                            let limit = self
                                .rt
                                .groups
                                .get(ex.group)
                                .map_or(0, |g| g.connect_retries);
                            if ex.attempts > limit {
                                return self.fail_exchange(ci, ex, 502);
                            }
                        }
                    }
                }
                Pick::Full => {
                    if let Err(ex) = self.enqueue(ci, ex.group, ex) {
                        self.fail_exchange(ci, ex, 503);
                    }
                    return;
                }
                Pick::Down => return self.fail_exchange(ci, ex, 502),
            }
        }
    }

    fn attach(&mut self, ci: usize, ui: usize, mut ex: Box<Exchange>) {
        let Some(u) = self.upstreams.get_mut(ui) else {
            return;
        };
        u.client = Some(ci);
        u.out.push(&ex.head);
        if !ex.replayable {
            ex.head = Vec::new();
        }
        ex.up = ui;
        let connecting = u.phase == UpPhase::Connecting;
        if !connecting {
            u.phase = UpPhase::Busy;
        }
        let timeout = self
            .rt
            .groups
            .get(ex.group)
            .map_or(std::time::Duration::from_secs(60), |g| g.forward_timeout);
        if let Some(c) = self.clients.get_mut(ci) {
            c.req = ReqState::Upstream(ex);
        }
        if !connecting {
            self.arm_upstream_timer(ui, timeout);
        }
        self.dirty.push_back(upstream_token(ui));
        self.dirty.push_back(client_token(ci));
    }
}

/// The request-level frang limits of vhost index `vhost` (0: the default vhost) and its
/// location, from the configuration.
pub(super) fn vhost_frang(
    config: &config::Config,
    vhost: usize,
    location: Option<usize>,
) -> Option<&config::FrangHttp> {
    let v = if vhost == 0 {
        Some(&config.default_vhost)
    } else {
        config.vhosts.get(vhost - 1)
    }?;
    Some(
        location
            .and_then(|l| v.locations.get(l))
            .map_or(&v.frang, |l| &l.frang),
    )
}

/// The host name rules compare: the port and one trailing dot removed (`Example.com.:8443`
/// names the same host as `example.com`; comparisons are case-insensitive).
pub(super) fn normalized_host(host: &[u8]) -> &[u8] {
    let host = strip_port(host);
    host.strip_suffix(b".").unwrap_or(host)
}

/// `example.com:8443` -> `example.com`, `[::1]:443` -> `[::1]`: rules compare host names.
fn strip_port(host: &[u8]) -> &[u8] {
    let colon = match host.first() {
        Some(b'[') => host.iter().position(|&b| b == b']').map(|end| end + 1),
        _ => host.iter().position(|&b| b == b':'),
    };
    match colon {
        Some(i) if host.get(i) == Some(&b':') || i == host.len() => &host[..i],
        _ => host,
    }
}

/// What the access log needs of a request, taken while its head is at hand.
pub(super) fn access_record(
    peer: std::net::SocketAddr,
    head: &RequestHead,
    buf: &[u8],
) -> Box<AccessRecord> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Box::new(AccessRecord {
        client: peer.ip(),
        method: text(head.method_bytes(buf)),
        uri: text(head.target(buf)),
        version: if head.version() == Version::Http10 {
            "HTTP/1.0"
        } else {
            "HTTP/1.1"
        },
        referer: head.header(buf, "referer").map(text),
        user_agent: head.header(buf, "user-agent").map(text),
    })
}

#[cfg(test)]
mod tests {
    use super::{normalized_host, strip_port};

    #[test]
    fn hosts_lose_port_and_trailing_dot() {
        assert_eq!(normalized_host(b"admin.example.:443"), b"admin.example");
        assert_eq!(normalized_host(b"admin.example."), b"admin.example");
        assert_eq!(normalized_host(b"[::1]:80"), b"[::1]");
    }

    #[test]
    fn ports_are_stripped_from_hosts() {
        assert_eq!(strip_port(b"example.com:8443"), b"example.com");
        assert_eq!(strip_port(b"example.com"), b"example.com");
        assert_eq!(strip_port(b"[::1]:443"), b"[::1]");
        assert_eq!(strip_port(b"[::1]"), b"[::1]");
        assert_eq!(strip_port(b""), b"");
    }
}
