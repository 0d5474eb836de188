//! The loop's drives: what the worker does when a client or upstream connection is ready, a
//! connection's timer comes due, or a reload retires servers. Each drive asks the
//! connection's owner (`client/`, `upstream/`, `quic/`) what happened and hands the exchanges
//! it concerns to the pipeline's functions (parts.rs `Parts`). These are the worker's methods
//! because they also reach what only the loop holds: the QUIC endpoints, a graceful stop's
//! state, the guard that closes a client whose drive panicked.

use std::time::Instant;

use super::client::codec::Codec;
use super::client::Stage as ConnStage;
use super::client::{self, ClientId};
use super::exchange::ExchangeId;
use super::finish::{self, Refusal, RefuseAt};
use super::forward;
use super::h1::{ConnState, Parsed};
use super::h2_serve::{self, Due, Next};
use super::request::Scheme;
use super::request_body::{self, Pumped};
use super::response;
use super::route;
use super::tier_hop::from_peer;
use super::token::{client_token, upstream_token};
use super::upstream::{self, UpPhase, UpstreamId};
use super::{health, limits, request, tunnel, Worker};
use crate::close_reason::CloseReason;
use crate::fleet::tier::HOP_FIELD;
use crate::frang;
use crate::metrics::bump;
use crate::transport::Transport;

impl Worker {
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
            progressed |= super::response::flush_client(self.client_side(), ci);
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
        super::response::flush_client(self.client_side(), ci);
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

    /// Drives upstream connection `ui` for what it is in: a tunnel's half (its client drives
    /// it), a connect in progress, a health check, or an exchange's response to relay.
    pub(super) fn drive_upstream(&mut self, ui: UpstreamId) {
        let Some(u) = self.upstreams.get(ui) else {
            return;
        };
        if let UpPhase::Tunnel { client, client_id } = u.phase {
            return self.drive_tunnel_upstream(ui, (client, client_id));
        }
        let connecting = matches!(u.phase, UpPhase::Connecting | UpPhase::Probe);
        if u.h2.is_some() && response::drive_h2(&mut self.parts(), ui) {
            return;
        }
        if connecting && !forward::settle_connect(&mut self.parts(), ui) {
            return;
        }
        if (self.upstreams.get(ui)).is_some_and(|u| u.phase == UpPhase::Checking) {
            return match self.parts().checks().drive(ui) {
                health::Checked::Judged(freed) => forward::serve_freed(&mut self.parts(), freed),
                health::Checked::Waiting => {}
                health::Checked::Again => self.dirty.push_back(upstream_token(ui)),
            };
        }
        for _ in 0..64 {
            let mut progressed = forward::flush_upstream(&mut self.parts(), ui);
            progressed |= upstream::read_at(&mut self.upstreams, &mut self.bufs, ui);
            let Some(u) = self.upstreams.get(ui) else {
                return;
            };
            if let UpPhase::Tunnel { client, client_id } = u.phase {
                // The response just relayed was a 101: the rest is the tunnel's.
                return self.drive_tunnel_upstream(ui, (client, client_id));
            }
            let Some(id) = u.exchange else {
                // An idle pooled connection that becomes readable was closed by the server
                // (or sent something unasked): it cannot be used again.
                if u.peer_closed || u.rbuf.as_ref().is_some_and(|b| !b.is_empty()) {
                    forward::close_upstream(&mut self.parts(), ui);
                }
                return;
            };
            if response::relay_response(&mut self.parts(), id, ui) {
                // Bytes for the client: flush them from its side.
                if let Some(ci) = self.exchanges.client_of(id, &self.clients) {
                    self.dirty.push_back(client_token(ci));
                }
                progressed = true;
            }
            if !progressed || !self.upstreams.contains(ui) {
                return;
            }
        }
        // Still moving after a full round: let other connections run, then come back (with
        // edge-triggered readiness no new event would arrive for bytes already waiting).
        self.dirty.push_back(upstream_token(ui));
    }

    /// HTTP/3 (`worker/quic/`): one turn of client `ci`'s QUIC connection. What arrived
    /// becomes exchange work here (requests through `stream_request`, body bytes, dropped
    /// streams, a slow head's block), request bodies move upstream, then responses and
    /// datagrams go out and the streams with room again wake their upstreams; last, what the
    /// connection holds is accounted (`client_mem`).
    pub(super) fn drive_h3(&mut self, ci: ClientId) {
        // The wall clock, not the turn's: a head's deadline fires by it (`fire_timers`).
        let now = Instant::now();
        let work = super::quic::drive(&mut self.quic, &mut self.clients, ci, now);
        for w in work {
            match w {
                super::quic::Work::Request {
                    stream,
                    request,
                    end_stream,
                } => {
                    let limits = &self.rt.limits;
                    let converted = super::quic::H3Codec::request(&request, end_stream, limits);
                    let now = self.now;
                    route::stream_request(&mut self.parts(), ci, stream, converted, now);
                }
                super::quic::Work::Data {
                    stream,
                    data,
                    end_stream,
                } => {
                    let parts = (&mut self.clients, &mut self.exchanges, &mut self.timers);
                    let body = (ci, stream, self.now);
                    let taken = super::quic::take_data(parts, &self.rt, body, (data, end_stream));
                    if let Err((id, v)) = taken {
                        self.frang_violation(ci, super::finish::RefuseAt::Exchange(id), &v);
                    }
                }
                super::quic::Work::Trailers { stream, fields } => {
                    let parts = (&mut self.clients, &self.exchanges, &*self.rt);
                    if let Some((at, v)) = super::h2_serve::h3_trailers(parts, ci, stream, fields) {
                        self.frang_violation(ci, at, &v);
                    }
                }
                super::quic::Work::Refuse { stream, status } => {
                    let at = super::finish::RefuseAt::Stream(stream);
                    let kind = super::finish::Refusal::Error;
                    super::finish::refuse_at(&mut self.parts(), ci, at, status, kind);
                }
                super::quic::Work::Drop(id) => self.drop_exchange(id),
                super::quic::Work::Block(v) => return self.h3_block(ci, &v, true),
                super::quic::Work::Gone => return self.close_client(ci, CloseReason::Client),
                super::quic::Work::Connected { hello, resumed } => {
                    let parts = (&*self.rt, &self.shared.metrics.quic);
                    let client = self.clients.get_mut(ci);
                    let hook = super::fingerprint_hook::on_quic_handshake;
                    let done = (hello, resumed);
                    if let Some(Err(v)) = client.map(|c| hook(c, done, parts, self.now)) {
                        return self.refuse_connection(ci, &v);
                    }
                }
            }
        }
        let parts = (&mut self.clients, &mut self.exchanges, &mut self.upstreams);
        super::quic::pump_bodies(parts, &mut self.dirty, ci);
        let parts = (&mut self.clients, &mut self.timers);
        let (woken, more) = super::quic::flush(&mut self.quic, parts, ci, Instant::now());
        super::h2_serve::wake_upstreams((&self.exchanges, &self.upstreams, &mut self.dirty), woken);
        if more {
            self.dirty.push_back(super::token::client_token(ci));
        }
        // As after a TCP connection's receive pass (`account_memory`).
        let over = self.clients.get_mut(ci).map(|c| c.account_memory(now));
        if let Some(Err(v)) = over {
            return self.h3_block(ci, &v, false);
        }
        // An idle connection closes once a graceful stop's last call is over.
        self.settle_client(ci);
    }

    /// HTTP/3 client `ci` broke frang limit `v`: a slow head (`record`: the block is
    /// recorded as HTTP/2's slow head is, `blocks_total{limit}` and `ip_block`), or
    /// `client_mem` (frang recorded it; counted as HTTP/2's is). The connection is closed
    /// with H3_EXCESSIVE_LOAD at once, its exchanges dropped.
    fn h3_block(&mut self, ci: ClientId, v: &crate::frang::Violation, record: bool) {
        let told = (&*self.rt, &*self.shared.metrics);
        if record {
            let parts = (&mut self.clients, &self.exchanges);
            let at = super::finish::RefuseAt::Connection;
            super::limits::record_violation(parts, told, (ci, at), v);
        } else if let Some(ip) = self.clients.get(ci).map(|c| c.peer.ip()) {
            super::limits::note_block(told, ip, v, "-");
        }
        super::quic::close_blocked(&self.quic, &mut self.clients, ci, v.limit);
        self.close_client(ci, CloseReason::Frang);
    }

    /// Closes retiring upstream connections `due` and ends what they carried (grace.rs).
    pub(super) fn retire(&mut self, due: Vec<UpstreamId>) {
        for ui in due {
            match super::grace::carried(&self.upstreams, &self.clients, ui) {
                Some(super::grace::Carried::Tunnel(ci)) => self.guarded(ci, |w| {
                    w.close_tunnel(ci, crate::metrics_tunnel::TunnelEnd::ServerRemoved)
                }),
                Some(super::grace::Carried::Exchange(id)) => {
                    forward::close_upstream(&mut self.parts(), ui);
                    let failure = response::Failure::ServerRemoved;
                    self.guarded_exchange(id, |w| {
                        response::exchange_failed(&mut w.parts(), id, failure)
                    });
                }
                Some(super::grace::Carried::Nothing) => {
                    forward::close_upstream(&mut self.parts(), ui)
                }
                None => {}
            }
        }
    }

    /// A reload replaced `old`: its exchanges and queues carried over (reload.rs); those of a
    /// group that is gone answered 502, then every queue served once through.
    pub(super) fn carry_exchanges_over(
        &mut self,
        old: &crate::runtime::Runtime,
        old_groups: Vec<upstream::groups::GroupState>,
    ) {
        let both = (old, &*self.rt);
        let (exchanges, groups) = (&mut self.exchanges, &mut self.groups);
        for id in super::reload::carry_exchanges_over(exchanges, groups, both, old_groups) {
            if !super::reload::queued(&self.exchanges, id) {
                continue;
            }
            self.guarded_exchange(id, |w| {
                if let Some(forward) = super::reload::take_queued(&mut w.exchanges, id) {
                    forward::fail_exchange(&mut w.parts(), id, forward, 502);
                }
            });
        }
        for group in 0..self.groups.len() {
            let waiting = self.groups.get(group).map_or(0, |g| g.queue.len());
            for _ in 0..waiting {
                forward::serve_queue(&mut self.parts(), group);
            }
        }
    }

    /// Upstream `ui` of a tunnel became ready: its client drives the tunnel (tunnel.rs), or
    /// it closes if that client is gone.
    pub(super) fn drive_tunnel_upstream(
        &mut self,
        ui: UpstreamId,
        (client, unique): (ClientId, u64),
    ) {
        match self.clients.current(client, unique) {
            Some(ci) => self.drive_client(ci),
            None => forward::close_upstream(&mut self.parts(), ui),
        }
    }

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
                route::enter_request(
                    &mut self.parts(),
                    ci,
                    (0, keep_alive, RefuseAt::Connection),
                    request,
                );
            }
            Parsed::Partial => return false,
            Parsed::TooLarge => {
                let at = RefuseAt::Connection;
                finish::refuse_at(&mut self.parts(), ci, at, 431, Refusal::Error);
            }
            Parsed::Invalid(e) => self.parse_refused(ci, RefuseAt::Connection, &e),
        }
        true
    }

    /// A request was malformed or over a limit; it is refused at `at` (finish.rs).
    pub(super) fn parse_refused(&mut self, ci: ClientId, at: RefuseAt, e: &http1::ParseError) {
        finish::parse_refused(&mut self.parts(), ci, at, e);
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
            super::response::flush_client(self.client_side(), ci);
            self.close_client(ci, CloseReason::Frang);
            return true;
        }
        let mut moved = read.moved || !read.events.is_empty();
        for event in read.events {
            match h2_serve::on_event(&mut self.h2_parts(), ci, event, now) {
                Next::Nothing => {}
                Next::Request(stream, converted) => {
                    route::stream_request(&mut self.parts(), ci, stream, converted, now)
                }
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

    /// Parked exchanges whose fetch finished (caching.rs): served again.
    pub(super) fn drain_inbox(&mut self) {
        for id in super::caching::take_inbox(&self.inbox) {
            if super::caching::waiting(&self.exchanges, id) {
                self.guarded_exchange(id, |w| route::resume_after_wait(&mut w.parts(), id));
            }
        }
    }
}
