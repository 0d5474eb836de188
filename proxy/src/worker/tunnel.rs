//! WebSocket tunnels: after the origin's `101`, a client connection and the upstream
//! connection that carried its handshake pass bytes to each other unchanged until one side
//! ends.
//!
//! - **Ownership.** The client connection owns the tunnel (its HTTP/1 codec's state is
//!   `ConnState::Tunnel`, holding the upstream's slab index); the upstream connection points
//!   back at the client (`UpPhase::Tunnel`). Readiness of either socket drives [`drive`]
//!   for the client. A tunnel leaves its server's pool accounting
//!   when it starts: a long-lived WebSocket does not take one of the `conns_n` places that
//!   requests share.
//! - **Backpressure.** Each direction holds at most one read buffer (16 KiB) and the other
//!   side's outbox up to its bound (256 KiB, `outbox::HIGH_WATER`): a side is not read while
//!   its peer's outbox is over the bound, so its TCP window closes and the sender waits. A
//!   peer never decides how much the proxy holds.
//! - **Ends.** When one side closes, its last bytes are written to the other, then the other
//!   is closed too: a tunnel is never left half-open (WebSocket closes with its own closing
//!   handshake before TCP closes, so a conforming peer loses nothing). `client_ws_timeout` is
//!   the idle timeout: no byte either way for that long closes both sides.
//! - **Accounting.** The exchange that carried the handshake ends (access log line with 101)
//!   when the tunnel starts; the client connection stays counted by frang until it closes.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use mio::Token;

use super::client::codec::Codec;
use super::client::{self, ClientId, Clients};
use super::exchange::{ExchangeId, Exchanges};
use super::finish::Outcome;
use super::token::{client_token, upstream_token};
use super::upstream::groups::{self, GroupState};
use super::upstream::{self, UpPhase, UpstreamId, Upstreams};
use crate::buf::BufPool;
use crate::close_reason::CloseReason;
use crate::metrics_tunnel::{TunnelEnd, TunnelMetrics};
use crate::timers::Timers;

/// A client connection's tunnel to an upstream connection.
pub struct Tunnel {
    /// The upstream connection (slab index) carrying the other half.
    up: UpstreamId,
    /// When a byte last moved either way: the idle timeout counts from here.
    last_activity: Instant,
    /// Why the tunnel ends, once [`end`] decided it (before its client connection closes).
    end: Option<TunnelEnd>,
}

/// What the tunnel of a handshake needs once its exchange has finished ([`open`]).
pub(super) struct Start {
    pub client: (ClientId, u64),
    /// The handshake's exchange ends with this (101, the forward it held).
    pub outcome: Outcome,
    /// The group whose wait queue gets the place the upstream connection left.
    pub queue: Option<usize>,
}

/// The origin accepted exchange `id`'s WebSocket handshake on upstream `ui` (its `101` is
/// queued for the client): `ui` leaves the exchange and its server's pool for the client's
/// tunnel and is never reused. Err when no tunnel can start and `ui` must close: `true` when
/// the client is gone too (the exchange is dropped).
pub(super) fn detach(
    exchanges: &mut Exchanges,
    clients: &Clients,
    (upstreams, groups, rt_gen): (&mut Upstreams, &mut [GroupState], u64),
    (id, ui): (ExchangeId, UpstreamId),
) -> Result<Start, bool> {
    let ex = exchanges.get_mut(id).ok_or(true)?;
    let client = (ex.client, ex.client_id);
    if clients.get(client.0).is_none_or(|c| c.id != client.1) {
        return Err(true);
    }
    let forward = ex.take_forward().ok_or(false)?;
    let outcome = Outcome {
        status: 101,
        bytes: 0,
        close: false,
        forward: Some(forward),
        upstream_end: None,
        from_origin: true,
    };
    let mut start = Start {
        client,
        outcome,
        queue: None,
    };
    let Some(u) = upstreams.get_mut(ui) else {
        return Ok(start);
    };
    u.exchange = None;
    u.phase = UpPhase::Tunnel {
        client: client.0,
        client_id: client.1,
    };
    u.keep_alive = false;
    // No upstream deadline: the tunnel's idle timeout is the client's timer.
    u.timer_gen = 0;
    if u.rt_gen == rt_gen {
        let server = groups::server_mut(groups, u.group, u.server);
        if let Some(st) = server {
            st.release_place();
        }
        start.queue = Some(u.group);
    }
    Ok(start)
}

/// The handshake's exchange has finished and client `ci`'s codec is between requests: from
/// here on its connection carries the tunnel to `ui`, unless finishing decided to close it
/// (a frang block on 101). False: no tunnel, `ui` must close.
pub(super) fn open(
    (clients, timers, dirty): (&mut Clients, &mut Timers, &mut VecDeque<Token>),
    metrics: &TunnelMetrics,
    ((ci, client_id), ui): ((ClientId, u64), UpstreamId),
    (ws_timeout, now): (Option<Duration>, Instant),
) -> bool {
    let started = match clients.get_mut(ci) {
        Some(c) if c.id == client_id && !c.end.closing() => match &mut c.codec {
            Codec::H1(h1) if h1.is_idle() => {
                h1.start_tunnel(Tunnel {
                    up: ui,
                    last_activity: Instant::now(),
                    end: None,
                });
                true
            }
            _ => false,
        },
        _ => false,
    };
    if !started {
        return false;
    }
    metrics.count_open();
    if let Some(timeout) = ws_timeout {
        clients.arm_timer(timers, ci, now + timeout);
    } else {
        // No idle timeout: the keep-alive timer armed by `finish` must not fire.
        clients.disarm_timer(timers, ci);
    }
    dirty.push_back(client_token(ci));
    dirty.push_back(upstream_token(ui));
    true
}

/// The parts a tunnel's bytes move through.
pub(super) struct TunnelIo<'a> {
    pub clients: &'a mut Clients,
    pub upstreams: &'a mut Upstreams,
    pub bufs: &'a mut BufPool,
    pub dirty: &'a mut VecDeque<Token>,
    pub metrics: &'a TunnelMetrics,
}

/// The upstream connection of client `ci`'s tunnel.
fn upstream_of(clients: &Clients, ci: ClientId) -> Option<UpstreamId> {
    clients.get(ci)?.codec.h1()?.tunnel().map(|t| t.up)
}

/// Moves client `ci`'s tunnel bytes both ways as far as the sockets and the bounds allow.
/// Some when the tunnel is over (a side has ended and its last bytes are out): [`end`] it.
pub(super) fn drive(io: TunnelIo<'_>, ci: ClientId) -> Option<TunnelEnd> {
    for _ in 0..64 {
        let ui = upstream_of(io.clients, ci)?;
        let (Some(c), Some(u)) = (io.clients.get_mut(ci), io.upstreams.get_mut(ui)) else {
            return Some(TunnelEnd::Error);
        };
        let m = io.metrics;
        let mut moved = client::read(c, ci, io.bufs, io.dirty);
        moved |= pass_bytes(&mut c.rbuf, &mut u.out, io.bufs, &m.bytes_to_origin);
        moved |= upstream::flush(u) != upstream::Flushed::Nothing;
        moved |= upstream::read(u, io.bufs);
        moved |= pass_bytes(&mut u.rbuf, &mut c.out, io.bufs, &m.bytes_to_client);
        moved |= client::flush(c).is_some();
        if let Some(end) = ended_by(c, u) {
            return Some(end);
        }
        if !moved {
            // Nothing moves: an idle tunnel holds no read buffer.
            io.bufs.release_if_empty(&mut c.rbuf);
            io.bufs.release_if_empty(&mut u.rbuf);
            return None;
        }
        if let Some(t) = tunnel_mut(c) {
            t.last_activity = Instant::now();
        }
    }
    // Still moving after a full round: let the others run, then come back.
    io.dirty.push_back(client_token(ci));
    None
}

fn tunnel_mut(c: &mut client::Client) -> Option<&mut Tunnel> {
    match &mut c.codec {
        Codec::H1(h1) => h1.tunnel_mut(),
        Codec::H2(_) | Codec::H3(_) => None,
    }
}

/// Whether the tunnel is over: a write to the client failed, or a side closed and its
/// last bytes have reached the other (or the other can take none).
fn ended_by(c: &client::Client, u: &upstream::Upstream) -> Option<TunnelEnd> {
    if c.end.write_failed() {
        return Some(TunnelEnd::Error);
    }
    let client_done = c.end.peer_closed() && c.rbuf.as_ref().is_none_or(|b| b.is_empty());
    let origin_done = u.peer_closed && u.rbuf.as_ref().is_none_or(|b| b.is_empty());
    if client_done && (u.out.is_empty() || u.peer_closed) {
        return Some(TunnelEnd::Client);
    }
    if origin_done && c.out.is_empty() {
        return Some(TunnelEnd::Origin);
    }
    None
}

/// Client `ci`'s timer fired while it tunnels: Some if it was idle for `client_ws_timeout`
/// ([`end`] it), else the timer is set for the rest of the quiet period.
pub(super) fn timer(
    (clients, timers): (&mut Clients, &mut Timers),
    ws_timeout: Option<Duration>,
    ci: ClientId,
    now: Instant,
) -> Option<TunnelEnd> {
    let timeout = ws_timeout?;
    let last = tunnel_mut(clients.get_mut(ci)?)?.last_activity;
    if now.saturating_duration_since(last) >= timeout {
        return Some(TunnelEnd::IdleTimeout);
    }
    clients.arm_timer(timers, ci, last + timeout);
    None
}

/// Client `ci`'s tunnel ends for `end`: the reason its connection closes with (the caller
/// closes it, and the tunnel's upstream connection with it, [`gone`]); None if `ci` is gone.
pub(super) fn end(clients: &mut Clients, ci: ClientId, end: TunnelEnd) -> Option<CloseReason> {
    if let Some(t) = tunnel_mut(clients.get_mut(ci)?) {
        t.end = Some(end);
    }
    Some(match end {
        TunnelEnd::Client => CloseReason::Client,
        TunnelEnd::Origin => CloseReason::Server,
        TunnelEnd::IdleTimeout => CloseReason::IdleTimeout,
        TunnelEnd::Error => CloseReason::Error,
        TunnelEnd::Shutdown | TunnelEnd::ServerRemoved => CloseReason::Shutdown,
    })
}

/// Tunnel `t` of client `client` (slab index, unique id) is gone with its connection, which
/// closed for `why`: it is counted as ended; Some names its upstream connection, to close.
pub(super) fn gone(
    upstreams: &Upstreams,
    metrics: &TunnelMetrics,
    t: Tunnel,
    (ci, client_id): (ClientId, u64),
    why: CloseReason,
) -> Option<UpstreamId> {
    metrics.count_close(t.end.unwrap_or_else(|| end_of(why)));
    let ours = upstreams.get(t.up).is_some_and(|u| {
        u.phase
            == UpPhase::Tunnel {
                client: ci,
                client_id,
            }
    });
    ours.then_some(t.up)
}

/// Every tunnel of this worker (client slab indices), for a graceful stop.
pub(super) fn clients(clients: &Clients) -> Vec<ClientId> {
    clients
        .iter()
        .filter(|(_, c)| c.codec.h1().is_some_and(|h1| h1.tunnel().is_some()))
        .map(|(ci, _)| ci)
        .collect()
}

/// Why a client connection closed, as a tunnel's end (a close that [`end`] did not decide:
/// a panic, a graceful stop).
fn end_of(reason: CloseReason) -> TunnelEnd {
    match reason {
        CloseReason::Client => TunnelEnd::Client,
        CloseReason::Server => TunnelEnd::Origin,
        CloseReason::IdleTimeout => TunnelEnd::IdleTimeout,
        CloseReason::Shutdown => TunnelEnd::Shutdown,
        _ => TunnelEnd::Error,
    }
}

/// Moves what one side read into the other side's outbox, if that outbox has room (the
/// tunnel's backpressure: a side is not read while the other cannot take more).
fn pass_bytes(
    from: &mut Option<crate::buf::Buf>,
    to: &mut crate::outbox::Outbox,
    bufs: &mut crate::buf::BufPool,
    counter: &std::sync::atomic::AtomicU64,
) -> bool {
    if !to.has_room() {
        return false;
    }
    let Some(rbuf) = from.as_mut().filter(|b| !b.is_empty()) else {
        return false;
    };
    let n = rbuf.len();
    to.push(rbuf.bytes());
    rbuf.consume(n);
    bufs.release_if_empty(from);
    crate::metrics::add(counter, n as u64);
    true
}
