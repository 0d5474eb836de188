//! The response relay: what an upstream sends for an exchange, read from its connection
//! and passed to the exchange's sink, for every kind of exchange. One path reads the head
//! (`head.rs`: interim responses, the framing facts, a 304 or an error the cache answers
//! instead, the final head) and the body (`body.rs`: decoded by its framing, its end decided
//! by `lifecycle::body_end`), releases or closes the upstream connection, and ends the
//! exchange (`finish`) or fails it (`exchange_failed`). What differs is only the sink
//! (`sink.rs`): a client's codec, plus the cache fill if any, or for a background
//! revalidation the fill alone ("fill only": a 304 freshens the entry, a storable response
//! replaces it, an error leaves it as it was).

use std::sync::Arc;
use std::time::Instant;

use super::background::Revalidation;
use super::client::codec::Codec;
use super::client::{ClientId, Wrote};
use super::exchange::{ExchangeId, Forward};
use super::finish::Outcome;
use super::health;
use super::token::{client_token, upstream_token};
use super::upstream::{self, UpPhase, UpstreamId};
use super::Worker;
use crate::close_reason::CloseReason;
use crate::metrics::bump;

mod body;
mod head;
mod sink;

use head::{HeadWriter, Recipient};
use sink::Sink;

/// Interim (1xx) responses relayed for one request; a server sending more is broken or
/// hostile, and each one would be copied to the client.
pub(super) const MAX_INTERIM_RESPONSES: u32 = 8;
const _: () =
    assert!(super::upstream::h2_pieces::INTERIM_KEPT == MAX_INTERIM_RESPONSES as usize + 1);

/// Why an exchange could not complete.
pub enum Failure {
    Connect,
    /// The connection failed before a response byte arrived.
    Reset,
    Timeout,
    BadResponse,
    /// A reload removed the server and its `grace_shutdown_time` ran out.
    ServerRemoved,
}

/// One step of relaying, decided while the connections are borrowed.
enum Step {
    /// Nothing more to do until more bytes arrive or the client drains.
    Wait,
    Moved,
    /// The connection closed before a response: `reused` says it may have been stale.
    Lost {
        reused: bool,
    },
    /// An unusable response (`count`: an upstream error to count).
    Bad {
        count: bool,
    },
    /// The origin's 304 answered the cache's revalidation (None: the entry is gone).
    NotModified(Option<Arc<cache::Entry>>),
    /// A stale entry answers instead of the origin's error.
    Stale(Arc<cache::Entry>),
    Complete,
    /// The body broke off after part of the response was sent.
    Broken,
    /// Nothing takes the rest of the body (a fill-only exchange whose fill gave up): the
    /// upstream connection is closed rather than read to the body's end.
    Abandoned,
    /// The origin accepted a WebSocket handshake; its `101` is queued for the client.
    Switch,
    /// frang's `http_resp_code_block` refuses the response, which goes no further.
    Blocked(crate::frang::Violation),
}

impl Worker {
    /// Relays what upstream `ui` sent for exchange `id` to the exchange's sink. True if
    /// anything moved.
    pub(super) fn relay_response(&mut self, id: ExchangeId, ui: UpstreamId) -> bool {
        let mut moved = false;
        // HTTP/2 connections owed a turn (a window given back as the response moved).
        if !self.upstreams.h2_woken.is_empty() {
            super::h2_origin::wake(&mut self.upstreams, &mut self.dirty);
        }
        loop {
            match self.relay_step(id, ui) {
                Step::Wait => break,
                Step::Moved => moved = true,
                end => return self.end_relay(id, ui, end),
            }
        }
        // An HTTP/2 origin's stream: the window of the body passed on goes back now, so that
        // the origin sends on while this exchange waits (h2_conn.rs `give_back`).
        super::upstream::h2_conn::give_back(&mut self.upstreams, ui);
        if !self.upstreams.h2_woken.is_empty() {
            super::h2_origin::wake(&mut self.upstreams, &mut self.dirty);
        }
        moved
    }

    /// One step of relaying exchange `id`'s response from upstream `ui`: its head, or as
    /// much of its body as the sink takes.
    fn relay_step(&mut self, id: ExchangeId, ui: UpstreamId) -> Step {
        let Worker {
            rt,
            clients,
            upstreams,
            exchanges,
            scratch,
            shared,
            ..
        } = self;
        let (Some(ex), Some(u)) = (exchanges.get_mut(id), upstreams.get_mut(ui)) else {
            return Step::Wait;
        };
        let client = if ex.has_client() {
            let Some(client) = clients.get_mut(ex.client).filter(|c| c.id == ex.client_id) else {
                return Step::Wait;
            };
            Some((client, ex.stream))
        } else {
            None
        };
        let Some(awaiting_head) = ex.forward().map(|f| f.resp.awaiting_head()) else {
            return Step::Wait;
        };
        let to = awaiting_head.then(|| Recipient::of(ex, u));
        let Some(fwd) = ex.forward_mut() else {
            return Step::Wait;
        };
        // The sink holds the fill for the step (`sink.rs`).
        let Some(mut sink) = Sink::new(client, fwd.fill.take()) else {
            return Step::Bad { count: false };
        };
        let step = match to {
            None if u.h2.is_some() => body::step_decoded(&mut sink, u, fwd),
            None => body::step(&mut sink, u, fwd),
            Some(to) => {
                let writer = HeadWriter {
                    rt,
                    metrics: &shared.metrics,
                    scratch,
                };
                writer.step(&mut sink, u, fwd, &to)
            }
        };
        fwd.fill = sink.into_fill();
        step
    }

    /// Acts on a step that ends the relay of exchange `id`'s response from upstream `ui`:
    /// the exchange completes, is answered from the cache, fails, or becomes a tunnel. True
    /// if anything moved.
    fn end_relay(&mut self, id: ExchangeId, ui: UpstreamId, step: Step) -> bool {
        match step {
            Step::Wait | Step::Moved => return false,
            Step::Lost { reused } => {
                self.close_upstream(ui);
                let failure = if reused {
                    Failure::Reset
                } else {
                    Failure::BadResponse
                };
                self.exchange_failed(id, failure);
            }
            Step::Bad { count } => {
                if count {
                    bump(&self.metrics().upstream_errors);
                }
                self.close_upstream(ui);
                self.exchange_failed(id, Failure::BadResponse);
            }
            Step::NotModified(Some(entry)) => return self.answer_from_cache(id, entry, true),
            // Nothing to answer from: the exchange fails as on a bad response.
            Step::NotModified(None) => {
                self.close_upstream(ui);
                self.exchange_failed(id, Failure::BadResponse);
            }
            Step::Stale(entry) => return self.answer_from_cache(id, entry, false),
            Step::Complete => self.complete_exchange(id),
            Step::Switch => self.start_tunnel(id, ui),
            Step::Blocked(violation) => {
                let freed = super::finish::block_response(&mut self.ends(), id, &violation);
                self.serve_freed(freed);
            }
            Step::Broken => {
                bump(&self.metrics().upstream_errors);
                self.close_upstream(ui);
                self.abort_response(id);
            }
            // No client and no store: the exchange ends there, the entry as it was.
            Step::Abandoned => {
                self.close_upstream(ui);
                self.drop_exchange(id);
            }
        }
        true
    }

    /// Sends `revalidation` to `pass` (its group and backup) as an exchange without a
    /// client, routed as the request it stands for (`vhost`, `location`): its response is
    /// relayed like any other, into a fill-only sink.
    pub(super) fn revalidate_in_background(
        &mut self,
        revalidation: Box<Revalidation>,
        vhost: Option<usize>,
        location: Option<usize>,
        pass: (usize, Option<usize>),
    ) {
        let frang = &self.rt.config.frang;
        let (new, fill, edits) = revalidation.into_exchange(frang, Instant::now());
        let id = self.exchanges.insert(new);
        if let Some(ex) = self.exchanges.get_mut(id) {
            ex.vhost = vhost;
            ex.location = location;
        }
        self.forward(id, pass, Some(fill), Some(edits));
    }

    /// The response was relayed to its end: store it if it fills the cache, and finish (a
    /// fill-only exchange answers no one: `finish` counts and logs nothing for it).
    fn complete_exchange(&mut self, id: ExchangeId) {
        let Some(mut forward) = self.exchanges.get_mut(id).and_then(|ex| ex.take_forward()) else {
            return;
        };
        // A removed server's index names an older configuration (`grace.rs`).
        let server = self
            .upstreams
            .get(forward.up)
            .filter(|u| !u.removed)
            .map(|u| u.server);
        if let Some(server) = server {
            self.checks()
                .health()
                .count_failover(forward.group, server, forward.resp.status());
        }
        if let Some(fill) = forward.fill.take() {
            fill.complete();
        }
        let keep_alive = self.exchanges.get(id).is_some_and(|ex| ex.keep_alive);
        let outcome = Outcome {
            status: forward.resp.status(),
            bytes: forward.resp.body_bytes(),
            close: !keep_alive,
            upstream_end: Some(forward.upstream_end(true)),
            forward: Some(forward),
            // frang judged its status when the head arrived (`HeadWriter::step`).
            from_origin: false,
        };
        self.finish(id, outcome);
    }

    /// An exchange failed on its upstream side (the connection is already closed): retry,
    /// answer the error, or close the client if part of the response is out.
    pub(super) fn exchange_failed(&mut self, id: ExchangeId, failure: Failure) {
        let Some(ex) = self.exchanges.get_mut(id) else {
            return;
        };
        let Some(mut forward) = ex.take_forward() else {
            return;
        };
        if forward.committed() {
            self.abort_response(id);
            return;
        }
        let retries = self
            .rt
            .groups
            .get(forward.group)
            .map_or(0, |g| g.forward_retries);
        match failure {
            Failure::Connect | Failure::Reset
                if forward.facts.replayable() && forward.attempts < retries.max(1) =>
            {
                forward.attempts += 1;
                bump(&self.metrics().upstream_retries);
                self.dispatch(id, forward);
            }
            // No connection to the main group: its backup (if any) gets the request, which
            // went nowhere yet.
            Failure::Connect if forward.turn_to_backup() => self.dispatch(id, forward),
            Failure::Connect | Failure::Reset | Failure::BadResponse | Failure::ServerRemoved => {
                self.fail_exchange(id, forward, 502)
            }
            Failure::Timeout => self.fail_exchange(id, forward, 504),
        }
    }

    /// Ends exchange `id` with a stored entry instead of the upstream's response (after a
    /// 304 to a revalidation, or a stale entry instead of an error). The upstream connection
    /// is pooled if its response was complete, else closed. A fill-only exchange is only
    /// finished: the 304 freshened its entry, or the stale entry stays as it was.
    fn answer_from_cache(&mut self, id: ExchangeId, entry: Arc<cache::Entry>, done: bool) -> bool {
        let answered = super::finish::answer_from_cache(&mut self.ends(), id, &entry, done);
        answered.map(|freed| self.serve_freed(freed)).is_some()
    }

    /// Part of exchange `id`'s response is out and the rest will not come: the only honest
    /// end is to cut it. HTTP/1.1 resets the connection (a FIN or close_notify would end a
    /// close-delimited body cleanly); HTTP/2 resets the stream (RST_STREAM, never
    /// END_STREAM). An exchange without a client (a fill-only one, or one whose client left)
    /// is dropped, its fill with it: the entry stays as it was.
    fn abort_response(&mut self, id: ExchangeId) {
        let Some(ci) = self.exchanges.client_of(id, &self.clients) else {
            return self.drop_exchange(id);
        };
        let stream = self.exchanges.get(id).map_or(0, |ex| ex.stream);
        self.drop_exchange(id);
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        match &mut c.codec {
            Codec::H1(_) => self.reset_client(ci, CloseReason::Error),
            Codec::H2(h2) => {
                h2.forget(stream);
                h2.cancel(stream);
                h2.flush_into(&mut c.out);
                self.dirty.push_back(super::token::client_token(ci));
            }
            Codec::H3(h3) => {
                h3.cancel(u64::from(stream), 0x102);
                self.dirty.push_back(super::token::client_token(ci));
            }
        }
    }

    /// The origin accepted exchange `id`'s WebSocket handshake on upstream `ui` (its `101` is
    /// queued): the exchange ends, its two connections become a tunnel (tunnel.rs).
    pub(super) fn start_tunnel(&mut self, id: ExchangeId, ui: UpstreamId) {
        let ups = (&mut self.upstreams, &mut self.groups[..], self.rt_gen);
        let start = match super::tunnel::detach(&mut self.exchanges, &self.clients, ups, (id, ui)) {
            Ok(start) => start,
            Err(client_gone) => {
                self.close_upstream(ui);
                if client_gone {
                    self.drop_exchange(id);
                }
                return;
            }
        };
        if let Some(group) = start.queue {
            self.serve_queue(group);
        }
        self.finish(id, start.outcome);
        let parts = (&mut self.clients, &mut self.timers, &mut self.dirty);
        let ws = (self.rt.config.client_ws_timeout, self.now);
        if !super::tunnel::open(parts, &self.shared.metrics.tunnels, (start.client, ui), ws) {
            self.close_upstream(ui);
        }
    }

    /// `server_proto h2`: connection `ui` speaks HTTP/2 from now on (h2_origin.rs `start`).
    pub(super) fn start_h2_origin(&mut self, ui: UpstreamId) -> bool {
        super::h2_origin::start((&mut self.upstreams, &mut self.groups), &self.rt, ui)
    }

    /// `server_proto h2`: a connection of `group` (to `server` if given) with a free stream
    /// (h2_conn.rs `find_conn`).
    pub(super) fn shared_h2(&self, group: usize, server: Option<usize>) -> Option<UpstreamId> {
        let parts = (&self.upstreams, &self.groups[..]);
        super::upstream::h2_conn::find_conn(parts, (group, server), self.rt_gen)
    }

    /// `server_proto h2`: sends `forward` on a new stream of connection `conn`
    /// (h2_origin.rs).
    pub(super) fn attach_h2(&mut self, id: ExchangeId, conn: UpstreamId, forward: Box<Forward>) {
        let parts = super::h2_origin::Parts {
            rt: &self.rt,
            upstreams: &mut self.upstreams,
            exchanges: &mut self.exchanges,
            clients: &self.clients,
            timers: &mut self.timers,
            dirty: &mut self.dirty,
        };
        match super::h2_origin::attach(parts, (id, conn), forward) {
            super::h2_origin::Placed::Sent => {}
            super::h2_origin::Placed::ClientGone => self.drop_exchange(id),
            super::h2_origin::Placed::Failed(forward) => self.fail_exchange(id, forward, 502),
        }
    }

    /// The loop's hook for an HTTP/2 entry (h2_origin.rs). A connection is driven here whole
    /// (True); a stream entry wakes its connection if it has request bytes for it, then goes
    /// on as any exchange's connection (False).
    pub(super) fn drive_h2(&mut self, ui: UpstreamId) -> bool {
        let Some(u) = self.upstreams.get(ui) else {
            return false;
        };
        if super::upstream::h2_conn::is_stream(u) {
            let parts = (&self.upstreams, &mut self.exchanges, &self.clients);
            super::h2_origin::stream_turn(parts, &mut self.dirty, ui);
            return false;
        }
        if u.phase == super::upstream::UpPhase::Connecting {
            if !self.settle_connect(ui) {
                return true;
            }
            if !super::h2_origin::alpn_agreed(&self.upstreams, ui) {
                self.close_upstream(ui);
                return true;
            }
        }
        let parts = (&mut self.upstreams, &mut self.bufs, &mut self.timers);
        let metrics = &self.shared.metrics.upstream;
        if super::h2_origin::conn_turn(parts, (&mut self.dirty, metrics), ui) {
            self.close_upstream(ui);
        }
        true
    }

    /// HTTP/2 connection `ui`'s codec deadline came (h2_conn.rs `arm_deadline`): what it
    /// does (a connection failed, a stream reset) is delivered by a turn now.
    pub(super) fn h2_deadline(&mut self, ui: UpstreamId, now: Instant) {
        super::upstream::h2_conn::on_deadline(&mut self.upstreams, ui, now);
        self.drive_upstream(ui);
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
        if u.h2.is_some() && self.drive_h2(ui) {
            return;
        }
        if connecting && !self.settle_connect(ui) {
            return;
        }
        if (self.upstreams.get(ui)).is_some_and(|u| u.phase == UpPhase::Checking) {
            return match self.checks().drive(ui) {
                health::Checked::Judged(freed) => self.serve_freed(freed),
                health::Checked::Waiting => {}
                health::Checked::Again => self.dirty.push_back(upstream_token(ui)),
            };
        }
        for _ in 0..64 {
            let mut progressed = self.flush_upstream(ui);
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
                    self.close_upstream(ui);
                }
                return;
            };
            if self.relay_response(id, ui) {
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

    /// Writes client `ci`'s queued bytes (client/conn.rs `write`). True if any went out.
    /// Room in the outbox lets the upstream side go on: every stream of an HTTP/2 client
    /// whose outbox had filled up, or the upstream of the HTTP/1 exchange being answered.
    pub(super) fn flush_client(&mut self, ci: ClientId) -> bool {
        match super::client::write(&mut self.clients, ci) {
            Wrote::Nothing => false,
            Wrote::Stalled(ids) => {
                super::h2_serve::wake_upstreams(
                    (&self.exchanges, &self.upstreams, &mut self.dirty),
                    ids,
                );
                true
            }
            Wrote::Sent(current) => {
                let forward = current.and_then(|id| self.exchanges.get(id)?.forward());
                if let Some(ui) = forward.map(|f| f.up) {
                    self.dirty.push_back(super::token::upstream_token(ui));
                }
                true
            }
        }
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
                    self.stream_request(ci, stream, converted, self.now);
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
                    let _ = super::finish::refuse_at(&mut self.ends(), ci, at, status, kind);
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
}
