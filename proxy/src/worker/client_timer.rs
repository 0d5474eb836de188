//! A client connection's one timer: what it is armed for (the handshake deadline, the
//! keep-alive timeout, `client_header_timeout`, HTTP/2's and a tunnel's deadlines) and what
//! firing it does. One entry per connection in the worker's heap, moved by generation.

use std::time::{Duration, Instant};

use super::client::Stage;
use super::codec::Codec;
use super::h1::ConnState;
use super::{client_token, Worker};
use crate::close_reason::CloseReason;

impl Worker {
    /// Keep-alive timeout of idle client connections.
    pub(super) fn idle_timeout(&self) -> Duration {
        let t = self.rt.config.keepalive_timeout;
        if t.is_zero() {
            Duration::from_secs(1)
        } else {
            t
        }
    }

    /// Arms client `ci`'s timer `after` from now, replacing whatever it was armed for (a new
    /// generation: code that remembered the old one sees it moved).
    pub(super) fn arm_client_timer(&mut self, ci: usize, after: Duration) {
        self.arm_client_timer_at(ci, self.now + after);
    }

    /// Arms client `ci`'s timer for the instant `when`. Callers that hold a deadline pass it
    /// as it is: a duration left until it, measured from another instant than the turn's
    /// `now`, would land the entry early.
    pub(super) fn arm_client_timer_at(&mut self, ci: usize, when: Instant) {
        if let Some(c) = self.clients.get_mut(ci) {
            c.timer_gen = self.timers.next_gen();
            c.timer_queued = Some(when);
            c.timer_deadline = Some(when);
            self.timers.schedule(when, client_token(ci).0, c.timer_gen);
        }
    }

    /// Arms client `ci`'s timer for `when` like [`Worker::arm_client_timer`], but when an
    /// entry already queued comes due no later, only moves the deadline: that entry re-arms
    /// itself for it when it fires ([`Worker::client_timer`]). Every keep-alive request arms
    /// the idle and head deadlines, each later than the last: this keeps them off the heap.
    /// The generation stays, so only for arms nothing compares generations across (not the
    /// handshake's).
    pub(super) fn extend_client_timer(&mut self, ci: usize, when: Instant) {
        match self.clients.get_mut(ci) {
            Some(c) if c.timer_queued.is_some_and(|queued| queued <= when) => {
                c.timer_deadline = Some(when);
            }
            Some(_) => self.arm_client_timer_at(ci, when),
            None => {}
        }
    }

    /// Client `ci`'s timer must not fire (what it was armed for no longer applies).
    pub(super) fn disarm_client_timer(&mut self, ci: usize) {
        if let Some(c) = self.clients.get_mut(ci) {
            c.timer_gen = self.timers.next_gen();
            c.timer_queued = None;
            c.timer_deadline = None;
        }
    }

    pub(super) fn client_timer(&mut self, ci: usize, gen: u64, now: Instant) {
        enum Due {
            Handshake,
            Head,
            Drain,
            H2,
            Tunnel,
            Nothing,
        }
        let Some(c) = self.clients.get(ci) else {
            return;
        };
        if c.timer_gen != gen {
            return;
        }
        if let Some(c) = self.clients.get_mut(ci) {
            c.timer_queued = None;
            // Fired before a deadline that was moved later: queue the entry again for it.
            if let Some(deadline) = c.timer_deadline.filter(|&d| now < d) {
                c.timer_queued = Some(deadline);
                self.timers.schedule(deadline, client_token(ci).0, gen);
                return;
            }
        }
        let Some(c) = self.clients.get(ci) else {
            return;
        };
        let due = match (&c.stage, &c.codec) {
            (Stage::Handshake(_), _) => Due::Handshake,
            (_, Codec::H2(_)) => Due::H2,
            (_, Codec::H1(h1)) => match h1.state() {
                ConnState::Idle => Due::Head,
                // The rest of a body being discarded stopped arriving.
                ConnState::Drain(_) => Due::Drain,
                // An exchange in progress keeps its own deadlines (exchange and upstream
                // timers).
                ConnState::Busy(_) => Due::Nothing,
                ConnState::Tunnel(_) => Due::Tunnel,
            },
        };
        match due {
            Due::Handshake => self.handshake_deadline_due(ci, now),
            // A slowloris head (client_header_timeout) is cut by frang; otherwise this is an
            // idle keep-alive client.
            Due::Head => {
                if !self.head_deadline_passed(ci, now) {
                    self.close_client(ci, CloseReason::IdleTimeout);
                }
            }
            Due::Drain => self.close_client(ci, CloseReason::Error),
            Due::H2 => self.h2_timer(ci, now),
            Due::Tunnel => self.tunnel_timer(ci, now),
            Due::Nothing => {}
        }
    }
}
