//! HTTP/2 connections on the exchange core: the bytes a client sent go into its `h2`
//! connection; each event becomes exchange work (a request opens an exchange, DATA feeds
//! its body, a reset drops it); request bodies move to the upstream as it takes them, and
//! the window credit goes back to the client only then; response bytes waiting for windows
//! move as windows open; the connection's frames go out through the outbox.

use std::time::Instant;

use h2::Event;

use super::client::codec::Codec;
use super::client::ClientId;
use super::exchange::ExchangeId;
use super::finish::{Refusal, RefuseAt};
use super::h1::Reply;
use super::h2::{H2Codec, Unservable};
use super::head_chunks::head_chunks;
use super::limits::vhost_frang;
use super::request::Scheme;
use super::request_body::{push_chunk, push_last_chunk};
use super::token::{client_token, upstream_token};
use super::Worker;
use crate::frang::check_trailers;
use crate::metrics::{bump, WorkerMetrics};

/// Longest an HTTP/2 connection with streams in flight goes without its timer.
const H2_TIMER_MAX: std::time::Duration = std::time::Duration::from_secs(5);

impl Worker {
    /// The HTTP/2 limits of this configuration.
    fn h2_limits(&self) -> h2::Limits {
        let config = &self.rt.config;
        let defaults = h2::Limits::default();
        // Unlimited in the configuration still has a bound here: the decoded list is held
        // in memory.
        let max_header_list_size = config
            .http_max_header_list_size
            .unwrap_or(defaults.max_header_list_size);
        h2::Limits {
            max_concurrent_streams: config.max_concurrent_streams,
            max_header_list_size,
            // With `http_header_cnt` set, frang counts the fields (`H2Codec::request`) and
            // the crate's own cap must not answer first: the list size already bounds the
            // fields, each costing at least 32 bytes of it (RFC 9113 §6.5.2).
            max_header_fields: match config.frang.http_header_cnt {
                Some(_) => max_header_list_size / 32 + 1,
                None => defaults.max_header_fields,
            },
            ctrl_frame_rate_multiplier: config.ctrl_frame_rate_multiplier,
            window_update_frame_rate_multiplier: config.window_update_frame_rate_multiplier,
            send_window_timeout: config.h2_stall_timeout,
            output_stall_timeout: config.h2_stall_timeout,
            ..defaults
        }
    }

    /// Client `ci` speaks HTTP/2 from now on (ALPN `h2`, or an h2c listener).
    pub(super) fn start_h2(&mut self, ci: ClientId, scheme: Scheme) {
        let limits = self.h2_limits();
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        match H2Codec::new(limits, scheme, self.shared.metrics.clone()) {
            Ok(mut h2) => {
                h2.flush_into(&mut c.out);
                c.codec = Codec::H2(Box::new(h2));
                bump(&self.shared.metrics.h2.connections);
                self.arm_h2_timer(ci);
            }
            Err(e) => {
                crate::warn!("worker {}: cannot start HTTP/2: {e}", self.id);
                c.end.close_after_flush();
            }
        }
    }

    /// Moves an HTTP/2 connection forward. True if anything changed.
    pub(super) fn process_h2(&mut self, ci: ClientId) -> bool {
        let now = Instant::now();
        let Some(c) = self.clients.get_mut(ci) else {
            return false;
        };
        let Codec::H2(h2) = &mut c.codec else {
            return false;
        };
        let mut moved = false;
        let mut head_chunk = Ok(());
        let mut events: Vec<Event> = Vec::new();
        // Input while the connection takes it and the answers queued are under the bound:
        // otherwise the read buffer fills and the socket is not read.
        if let Some(rbuf) = c.rbuf.as_mut() {
            if !rbuf.is_empty() && h2.conn.wants_read() && c.out.has_room() {
                let n = rbuf.len();
                let head_before = h2.conn.head_in_progress();
                h2.conn.recv(rbuf.bytes(), now);
                rbuf.consume(n);
                moved = true;
                events.extend(std::iter::from_fn(|| h2.conn.poll_event()));
                let head_after = h2.conn.head_in_progress();
                let completed = events
                    .iter()
                    .any(|e| matches!(e, Event::Request { .. } | Event::Trailers { .. }));
                head_chunk =
                    head_chunks(&mut c.limits, self.now, head_before, completed, head_after);
            }
        }
        events.extend(std::iter::from_fn(|| h2.conn.poll_event()));
        if let Err(v) = head_chunk {
            // Nothing of the connection is served after a slow-head block.
            self.frang_violation(ci, RefuseAt::Connection, &v);
            self.flush_client(ci);
            self.close_client(ci, crate::close_reason::CloseReason::Frang);
            return true;
        }
        for event in events {
            moved = true;
            // Once the client is gone nothing more is served; once a request of it was
            // blocked, no request read in the same pass is routed (HTTP/1.1 stops parsing
            // at the block as well).
            let serves = self
                .clients
                .get(ci)
                .map(|c| (!c.end.is_gone(), !c.end.blocked()));
            match (serves, &event) {
                (None | Some((false, _)), _) => {}
                // Refused unprocessed (RFC 9113 §8.7): the connection ends after GOAWAY.
                (Some((_, false)), Event::Request { stream, .. }) => {
                    if let Some(h2) = self.h2_codec(ci) {
                        h2.conn.reset(*stream, h2::ErrorCode::REFUSED_STREAM);
                    }
                }
                _ => self.h2_event(ci, event, now),
            }
        }
        moved |= self.h2_pump(ci);
        if let Some(c) = self.clients.get_mut(ci) {
            if let Codec::H2(h2) = &mut c.codec {
                h2.flush_into(&mut c.out);
                if h2.conn.is_done() {
                    c.end.close_after_flush();
                }
                if c.out.is_empty() {
                    h2.out_stalled_since = None;
                } else {
                    h2.out_stalled_since.get_or_insert(now);
                }
            }
        }
        if super::h2_floods::judge(&mut self.clients, ci, &self.rt, &self.shared.metrics) {
            self.drop_response(ci, Refusal::Attack);
        }
        self.arm_h2_timer(ci);
        moved
    }

    fn h2_event(&mut self, ci: ClientId, event: Event, now: Instant) {
        match event {
            Event::Request {
                stream,
                request,
                end_stream,
            } => {
                let codec = self.clients.get_mut(ci).map(|c| &mut c.codec);
                let Some(Codec::H2(h2)) = codec else {
                    return;
                };
                let converted = h2.request(&request, end_stream, &self.rt.limits);
                self.stream_request(ci, stream, converted, now);
            }
            Event::Data {
                stream,
                data,
                end_stream,
            } => self.h2_data(ci, stream, data, end_stream, now),
            Event::Trailers { stream, fields } => self.h2_trailers(ci, stream, fields),
            Event::Reset { stream, .. } => {
                if let Some(id) = self.h2_codec(ci).and_then(|h2| h2.forget(stream)) {
                    self.drop_exchange(id);
                }
            }
            // The stream's waiting bytes go out in `h2_pump`, which also wakes its upstream.
            Event::WindowOpened { .. } => {}
            Event::GoAway { .. } => {}
            Event::Closed { .. } => {
                let dropped = match self.clients.get_mut(ci) {
                    Some(c) => {
                        c.end.close_after_flush();
                        c.codec.reset()
                    }
                    None => Vec::new(),
                };
                for id in dropped {
                    self.drop_exchange(id);
                }
            }
        }
    }

    fn h2_codec(&mut self, ci: ClientId) -> Option<&mut H2Codec> {
        match &mut self.clients.get_mut(ci)?.codec {
            Codec::H2(h2) => Some(h2),
            Codec::H1(_) | Codec::H3(_) => None,
        }
    }

    /// A stream opened with a request, on HTTP/2 or HTTP/3 (`drive_h3`), as its codec
    /// converted it: it enters as every request does (`enter_request`), or is answered on
    /// the stream when it cannot become a request the rules can see.
    pub(super) fn stream_request(
        &mut self,
        ci: ClientId,
        stream: u32,
        converted: Result<crate::worker::request::Request, Unservable>,
        now: Instant,
    ) {
        match converted {
            // The connection outlives its streams; closing is the codec's (GOAWAY). A
            // request frang refuses has no exchange: refused on its stream.
            Ok(request) => {
                self.enter_request(ci, (stream, true, RefuseAt::Stream(stream)), request)
            }
            Err(refused) => self.stream_unservable(ci, stream, refused, now),
        }
    }

    /// A stream whose request cannot become an exchange. It still counts against frang's
    /// request rate first: a connection cannot send malformed requests without limit (on
    /// HTTP/1.1 each costs a connection).
    fn stream_unservable(&mut self, ci: ClientId, stream: u32, refused: Unservable, now: Instant) {
        WorkerMetrics::bump(&self.worker_metrics().requests);
        let Some(ip) = self.clients.get(ci).map(|c| c.peer.ip()) else {
            return;
        };
        if let Err(v) = self.rt.frang.on_request(ip, now) {
            return self.frang_violation(ci, RefuseAt::Stream(stream), &v);
        }
        match refused {
            Unservable::NotProxied(status) => {
                // Not expressible as a request the rules can see: answered on the stream.
                bump(&self.shared.metrics.parse_errors);
                let page = Reply::status_page(status, &self.rt.error_pages);
                let date = self.date.now();
                if let Some(c) = self.clients.get_mut(ci) {
                    let to = super::h1::ReplyTo::default();
                    super::client::codec::reply(c, stream, &page, to, date, false);
                }
                self.dirty.push_back(super::token::client_token(ci));
                self.shared.metrics.workers[self.id].count_status(status);
            }
            // Judged as an HTTP/1.1 head is: a frang limit is a block, the rest a 4xx.
            Unservable::Invalid(e) => self.parse_refused(ci, RefuseAt::Stream(stream), &e),
        }
    }

    /// Request body bytes on `stream`: kept for its exchange (bounded by the stream's
    /// window, as the credit returns only when the upstream has taken them), counted by
    /// frang; without an exchange they are dropped and the credit returned at once.
    fn h2_data(
        &mut self,
        ci: ClientId,
        stream: u32,
        data: Vec<u8>,
        end_stream: bool,
        now: Instant,
    ) {
        let Some(h2) = self.h2_codec(ci) else {
            return;
        };
        let Some(id) = h2.exchange_of(stream) else {
            h2.conn.consumed(stream, data.len());
            return;
        };
        let rt = self.rt.clone();
        let Some(ex) = self.exchanges.get_mut(id) else {
            return;
        };
        let body_limits = vhost_frang(&rt.config, ex.vhost.unwrap_or(0), ex.location);
        let chunk = ex.limits.on_body_chunk(now).and_then(|()| {
            body_limits.map_or(Ok(()), |l| ex.limits.on_body_bytes(data.len() as u64, l))
        });
        if let Err(v) = chunk {
            if let Some(h2) = self.h2_codec(ci) {
                h2.conn.consumed(stream, data.len());
            }
            return self.frang_violation(ci, RefuseAt::Exchange(id), &v);
        }
        if let Some(h2) = self.h2_codec(ci) {
            let body = h2.body_mut(stream);
            body.data.extend_from_slice(&data);
            body.end |= end_stream;
        }
        self.exchanges
            .arm_body_deadline(&mut self.timers, id, self.now);
    }

    /// A stream's request trailers: they end its body and go upstream as the chunked
    /// body's trailer (with a Content-Length body there is no place for them: dropped), the
    /// fields `request_body::trailer_forwardable` refuses left out. A field the head also
    /// has is a frang block unless `http_trailer_split_allowed`, as on HTTP/1.1.
    fn h2_trailers(&mut self, ci: ClientId, stream: u32, fields: Vec<h2::Field>) {
        let Some(id) = self.h2_codec(ci).and_then(|h2| h2.exchange_of(stream)) else {
            return;
        };
        if let Some(v) = self.trailer_split(id, &fields) {
            return self.frang_violation(ci, RefuseAt::Exchange(id), &v);
        }
        if let Some(h2) = self.h2_codec(ci) {
            let body = h2.body_mut(stream);
            body.trailers = fields;
            body.end = true;
        }
    }

    /// An HTTP/3 request stream's trailers (`quic::Work::Trailers`): judged as an HTTP/2
    /// stream's, then they end its body.
    pub(super) fn h3_trailers(&mut self, ci: ClientId, stream: u32, fields: Vec<h2::Field>) {
        let Some(Codec::H3(h3)) = self.clients.get(ci).map(|c| &c.codec) else {
            return;
        };
        let Some(id) = h3.exchange_of(stream) else {
            return;
        };
        if let Some(v) = self.trailer_split(id, &fields) {
            return self.frang_violation(ci, RefuseAt::Exchange(id), &v);
        }
        if let Some(Codec::H3(h3)) = self.clients.get_mut(ci).map(|c| &mut c.codec) {
            let body = &mut h3.stream_mut(stream).body;
            body.trailers = fields;
            body.end = true;
        }
    }

    /// frang's trailer-split check (`http_trailer_split_allowed`) of exchange `id`'s request
    /// head against its trailer `fields`: the violation, if any.
    fn trailer_split(
        &self,
        id: ExchangeId,
        fields: &[h2::Field],
    ) -> Option<crate::frang::Violation> {
        let ex = self.exchanges.get(id)?;
        let limits = vhost_frang(&self.rt.config, ex.vhost.unwrap_or(0), ex.location)?;
        let head_names = ex.request.field_names();
        check_trailers(limits, head_names, fields.iter().map(|f| &f.name[..])).err()
    }

    /// Moves request bodies to their upstreams and waiting response bytes into windows;
    /// wakes upstreams whose stream has room again. True if anything moved.
    fn h2_pump(&mut self, ci: ClientId) -> bool {
        let Some(h2) = self.h2_codec(ci) else {
            return false;
        };
        let drained = h2.pump_all();
        let mut moved = !drained.is_empty();
        for (stream, id) in h2.bodies_pending() {
            moved |= self.pump_h2_body(ci, stream, id);
        }
        // Streams whose waiting bytes went out may relay more: wake their upstreams.
        let Some(h2) = self.h2_codec(ci) else {
            return moved;
        };
        let woken: Vec<ExchangeId> = drained
            .into_iter()
            .filter(|&s| h2.has_room(s))
            .filter_map(|s| h2.exchange_of(s))
            .collect();
        self.wake_upstreams(woken);
        moved
    }

    /// Wakes the upstream connections of `exchanges` that have response bytes waiting.
    pub(super) fn wake_upstreams(&mut self, exchanges: Vec<ExchangeId>) {
        for id in exchanges {
            let Some(up) = self
                .exchanges
                .get(id)
                .and_then(|ex| ex.forward())
                .map(|f| f.up)
            else {
                continue;
            };
            let waiting = self
                .upstreams
                .get(up)
                .is_some_and(|u| u.rbuf.as_ref().is_some_and(|b| !b.is_empty()) || u.peer_closed);
            if waiting {
                self.dirty.push_back(upstream_token(up));
            }
        }
    }

    /// Passes what arrived of `stream`'s body to its exchange's upstream connection.
    fn pump_h2_body(&mut self, ci: ClientId, stream: u32, id: ExchangeId) -> bool {
        let Worker {
            clients,
            exchanges,
            upstreams,
            dirty,
            ..
        } = self;
        let Some(Codec::H2(h2)) = clients.get_mut(ci).map(|c| &mut c.codec) else {
            return false;
        };
        let Some((request, _, fwd)) = exchanges.get_mut(id).and_then(|ex| ex.body_parts()) else {
            return false;
        };
        let Some(u) = upstreams.get_mut(fwd.up) else {
            return false;
        };
        if fwd.sending.all_queued() {
            // All passed on; the credit of the last bytes returns once the upstream has room.
            if u.out.has_room() {
                h2.release_credit(stream);
                h2.body_done(stream);
            }
            return false;
        }
        let chunked = matches!(request.framing(), http1::BodyFraming::Chunked);
        let body = h2.body_mut(stream);
        let mut moved = false;
        if !body.data.is_empty() && u.out.has_room() {
            let data = std::mem::take(&mut body.data);
            if chunked {
                push_chunk(&mut u.out, &data);
            } else {
                u.out.push(&data);
            }
            body.owed += data.len();
            moved = true;
        }
        if body.data.is_empty() && body.end {
            if chunked {
                let mut trailer = Vec::new();
                for f in &body.trailers {
                    http1::write_field(&mut trailer, &f.name, &f.value);
                }
                push_last_chunk(&mut u.out, &trailer);
            }
            fwd.sending.body_done();
            moved = true;
        }
        if u.out.has_room() {
            h2.release_credit(stream);
        }
        if fwd.sending.all_queued() {
            h2.body_done(stream);
        }
        if moved {
            dirty.push_back(upstream_token(fwd.up));
        }
        moved
    }

    /// Client `ci` read nothing for `h2_stall_timeout` (`h2_floods::output_stalled`): reset
    /// it; its streams end with it (their upstream requests are cancelled).
    fn reset_stalled(&mut self, ci: ClientId) {
        self.drop_response(ci, Refusal::Attack);
        let dropped = match self.clients.get_mut(ci) {
            Some(c) => c.codec.reset(),
            None => Vec::new(),
        };
        for id in dropped {
            self.drop_exchange(id);
        }
        self.dirty.push_back(client_token(ci));
    }

    /// The client timer of an HTTP/2 connection: the protocol's own deadlines (SETTINGS
    /// ack, stalled streams and output), and the keep-alive timeout once no stream is left.
    pub(super) fn h2_timer(&mut self, ci: ClientId, now: Instant) {
        let keepalive = super::client::idle_timeout(&self.rt);
        let draining = self.draining.is_some();
        let parts = (&*self.rt, &*self.shared.metrics);
        if super::h2_floods::output_stalled(&mut self.clients, ci, parts, now) {
            return self.reset_stalled(ci);
        }
        let head_due = self
            .clients
            .get(ci)
            .and_then(|c| c.limits.deadline())
            .filter(|&(at, _)| now >= at);
        if let Some((_, limit)) = head_due {
            // A head begun and not finished in time (a slowloris over HTTP/2).
            return self.deadline_violation(ci, None, limit);
        }
        if let Some(h2) = self.h2_codec(ci) {
            h2.armed_at = None;
            h2.conn.on_timeout(now);
            if h2.idle_at().is_some_and(|at| now >= at + keepalive) || (draining && h2.is_idle()) {
                h2.conn.go_away();
                if let Some(c) = self.clients.get_mut(ci) {
                    c.end.close_after_flush();
                }
            }
        }
        self.process_h2(ci);
        self.dirty.push_back(client_token(ci));
    }

    /// Arms the client timer at the connection's next deadline.
    pub(super) fn arm_h2_timer(&mut self, ci: ClientId) {
        let keepalive = super::client::idle_timeout(&self.rt);
        let stall_timeout = self.rt.config.h2_stall_timeout;
        let head = self
            .clients
            .get(ci)
            .and_then(|c| c.limits.deadline())
            .map(|(at, _)| at);
        let Some(h2) = self.h2_codec(ci) else {
            return;
        };
        // A timer is pending: it re-arms when it fires (deadlines only move later, except a
        // stream that stalls meanwhile, whose 30 s limit is then checked at most
        // H2_TIMER_MAX late, and a head's deadline, which may be the earliest and is armed
        // for).
        if h2
            .armed_at
            .is_some_and(|armed| head.is_none_or(|head| armed <= head))
        {
            return;
        }
        let idle = h2.idle_at().map(|at| at + keepalive);
        let stall = h2.out_stalled_since.map(|at| at + stall_timeout);
        let busy = (!h2.is_idle()).then(|| Instant::now() + H2_TIMER_MAX);
        let Some(at) = [h2.conn.next_deadline(), idle, busy, stall, head]
            .into_iter()
            .flatten()
            .min()
        else {
            return;
        };
        h2.armed_at = Some(at);
        self.clients.arm_timer(&mut self.timers, ci, at);
    }
}
