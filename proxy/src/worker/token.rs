//! The worker's poll tokens and timer keys: which connection, listener or timer a number
//! names.

use std::sync::atomic::Ordering;

use mio::event::Event;
use mio::Token;

use crate::metrics::WorkerMetrics;
use crate::runtime::Runtime;
use crate::timers::Timers;

use super::client::{ClientId, Clients};
use super::exchange::{Exchanges, EXCHANGE_TIMER_BASE};
use super::grace;
use super::upstream::{UpstreamId, Upstreams};

pub(super) const WAKER: Token = Token(0);
pub(super) const LISTENER_BASE: usize = 1;
pub(super) const CLIENT_BASE: usize = 1 << 32;
pub(super) const UPSTREAM_BASE: usize = 2 << 32;
/// Timer keys of health probes: PROBE_BASE + group * 65536 + server.
pub(super) const PROBE_BASE: usize = 3 << 32;

pub(super) enum Kind {
    Waker,
    Listener(usize),
    Client(ClientId),
    Upstream(UpstreamId),
    Probe(usize),
    /// A timer of an exchange (slab index).
    Exchange(usize),
    /// The `grace_shutdown_time` deadline of a reload.
    Grace,
    /// A QUIC socket (`quic::QUIC_BASE` + index).
    Quic(usize),
}

pub(super) fn kind(token: Token) -> Kind {
    match token.0 {
        0 => Kind::Waker,
        grace::GRACE_TIMER => Kind::Grace,
        n if n >= super::quic::QUIC_BASE => Kind::Quic(n - super::quic::QUIC_BASE),
        n if n >= EXCHANGE_TIMER_BASE => Kind::Exchange(n - EXCHANGE_TIMER_BASE),
        n if n >= PROBE_BASE => Kind::Probe(n),
        n if n >= UPSTREAM_BASE => Kind::Upstream(UpstreamId::from_index(n - UPSTREAM_BASE)),
        n if n >= CLIENT_BASE => Kind::Client(ClientId::from_index(n - CLIENT_BASE)),
        n => Kind::Listener(n - LISTENER_BASE),
    }
}

/// Tells a connection's owner what readiness `event` reports for its socket: reads skipped
/// while the socket was known to be empty may find bytes (or the end) again.
#[inline]
pub(super) fn note_readiness(event: &Event, clients: &mut Clients, upstreams: &mut Upstreams) {
    if !(event.is_readable() || event.is_read_closed() || event.is_error()) {
        return;
    }
    let closed = event.is_read_closed() || event.is_error();
    match kind(event.token()) {
        Kind::Client(ci) => super::client::readable(clients, ci, closed),
        Kind::Upstream(ui) => super::upstream::readable(upstreams, ui, closed),
        _ => {}
    }
}

#[inline]
pub(super) fn client_token(ci: ClientId) -> Token {
    Token(CLIENT_BASE + ci.index())
}

#[inline]
pub(super) fn upstream_token(ui: UpstreamId) -> Token {
    Token(UPSTREAM_BASE + ui.index())
}

/// Drops the timer entries that re-arming left stale, and publishes the heap's size.
pub(super) fn compact_timers(
    timers: &mut Timers,
    live: (&Clients, &Upstreams, &Exchanges),
    rt: &Runtime,
    metrics: &WorkerMetrics,
) {
    compact(timers, live, rt);
    let queued = u64::try_from(timers.queued()).unwrap_or(u64::MAX);
    metrics.timers_queued.store(queued, Ordering::Relaxed);
}

/// Drops the timer entries that re-arming left stale, once they outnumber the live ones
/// (`timers` module): the heap's size follows the connections, not the request rate. An
/// entry is live while its connection or exchange still carries its generation.
fn compact(
    timers: &mut Timers,
    (clients, upstreams, exchanges): (&Clients, &Upstreams, &Exchanges),
    rt: &Runtime,
) {
    // Below the slack no compaction is due, whatever is live: skip counting.
    if timers.queued() <= crate::timers::COMPACT_SLACK {
        return;
    }
    let probes = rt.groups.iter().map(|g| g.servers.len()).sum::<usize>();
    let live_bound = clients.len() + upstreams.len() + exchanges.len() + probes;
    if timers.needs_compaction(live_bound) {
        timers.compact(|key, gen| match kind(Token(key)) {
            Kind::Client(ci) => clients.get(ci).is_some_and(|c| c.timer_gen == gen),
            Kind::Upstream(ui) => upstreams.get(ui).is_some_and(|u| u.timer_gen == gen),
            Kind::Exchange(index) => exchanges.timer_gen_at(index) == Some(gen),
            // Health probes keep their own generations; they are few.
            _ => true,
        });
    }
}
