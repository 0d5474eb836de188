//! Deadlines of one worker: a min-heap with lazy deletion. A connection re-arms by pushing a
//! new deadline with a new generation; stale entries are skipped when they come due.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

#[derive(Default)]
pub struct Timers {
    heap: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    last_gen: u64,
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

    /// How long the event loop may sleep.
    pub fn next_timeout(&self, now: Instant) -> Option<Duration> {
        self.heap
            .peek()
            .map(|Reverse((when, _, _))| when.saturating_duration_since(now))
    }

    /// Pops one entry that is due at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<(usize, u64)> {
        match self.heap.peek() {
            Some(Reverse((when, _, _))) if *when <= now => {
                self.heap.pop().map(|Reverse((_, key, gen))| (key, gen))
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
