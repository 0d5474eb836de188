//! From bytes to an exchange: the client's codec yields a request, frang counts it, an
//! exchange is made for it, `http_chain` routes it (block, redirect, or a vhost), and a
//! routed request is served from the cache or sent to the vhost's server group.

use std::time::{Duration, Instant};

use http1::ParseError;

use super::caching::CacheStep;
use super::chain::Routed;
use super::client::codec::Codec;
use super::client::Stage as ConnStage;
use super::client::{self, ClientId};
use super::exchange::{Arrival, ExchangeId, TierFallback};
use super::finish::{self, Refusal, RefuseAt};
use super::h1::{ConnState, Parsed, Reply};
use super::h2::Unservable;
use super::h2_serve::{self, Due, Next, StreamRefused};
use super::limits;
use super::request::{self, Request, Scheme};
use super::request_body::{self, Pumped};
use super::tier_hop::{from_peer, tier_owner};
use super::token::client_token;
use super::tunnel;
use super::websocket::Upgrade;
use super::Worker;
use crate::close_reason::CloseReason;
use crate::fleet::tier::HOP_FIELD;
use crate::frang;
use crate::metrics::{bump, WorkerMetrics};
use crate::router::{CacheOverride, Route};
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
            Parsed::TooLarge => {
                let at = RefuseAt::Connection;
                let _ = finish::refuse_at(&mut self.ends(), ci, at, 431, Refusal::Error);
            }
            Parsed::Invalid(e) => self.parse_refused(ci, RefuseAt::Connection, &e),
        }
        true
    }

    /// Moves client `ci` forward as far as its socket allows: its tunnel, or its handshake
    /// and then rounds of read, frang's count, its requests (route.rs), write.
    pub(super) fn drive_client(&mut self, ci: ClientId) {
        let Some(c) = self.clients.get(ci) else {
            return;
        };
        if let client::codec::Codec::H3(_) = c.codec {
            return self.drive_h3(ci);
        }
        if c.codec.h1().is_some_and(|h1| h1.tunnel().is_some()) {
            let io = tunnel::TunnelIo {
                clients: &mut self.clients,
                upstreams: &mut self.upstreams,
                bufs: &mut self.bufs,
                dirty: &mut self.dirty,
                metrics: &self.shared.metrics.tunnels,
            };
            if let Some(end) = tunnel::drive(io, ci) {
                self.close_tunnel(ci, end);
            }
            return;
        }
        if matches!(c.stage, client::Stage::Handshake(_)) {
            match client::handshake(&mut self.client_conns().0, ci) {
                client::Handshake::Open { h2: true } => {
                    h2_serve::start(&mut self.h2_parts(), ci, request::Scheme::Https)
                }
                client::Handshake::Open { h2: false } => {}
                client::Handshake::Pending => return,
                client::Handshake::Close(why) => return self.close_client(ci, why),
            }
        }
        for _ in 0..64 {
            let read =
                |c: &mut client::Client| client::read(c, ci, &mut self.bufs, &mut self.dirty);
            let mut progressed = self.clients.get_mut(ci).is_some_and(read);
            if progressed {
                let parts = (&mut self.clients, &mut self.exchanges, &mut self.timers);
                match limits::account_read(parts, &self.rt, ci, self.now) {
                    limits::ReadVerdict::Within => {}
                    limits::ReadVerdict::Reset(v) => self.refuse_connection(ci, &v),
                    limits::ReadVerdict::Refuse(at, v) => self.frang_violation(ci, at, &v),
                }
            }
            progressed |= self.process_client(ci);
            progressed |= self.flush_client(ci);
            if !self.clients.contains(ci) {
                return;
            }
            if !progressed {
                self.account_memory(ci);
                return self.settle_client(ci);
            }
        }
        self.account_memory(ci);
        // Still moving after a full round: come back after the others (edge-triggered).
        self.dirty.push_back(client_token(ci));
    }

    /// Client `ci`'s handshake deadline came due: process what already arrived, then cut
    /// the handshake unless that finished it or moved it (which re-armed the deadline).
    pub(super) fn handshake_deadline_due(&mut self, ci: ClientId, now: Instant) {
        let Some(gen) = self.clients.get(ci).map(|c| c.timer_gen) else {
            return;
        };
        self.drive_client(ci);
        let Some((ip, state)) = self.clients.handshake_overdue(ci, gen) else {
            return;
        };
        self.metrics().count_handshake_timeout(state);
        bump(&self.metrics().handshakes_failed);
        let _ = self.rt.frang.on_tls_incomplete(ip, now);
        self.close_client(ci, CloseReason::HandshakeTimeout);
    }

    /// Client `ci`'s head (`id` None) or exchange `id`'s body missed its deadline for `limit`.
    pub(super) fn deadline_violation(
        &mut self,
        ci: ClientId,
        id: Option<ExchangeId>,
        limit: &'static str,
    ) {
        self.frang_violation(ci, id.into(), &limits::deadline_passed(limit));
        self.flush_client(ci);
        self.close_client(ci, CloseReason::Frang);
    }

    /// Exchange `id`'s timer fired while its body was arriving.
    pub(super) fn body_deadline(&mut self, id: ExchangeId, now: Instant) {
        let deadline = self.exchanges.body_deadline(&mut self.timers, id, now);
        let limits::Deadline::Passed(limit) = deadline else {
            return;
        };
        if let Some(ci) = self.exchanges.client_of(id, &self.clients) {
            self.deadline_violation(ci, Some(id), limit);
        }
    }

    /// Resets client `ci` for `v`, a refusal of the connection itself (a `tft` limit on its
    /// records).
    pub(super) fn refuse_connection(&mut self, ci: ClientId, v: &frang::Violation) {
        let Some(ip) = self.clients.get(ci).map(|c| c.peer.ip()) else {
            return;
        };
        limits::note_block((&self.rt, self.metrics()), ip, v, "-");
        self.reset_client(ci, CloseReason::Frang);
    }

    /// After a receive pass of client `ci`: its held bytes join its address's total
    /// (`client_mem`); over the hard limit the connection is reset as a block.
    pub(super) fn account_memory(&mut self, ci: ClientId) {
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        if let Err(v) = c.account_memory(self.now) {
            let ip = c.peer.ip();
            limits::note_block((&self.rt, self.metrics()), ip, &v, "-");
            client::refuse::drop_response(&mut self.clients, ci, finish::Refusal::Attack);
            self.close_client(ci, CloseReason::Frang);
        }
    }

    /// After driving client `ci`: close it if it is finished (client/conn.rs `settle`).
    pub(super) fn settle_client(&mut self, ci: ClientId) {
        let last_call_over = super::drain::last_call_over(self.draining);
        match client::settle(&mut self.clients, &mut self.bufs, ci, last_call_over) {
            Some((why, true)) => self.reset_client(ci, why),
            Some((why, false)) => self.close_client(ci, why),
            None => {}
        }
    }

    /// A request was malformed or over a limit; it is refused at `at` (finish.rs).
    pub(super) fn parse_refused(&mut self, ci: ClientId, at: RefuseAt, e: &ParseError) {
        let freed = finish::parse_refused(&mut self.ends(), ci, at, e);
        self.serve_freed(freed);
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
            super::client::refuse::drop_response(&mut self.clients, ci, Refusal::Attack);
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
        super::client::refuse::drop_response(&mut self.clients, ci, Refusal::Attack);
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

    /// Applies `http_chain` to exchange `id` (chain.rs); a request routed to a vhost goes
    /// on through the sticky cookie's gate to be served.
    pub(super) fn route(&mut self, id: ExchangeId) {
        match super::chain::route(&mut self.ends(), id) {
            Routed::Ended(freed) => self.serve_freed(freed),
            Routed::Vhost(cache) => {
                if self.sticky_gate(id) {
                    self.serve(id, cache);
                }
            }
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
