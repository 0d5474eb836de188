//! The end of an exchange, written once. Whatever way an exchange ends (a relayed response,
//! a cache hit, a 304, a stale answer, PURGE, a redirect, a block, an error page), it goes
//! through [`Worker::finish`]: the access-log line with the status and body bytes the client
//! got, the status counters, frang's response accounting, the upstream connection's reuse
//! decision (`lifecycle.rs`), the client connection's continuation (the codec) and its idle
//! timer. An exchange whose client went away goes through [`Worker::drop_exchange`] instead:
//! nothing reaches anyone, so nothing is logged.

use std::time::Instant;

use http1::BodyDecoder;

use super::client::codec::{self, Codec};
use super::client::{ClientId, Due};
use super::exchange::{ExchangeId, Forward, Stage};
use super::h1::{self, Reply, ReplyTo};
use super::limits;
use super::token::client_token;
use super::upstream::UpstreamEnd;
use super::Worker;
use crate::access_log::{CacheStatus, RequestRecord as AccessRecord};
use crate::close_reason::CloseReason;
use crate::frang::Violation;

/// How an exchange ended.
pub struct Outcome {
    /// The status the client received; 0 when nothing was sent (a dropped request).
    pub status: u16,
    /// Body bytes sent to the client.
    pub bytes: u64,
    /// The client connection closes after this response.
    pub close: bool,
    /// The upstream side, when the caller holds it (else it is taken from the exchange).
    pub forward: Option<Box<Forward>>,
    /// What is known of the upstream connection's state (abandoned when not given).
    pub upstream_end: Option<UpstreamEnd>,
    /// A status from the origin that frang's `http_resp_code_block` still has to count (a
    /// `101` that became a tunnel; other responses are judged when their head arrives,
    /// `response/head.rs`).
    pub from_origin: bool,
}

impl Outcome {
    /// A response the proxy made itself.
    pub fn local(status: u16, bytes: u64, close: bool) -> Outcome {
        Outcome {
            status,
            bytes,
            close,
            forward: None,
            upstream_end: None,
            from_origin: false,
        }
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

/// Where a refusal is answered.
#[derive(Clone, Copy, Debug)]
pub enum RefuseAt {
    /// The connection: nothing of the request became an exchange (a bad HTTP/1.1 head, a
    /// slow head, a connection limit).
    Connection,
    /// The request's exchange.
    Exchange(ExchangeId),
    /// An HTTP/2 stream whose request did not become an exchange.
    Stream(u32),
}

impl From<Option<ExchangeId>> for RefuseAt {
    fn from(id: Option<ExchangeId>) -> RefuseAt {
        id.map_or(RefuseAt::Connection, RefuseAt::Exchange)
    }
}

impl Worker {
    /// Records and answers a violation by client `ci`, refused at `at` (limits.rs decides and
    /// records; the refusal is this file's).
    pub(super) fn frang_violation(&mut self, ci: ClientId, at: RefuseAt, v: &Violation) {
        let parts = (&mut self.clients, &self.exchanges);
        if limits::record_violation(parts, (&self.rt, &self.shared.metrics), (ci, at), v) {
            self.refuse_at(ci, at, v.status, Refusal::Attack);
        }
    }

    /// Resets client `ci` for `v`, a refusal of the connection itself (a `tft` limit on its
    /// records).
    pub(super) fn refuse_connection(&mut self, ci: ClientId, v: &Violation) {
        let Some(ip) = self.clients.get(ci).map(|c| c.peer.ip()) else {
            return;
        };
        limits::note_block((&self.rt, self.metrics()), ip, v, "-");
        self.reset_client(ci, CloseReason::Frang);
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
        let limits::Deadline::Passed(limit) =
            self.exchanges.body_deadline(&mut self.timers, id, now)
        else {
            return;
        };
        if let Some(ci) = self.exchanges.client_of(id, &self.clients) {
            self.deadline_violation(ci, Some(id), limit);
        }
    }

    /// Client `ci`'s timer entry of generation `gen` came due: acts on what it is due for.
    pub(super) fn client_timer(&mut self, ci: ClientId, gen: u64, now: Instant) {
        let Some(due) = self.clients.timer_due(&mut self.timers, ci, gen, now) else {
            return;
        };
        match due {
            Due::Handshake => self.handshake_deadline_due(ci, now),
            // A slowloris head (client_header_timeout) is cut by frang; otherwise this is an
            // idle keep-alive client.
            Due::Head => match self.clients.head_deadline(&mut self.timers, ci, now) {
                limits::Deadline::None => self.close_client(ci, CloseReason::IdleTimeout),
                limits::Deadline::Pending => {}
                limits::Deadline::Passed(limit) => self.deadline_violation(ci, None, limit),
            },
            Due::Drain => self.close_client(ci, CloseReason::Error),
            Due::H2 => self.h2_timer(ci, now),
            Due::H3 => {
                // A QUIC handshake cut at its deadline counts as a TCP one does.
                if let Some(ip) = super::quic::timeout(&mut self.quic, &mut self.clients, ci, now) {
                    let _ = self.rt.frang.on_tls_incomplete(ip, now);
                }
                self.drive_client(ci);
            }
            Due::Tunnel => {
                let parts = (&mut self.clients, &mut self.timers);
                let timeout = self.rt.config.client_ws_timeout;
                if let Some(end) = super::tunnel::timer(parts, timeout, ci, now) {
                    self.close_tunnel(ci, end);
                }
            }
        }
    }

    /// Client `ci`'s handshake deadline came due: process what already arrived, then cut
    /// the handshake unless that finished it or moved it (which re-armed the deadline).
    fn handshake_deadline_due(&mut self, ci: ClientId, now: Instant) {
        let Some(gen) = self.clients.get(ci).map(|c| c.timer_gen) else {
            return;
        };
        self.drive_client(ci);
        let Some((ip, state)) = self.clients.handshake_overdue(ci, gen) else {
            return;
        };
        self.metrics().count_handshake_timeout(state);
        crate::metrics::bump(&self.metrics().handshakes_failed);
        let _ = self.rt.frang.on_tls_incomplete(ip, now);
        self.close_client(ci, CloseReason::HandshakeTimeout);
    }

    /// After a receive pass of client `ci`: its held bytes join its address's total
    /// (`client_mem`); over the hard limit the connection is reset as a block.
    pub(super) fn account_memory(&mut self, ci: ClientId) {
        let now = self.now;
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        let Err(v) = c.account_memory(now) else {
            return;
        };
        let ip = c.peer.ip();
        limits::note_block((&self.rt, self.metrics()), ip, &v, "-");
        self.drop_response(ci, Refusal::Attack);
        self.close_client(ci, CloseReason::Frang);
    }

    /// After driving client `ci`: close it if it is finished (client/conn.rs `settle`).
    pub(super) fn settle_client(&mut self, ci: ClientId) {
        let last_call_over = super::drain::last_call_over(self.draining);
        match super::client::settle(&mut self.clients, &mut self.bufs, ci, last_call_over) {
            Some((why, true)) => self.reset_client(ci, why),
            Some((why, false)) => self.close_client(ci, why),
            None => {}
        }
    }

    /// Closes client connection `ci`, with close_notify (TLS) unless the client closed first.
    pub(super) fn close_client(&mut self, ci: ClientId, why: CloseReason) {
        self.end_client(ci, why, true);
    }

    /// Cuts client connection `ci` with a reset: no close_notify and no FIN, which a reader
    /// of a close-delimited body would take for its clean end (RFC 9112 §8); what was not
    /// sent yet is dropped.
    pub(super) fn reset_client(&mut self, ci: ClientId, why: CloseReason) {
        self.end_client(ci, why, false);
    }

    /// Closes client connection `ci` (client/conn.rs `close`), then its tunnel's upstream and
    /// the exchanges it carried.
    fn end_client(&mut self, ci: ClientId, why: CloseReason, orderly: bool) {
        super::quic::closing(&mut self.quic, &mut self.clients, ci, self.now);
        let conns = &mut self.client_conns().0;
        let Some(closed) = super::client::close(conns, ci, why, orderly) else {
            return;
        };
        if let Some((tunnel, unique)) = closed.tunnel {
            let tunnels = &self.shared.metrics.tunnels;
            let gone = super::tunnel::gone(&self.upstreams, tunnels, tunnel, (ci, unique), why);
            if let Some(ui) = gone {
                self.close_upstream(ui);
            }
        }
        for id in closed.exchanges {
            self.drop_exchange(id);
        }
    }

    /// `http_resp_code_block` refused the origin's response to exchange `id` before any of
    /// it was sent: as Tempesta does, the client gets 403 instead (per `block_action attack`)
    /// and the connection closes; the upstream connection, its response unread, is closed.
    pub(super) fn block_response(&mut self, id: ExchangeId, v: &Violation) {
        let parts = (&self.exchanges, &self.clients);
        limits::record_response_block(parts, (&self.rt, &self.shared.metrics), id, v);
        self.refuse_exchange(id, 403, Refusal::Attack);
    }

    /// Ends exchange `id` with `outcome`.
    pub(super) fn finish(&mut self, id: ExchangeId, mut outcome: Outcome) {
        let Some(mut ex) = self.exchanges.remove(id) else {
            return;
        };
        let stage_forward = match ex.take_stage() {
            Stage::Upstream(f) => Some(f),
            Stage::Queued(f) => {
                super::upstream::groups::unqueue(&mut self.groups, id);
                Some(f)
            }
            Stage::CacheWait(ticket) => {
                self.shared.cache.cancel_wait(ticket);
                None
            }
            Stage::New => None,
        };
        let forward = outcome.forward.take().or(stage_forward);
        let upstream_time = self.record_upstream_time(forward.as_deref());
        // The request body: what its forward did not read, or all of it (never forwarded).
        let unread = match forward {
            Some(f) => {
                let end = outcome.upstream_end.unwrap_or(UpstreamEnd::ABANDONED);
                self.end_upstream(Some(id), f.up, end);
                f.unread_body()
            }
            None => ex
                .request
                .has_body()
                .then(|| BodyDecoder::new(ex.request.framing(), &self.rt.limits)),
        };
        // A background revalidation answers no one: no status to count.
        if outcome.status != 0 && ex.has_client() {
            self.worker_metrics().count_status(outcome.status);
            let took = ex.started.elapsed();
            self.worker_metrics().request_duration.record_owned(took);
        }
        if ex.log.is_some() {
            let vhost_name = limits::vhost_name(&self.rt, ex.vhost);
            let answer = (outcome.status, outcome.bytes);
            self.access_log(ex.log.as_deref(), vhost_name, answer, upstream_time);
        }
        let Some(ci) = self.clients.current(ex.client, ex.client_id) else {
            return;
        };
        if outcome.from_origin {
            let metrics = &self.shared.metrics;
            let upgrade = (ci, outcome.status, ex.vhost.unwrap_or(0));
            limits::judge_upgrade(&mut self.clients, (&self.rt, metrics), upgrade);
        }
        let idle = super::client::idle_timeout(&self.rt);
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        match &mut c.codec {
            Codec::H1(h1) if h1.current() == Some(id) => {
                let closing = outcome.close || c.end.closing();
                c.end
                    .close_after_flush_if(h1.exchange_done(unread, closing));
            }
            Codec::H1(_) => c.end.close_after_flush_if(outcome.close),
            Codec::H2(h2) => {
                h2.end(ex.stream);
                h2.exchange_done(ex.stream);
                if outcome.close {
                    // A refused request ends the connection, after the streams in flight.
                    h2.conn.go_away();
                }
                h2.flush_into(&mut c.out);
                super::h2_serve::arm_timer((&mut self.clients, &mut self.timers, &self.rt), ci);
                self.dirty.push_back(client_token(ci));
                return;
            }
            Codec::H3(h3) => return h3.exchange_done(ex.stream, (&mut self.dirty, ci)),
        }
        self.clients
            .extend_timer(&mut self.timers, ci, self.now + idle);
        self.dirty.push_back(client_token(ci));
    }

    /// Forgets exchange `id` whose client is gone: its upstream connection (if any) is
    /// closed mid-message, its queue place and cache wait released.
    pub(super) fn drop_exchange(&mut self, id: ExchangeId) {
        let Some(mut ex) = self.exchanges.remove(id) else {
            return;
        };
        match ex.take_stage() {
            Stage::Upstream(f) => self.end_upstream(Some(id), f.up, UpstreamEnd::ABANDONED),
            Stage::Queued(_) => super::upstream::groups::unqueue(&mut self.groups, id),
            Stage::CacheWait(ticket) => {
                self.shared.cache.cancel_wait(ticket);
            }
            Stage::New => {}
        }
    }

    /// Answers exchange `id` with a response of the proxy's own and finishes it.
    pub(super) fn answer(&mut self, id: ExchangeId, reply: Reply<'_>, close: bool) {
        let (status, bytes) = self.write_reply(id, &reply, close);
        self.finish(id, Outcome::local(status, bytes, close));
    }

    /// Answers exchange `id`, whose upstream side is `forward`, with a stored entry (a stale
    /// one instead of an error, or the one a 304 refreshed) and finishes it; `upstream_end`
    /// is what is known of the upstream connection (None: abandoned, or closed already).
    pub(super) fn answer_stored(
        &mut self,
        id: ExchangeId,
        forward: Box<Forward>,
        entry: &std::sync::Arc<cache::Entry>,
        upstream_end: Option<UpstreamEnd>,
    ) {
        let close = self.exchanges.get(id).is_none_or(|ex| !ex.keep_alive);
        let answer = forward
            .fill
            .as_ref()
            .map_or(cache::Answer::Stored(cache::ReplyKind::Full), |f| {
                f.answer(entry)
            });
        let (status, bytes) = self.write_reply(id, &Reply::Stored { entry, answer }, close);
        let outcome = Outcome {
            upstream_end,
            forward: Some(forward),
            ..Outcome::local(status, bytes, close)
        };
        self.finish(id, outcome);
    }

    /// Writes `reply` to exchange `id`'s client; returns the status and body bytes sent.
    pub(super) fn write_reply(
        &mut self,
        id: ExchangeId,
        reply: &Reply<'_>,
        close: bool,
    ) -> (u16, u64) {
        let status = reply.status();
        let rt = self.rt.clone();
        let page;
        let reply = match reply {
            Reply::Status(status) => {
                page = Reply::status_page(*status, &rt.error_pages);
                &page
            }
            other => other,
        };
        let Some(ex) = self.exchanges.get(id) else {
            return (status, 0);
        };
        let to = ReplyTo {
            http10: h1::is_http10(&ex.request),
            close,
        };
        let (stream, head_only) = (ex.stream, ex.request.method() == http1::Method::Head);
        let Some(ci) = self.exchanges.client_of(id, &self.clients) else {
            return (status, 0);
        };
        let date = match reply {
            Reply::Redirect { .. } | Reply::Local(_) => self.date.now().to_string(),
            _ => String::new(),
        };
        let Some(c) = self.clients.get_mut(ci) else {
            return (status, 0);
        };
        let bytes = codec::reply(c, stream, reply, to, &date, head_only);
        (status, bytes)
    }

    /// Refuses exchange `id` per `block_action` (reply, or drop; an attack drop resets the
    /// connection) and closes the connection after it.
    pub(super) fn refuse_exchange(&mut self, id: ExchangeId, status: u16, kind: Refusal) {
        let action = self.block_action(kind);
        if action.reply {
            let (status, bytes) = self.write_reply(id, &Reply::Status(status), true);
            self.finish(id, Outcome::local(status, bytes, true));
        } else {
            if let Some(ci) = self.exchanges.client_of(id, &self.clients) {
                self.drop_response(ci, kind);
            }
            self.finish(id, Outcome::local(0, 0, true));
        }
    }

    /// Refuses what client `ci` sent before any exchange exists (a malformed or oversized
    /// head) per `block_action`, and closes the connection after it.
    pub(super) fn refuse(&mut self, ci: ClientId, status: u16, kind: Refusal) {
        let action = self.block_action(kind);
        let (rt, date) = (self.rt.clone(), self.date.now().to_string());
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        if let Codec::H2(h2) = &mut c.codec {
            if !action.reply {
                return self.drop_response(ci, kind);
            }
            // No stream to answer on: the connection ends after the streams in flight.
            h2.conn.go_away();
            h2.flush_into(&mut c.out);
            return;
        }
        if let Codec::H3(h3) = &mut c.codec {
            h3.h3.send_goaway();
            return self.dirty.push_back(client_token(ci));
        }
        c.end.close_after_flush();
        if action.reply {
            let to = ReplyTo {
                http10: false,
                close: true,
            };
            let page = Reply::status_page(status, &rt.error_pages);
            h1::write_reply(&mut c.out, &page, to, &date);
            self.worker_metrics().count_status(status);
        } else {
            self.drop_response(ci, kind);
        }
    }

    /// Refuses at `at` (see [`RefuseAt`]) with `status`, per `block_action`.
    pub(super) fn refuse_at(&mut self, ci: ClientId, at: RefuseAt, status: u16, kind: Refusal) {
        match at {
            RefuseAt::Connection => self.refuse(ci, status, kind),
            RefuseAt::Exchange(id) => self.refuse_exchange(id, status, kind),
            RefuseAt::Stream(stream) => self.refuse_stream(ci, stream, status, kind),
        }
    }

    /// Refuses the request on HTTP/2 stream `stream`, which has no exchange, per
    /// `block_action`: `reply` answers `status` on the stream, and a block (as on HTTP/1.1)
    /// also ends the connection with GOAWAY after the streams in flight; `drop` closes the
    /// connection with nothing more sent.
    fn refuse_stream(&mut self, ci: ClientId, stream: u32, status: u16, kind: Refusal) {
        if !self.block_action(kind).reply {
            return self.drop_response(ci, kind);
        }
        let (rt, date) = (self.rt.clone(), self.date.now().to_string());
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        let page = Reply::status_page(status, &rt.error_pages);
        if let Codec::H3(_) = &c.codec {
            super::client::codec::reply(c, stream, &page, ReplyTo::default(), &date, false);
            self.worker_metrics().count_status(status);
            self.dirty.push_back(client_token(ci));
            return;
        }
        let Codec::H2(h2) = &mut c.codec else {
            return;
        };
        h2.reply(stream, &page, &date, false);
        if kind == Refusal::Attack {
            h2.conn.go_away();
        }
        h2.flush_into(&mut c.out);
        self.worker_metrics().count_status(status);
        self.dirty.push_back(client_token(ci));
    }

    fn block_action(&self, kind: Refusal) -> config::BlockAction {
        match kind {
            Refusal::Error => self.rt.config.block_action.error,
            Refusal::Attack => self.rt.config.block_action.attack,
        }
    }

    /// `block_action ... drop`: nothing more is sent and nothing more is served. The client
    /// is gone: the connection closes when this drive settles, every exchange of it ends
    /// there (on HTTP/2, the other streams too, and requests read in the same pass are not
    /// routed: `process_h2`), and a dropped attacker gets a reset, not a polite FIN.
    pub(super) fn drop_response(&mut self, ci: ClientId, kind: Refusal) {
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        c.out.clear();
        // Errors too, as Tempesta resets for both (fw/http.c, `tfw_h1_error_resp`: a drop
        // is T_BLOCK_WITH_RST); and no close_notify over TLS, which a client reads as an
        // orderly end (`settle_client` resets).
        c.end.drop_with_reset(match kind {
            Refusal::Attack => CloseReason::Frang,
            Refusal::Error => CloseReason::Server,
        });
        let _ = socket2::SockRef::from(&c.sock).set_linger(Some(std::time::Duration::ZERO));
    }

    /// Counts the time `forward`'s server took to answer in its group's histogram; returns
    /// it for the access log.
    fn record_upstream_time(&self, forward: Option<&Forward>) -> Option<std::time::Duration> {
        let f = forward?;
        let d = f.upstream_time?;
        if let Some(group) = self.rt.groups.get(f.group) {
            self.metrics()
                .upstream
                .record_response(self.id, &group.name, d);
        }
        Some(d)
    }

    /// Notes in exchange `id`'s access log record (when the log is on) what the cache did.
    pub(super) fn log_cache_status(&mut self, id: ExchangeId, status: CacheStatus) {
        if let Some(log) = self.exchanges.get_mut(id).and_then(|ex| ex.log.as_mut()) {
            log.cache = Some(status);
        }
    }

    pub(super) fn access_log(
        &self,
        request: Option<&AccessRecord>,
        vhost: &str,
        (status, bytes): (u16, u64),
        upstream_time: Option<std::time::Duration>,
    ) {
        let Some(request) = request else { return };
        let entry = crate::access_log::Entry {
            request,
            vhost,
            status,
            bytes,
            time: std::time::SystemTime::now(),
            duration: request.started.elapsed(),
            upstream_time,
        };
        crate::access_log::write(&self.rt.config.access_log, &entry);
    }

    /// Ends client `ci`'s tunnel for `end`: both connections close (tunnel.rs).
    pub(super) fn close_tunnel(&mut self, ci: ClientId, end: crate::metrics_tunnel::TunnelEnd) {
        if let Some(why) = super::tunnel::end(&mut self.clients, ci, end) {
            self.close_client(ci, why);
        }
    }
}
