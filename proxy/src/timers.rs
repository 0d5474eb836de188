//! Deadlines of one worker: a min-heap with lazy deletion. A connection re-arms by pushing a
//! new deadline with a new generation; stale entries are skipped when they come due.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

#[derive(Default)]
pub struct Timers {
    heap: BinaryHeap<Reverse<(Instant, usize, u64)>>,
}

impl Timers {
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
