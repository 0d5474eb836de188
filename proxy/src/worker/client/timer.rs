//! A client connection's one timer: arming it for a deadline (the handshake deadline, the
//! keep-alive timeout, `client_header_timeout`, HTTP/2's and a tunnel's deadlines) and, when
//! its entry comes due, what it is due for. One entry per connection in the worker's heap,
//! moved by generation. These are functions of the client table and the timer heap only; the
//! worker acts on what [`Clients::timer_due`] returns.

use std::time::{Duration, Instant};

use super::codec::Codec;
use super::{ClientId, Clients, Stage};
use crate::runtime::Runtime;
use crate::timers::Timers;
use crate::worker::h1::ConnState;
use crate::worker::token::client_token;

/// What a client's timer came due for.
pub enum Due {
    /// The TLS handshake's deadline.
    Handshake,
    /// An idle keep-alive connection, or a request head arriving too slowly.
    Head,
    /// The rest of a body being discarded stopped arriving.
    Drain,
    H2,
    /// An HTTP/3 connection's QUIC deadline (`quic/conn.rs` `timeout`).
    H3,
    Tunnel,
}

/// Keep-alive timeout of idle client connections.
pub fn idle_timeout(rt: &Runtime) -> Duration {
    let t = rt.config.keepalive_timeout;
    if t.is_zero() {
        Duration::from_secs(1)
    } else {
        t
    }
}

impl Clients {
    /// Arms client `ci`'s timer for the instant `when`, replacing whatever it was armed for
    /// (a new generation: code that remembered the old one sees it moved). Callers that hold
    /// a deadline pass it as it is: a duration left until it, measured from another instant
    /// than the turn's `now`, would land the entry early.
    #[inline]
    pub fn arm_timer(&mut self, timers: &mut Timers, ci: ClientId, when: Instant) {
        if let Some(c) = self.get_mut(ci) {
            c.timer_gen = timers.next_gen();
            c.timer_queued = Some(when);
            c.timer_deadline = Some(when);
            timers.schedule(when, client_token(ci).0, c.timer_gen);
        }
    }

    /// Arms client `ci`'s timer for `when` like [`Clients::arm_timer`], but when an entry
    /// already queued comes due no later, only moves the deadline: that entry re-arms itself
    /// for it when it fires ([`Clients::timer_due`]). Every keep-alive request arms the idle
    /// and head deadlines, each later than the last: this keeps them off the heap. The
    /// generation stays, so only for arms nothing compares generations across (not the
    /// handshake's).
    #[inline]
    pub fn extend_timer(&mut self, timers: &mut Timers, ci: ClientId, when: Instant) {
        match self.get_mut(ci) {
            Some(c) if c.timer_queued.is_some_and(|queued| queued <= when) => {
                c.timer_deadline = Some(when);
            }
            Some(_) => self.arm_timer(timers, ci, when),
            None => {}
        }
    }

    /// Client `ci`'s timer must not fire (what it was armed for no longer applies).
    pub fn disarm_timer(&mut self, timers: &mut Timers, ci: ClientId) {
        if let Some(c) = self.get_mut(ci) {
            c.timer_gen = timers.next_gen();
            c.timer_queued = None;
            c.timer_deadline = None;
        }
    }

    /// Client `ci`'s timer entry of generation `gen` came due at `now`: what the client is
    /// due for, or `None` (a stale entry, one queued again for a deadline moved later, or an
    /// HTTP/1 exchange in progress, which keeps its own deadlines).
    pub fn timer_due(
        &mut self,
        timers: &mut Timers,
        ci: ClientId,
        gen: u64,
        now: Instant,
    ) -> Option<Due> {
        let c = self.get_mut(ci).filter(|c| c.timer_gen == gen)?;
        c.timer_queued = None;
        // Fired before a deadline that was moved later: queue the entry again for it.
        if let Some(deadline) = c.timer_deadline.filter(|&d| now < d) {
            c.timer_queued = Some(deadline);
            timers.schedule(deadline, client_token(ci).0, gen);
            return None;
        }
        match (&c.stage, &c.codec) {
            (Stage::Handshake(_), _) => Some(Due::Handshake),
            (_, Codec::H2(_)) => Some(Due::H2),
            (_, Codec::H3(_)) => Some(Due::H3),
            (_, Codec::H1(h1)) => match h1.state() {
                ConnState::Idle => Some(Due::Head),
                ConnState::Drain(_) => Some(Due::Drain),
                // An exchange in progress keeps its own deadlines (exchange and upstream
                // timers).
                ConnState::Busy(_) => None,
                ConnState::Tunnel(_) => Some(Due::Tunnel),
            },
        }
    }
}
