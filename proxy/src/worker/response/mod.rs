//! The response relay: what an upstream sends for an exchange, read from its connection
//! and passed to the exchange's sink, for every kind of exchange. One path reads the head
//! (`head.rs`: interim responses, the framing facts, a 304 or an error the cache answers
//! instead, the final head) and the body (`body.rs`: decoded by its framing, its end decided
//! by `lifecycle::body_end`), releases or closes the upstream connection, and ends the
//! exchange (`finish`) or fails it (`exchange_failed`). What differs is only the sink
//! (`sink.rs`): a client's codec, plus the cache fill if any, or for a background
//! revalidation the fill alone ("fill only": a 304 freshens the entry, a storable response
//! replaces it, an error leaves it as it was). Functions over the pipeline's parts
//! (parts.rs), as is an HTTP/2 origin's turn; a client's flush takes only the client
//! side's (`ClientSide`).

use std::sync::Arc;
use std::time::Instant;

use super::background::Revalidation;
use super::client::codec::Codec;
use super::client::{ClientId, Wrote};
use super::exchange::ExchangeId;
use super::finish::{self, Outcome};
use super::forward;
use super::parts::Parts;
use super::upstream::UpstreamId;
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

/// Relays what upstream `ui` sent for exchange `id` to the exchange's sink. True if
/// anything moved.
pub(super) fn relay_response(p: &mut Parts<'_>, id: ExchangeId, ui: UpstreamId) -> bool {
    let mut moved = false;
    // HTTP/2 connections owed a turn (a window given back as the response moved).
    if !p.conns.upstreams.h2_woken.is_empty() {
        super::h2_origin::wake(&mut *p.conns.upstreams, &mut *p.dirty);
    }
    loop {
        match relay_step(p, id, ui) {
            Step::Wait => break,
            Step::Moved => moved = true,
            end => return end_relay(p, id, ui, end),
        }
    }
    // An HTTP/2 origin's stream: the window of the body passed on goes back now, so that
    // the origin sends on while this exchange waits (h2_conn.rs `give_back`).
    super::upstream::h2_conn::give_back(&mut *p.conns.upstreams, ui);
    if !p.conns.upstreams.h2_woken.is_empty() {
        super::h2_origin::wake(&mut *p.conns.upstreams, &mut *p.dirty);
    }
    moved
}

/// One step of relaying exchange `id`'s response from upstream `ui`: its head, or as
/// much of its body as the sink takes.
fn relay_step(p: &mut Parts<'_>, id: ExchangeId, ui: UpstreamId) -> Step {
    let Parts {
        rt,
        clients,
        conns,
        exchanges,
        scratch,
        ..
    } = p;
    let upstreams = &mut *conns.upstreams;
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
                metrics: conns.metrics,
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
fn end_relay(p: &mut Parts<'_>, id: ExchangeId, ui: UpstreamId, step: Step) -> bool {
    match step {
        Step::Wait | Step::Moved => return false,
        Step::Lost { reused } => {
            forward::close_upstream(p, ui);
            let failure = if reused {
                Failure::Reset
            } else {
                Failure::BadResponse
            };
            exchange_failed(p, id, failure);
        }
        Step::Bad { count } => {
            if count {
                bump(&p.conns.metrics.upstream_errors);
            }
            forward::close_upstream(p, ui);
            exchange_failed(p, id, Failure::BadResponse);
        }
        Step::NotModified(Some(entry)) => return answer_from_cache(p, id, entry, true),
        // Nothing to answer from: the exchange fails as on a bad response.
        Step::NotModified(None) => {
            forward::close_upstream(p, ui);
            exchange_failed(p, id, Failure::BadResponse);
        }
        Step::Stale(entry) => return answer_from_cache(p, id, entry, false),
        Step::Complete => complete_exchange(p, id),
        Step::Switch => start_tunnel(p, id, ui),
        Step::Blocked(violation) => {
            super::finish::block_response(p, id, &violation);
        }
        Step::Broken => {
            bump(&p.conns.metrics.upstream_errors);
            forward::close_upstream(p, ui);
            abort_response(p, id);
        }
        // No client and no store: the exchange ends there, the entry as it was.
        Step::Abandoned => {
            forward::close_upstream(p, ui);
            finish::drop_exchange(p, id);
        }
    }
    true
}

/// Sends `revalidation` to `pass` (its group and backup) as an exchange without a
/// client, routed as the request it stands for (`vhost`, `location`): its response is
/// relayed like any other, into a fill-only sink.
pub(super) fn revalidate_in_background(
    p: &mut Parts<'_>,
    revalidation: Box<Revalidation>,
    vhost: Option<usize>,
    location: Option<usize>,
    pass: (usize, Option<usize>),
) {
    let frang = &p.rt.config.frang;
    let (new, fill, edits) = revalidation.into_exchange(frang, Instant::now());
    let id = p.exchanges.insert(new);
    if let Some(ex) = p.exchanges.get_mut(id) {
        ex.vhost = vhost;
        ex.location = location;
    }
    forward::forward(p, id, pass, Some(fill), Some(edits));
}

/// The response was relayed to its end: store it if it fills the cache, and finish (a
/// fill-only exchange answers no one: `finish` counts and logs nothing for it).
fn complete_exchange(p: &mut Parts<'_>, id: ExchangeId) {
    let Some(mut forward) = p.exchanges.get_mut(id).and_then(|ex| ex.take_forward()) else {
        return;
    };
    // A removed server's index names an older configuration (`grace.rs`).
    let server = p
        .conns
        .upstreams
        .get(forward.up)
        .filter(|u| !u.removed)
        .map(|u| u.server);
    if let Some(server) = server {
        p.checks()
            .health()
            .count_failover(forward.group, server, forward.resp.status());
    }
    if let Some(fill) = forward.fill.take() {
        fill.complete();
    }
    let keep_alive = p.exchanges.get(id).is_some_and(|ex| ex.keep_alive);
    let outcome = Outcome {
        status: forward.resp.status(),
        bytes: forward.resp.body_bytes(),
        close: !keep_alive,
        upstream_end: Some(forward.upstream_end(true)),
        forward: Some(forward),
        // frang judged its status when the head arrived (`HeadWriter::step`).
        from_origin: false,
    };
    finish::finish(p, id, outcome);
}

/// An exchange failed on its upstream side (the connection is already closed): retry,
/// answer the error, or close the client if part of the response is out.
pub(super) fn exchange_failed(p: &mut Parts<'_>, id: ExchangeId, failure: Failure) {
    let Some(ex) = p.exchanges.get_mut(id) else {
        return;
    };
    let Some(mut forward) = ex.take_forward() else {
        return;
    };
    if forward.committed() {
        abort_response(p, id);
        return;
    }
    let retries =
        p.rt.groups
            .get(forward.group)
            .map_or(0, |g| g.forward_retries);
    match failure {
        Failure::Connect | Failure::Reset
            if forward.facts.replayable() && forward.attempts < retries.max(1) =>
        {
            forward.attempts += 1;
            bump(&p.conns.metrics.upstream_retries);
            forward::dispatch(p, id, forward);
        }
        // No connection to the main group: its backup (if any) gets the request, which
        // went nowhere yet.
        Failure::Connect if forward.turn_to_backup() => forward::dispatch(p, id, forward),
        Failure::Connect | Failure::Reset | Failure::BadResponse | Failure::ServerRemoved => {
            forward::fail_exchange(p, id, forward, 502)
        }
        Failure::Timeout => forward::fail_exchange(p, id, forward, 504),
    }
}

/// Ends exchange `id` with a stored entry instead of the upstream's response (after a
/// 304 to a revalidation, or a stale entry instead of an error). The upstream connection
/// is pooled if its response was complete, else closed. A fill-only exchange is only
/// finished: the 304 freshened its entry, or the stale entry stays as it was.
fn answer_from_cache(
    p: &mut Parts<'_>,
    id: ExchangeId,
    entry: Arc<cache::Entry>,
    done: bool,
) -> bool {
    finish::answer_from_cache(p, id, &entry, done)
}

/// Part of exchange `id`'s response is out and the rest will not come: the only honest
/// end is to cut it. HTTP/1.1 resets the connection (a FIN or close_notify would end a
/// close-delimited body cleanly); HTTP/2 resets the stream (RST_STREAM, never
/// END_STREAM). An exchange without a client (a fill-only one, or one whose client left)
/// is dropped, its fill with it: the entry stays as it was.
fn abort_response(p: &mut Parts<'_>, id: ExchangeId) {
    let Some(ci) = p.exchanges.client_of(id, &*p.clients) else {
        return finish::drop_exchange(p, id);
    };
    let stream = p.exchanges.get(id).map_or(0, |ex| ex.stream);
    finish::drop_exchange(p, id);
    let Some(c) = p.clients.get_mut(ci) else {
        return;
    };
    match &mut c.codec {
        Codec::H1(_) => finish::end_client(p, ci, CloseReason::Error, false),
        Codec::H2(h2) => {
            h2.forget(stream);
            h2.cancel(stream);
            h2.flush_into(&mut c.out);
            p.dirty.push_back(super::token::client_token(ci));
        }
        Codec::H3(h3) => {
            h3.cancel(u64::from(stream), 0x102);
            p.dirty.push_back(super::token::client_token(ci));
        }
    }
}

/// The origin accepted exchange `id`'s WebSocket handshake on upstream `ui` (its `101` is
/// queued): the exchange ends, its two connections become a tunnel (tunnel.rs).
pub(super) fn start_tunnel(p: &mut Parts<'_>, id: ExchangeId, ui: UpstreamId) {
    let ups = (
        &mut *p.conns.upstreams,
        &mut p.conns.groups[..],
        p.conns.rt_gen,
    );
    let start = match super::tunnel::detach(&mut *p.exchanges, &*p.clients, ups, (id, ui)) {
        Ok(start) => start,
        Err(client_gone) => {
            forward::close_upstream(p, ui);
            if client_gone {
                finish::drop_exchange(p, id);
            }
            return;
        }
    };
    if let Some(group) = start.queue {
        forward::serve_queue(p, group);
    }
    finish::finish(p, id, start.outcome);
    let parts = (&mut *p.clients, &mut *p.conns.timers, &mut *p.dirty);
    let ws = (p.rt.config.client_ws_timeout, p.now);
    if !super::tunnel::open(parts, &p.conns.metrics.tunnels, (start.client, ui), ws) {
        forward::close_upstream(p, ui);
    }
}

/// The loop's hook for an HTTP/2 entry (h2_origin.rs). A connection is driven here whole
/// (True); a stream entry wakes its connection if it has request bytes for it, then goes
/// on as any exchange's connection (False).
pub(super) fn drive_h2(p: &mut Parts<'_>, ui: UpstreamId) -> bool {
    let Some(u) = p.conns.upstreams.get(ui) else {
        return false;
    };
    if super::upstream::h2_conn::is_stream(u) {
        let parts = (&*p.conns.upstreams, &mut *p.exchanges, &*p.clients);
        super::h2_origin::stream_turn(parts, &mut *p.dirty, ui);
        return false;
    }
    if u.phase == super::upstream::UpPhase::Connecting {
        if !forward::settle_connect(p, ui) {
            return true;
        }
        if !super::h2_origin::alpn_agreed(&*p.conns.upstreams, ui) {
            forward::close_upstream(p, ui);
            return true;
        }
    }
    let parts = (
        &mut *p.conns.upstreams,
        &mut *p.conns.bufs,
        &mut *p.conns.timers,
    );
    let metrics = &p.conns.metrics.upstream;
    if super::h2_origin::conn_turn(parts, (&mut *p.dirty, metrics), ui) {
        forward::close_upstream(p, ui);
    }
    true
}

/// Writes client `ci`'s queued bytes (client/conn.rs `write`). True if any went out.
/// Room in the outbox lets the upstream side go on: every stream of an HTTP/2 client
/// whose outbox had filled up, or the upstream of the HTTP/1 exchange being answered.
pub(super) fn flush_client(
    (clients, exchanges, upstreams, dirty): ClientSide<'_>,
    ci: ClientId,
) -> bool {
    match super::client::write(clients, ci) {
        Wrote::Nothing => false,
        Wrote::Stalled(ids) => {
            super::h2_serve::wake_upstreams((exchanges, upstreams, dirty), ids);
            true
        }
        Wrote::Sent(current) => {
            let forward = current.and_then(|id| exchanges.get(id)?.forward());
            if let Some(ui) = forward.map(|f| f.up) {
                dirty.push_back(super::token::upstream_token(ui));
            }
            true
        }
    }
}

/// What a client's flush touches: the client table, and the exchanges, upstream connections
/// and queue of connections to drive again that room in its outbox wakes.
pub(super) type ClientSide<'a> = (
    &'a mut super::client::Clients,
    &'a super::exchange::Exchanges,
    &'a super::upstream::Upstreams,
    &'a mut std::collections::VecDeque<mio::Token>,
);
