//! Fair turns: how often one client connection may be driven before the worker polls again.
//!
//! The worker drives the connections its poll reported, and every connection that the
//! driving queued again (a finished exchange re-queues its client; a connection still moving
//! after a full round re-queues itself). A client whose next request is already in its socket
//! when it is driven again (a pipelining client, or a fast keep-alive client on OpenSSL's
//! record layer, which reads the socket on every attempt) re-queues itself for as long as it
//! sends: the pass over the queue never ended, the worker never polled, and every other
//! connection's request sat unread in its socket for seconds (the "cold start" stall of
//! docs/PERFORMANCE.md: turns of 2-3 s and 7 000-12 000 drives measured, while other
//! clients timed out with their request in the kernel's receive queue).
//!
//! So a client is driven at most [`DRIVES_PER_TURN`] times in one turn; beyond that it is
//! deferred, once, to the next turn, which polls without waiting first and so hears every
//! other connection before driving it again.

use std::collections::VecDeque;

use super::client::ClientId;
use mio::Token;

/// Drives of one client in one turn: the event's, the re-drive after its exchange finished,
/// and room for a cache miss's round trip through an upstream. Each drive is itself bounded
/// (64 rounds of read, process, flush).
pub const DRIVES_PER_TURN: u8 = 4;

/// Per-turn drive counts of the worker's client slots, and the clients deferred to the next
/// turn.
#[derive(Default)]
pub struct FairTurns {
    /// The current turn's number (starts at 1; 0 marks a slot never driven).
    turn: u64,
    /// Per client slot: the turn of its last drive and the drives in that turn.
    drives: Vec<(u64, u8)>,
    /// Clients that used their turn's drives: driven again after the next poll.
    deferred: VecDeque<Token>,
}

impl FairTurns {
    /// A new turn begins: what was deferred is due now (after the poll's events).
    pub fn begin_turn(&mut self, dirty: &mut VecDeque<Token>) {
        self.turn += 1;
        dirty.append(&mut self.deferred);
    }

    /// Whether client slot `ci` may be driven again in this turn. The first refusal defers
    /// `token` to the next turn; later ones in the same turn drop it (already deferred).
    #[inline]
    pub fn admit(&mut self, ci: ClientId, token: Token) -> bool {
        let slot = ci.index();
        if self.drives.len() <= slot {
            self.drives.resize(slot + 1, (0, 0));
        }
        let (turn, count) = &mut self.drives[slot];
        if *turn != self.turn {
            *turn = self.turn;
            *count = 0;
        }
        *count = count.saturating_add(1);
        if *count <= DRIVES_PER_TURN {
            return true;
        }
        if *count == DRIVES_PER_TURN + 1 {
            self.deferred.push_back(token);
        }
        false
    }

    /// Tokens left when a pass stopped early: they are due next turn, not forgotten.
    pub fn defer_all(&mut self, rest: &mut VecDeque<Token>) {
        self.deferred.append(rest);
    }

    /// `token` is due next turn (once, however often this turn asks): a source with more to
    /// read than one round, whose edge-triggered readiness will not come again.
    pub fn defer(&mut self, token: Token) {
        if !self.deferred.contains(&token) {
            self.deferred.push_back(token);
        }
    }

    /// Something is due without waiting for an event: the next poll must not sleep.
    pub fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_past_its_drives_is_deferred_once_then_due_next_turn() {
        let mut f = FairTurns::default();
        let mut dirty = VecDeque::new();
        f.begin_turn(&mut dirty);
        let t = Token(7);
        for _ in 0..DRIVES_PER_TURN {
            assert!(f.admit(ClientId::from_index(3), t));
        }
        assert!(!f.admit(ClientId::from_index(3), t));
        assert!(!f.admit(ClientId::from_index(3), t));
        assert!(f.has_deferred());
        // Another client is not affected.
        assert!(f.admit(ClientId::from_index(4), Token(8)));
        f.begin_turn(&mut dirty);
        assert_eq!(dirty, VecDeque::from([t]), "deferred exactly once");
        assert!(!f.has_deferred());
        assert!(
            f.admit(ClientId::from_index(3), t),
            "a new turn gives new drives"
        );
    }

    #[test]
    fn a_stopped_pass_keeps_its_tokens() {
        let mut f = FairTurns::default();
        let mut rest = VecDeque::from([Token(1), Token(2)]);
        f.defer_all(&mut rest);
        assert!(rest.is_empty());
        let mut dirty = VecDeque::new();
        f.begin_turn(&mut dirty);
        assert_eq!(dirty, VecDeque::from([Token(1), Token(2)]));
    }
}
