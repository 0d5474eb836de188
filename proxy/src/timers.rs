//! Deadlines of one worker: a min-heap with lazy deletion. A connection re-arms by pushing a
//! new deadline with a new generation; stale entries are skipped when they come due. A
//! client's deadline that only moves later (the keep-alive idle and head deadlines each
//! request arms) is not pushed at all: the entry already queued re-queues itself for the
//! later deadline when it fires (`Clients::extend_timer`).
//!
//! A stale entry stays until its time comes, and a keep-alive connection re-arms on every
//! request: left alone, the heap would hold one entry per request of the last idle timeout
//! (75 s at 100k requests/s: 7.5 million). The owner compacts it ([`Timers::compact`]) once
//! it holds more than twice what can be live plus [`COMPACT_SLACK`], so its size is bounded
//! by the connections and exchanges, not by the request rate; the cost is O(n) after at
//! least n/2 pushes.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

/// When a worker tries a listener again after `accept` failed (descriptors exhausted). Its
/// poll is edge-triggered: the connections left in the accept queue are not reported again
/// until another one arrives, so without this timer they would wait for a client that may
/// never come (issue 38). nginx pauses its accepts on EMFILE the same way. One retry is
/// queued per listener at a time ([`Timers::schedule_retry`]).
pub const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// The generation of a listener's retry entry: no connection's (those come from
/// [`Timers::next_gen`], counting up from 1) and not 0.
const RETRY_GEN: u64 = u64::MAX;

/// Entries beyond twice the live ones before a compaction is worth its pass.
pub const COMPACT_SLACK: usize = 4096;

#[derive(Default)]
pub struct Timers {
    heap: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    last_gen: u64,
    /// The entries of the pass under way ([`Timers::take_due`]), kept for its allocation.
    due: Vec<(usize, u64)>,
    /// The keys with a retry queued ([`Timers::schedule_retry`]): a few listeners at most.
    retrying: Vec<usize>,
}

impl Timers {
    /// A generation never handed out before (never 0). Connection slots are reused, so a
    /// generation must be unique to the worker, not to the connection: a stale entry left by
    /// a slot's previous connection must not match the new one.
    pub fn next_gen(&mut self) -> u64 {
        self.last_gen += 1;
        self.last_gen
    }

    /// Schedules `key` (a connection token) with generation `gen` at `when`.
    pub fn schedule(&mut self, when: Instant, key: usize, gen: u64) {
        self.heap.push(Reverse((when, key, gen)));
    }

    /// Schedules a retry of `key` (a listener) at `when`, unless one is queued already:
    /// whether this call queued it. Every readiness event of a listener whose `accept` fails
    /// asks for a retry; queued each time, the retries would multiply with the connections
    /// arriving while descriptors are exhausted (on the previous binary: ~800 failing
    /// `accept4` a second with 80 connections waiting, issue 38), each re-queued every
    /// interval until an `accept` succeeds.
    pub fn schedule_retry(&mut self, when: Instant, key: usize) -> bool {
        if self.retrying.contains(&key) {
            return false;
        }
        self.retrying.push(key);
        self.schedule(when, key, RETRY_GEN);
        true
    }

    /// Entries queued, stale ones included.
    pub fn queued(&self) -> usize {
        self.heap.len()
    }

    /// Whether the heap holds more than `live_bound` (at most that many entries can be
    /// live) allows: time to [`Timers::compact`].
    pub fn needs_compaction(&self, live_bound: usize) -> bool {
        self.heap.len() > live_bound.saturating_mul(2).saturating_add(COMPACT_SLACK)
    }

    /// Drops every entry `live(key, gen)` says is stale.
    pub fn compact(&mut self, mut live: impl FnMut(usize, u64) -> bool) {
        self.heap.retain(|Reverse((_, key, gen))| live(*key, *gen));
    }

    /// How long the event loop may sleep.
    pub fn next_timeout(&self, now: Instant) -> Option<Duration> {
        self.heap
            .peek()
            .map(|Reverse((when, _, _))| when.saturating_duration_since(now))
    }

    /// Takes every entry due at `now`, in deadline order, for one pass of firing; hand the
    /// vector back with [`Timers::recycle`]. An entry that firing pushes, even one already
    /// due, waits for the next pass: a deadline re-armed into the past (a duration measured
    /// from an earlier instant) costs one event-loop turn, never a loop that does not end
    /// (issue 30: an idle h2 connection re-armed early and froze its worker).
    pub fn take_due(&mut self, now: Instant) -> Vec<(usize, u64)> {
        let mut due = std::mem::take(&mut self.due);
        due.clear();
        due.extend(std::iter::from_fn(|| self.pop_due(now)));
        due
    }

    /// Returns the vector [`Timers::take_due`] handed out, so the next pass reuses it.
    pub fn recycle(&mut self, due: Vec<(usize, u64)>) {
        self.due = due;
    }

    /// Pops one entry that is due at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<(usize, u64)> {
        match self.heap.peek() {
            Some(Reverse((when, _, _))) if *when <= now => {
                let (key, gen) = self.heap.pop().map(|Reverse((_, key, gen))| (key, gen))?;
                if gen == RETRY_GEN {
                    self.retrying.retain(|k| *k != key);
                }
                Some((key, gen))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_are_unique_and_never_zero() {
        let mut t = Timers::default();
        let a = t.next_gen();
        let b = t.next_gen();
        assert!(a != 0 && b != 0 && a != b);
    }

    #[test]
    fn compaction_keeps_only_live_entries_in_order() {
        let now = Instant::now();
        let mut t = Timers::default();
        for i in 0..10_000u64 {
            t.schedule(now + Duration::from_millis(i), (i % 10) as usize, i);
        }
        assert!(t.needs_compaction(10));
        // Live: the last generation of each key.
        t.compact(|key, gen| gen >= 9_990 && gen % 10 == key as u64);
        assert_eq!(t.queued(), 10);
        assert!(!t.needs_compaction(10));
        let later = now + Duration::from_secs(60);
        let order: Vec<_> = std::iter::from_fn(|| t.pop_due(later)).collect();
        assert_eq!(
            order,
            (9_990..10_000)
                .map(|g| ((g % 10) as usize, g))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn an_entry_pushed_while_firing_waits_for_the_next_pass() {
        let now = Instant::now();
        let mut t = Timers::default();
        t.schedule(now, 1, 1);
        let due = t.take_due(now);
        assert_eq!(due, vec![(1, 1)]);
        // Firing re-arms into the past: it is due, but not in this pass.
        t.schedule(now - Duration::from_millis(5), 1, 2);
        t.recycle(due);
        assert_eq!(t.take_due(now), vec![(1, 2)]);
        assert!(t.take_due(now).is_empty());
    }

    #[test]
    fn one_retry_per_key_is_queued_until_it_fires() {
        let now = Instant::now();
        let mut t = Timers::default();
        assert!(t.schedule_retry(now, 1));
        assert!(!t.schedule_retry(now, 1));
        assert!(t.schedule_retry(now, 2));
        assert_eq!(t.queued(), 2);
        assert_eq!(t.take_due(now).len(), 2);
        // Fired: the next failure queues one again.
        assert!(t.schedule_retry(now, 1));
        assert_eq!(t.queued(), 1);
    }

    #[test]
    fn due_in_deadline_order() {
        let now = Instant::now();
        let mut t = Timers::default();
        t.schedule(now + Duration::from_secs(2), 1, 0);
        t.schedule(now + Duration::from_secs(1), 2, 7);
        t.schedule(now + Duration::from_secs(5), 3, 0);
        assert_eq!(t.next_timeout(now), Some(Duration::from_secs(1)));
        let later = now + Duration::from_secs(3);
        assert_eq!(t.pop_due(later), Some((2, 7)));
        assert_eq!(t.pop_due(later), Some((1, 0)));
        assert_eq!(t.pop_due(later), None);
    }
}
