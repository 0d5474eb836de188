//! From bytes to an exchange: the client's codec yields a request, frang counts it, an
//! exchange is made for it, `http_chain` routes it (block, redirect, or a vhost), and a
//! routed request is served from the cache or sent to the vhost's server group.

use std::time::{Duration, Instant};

use http1::ParseError;

use super::caching::CacheStep;
use super::client::codec::Codec;
use super::client::ClientId;
use super::client::Stage as ConnStage;
use super::exchange::{Arrival, ExchangeId, TierFallback};
use super::finish::{Refusal, RefuseAt};
use super::h1::{ConnState, Parsed, Reply};
use super::h2::Unservable;
use super::h2_serve::{self, Due, Next, StreamRefused};
use super::limits;
use super::request::{Request, Scheme};
use super::request_body::{self, Pumped};
use super::tier_hop::{from_peer, peer_client, tier_owner};
use super::token::client_token;
use super::websocket::Upgrade;
use super::Worker;
use crate::close_reason::CloseReason;
use crate::fleet::tier::{HOP_FIELD, PROBE};
use crate::metrics::{bump, WorkerMetrics};
use crate::router::{CacheOverride, RequestView, Route};
use crate::transport::Transport;

impl Worker {
    /// Moves client `ci`'s current request forward. True if anything changed.
    pub(super) fn process_client(&mut self, ci: ClientId) -> bool {
        let Some(c) = self.clients.get_mut(ci) else {
            return false;
        };
        let Codec::H1(h1) = &mut c.codec else {
            return self.process_h2(ci);
        };
        match h1.state() {
            ConnState::Idle => self.try_request(ci),
            ConnState::Busy(id) => {
                let id = *id;
                let parts = request_body::BodyParts {
                    clients: &mut self.clients,
                    exchanges: &mut self.exchanges,
                    upstreams: &mut self.upstreams,
                    dirty: &mut self.dirty,
                };
                let at = RefuseAt::Exchange(id);
                match request_body::pump(parts, &self.rt.config, (ci, id)) {
                    Pumped::Moved(moved) => return moved,
                    Pumped::Invalid(e) => self.parse_refused(ci, at, &e),
                    Pumped::Violation(v) => self.frang_violation(ci, at, &v),
                    Pumped::Truncated => self.close_client(ci, CloseReason::Client),
                }
                true
            }
            ConnState::Drain(_) => {
                let (moved, close) = h1.discard_body(c.rbuf.as_mut(), c.end.peer_closed());
                c.end.close_after_flush_if(close);
                moved
            }
            // Driven by `tunnel::drive`, never parsed.
            ConnState::Tunnel(_) => false,
        }
    }

    fn try_request(&mut self, ci: ClientId) -> bool {
        let Some(c) = self.clients.get_mut(ci) else {
            return false;
        };
        // No new request while the answers already queued are over the outbox bound: a
        // client that pipelines without reading stops being read (its socket buffer, then
        // its TCP window, fill up) instead of growing the proxy.
        let scheme = match &c.stage {
            ConnStage::Open(Transport::Plain(_)) => Scheme::Http,
            ConnStage::Open(_) => Scheme::Https,
            _ => return false,
        };
        if c.end.closing() || !c.out.has_room() {
            return false;
        }
        let Some(rbuf) = c.rbuf.as_mut().filter(|b| !b.is_empty()) else {
            return false;
        };
        let Codec::H1(h1) = &mut c.codec else {
            return false;
        };
        let rt = &self.rt;
        let parsed = match h1.next_request(rbuf, &rt.limits, scheme) {
            // A cache tier peer's request is parsed again, with the share of the fields the
            // node its client reached added (`fleet::tier::hop_limits`).
            Parsed::Invalid(e)
                if crate::fleet::tier::grown_by_hop(&e)
                    && from_peer(rt.tier.as_ref(), (c.peer.ip(), &c.sock)) =>
            {
                let limits = crate::fleet::tier::hop_limits(&rt.limits, &rt.forward_limits);
                match h1.next_request(rbuf, &limits, scheme) {
                    Parsed::Request(r) if r.header(HOP_FIELD).is_none() => Parsed::Invalid(e),
                    again => again,
                }
            }
            parsed => parsed,
        };
        match parsed {
            // A complete head: whether the connection stays open after it is decided here
            // (the request, `keepalive_timeout`, a graceful stop answers the requests of its
            // last call with `Connection: close`); a request frang refuses has no exchange:
            // the connection is refused (it carries one request at a time). The rest is every
            // protocol's `enter_request`, called from here: the request is not copied once
            // more on its way.
            Parsed::Request(request) => {
                c.limits.head_complete();
                let keep_alive = request.keep_alive()
                    && !rt.config.keepalive_timeout.is_zero()
                    && self.draining.is_none();
                self.enter_request(ci, (0, keep_alive, RefuseAt::Connection), request);
            }
            Parsed::Partial => return false,
            Parsed::TooLarge => self.refuse(ci, 431, Refusal::Error),
            Parsed::Invalid(e) => self.parse_refused(ci, RefuseAt::Connection, &e),
        }
        true
    }

    /// A request was malformed or over a limit; it is refused at `at`.
    pub(super) fn parse_refused(&mut self, ci: ClientId, at: RefuseAt, e: &ParseError) {
        // A size limit set by frang_limits is a frang block (403, `block_action attack`,
        // ip_block), as in Tempesta; the parser's own defaults are plain errors.
        if let Some(limit) = limits::frang_limit_of(&self.rt.config, e)
            .filter(|_| !peer_client(&self.clients, &self.rt, ci))
        {
            let v = crate::frang::Violation {
                limit,
                detail: e.to_string(),
                status: crate::frang::FRANG_BLOCK_STATUS,
            };
            self.frang_violation(ci, at, &v);
            return;
        }
        bump(&self.metrics().parse_errors);
        if self.rt.config.block_action.error.log {
            let peer = self.clients.get(ci).map(|c| c.peer);
            crate::warn!("refused request from {:?}: {} ({})", peer, e, e.status());
        }
        self.refuse_at(ci, at, e.status(), Refusal::Error);
    }

    /// The parts serving an HTTP/2 connection touches (h2_serve.rs).
    pub(super) fn h2_parts(&mut self) -> h2_serve::Parts<'_> {
        h2_serve::Parts {
            clients: &mut self.clients,
            exchanges: &mut self.exchanges,
            upstreams: &mut self.upstreams,
            timers: &mut self.timers,
            dirty: &mut self.dirty,
            rt: &self.rt,
            metrics: &self.shared.metrics,
            worker: self.id,
            date: &mut self.date,
            now: self.now,
        }
    }

    /// Moves an HTTP/2 connection forward (h2_serve.rs), acting on what its events need of
    /// the pipeline. True if anything changed.
    fn process_h2(&mut self, ci: ClientId) -> bool {
        let now = Instant::now();
        let Some(read) = h2_serve::read(&mut self.clients, ci, (now, self.now)) else {
            return false;
        };
        if let Err(v) = read.head_chunk {
            // Nothing of the connection is served after a slow-head block.
            self.frang_violation(ci, RefuseAt::Connection, &v);
            self.flush_client(ci);
            self.close_client(ci, CloseReason::Frang);
            return true;
        }
        let mut moved = read.moved || !read.events.is_empty();
        for event in read.events {
            match h2_serve::on_event(&mut self.h2_parts(), ci, event, now) {
                Next::Nothing => {}
                Next::Request(stream, converted) => self.stream_request(ci, stream, converted, now),
                Next::Refuse(at, v) => self.frang_violation(ci, at, &v),
                Next::Drop(id) => self.drop_exchange(id),
                Next::DropAll(ids) => ids.into_iter().for_each(|id| self.drop_exchange(id)),
            }
        }
        moved |= h2_serve::pump(&mut self.h2_parts(), ci);
        if h2_serve::end_pass(&mut self.h2_parts(), ci, now) {
            self.drop_response(ci, Refusal::Attack);
        }
        h2_serve::arm_timer((&mut self.clients, &mut self.timers, &self.rt), ci);
        moved
    }

    /// A stream opened with a request, on HTTP/2 or HTTP/3 (`drive_h3`), as its codec
    /// converted it: it enters as every request does (`enter_request`), or is answered on
    /// the stream when it cannot become a request the rules can see.
    pub(super) fn stream_request(
        &mut self,
        ci: ClientId,
        stream: u32,
        converted: Result<Request, Unservable>,
        now: Instant,
    ) {
        let at = RefuseAt::Stream(stream);
        let refused = match converted {
            // The connection outlives its streams; closing is the codec's (GOAWAY). A
            // request frang refuses has no exchange: refused on its stream.
            Ok(request) => return self.enter_request(ci, (stream, true, at), request),
            Err(refused) => h2_serve::unservable(&mut self.h2_parts(), ci, (stream, refused), now),
        };
        match refused {
            Some(StreamRefused::Frang(v)) => self.frang_violation(ci, at, &v),
            Some(StreamRefused::Parse(e)) => self.parse_refused(ci, at, &e),
            None => {}
        }
    }

    /// The client timer of an HTTP/2 connection (`h2_serve::timer`).
    pub(super) fn h2_timer(&mut self, ci: ClientId, now: Instant) {
        let draining = self.draining.is_some();
        match h2_serve::timer(&mut self.h2_parts(), ci, now, draining) {
            Due::Stalled => self.reset_stalled(ci),
            Due::Head(limit) => self.deadline_violation(ci, None, limit),
            Due::Process => {
                self.process_h2(ci);
                self.dirty.push_back(client_token(ci));
            }
        }
    }

    /// Client `ci` read nothing for `h2_stall_timeout` (`h2_floods::output_stalled`): reset
    /// it; its streams end with it (their upstream requests are cancelled).
    fn reset_stalled(&mut self, ci: ClientId) {
        self.drop_response(ci, Refusal::Attack);
        let dropped = self.clients.get_mut(ci).map(|c| c.codec.reset());
        for id in dropped.unwrap_or_default() {
            self.drop_exchange(id);
        }
        self.dirty.push_back(client_token(ci));
    }

    /// The one entry of a request on every protocol (`exchange::admit`): frang counts it,
    /// then it becomes an exchange on `stream` of client `ci` (the codec begins it) and is
    /// routed, or it is refused at `unadmitted`, where its protocol refuses a request that
    /// has no exchange (HTTP/1.1: the connection; HTTP/2 and HTTP/3: the stream).
    pub(super) fn enter_request(
        &mut self,
        ci: ClientId,
        (stream, keep_alive, unadmitted): (u32, bool, RefuseAt),
        request: Request,
    ) {
        WorkerMetrics::bump(&self.worker_metrics().requests);
        let Some(c) = self.clients.get(ci) else {
            return;
        };
        let arrival = Arrival {
            client: ci,
            client_id: c.id,
            peer: c.peer,
            tls: (c.tft, c.ja4),
            // Asked only with a tier and of a request carrying the hop field: a request's
            // fields are scanned for it, and the connection's address costs a getsockname.
            from_peer: self.rt.tier.is_some()
                && request.header(HOP_FIELD).is_some()
                && from_peer(self.rt.tier.as_ref(), (c.peer.ip(), &c.sock)),
            stream,
            keep_alive,
        };
        let parts = (&*self.rt, &mut self.exchanges, &mut self.timers);
        let clients = &mut self.clients;
        let begin = |id| {
            if let Some(c) = clients.get_mut(ci) {
                c.codec.begin(stream, id);
            }
        };
        match super::exchange::admit(parts, arrival, request, self.now, begin) {
            Ok(id) => self.route(id),
            Err(v) => self.frang_violation(ci, unadmitted, &v),
        }
    }

    /// Applies `http_chain` to exchange `id`.
    pub(super) fn route(&mut self, id: ExchangeId) {
        let rt = self.rt.clone();
        let Some(ex) = self.exchanges.get(id) else {
            return;
        };
        if !forwarded_for_is_address(&ex.request) {
            return self.refuse_forwarded_for(id);
        }
        // A cache tier peer's probe (`fleet::tier::PROBE`): this node is alive and answers.
        if ex.tier_hop && ex.request.header(HOP_FIELD) == Some(PROBE) {
            let page = super::h1::LocalPage {
                status: 204,
                fields: &[],
                body: &[],
            };
            return self.answer(id, Reply::Local(page), !ex.keep_alive);
        }
        // HTTP-01 (crate::acme): the ACME server asks a plain listener, whatever the chain says.
        if ex.request.scheme() == Scheme::Http {
            if let Some(body) = crate::acme::challenge_answer(ex.request.path()) {
                let close = !ex.keep_alive || ex.request.has_body();
                let page = super::h1::LocalPage {
                    status: 200,
                    fields: &[],
                    body: &body,
                };
                return self.answer(id, Reply::Local(page), close);
            }
        }
        match rt.router.route(&ex.request) {
            Route::NoMatch => self.refuse_unrouted(id),
            Route::Block => {
                self.note_chain_refusal(id, "http_chain", rt.config.block_action.attack.log);
                self.refuse_exchange(id, 403, Refusal::Attack);
            }
            Route::Redirect { status, url } => {
                // `$host` keeps the port the client used.
                let host = String::from_utf8_lossy(ex.request.authority().unwrap_or(b""));
                let uri = String::from_utf8_lossy(ex.request.uri());
                let location = url.render(&host, &uri);
                let close = !ex.keep_alive || ex.request.has_body();
                self.answer(
                    id,
                    Reply::Redirect {
                        status,
                        location: &location,
                    },
                    close,
                );
            }
            Route::Vhost { vhost, cache } => {
                let location = rt
                    .vhosts
                    .get(vhost)
                    .and_then(|v| v.location(ex.request.path()).map(|l| (v, l)))
                    .and_then(|(v, l)| v.locations.iter().position(|x| std::ptr::eq(x, l)));
                if let Some(ex) = self.exchanges.get_mut(id) {
                    ex.vhost = Some(vhost);
                    ex.location = location;
                }
                if self.sticky_gate(id) {
                    self.serve(id, cache);
                }
            }
        }
    }

    /// Exchange `id`'s X-Forwarded-For does not start with an address: as Tempesta's
    /// "incorrect X-Forwarded-For header" (fw/http.c, `tfw_http_req_client_link`, before the
    /// request is routed), an error answered 400 with the connection kept, or dropped per
    /// `block_action error drop`.
    fn refuse_forwarded_for(&mut self, id: ExchangeId) {
        bump(&self.metrics().parse_errors);
        let Some(ex) = self.exchanges.get(id) else {
            return;
        };
        if self.rt.config.block_action.error.log {
            let peer = self.clients.get(ex.client).map(|c| c.peer);
            crate::warn!("refused request from {peer:?}: X-Forwarded-For is not an address (400)");
        }
        if !self.rt.config.block_action.error.reply {
            return self.refuse_exchange(id, 400, Refusal::Error);
        }
        // An unread body would be taken for the next request.
        let close = !ex.keep_alive || ex.request.has_body();
        self.answer(id, Reply::Status(400), close);
    }

    /// No `http_chain` rule matched exchange `id` (or its chain is empty): as Tempesta's
    /// "cannot find appropriate virtual host", an error answered 403 whatever `block_action`
    /// says, the connection kept (fw/http.c, tfw_http_send_err_resp); logged unless
    /// `block_action error nolog`.
    fn refuse_unrouted(&mut self, id: ExchangeId) {
        let log = self.rt.config.block_action.error.log;
        self.note_chain_refusal(id, "no_vhost", log);
        let Some(ex) = self.exchanges.get(id) else {
            return;
        };
        // An unread body would be taken for the next request.
        let close = !ex.keep_alive || ex.request.has_body();
        self.answer(id, Reply::Status(403), close);
    }

    /// Counts (`blocks_total{limit}`) and, if `log`, logs a refusal by `http_chain` with the
    /// client's address, the Host it asked for and the URI.
    fn note_chain_refusal(&self, id: ExchangeId, limit: &'static str, log: bool) {
        self.metrics().count_block(limit);
        let Some(ex) = self.exchanges.get(id) else {
            return;
        };
        if log {
            // The connection's address, not the access log's record: that one exists only
            // while the access log is on.
            let peer = self.clients.get(ex.client).map(|c| c.peer.ip());
            let what = match limit {
                "no_vhost" => "no http_chain rule for",
                _ => "http_chain blocked",
            };
            crate::warn!(
                "{what} {} host {:?} {:?}",
                peer.map_or_else(String::new, |ip| ip.to_string()),
                String::from_utf8_lossy(ex.request.host()),
                String::from_utf8_lossy(ex.request.uri())
            );
        }
    }

    /// Serves exchange `id`, routed to a vhost: from the cache, or through its server group.
    pub(super) fn serve(&mut self, id: ExchangeId, overrides: CacheOverride) {
        let rt = self.rt.clone();
        match limits::judge_request((&self.exchanges, &self.clients), &rt, id, self.now) {
            Some(Ok(())) => {}
            None => return,
            Some(Err((ci, v))) => return self.frang_violation(ci, RefuseAt::Exchange(id), &v),
        }
        let Some(ex) = self.exchanges.get(id) else {
            return;
        };
        let Some(v) = ex.vhost.and_then(|v| rt.vhosts.get(v)) else {
            return;
        };
        let loc = ex.location.and_then(|l| v.locations.get(l));
        let close_on_error = !ex.keep_alive || ex.request.has_body();
        let Some(pass) = loc.map_or(v.proxy_pass, |l| l.proxy_pass) else {
            return self.answer(id, Reply::Status(502), close_on_error);
        };
        // A WebSocket handshake goes to the origin as it is, never to the cache; a malformed
        // one goes nowhere.
        let websocket = match super::websocket::classify(&ex.request) {
            Upgrade::None => false,
            Upgrade::WebSocket => true,
            Upgrade::Malformed(why) => {
                bump(&self.metrics().parse_errors);
                if rt.config.block_action.error.log {
                    let peer = self.clients.get(ex.client).map(|c| c.peer);
                    crate::warn!("refused WebSocket handshake from {peer:?}: {why}");
                }
                return self.refuse_exchange(id, 400, Refusal::Error);
            }
        };
        let mut validators = None;
        let mut fill = None;
        let routed = (ex.vhost, ex.location);
        let cache = loc
            .map_or(&v.cache, |l| &l.cache)
            .as_ref()
            .filter(|_| !websocket);
        // While caching is on, Tempesta refuses a PURGE where `cache_purge` is not configured
        // (`tfw_cache_purge_method`) rather than pass it to the origin.
        if ex.request.method_bytes() == b"PURGE"
            && rt.config.cache.mode.enabled()
            && cache.is_none_or(|c| c.purge.is_none())
        {
            return self.answer(id, Reply::Status(403), close_on_error);
        }
        if let Some(rc) = cache {
            match self.cache_step(id, rc, &v.name, overrides) {
                CacheStep::Served => return,
                CacheStep::ServedStale(revalidation) => {
                    return self.revalidate_in_background(revalidation, routed.0, routed.1, pass)
                }
                CacheStep::Parked(ticket) => {
                    let timeout = rt
                        .groups
                        .get(pass.0)
                        .map_or(Duration::from_secs(60), |g| g.forward_timeout);
                    if let Some(ex) = self.exchanges.get_mut(id) {
                        ex.park(ticket);
                    }
                    self.exchanges.arm_timer(&mut self.timers, id, timeout);
                    return;
                }
                CacheStep::Forward { fill: f, edits } => {
                    fill = f;
                    validators = edits;
                }
            }
        }
        self.forward_miss(id, pass, fill, validators);
    }

    /// Sends exchange `id` to the cache tier's owner of its object when another peer owns
    /// it (falling back to `pass`), else to `pass`, as [`Worker::forward`].
    fn forward_miss(
        &mut self,
        id: ExchangeId,
        pass: (usize, Option<usize>),
        fill: Option<Box<super::caching::Fill>>,
        validators: Option<http1::HeaderEdits>,
    ) {
        let owner = self.rt.tier.as_ref().and_then(|tier| {
            let ex = self.exchanges.get(id)?;
            tier_owner(tier, ex, fill.is_some())
        });
        let Some(owner) = owner else {
            return self.forward(id, pass, fill, validators);
        };
        let fallback = Box::new(TierFallback {
            pass,
            validators: validators.clone(),
        });
        self.forward_via(id, (owner, None), fill, validators, Some(fallback));
    }

    /// A parked exchange's cache wait ended (the fetch it waited for finished, or the wait
    /// timed out): serve it again; it does not wait a second time.
    pub(super) fn resume_after_wait(&mut self, id: ExchangeId) {
        let Some(ex) = self.exchanges.get_mut(id) else {
            return;
        };
        if let super::exchange::Stage::CacheWait(ticket) = ex.take_stage() {
            self.shared.cache.cancel_wait(ticket);
        }
        let Some(ex) = self.exchanges.get_mut(id) else {
            return;
        };
        ex.cache_after_wait = true;
        let ci = ex.client;
        // The route is taken again: a reload meanwhile may have changed the overrides.
        let overrides = match self.rt.router.route(&ex.request) {
            Route::Vhost { cache, .. } => cache,
            _ => CacheOverride::default(),
        };
        self.serve(id, overrides);
        self.dirty.push_back(client_token(ci));
    }

    /// Checks routed exchange `id`'s sticky cookie (sticky_hook.rs): true to serve it, false
    /// when it was answered here (302, the challenge, a block).
    pub(super) fn sticky_gate(&mut self, id: ExchangeId) -> bool {
        let parts = (&*self.rt, &self.shared.metrics.sticky);
        match super::sticky_hook::gate(&mut self.exchanges, &mut self.clients, parts, id) {
            super::sticky_hook::Gate::Serve => return true,
            super::sticky_hook::Gate::Gone => {}
            super::sticky_hook::Gate::Status(status, close) => {
                self.answer(id, Reply::Status(status), close)
            }
            super::sticky_hook::Gate::Page(page) => {
                page.send(|reply, close| self.answer(id, reply, close))
            }
            super::sticky_hook::Gate::Block(v) => match self.exchanges.client_of(id, &self.clients)
            {
                Some(ci) => self.frang_violation(ci, RefuseAt::Exchange(id), &v),
                None => self.drop_exchange(id),
            },
        }
        false
    }

    /// What the cache does for exchange `id` (caching.rs): hits, PURGE and only-if-cached
    /// misses are answered here.
    #[inline]
    pub(super) fn cache_step(
        &mut self,
        id: ExchangeId,
        rt_cache: &std::sync::Arc<crate::runtime::CacheRt>,
        vhost: &str,
        overrides: crate::router::CacheOverride,
    ) -> CacheStep {
        let parts = (&*self.rt, &self.shared.cache, (&self.inbox, &self.waker));
        let request = (id, rt_cache, vhost, overrides);
        let (step, answer) =
            super::caching::step(&mut self.exchanges, &self.clients, parts, request);
        if let Some(answer) = answer {
            answer.send(|reply, close| self.answer(id, reply, close));
        }
        step
    }

    /// Parked exchanges whose fetch finished (caching.rs): served again.
    pub(super) fn drain_inbox(&mut self) {
        for id in super::caching::take_inbox(&self.inbox) {
            if super::caching::waiting(&self.exchanges, id) {
                self.guarded_exchange(id, |w| w.resume_after_wait(id));
            }
        }
    }
}

/// Whether `request` has no X-Forwarded-For or one whose first node is an IP address
/// (http1's `forwarded_for_address`: why `1.1.1.1.1.1` is refused).
fn forwarded_for_is_address(request: &Request) -> bool {
    request
        .head()
        .forwarded_for(request.bytes())
        .is_none_or(|value| http1::forwarded_for_address(value).is_some())
}
