//! The response side of an exchange: relay the upstream's response to the client through
//! its codec (or answer from the cache instead), end the exchange, or answer for an
//! upstream that failed.

use std::sync::Arc;

use http1::BodyDecoder;

use super::client::codec::{self, Codec};
use super::exchange::{ExchangeId, RespPhase};
use super::finish::Outcome;
use super::h1::{self, ReplyTo};
use super::lifecycle::{body_end, BodyEnd, ResponseFraming};
use super::sticky_hook;
use super::upstream::UpstreamId;
use super::Worker;
use crate::close_reason::CloseReason;
use crate::metrics::bump;

/// Interim (1xx) responses relayed for one request; a server sending more is broken or
/// hostile, and each one would be copied to the client.
pub(super) const MAX_INTERIM_RESPONSES: u32 = 8;

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
    /// The origin accepted a WebSocket handshake; its `101` is queued for the client.
    Switch,
    /// frang's `http_resp_code_block` refuses the response, which goes no further.
    Blocked(crate::frang::Violation),
}

impl Worker {
    /// Relays what upstream `ui` sent for exchange `id`. True if anything moved.
    pub(super) fn relay_response(&mut self, id: ExchangeId, ui: UpstreamId) -> bool {
        if self.exchanges.get(id).is_some_and(|ex| !ex.has_client()) {
            return self.relay_background(id, ui);
        }
        let mut moved = false;
        loop {
            let awaiting_head = self
                .exchanges
                .get(id)
                .and_then(|ex| ex.forward())
                .map(|f| matches!(f.resp, RespPhase::AwaitHead));
            let step = match awaiting_head {
                None => return moved,
                Some(true) => self.relay_head(id, ui),
                Some(false) => self.relay_body(id, ui),
            };
            match step {
                Step::Wait => return moved,
                Step::Moved => moved = true,
                Step::Lost { reused } => {
                    self.close_upstream(ui);
                    let failure = if reused {
                        Failure::Reset
                    } else {
                        Failure::BadResponse
                    };
                    self.exchange_failed(id, failure);
                    return true;
                }
                Step::Bad { count } => {
                    if count {
                        bump(&self.metrics().upstream_errors);
                    }
                    self.close_upstream(ui);
                    self.exchange_failed(id, Failure::BadResponse);
                    return true;
                }
                Step::NotModified(Some(entry)) => return self.answer_from_cache(id, entry, true),
                Step::NotModified(None) => {
                    self.close_upstream(ui);
                    self.exchange_failed(id, Failure::BadResponse);
                    return true;
                }
                Step::Stale(entry) => return self.answer_from_cache(id, entry, false),
                Step::Complete => {
                    self.complete_exchange(id);
                    return true;
                }
                Step::Switch => {
                    self.start_tunnel(id, ui);
                    return true;
                }
                Step::Blocked(violation) => {
                    self.block_response(id, &violation);
                    return true;
                }
                Step::Broken => {
                    bump(&self.metrics().upstream_errors);
                    self.close_upstream(ui);
                    self.abort_response(id);
                    return true;
                }
            }
        }
    }

    /// Reads the response head (or an interim one) and sends it on.
    fn relay_head(&mut self, id: ExchangeId, ui: UpstreamId) -> Step {
        let Worker {
            rt,
            clients,
            upstreams,
            exchanges,
            scratch,
            shared,
            ..
        } = self;
        let Some(ex) = exchanges.get_mut(id) else {
            return Step::Wait;
        };
        let Some(c) = clients.get_mut(ex.client).filter(|c| c.id == ex.client_id) else {
            return Step::Wait;
        };
        let Some(u) = upstreams.get_mut(ui) else {
            return Step::Wait;
        };
        let recipient = Recipient {
            vhost: ex.vhost,
            location: ex.location,
            keep_alive: ex.keep_alive,
            stream: ex.stream,
            set_cookie: ex.sticky.as_ref().and_then(|s| s.set_cookie.clone()),
            // A removed server's index names an older configuration (`grace.rs`).
            server: (!u.removed).then_some(u.server),
        };
        let Some(fwd) = ex.forward_mut() else {
            return Step::Wait;
        };
        let input = u.rbuf.as_ref().map_or(&[][..], |b| b.bytes());
        if input.is_empty() {
            return if u.peer_closed {
                Step::Lost { reused: u.reused }
            } else {
                Step::Wait
            };
        }
        let is_head = fwd.method == http1::Method::Head;
        let (head, len) = match http1::parse_response(input, &rt.limits, is_head) {
            Ok(Some(h)) => h,
            Ok(None) if !u.peer_closed && !u.rbuf.as_mut().is_some_and(|b| b.is_full()) => {
                return Step::Wait
            }
            Ok(None) | Err(_) => return Step::Bad { count: true },
        };
        fwd.head_received(head.status());
        // Decided for every head, interim, 304 to a revalidation and final alike, before any
        // of them is acted on.
        fwd.body_may_follow |= ResponseFraming::of(fwd.method, &head, input).body_may_follow();
        let mut writer = HeadWriter {
            rt,
            metrics: &shared.metrics,
            scratch,
        };
        if let Some(step) = writer.not_relayed_as_final(c, u, fwd, &recipient, (&head, len)) {
            return step;
        }
        // Judged before a byte of it is sent: a refused response is replaced, as in Tempesta.
        let vhost = recipient.vhost.unwrap_or(0);
        if let Err(v) = super::limits::judge_response_status(rt, vhost, c.peer.ip(), head.status())
        {
            return Step::Blocked(v);
        }
        let input = u.rbuf.as_ref().map_or(&[][..], |b| b.bytes());
        let origin = super::fill::Origin { head: &head, input };
        if writer.start_response(c, fwd, &recipient, origin).is_err() {
            // The proxy's fields took the head over what a client parsing like this proxy
            // accepts (`Limits::for_forwarding`): a bad response, never relayed.
            return Step::Bad { count: true };
        }
        // The upstream closes after a response without keep-alive: never pool it. A connection
        // opened for a WebSocket handshake that got an ordinary answer is not pooled either.
        u.keep_alive = head.keep_alive() && !fwd.websocket;
        if let Some(b) = u.rbuf.as_mut() {
            b.consume(len);
        }
        Step::Moved
    }

    /// Passes response body bytes on, as far as the client's outbox has room.
    fn relay_body(&mut self, id: ExchangeId, ui: UpstreamId) -> Step {
        let Worker {
            clients,
            upstreams,
            exchanges,
            ..
        } = self;
        let Some(ex) = exchanges.get_mut(id) else {
            return Step::Wait;
        };
        let Some(c) = clients.get_mut(ex.client).filter(|c| c.id == ex.client_id) else {
            return Step::Wait;
        };
        let Some(u) = upstreams.get_mut(ui) else {
            return Step::Wait;
        };
        let stream = ex.stream;
        let Some(fwd) = ex.forward_mut() else {
            return Step::Wait;
        };
        let RespPhase::Body(decoder) = &mut fwd.resp else {
            return Step::Wait;
        };
        if !codec::has_room(c, stream) {
            return Step::Wait;
        }
        let input = u.rbuf.as_ref().map_or(&[][..], |b| b.bytes());
        if input.is_empty() && !decoder.is_done() {
            return match body_end(decoder, u.peer_end()) {
                BodyEnd::Open => Step::Wait,
                BodyEnd::Complete => Step::Complete,
                BodyEnd::Cut => Step::Broken,
            };
        }
        let Ok(step) = decoder.decode(input) else {
            return Step::Broken;
        };
        let chunked = matches!(decoder, BodyDecoder::Chunked(_));
        fwd.body_bytes += codec::body(
            c,
            stream,
            &input[..step.consumed],
            &input[step.data.clone()],
            chunked,
            fwd.dechunk,
        );
        if let Some(fill) = fwd.fill.as_mut() {
            fill.push_body(&input[step.data.clone()]);
        }
        if let (true, BodyDecoder::Chunked(chunked)) = (step.done, &*decoder) {
            codec::trailers(c, stream, chunked.trailer_section());
        }
        if let Some(b) = u.rbuf.as_mut() {
            b.consume(step.consumed);
        }
        if step.done {
            Step::Complete
        } else if step.consumed == 0 {
            Step::Wait
        } else {
            Step::Moved
        }
    }

    /// The response was relayed to its end: store it if it fills the cache, and finish.
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
            self.count_failover(forward.group, server, forward.status);
        }
        if let Some(fill) = forward.fill.take() {
            fill.complete();
        }
        let keep_alive = self.exchanges.get(id).is_some_and(|ex| ex.keep_alive);
        let outcome = Outcome {
            status: forward.status,
            bytes: forward.body_bytes,
            close: !keep_alive,
            upstream_end: Some(forward.upstream_end(true)),
            forward: Some(forward),
            // frang judged its status when the head arrived (`relay_head`).
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
        if forward.sent_to_client {
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
                if forward.replayable && forward.attempts < retries.max(1) =>
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
    /// is pooled if its response was complete, else closed.
    fn answer_from_cache(
        &mut self,
        id: ExchangeId,
        entry: Arc<cache::Entry>,
        upstream_done: bool,
    ) -> bool {
        let Some(forward) = self.exchanges.get_mut(id).and_then(|ex| ex.take_forward()) else {
            return false;
        };
        let end = forward.upstream_end(upstream_done);
        self.answer_stored(id, forward, &entry, Some(end));
        true
    }

    /// Part of exchange `id`'s response is out and the rest will not come: the only honest
    /// end is to cut it. HTTP/1.1 resets the connection (a FIN or close_notify would end a
    /// close-delimited body cleanly); HTTP/2 resets the stream (RST_STREAM, never
    /// END_STREAM).
    fn abort_response(&mut self, id: ExchangeId) {
        let Some(ci) = self.client_of(id) else {
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
                self.dirty.push_back(super::client_token(ci));
            }
        }
    }
}

/// Whom a final response head is written for, copied out of the exchange so that the
/// exchange's `Forward` can be borrowed beside it.
struct Recipient {
    vhost: Option<usize>,
    location: Option<usize>,
    /// The client keeps its connection after this exchange.
    keep_alive: bool,
    stream: u32,
    /// The sticky cookie this response sets (`sticky_hook.rs`).
    set_cookie: Option<String>,
    /// The server that answered, for the sticky session it may start (None: a reload
    /// removed it).
    server: Option<usize>,
}

/// The worker's parts that writing a final response head reads, borrowed apart from the
/// client, the upstream and the exchange.
struct HeadWriter<'a> {
    rt: &'a crate::runtime::Runtime,
    metrics: &'a crate::metrics::Metrics,
    scratch: &'a mut Vec<u8>,
}

impl HeadWriter<'_> {
    /// The heads that are not relayed as the final response: a `101` switching to a
    /// WebSocket tunnel, an interim 1xx, a 304 or an error the cache answers instead. None:
    /// `head` (parsed from the first `len` bytes of the upstream's buffer) is a final response
    /// to relay.
    fn not_relayed_as_final(
        &mut self,
        c: &mut super::client::Client,
        u: &mut super::upstream::Upstream,
        fwd: &mut super::exchange::Forward,
        to: &Recipient,
        (head, len): (&http1::ResponseHead, usize),
    ) -> Option<Step> {
        let status = head.status();
        let input = u.rbuf.as_ref().map_or(&[][..], |b| b.bytes());
        // A server removed by a reload without grace time gets no new tunnel (`grace.rs`).
        if status == 101 && fwd.websocket && !(u.removed && u.retire_at.is_none()) {
            let edits = response_edits(self.rt, to.vhost, to.location);
            let switch = (head, input, edits, &self.rt.forward_limits);
            if let Some(step) = switch_protocols(fwd, &mut c.out, self.scratch, switch) {
                if let Some(b) = u.rbuf.as_mut() {
                    b.consume(len);
                }
                return Some(step);
            }
        }
        if (100..200).contains(&status) {
            return Some(relay_interim(
                fwd,
                (c, to.stream),
                u,
                (head, len),
                self.metrics,
            ));
        }
        let step = cache_instead(fwd, head, input)?;
        if matches!(step, Step::NotModified(_)) {
            u.keep_alive = head.keep_alive();
            if let Some(b) = u.rbuf.as_mut() {
                b.consume(len);
            }
        }
        Some(step)
    }

    /// A final (not 1xx) response head from the origin: writes it for the client with the
    /// vhost's and the sticky cookie's edits (and `Age` for a cache fill), starts storing it,
    /// lets a sticky session learn its server and sets the exchange up to relay the body.
    /// Err: the rewritten head is over the forwarding limits (nothing was written).
    fn start_response(
        self,
        c: &mut super::client::Client,
        fwd: &mut super::exchange::Forward,
        to: &Recipient,
        origin: super::fill::Origin<'_>,
    ) -> Result<(), ()> {
        let super::fill::Origin { head, input } = origin;
        let rt = self.rt;
        let edits = response_edits(rt, to.vhost, to.location);
        let edits = &*sticky_hook::response_edits(to.set_cookie.as_deref(), edits);
        let with_age = fwd
            .fill
            .as_ref()
            .and_then(|f| f.age_edits(head, input, edits));
        let relayed = codec::RelayedHead {
            head,
            input,
            edits: with_age.as_ref().unwrap_or(edits),
            limits: &rt.forward_limits,
            to: ReplyTo {
                http10: fwd.http10,
                close: !to.keep_alive,
            },
        };
        let store = fwd.fill.as_mut().map(|f| f.head_sink());
        let plan = codec::response_head(c, to.stream, self.scratch, &relayed, store)?;
        let status = head.status();
        if let Some(fill) = fwd.fill.as_mut() {
            fill.begin_store(status, origin);
        }
        if let Some(server) = to.server {
            sticky_hook::learn(rt, self.metrics, to.vhost, (fwd.group, server), head, input);
        }
        if plan.close_delimited {
            c.end.close_after_flush();
        }
        fwd.dechunk = plan.dechunk;
        fwd.status = status;
        fwd.sent_to_client = true;
        fwd.resp = RespPhase::Body(BodyDecoder::new(
            head.framing(),
            &http1::Limits {
                max_body_bytes: None,
                ..rt.limits.clone()
            },
        ));
        Ok(())
    }
}

/// The origin's `101` to a WebSocket handshake (`switch`: the head, the bytes it was parsed
/// from, the response edits and the forwarding limits): when it accepts the handshake, it is
/// queued for the client and the exchange switches to a tunnel (the caller consumes the head).
/// None: not a switch this proxy makes (the caller refuses the 101).
fn switch_protocols(
    fwd: &mut super::exchange::Forward,
    out: &mut crate::outbox::Outbox,
    scratch: &mut Vec<u8>,
    switch: (
        &http1::ResponseHead,
        &[u8],
        &http1::HeaderEdits,
        &http1::Limits,
    ),
) -> Option<Step> {
    let (head, input, edits, limits) = switch;
    if !super::websocket::accepts(head, input) {
        return None;
    }
    if h1::write_switching_protocols(out, scratch, head, input, edits, limits).is_err() {
        return Some(Step::Bad { count: true });
    }
    fwd.status = head.status();
    fwd.sent_to_client = true;
    Some(Step::Switch)
}

/// The response edits of `vhost` (its `location`'s when it has one); none if the vhost
/// vanished in a reload meanwhile.
fn response_edits(
    rt: &crate::runtime::Runtime,
    vhost: Option<usize>,
    location: Option<usize>,
) -> &http1::HeaderEdits {
    static NONE: std::sync::OnceLock<http1::HeaderEdits> = std::sync::OnceLock::new();
    match vhost.and_then(|v| rt.vhosts.get(v)) {
        Some(v) => location
            .and_then(|l| v.locations.get(l))
            .map_or(&v.response_edits, |l| &l.response_edits),
        None => NONE.get_or_init(http1::HeaderEdits::new),
    }
}

/// An interim (1xx) response: passed on as it is, a bounded number of them. A `101` that
/// does not accept a WebSocket handshake of this exchange cannot be relayed (nothing after it
/// would be HTTP): a bad response, 502.
fn relay_interim(
    fwd: &mut super::exchange::Forward,
    (c, stream): (&mut super::client::Client, u32),
    u: &mut super::upstream::Upstream,
    (head, len): (&http1::ResponseHead, usize),
    metrics: &crate::metrics::Metrics,
) -> Step {
    let status = head.status();
    fwd.interim += 1;
    if status == 101 || fwd.interim > MAX_INTERIM_RESPONSES {
        if status != 101 {
            bump(&metrics.upstream_interim_floods);
        }
        return Step::Bad { count: false };
    }
    // The proxy answered `Expect: 100-continue` itself; an HTTP/1.0 client gets no interim
    // responses at all.
    let input = u.rbuf.as_ref().map_or(&[][..], |b| b.bytes());
    if !(fwd.http10 || status == 100 && fwd.continue_sent) {
        fwd.sent_to_client |= codec::interim(c, stream, (head, input, len));
    }
    if let Some(b) = u.rbuf.as_mut() {
        b.consume(len);
    }
    Step::Moved
}

/// The cache may answer instead of the origin's response: a 304 to its revalidation
/// refreshes the stored entry; an error may be replaced by a stale entry.
/// (The caller consumes a 304's head.)
fn cache_instead(
    fwd: &mut super::exchange::Forward,
    head: &http1::ResponseHead,
    input: &[u8],
) -> Option<Step> {
    let fill = fwd.fill.as_mut()?;
    let status = head.status();
    if status == 304 && fill.revalidating.is_some() {
        let fields: Vec<(&[u8], &[u8])> = head.headers().fields(input).collect();
        return Some(Step::NotModified(fill.not_modified(&fields)));
    }
    fill.stale_instead(status).map(Step::Stale)
}
