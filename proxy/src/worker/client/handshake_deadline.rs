//! How long a TLS handshake may take: the policy that keeps slow-handshake attackers out
//! while a storm of legitimate handshakes completes.
//!
//! A fixed deadline from accept (10 s, the old policy) counts the time the *server* spends
//! behind its own queue against the client. Under a storm of thousands of handshakes on a
//! small machine that queue is seconds long, and in TLS 1.3 the client counts its
//! handshake complete as soon as it sends its Finished: connections it holds as
//! established were closed by the server as "handshake timeout" (measured with the
//! `handshake_timeout` close reason; docs/PERFORMANCE.md, C100K).
//!
//! The policy instead times the *client's* turns:
//! - The client has [`CLIENT_TURN`] from accept to deliver its first flight, and again
//!   [`CLIENT_TURN`] from each step in which the server processed a flight of the client's
//!   and answered it (OpenSSL's handshake state moved). A client that sends nothing, or
//!   trickles its ClientHello, or never sends its Finished, is cut after `CLIENT_TURN`
//!   of its own silence.
//! - When the deadline comes due, the bytes that already arrived are processed first: a
//!   worker that was busy with other handshakes must not blame the client for its delay.
//! - Whatever happens, a handshake ends [`HANDSHAKE_LIMIT`] after accept (a peer cannot
//!   extend it without bound by moving the state machine), and every cut handshake counts
//!   for frang's `tls_incomplete_connection_rate`.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::{ClientId, Clients, Stage};
use crate::timers::Timers;

/// The time a client has for each of its turns in the handshake.
pub const CLIENT_TURN: Duration = Duration::from_secs(10);

/// No handshake lasts longer than this from accept.
pub const HANDSHAKE_LIMIT: Duration = Duration::from_secs(30);

/// A handshake's clock: when it began and where OpenSSL's state machine was last seen.
pub struct HandshakeClock {
    accepted: Instant,
    /// OpenSSL's short state name after the last step (a change means a flight was
    /// processed).
    last_state: &'static str,
}

impl HandshakeClock {
    pub fn start(now: Instant) -> HandshakeClock {
        HandshakeClock {
            accepted: now,
            last_state: "",
        }
    }

    /// The deadline after a step that ended in `state` at `now`, if the step moved the
    /// handshake (the client's turn starts again); `None` if nothing moved.
    fn after_step(&mut self, state: &'static str, now: Instant) -> Option<Instant> {
        if state == self.last_state {
            return None;
        }
        self.last_state = state;
        Some((now + CLIENT_TURN).min(self.accepted + HANDSHAKE_LIMIT))
    }
}

impl Clients {
    /// A handshake step at `now` did not finish client `ci`'s handshake: if it moved
    /// OpenSSL's state, the client's turn starts again (its timer re-armed).
    pub fn handshake_waits(&mut self, timers: &mut Timers, ci: ClientId, now: Instant) {
        let Some(c) = self.get_mut(ci) else {
            return;
        };
        let Stage::Handshake(session) = &c.stage else {
            return;
        };
        let state = session.ssl().state_string();
        if let Some(deadline) = c.handshake.after_step(state, now) {
            self.arm_timer(timers, ci, deadline);
        }
    }

    /// After the bytes that had arrived when client `ci`'s handshake deadline (timer
    /// generation `gen`) came due were processed: whether the handshake is still unfinished
    /// and that step did not move it (which re-arms the deadline). `Some`: cut it; the
    /// client's address and OpenSSL's state for the count.
    pub fn handshake_overdue(&self, ci: ClientId, gen: u64) -> Option<(IpAddr, &'static str)> {
        let c = self.get(ci).filter(|c| c.timer_gen == gen)?;
        let Stage::Handshake(session) = &c.stage else {
            return None;
        };
        Some((c.peer.ip(), session.ssl().state_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_state_starts_the_clients_turn_again() {
        let t0 = Instant::now();
        let mut clock = HandshakeClock::start(t0);
        let t1 = t0 + Duration::from_secs(4);
        assert_eq!(clock.after_step("TRCH", t1), Some(t1 + CLIENT_TURN));
        // The same state again (a partial flight): no new turn.
        assert_eq!(clock.after_step("TRCH", t1 + Duration::from_secs(1)), None);
        let t2 = t0 + Duration::from_secs(9);
        assert_eq!(clock.after_step("TWSF", t2), Some(t2 + CLIENT_TURN));
    }

    #[test]
    fn no_turn_goes_past_the_limit() {
        let t0 = Instant::now();
        let mut clock = HandshakeClock::start(t0);
        let late = t0 + HANDSHAKE_LIMIT - Duration::from_secs(1);
        assert_eq!(clock.after_step("TRCH", late), Some(t0 + HANDSHAKE_LIMIT));
        let past = t0 + HANDSHAKE_LIMIT + Duration::from_secs(5);
        assert_eq!(clock.after_step("TWSF", past), Some(t0 + HANDSHAKE_LIMIT));
    }
}
