//! The loop's drives: what the worker does when a client or upstream connection is ready or
//! a connection's timer comes due. Each drive asks the connection's owner (`client/`,
//! `upstream/`, `quic/`) what happened and hands the exchanges it concerns to the
//! pipeline's functions. They take a [`Drive`]: the pipeline's parts
//! (parts.rs), the QUIC owner (an HTTP/3 client is driven, and closed, through its
//! endpoint), and whether a graceful stop drains the worker. What stays the loop's own
//! (mod.rs: the poll and listeners, the fairness of turns, how far a stop got, a reload) is
//! out of their reach. The panic guard that closes a client whose drive panicked is here
//! too ([`guarded`]); the HTTP/3 drive is drive_h3.rs.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use super::client::codec::Codec;
use super::client::Stage as ConnStage;
use super::client::{self, ClientId};
use super::exchange::ExchangeId;
use super::finish::{self, Refusal, RefuseAt};
use super::forward;
use super::h1::{ConnState, Parsed};
use super::h2_serve::{self, Due, Next};
use super::parts::Parts;
use super::quic::{self, Quic};
use super::request::Scheme;
use super::request_body::{self, Pumped};
use super::response;
use super::route;
use super::tier_hop::from_peer;
use super::token::{client_token, upstream_token};
use super::upstream::{self, UpPhase, UpstreamId};
use super::{health, limits, request, tunnel};
use crate::close_reason::CloseReason;
use crate::fleet::tier::HOP_FIELD;
use crate::frang;
use crate::metrics::bump;
use crate::transport::Transport;

/// What a drive touches, lent by the loop (`Worker::drive` for one call, `drain_dirty` for
/// a whole drain).
pub(super) struct Drive<'a> {
    /// The pipeline's parts.
    pub p: Parts<'a>,
    /// The QUIC owner: its endpoints and connections.
    pub quic: &'a mut Quic,
    /// Since when a graceful stop drains the worker: its requests are answered with
    /// `Connection: close`, an idle connection closes once the last call is over.
    pub draining: Option<Instant>,
}

/// Moves client `ci` forward as far as its socket allows: its tunnel, or its handshake
/// and then rounds of read, frang's count, its requests (route.rs), write.
#[inline]
pub(super) fn drive_client(d: &mut Drive<'_>, ci: ClientId) {
    let Some(c) = d.p.clients.get(ci) else {
        return;
    };
    if let client::codec::Codec::H3(_) = c.codec {
        return super::drive_h3::drive_h3(d, ci);
    }
    if c.codec.h1().is_some_and(|h1| h1.tunnel().is_some()) {
        let io = tunnel::TunnelIo {
            clients: &mut *d.p.clients,
            upstreams: &mut *d.p.conns.upstreams,
            bufs: &mut *d.p.conns.bufs,
            dirty: &mut *d.p.dirty,
            metrics: &d.p.metrics.tunnels,
        };
        if let Some(end) = tunnel::drive(io, ci) {
            close_tunnel(d, ci, end);
        }
        return;
    }
    if matches!(c.stage, client::Stage::Handshake(_)) {
        match client::handshake(&mut d.p.client_conns(), ci) {
            client::Handshake::Open { h2: true } => {
                h2_serve::start(&mut d.p.h2(), ci, request::Scheme::Https)
            }
            client::Handshake::Open { h2: false } => {}
            client::Handshake::Pending => return,
            client::Handshake::Close(why) => return close_client(d, ci, why),
        }
    }
    for _ in 0..64 {
        let read =
            |c: &mut client::Client| client::read(c, ci, &mut *d.p.conns.bufs, &mut *d.p.dirty);
        let mut progressed = d.p.clients.get_mut(ci).is_some_and(read);
        if progressed {
            let parts = (
                &mut *d.p.clients,
                &mut *d.p.exchanges,
                &mut *d.p.conns.timers,
            );
            match limits::account_read(parts, d.p.rt, ci, d.p.now) {
                limits::ReadVerdict::Within => {}
                limits::ReadVerdict::Reset(v) => refuse_connection(d, ci, &v),
                limits::ReadVerdict::Refuse(at, v) => finish::frang_violation(&mut d.p, ci, at, &v),
            }
        }
        progressed |= process_client(d, ci);
        progressed |= super::response::flush_client(d.p.client_side(), ci);
        if !d.p.clients.contains(ci) {
            return;
        }
        if !progressed {
            account_memory(d, ci);
            return settle_client(d, ci);
        }
    }
    account_memory(d, ci);
    // Still moving after a full round: come back after the others (edge-triggered).
    d.p.dirty.push_back(client_token(ci));
}

/// Client `ci`'s handshake deadline came due: process what already arrived, then cut
/// the handshake unless that finished it or moved it (which re-armed the deadline).
pub(super) fn handshake_deadline_due(d: &mut Drive<'_>, ci: ClientId, now: Instant) {
    let Some(gen) = d.p.clients.get(ci).map(|c| c.timer_gen) else {
        return;
    };
    drive_client(d, ci);
    let Some((ip, state)) = d.p.clients.handshake_overdue(ci, gen) else {
        return;
    };
    d.p.conns.metrics.count_handshake_timeout(state);
    bump(&d.p.conns.metrics.handshakes_failed);
    let _ = d.p.rt.frang.on_tls_incomplete(ip, now);
    close_client(d, ci, CloseReason::HandshakeTimeout);
}

/// Client `ci`'s head (`id` None) or exchange `id`'s body missed its deadline for `limit`.
pub(super) fn deadline_violation(
    d: &mut Drive<'_>,
    ci: ClientId,
    id: Option<ExchangeId>,
    limit: &'static str,
) {
    finish::frang_violation(&mut d.p, ci, id.into(), &limits::deadline_passed(limit));
    super::response::flush_client(d.p.client_side(), ci);
    close_client(d, ci, CloseReason::Frang);
}

/// Exchange `id`'s timer fired while its body was arriving.
pub(super) fn body_deadline(d: &mut Drive<'_>, id: ExchangeId, now: Instant) {
    let deadline = d.p.exchanges.body_deadline(&mut *d.p.conns.timers, id, now);
    let limits::Deadline::Passed(limit) = deadline else {
        return;
    };
    if let Some(ci) = d.p.exchanges.client_of(id, &*d.p.clients) {
        deadline_violation(d, ci, Some(id), limit);
    }
}

/// Resets client `ci` for `v`, a refusal of the connection itself (a `tft` limit on its
/// records).
pub(super) fn refuse_connection(d: &mut Drive<'_>, ci: ClientId, v: &frang::Violation) {
    let Some(ip) = d.p.clients.get(ci).map(|c| c.peer.ip()) else {
        return;
    };
    limits::note_block((d.p.rt, d.p.conns.metrics), ip, v, "-");
    reset_client(d, ci, CloseReason::Frang);
}

/// After a receive pass of client `ci`: its held bytes join its address's total
/// (`client_mem`); over the hard limit the connection is reset as a block.
pub(super) fn account_memory(d: &mut Drive<'_>, ci: ClientId) {
    let Some(c) = d.p.clients.get_mut(ci) else {
        return;
    };
    if let Err(v) = c.account_memory(d.p.now) {
        let ip = c.peer.ip();
        limits::note_block((d.p.rt, d.p.conns.metrics), ip, &v, "-");
        client::refuse::drop_response(&mut *d.p.clients, ci, finish::Refusal::Attack);
        close_client(d, ci, CloseReason::Frang);
    }
}

/// After driving client `ci`: close it if it is finished (client/conn.rs `settle`).
pub(super) fn settle_client(d: &mut Drive<'_>, ci: ClientId) {
    let last_call_over = super::drain::last_call_over(d.draining);
    match client::settle(&mut *d.p.clients, &mut *d.p.conns.bufs, ci, last_call_over) {
        Some((why, true)) => reset_client(d, ci, why),
        Some((why, false)) => close_client(d, ci, why),
        None => {}
    }
}

/// Drives upstream connection `ui` for what it is in: a tunnel's half (its client drives
/// it), a connect in progress, a health check, or an exchange's response to relay.
pub(super) fn drive_upstream(d: &mut Drive<'_>, ui: UpstreamId) {
    let Some(u) = d.p.conns.upstreams.get(ui) else {
        return;
    };
    if let UpPhase::Tunnel { client, client_id } = u.phase {
        return drive_tunnel_upstream(d, ui, (client, client_id));
    }
    let connecting = matches!(u.phase, UpPhase::Connecting | UpPhase::Probe);
    if u.h2.is_some() && response::drive_h2(&mut d.p, ui) {
        return;
    }
    if connecting && !forward::settle_connect(&mut d.p, ui) {
        return;
    }
    if (d.p.conns.upstreams.get(ui)).is_some_and(|u| u.phase == UpPhase::Checking) {
        return match d.p.checks().drive(ui) {
            health::Checked::Judged(freed) => forward::serve_freed(&mut d.p, freed),
            health::Checked::Waiting => {}
            health::Checked::Again => d.p.dirty.push_back(upstream_token(ui)),
        };
    }
    for _ in 0..64 {
        let mut progressed = forward::flush_upstream(&mut d.p, ui);
        progressed |= upstream::read_at(&mut *d.p.conns.upstreams, &mut *d.p.conns.bufs, ui);
        let Some(u) = d.p.conns.upstreams.get(ui) else {
            return;
        };
        if let UpPhase::Tunnel { client, client_id } = u.phase {
            // The response just relayed was a 101: the rest is the tunnel's.
            return drive_tunnel_upstream(d, ui, (client, client_id));
        }
        let Some(id) = u.exchange else {
            // An idle pooled connection that becomes readable was closed by the server
            // (or sent something unasked): it cannot be used again.
            if u.peer_closed || u.rbuf.as_ref().is_some_and(|b| !b.is_empty()) {
                forward::close_upstream(&mut d.p, ui);
            }
            return;
        };
        if response::relay_response(&mut d.p, id, ui) {
            // Bytes for the client: flush them from its side.
            if let Some(ci) = d.p.exchanges.client_of(id, &*d.p.clients) {
                d.p.dirty.push_back(client_token(ci));
            }
            progressed = true;
        }
        if !progressed || !d.p.conns.upstreams.contains(ui) {
            return;
        }
    }
    // Still moving after a full round: let other connections run, then come back (with
    // edge-triggered readiness no new event would arrive for bytes already waiting).
    d.p.dirty.push_back(upstream_token(ui));
}

/// Upstream `ui` of a tunnel became ready: its client drives the tunnel (tunnel.rs), or
/// it closes if that client is gone.
pub(super) fn drive_tunnel_upstream(
    d: &mut Drive<'_>,
    ui: UpstreamId,
    (client, unique): (ClientId, u64),
) {
    match d.p.clients.current(client, unique) {
        Some(ci) => drive_client(d, ci),
        None => forward::close_upstream(&mut d.p, ui),
    }
}

/// Moves client `ci`'s current request forward. True if anything changed.
pub(super) fn process_client(d: &mut Drive<'_>, ci: ClientId) -> bool {
    let Some(c) = d.p.clients.get_mut(ci) else {
        return false;
    };
    let Codec::H1(h1) = &mut c.codec else {
        return process_h2(d, ci);
    };
    match h1.state() {
        ConnState::Idle => try_request(d, ci),
        ConnState::Busy(id) => {
            let id = *id;
            let parts = request_body::BodyParts {
                clients: &mut *d.p.clients,
                exchanges: &mut *d.p.exchanges,
                upstreams: &mut *d.p.conns.upstreams,
                dirty: &mut *d.p.dirty,
            };
            let at = RefuseAt::Exchange(id);
            match request_body::pump(parts, &d.p.rt.config, (ci, id)) {
                Pumped::Moved(moved) => return moved,
                Pumped::Invalid(e) => finish::parse_refused(&mut d.p, ci, at, &e),
                Pumped::Violation(v) => finish::frang_violation(&mut d.p, ci, at, &v),
                Pumped::Truncated => close_client(d, ci, CloseReason::Client),
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

pub(super) fn try_request(d: &mut Drive<'_>, ci: ClientId) -> bool {
    let Some(c) = d.p.clients.get_mut(ci) else {
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
    let rt = d.p.rt;
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
                && d.draining.is_none();
            route::enter_request(&mut d.p, ci, (0, keep_alive, RefuseAt::Connection), request);
        }
        Parsed::Partial => return false,
        Parsed::TooLarge => {
            let at = RefuseAt::Connection;
            finish::refuse_at(&mut d.p, ci, at, 431, Refusal::Error);
        }
        Parsed::Invalid(e) => finish::parse_refused(&mut d.p, ci, RefuseAt::Connection, &e),
    }
    true
}

/// Moves an HTTP/2 connection forward (h2_serve.rs), acting on what its events need of
/// the pipeline. True if anything changed.
pub(super) fn process_h2(d: &mut Drive<'_>, ci: ClientId) -> bool {
    let now = Instant::now();
    let Some(read) = h2_serve::read(&mut *d.p.clients, ci, (now, d.p.now)) else {
        return false;
    };
    if let Err(v) = read.head_chunk {
        // Nothing of the connection is served after a slow-head block.
        finish::frang_violation(&mut d.p, ci, RefuseAt::Connection, &v);
        super::response::flush_client(d.p.client_side(), ci);
        close_client(d, ci, CloseReason::Frang);
        return true;
    }
    let mut moved = read.moved || !read.events.is_empty();
    for event in read.events {
        match h2_serve::on_event(&mut d.p.h2(), ci, event, now) {
            Next::Nothing => {}
            Next::Request(stream, converted) => {
                route::stream_request(&mut d.p, ci, stream, converted, now)
            }
            Next::Refuse(at, v) => finish::frang_violation(&mut d.p, ci, at, &v),
            Next::Drop(id) => finish::drop_exchange(&mut d.p, id),
            Next::DropAll(ids) => ids
                .into_iter()
                .for_each(|id| finish::drop_exchange(&mut d.p, id)),
        }
    }
    moved |= h2_serve::pump(&mut d.p.h2(), ci);
    if h2_serve::end_pass(&mut d.p.h2(), ci, now) {
        super::client::refuse::drop_response(&mut *d.p.clients, ci, Refusal::Attack);
    }
    h2_serve::arm_timer((&mut *d.p.clients, &mut *d.p.conns.timers, d.p.rt), ci);
    moved
}

/// The client timer of an HTTP/2 connection (`h2_serve::timer`).
pub(super) fn h2_timer(d: &mut Drive<'_>, ci: ClientId, now: Instant) {
    let draining = d.draining.is_some();
    match h2_serve::timer(&mut d.p.h2(), ci, now, draining) {
        Due::Stalled => reset_stalled(d, ci),
        Due::Head(limit) => deadline_violation(d, ci, None, limit),
        Due::Process => {
            process_h2(d, ci);
            d.p.dirty.push_back(client_token(ci));
        }
    }
}

/// Client `ci` read nothing for `h2_stall_timeout` (`h2_floods::output_stalled`): reset
/// it; its streams end with it (their upstream requests are cancelled).
pub(super) fn reset_stalled(d: &mut Drive<'_>, ci: ClientId) {
    super::client::refuse::drop_response(&mut *d.p.clients, ci, Refusal::Attack);
    let dropped = d.p.clients.get_mut(ci).map(|c| c.codec.reset());
    for id in dropped.unwrap_or_default() {
        finish::drop_exchange(&mut d.p, id);
    }
    d.p.dirty.push_back(client_token(ci));
}

/// Closes client connection `ci`, with close_notify (TLS) unless the client closed first.
pub(super) fn close_client(d: &mut Drive<'_>, ci: ClientId, why: CloseReason) {
    end_client(d, ci, why, true);
}

/// Cuts client connection `ci` with a reset: no close_notify and no FIN, which a reader
/// of a close-delimited body would take for its clean end (RFC 9112 §8); what was not
/// sent yet is dropped.
pub(super) fn reset_client(d: &mut Drive<'_>, ci: ClientId, why: CloseReason) {
    end_client(d, ci, why, false);
}

pub(super) fn end_client(d: &mut Drive<'_>, ci: ClientId, why: CloseReason, orderly: bool) {
    quic::closing(d.quic, d.p.clients, ci, d.p.now);
    finish::end_client(&mut d.p, ci, why, orderly);
}

/// Client `ci`'s timer entry of generation `gen` came due: acts on what it is due for.
pub(super) fn client_timer(d: &mut Drive<'_>, ci: ClientId, gen: u64, now: Instant) {
    let Some(due) = d.p.clients.timer_due(d.p.conns.timers, ci, gen, now) else {
        return;
    };
    match due {
        client::Due::Handshake => handshake_deadline_due(d, ci, now),
        // A slowloris head (client_header_timeout) is cut by frang; otherwise this is an
        // idle keep-alive client.
        client::Due::Head => match d.p.clients.head_deadline(d.p.conns.timers, ci, now) {
            limits::Deadline::None => close_client(d, ci, CloseReason::IdleTimeout),
            limits::Deadline::Pending => {}
            limits::Deadline::Passed(limit) => deadline_violation(d, ci, None, limit),
        },
        client::Due::Drain => close_client(d, ci, CloseReason::Error),
        client::Due::H2 => h2_timer(d, ci, now),
        client::Due::H3 => {
            // A QUIC handshake cut at its deadline counts as a TCP one does.
            if let Some(ip) = quic::timeout(d.quic, d.p.clients, ci, now) {
                let _ = d.p.rt.frang.on_tls_incomplete(ip, now);
            }
            drive_client(d, ci);
        }
        client::Due::Tunnel => {
            let parts = (&mut *d.p.clients, &mut *d.p.conns.timers);
            let timeout = d.p.rt.config.client_ws_timeout;
            if let Some(end) = tunnel::timer(parts, timeout, ci, now) {
                close_tunnel(d, ci, end);
            }
        }
    }
}

/// Ends client `ci`'s tunnel for `end`: both connections close (tunnel.rs).
pub(super) fn close_tunnel(d: &mut Drive<'_>, ci: ClientId, end: crate::metrics_tunnel::TunnelEnd) {
    if let Some(why) = tunnel::end(d.p.clients, ci, end) {
        close_client(d, ci, why);
    }
}

/// Runs `f` for client `ci`; a panic closes that client (and its upstream) only.
#[inline]
pub(super) fn guarded(d: &mut Drive<'_>, ci: ClientId, f: impl FnOnce(&mut Drive<'_>)) {
    if catch_unwind(AssertUnwindSafe(|| f(d))).is_err() {
        bump(&d.p.conns.metrics.panics);
        let worker = d.p.worker;
        crate::error!("worker {worker}: panic while serving a connection; closed it");
        close_client(d, ci, CloseReason::Error);
    }
}

/// Runs `f` for exchange `id`, guarded as its client is; an exchange whose client is gone
/// is dropped instead.
pub(super) fn guarded_exchange(d: &mut Drive<'_>, id: ExchangeId, f: impl FnOnce(&mut Drive<'_>)) {
    match d.p.exchanges.client_of(id, d.p.clients) {
        Some(ci) => guarded(d, ci, f),
        None => finish::drop_exchange(&mut d.p, id),
    }
}
