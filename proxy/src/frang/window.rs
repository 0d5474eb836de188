//! Tempesta's rate accounting: a ring of `FRANG_FREQ` time slots.
//!
//! Time is cut into quanta of `time_frame / FRANG_FREQ` (125 ms for the
//! default one-second frame). An event is counted in the slot of its
//! quantum; a `*_burst` limit applies to the count of the current slot and
//! a `*_rate` limit to the sum over the slots whose quantum lies within the
//! last `FRANG_FREQ` quanta. A slot is reused (reset) when its quantum is
//! `FRANG_FREQ` or more behind, so memory per counter is fixed.

use std::time::{Duration, Instant};

/// Number of slots per time frame (Tempesta's `FRANG_FREQ`).
pub const FRANG_FREQ: u64 = 8;

/// Length of one slot for a limit measured over `time_frame`.
pub(crate) fn slot_len(time_frame: Duration) -> Duration {
    // Never zero: a zero-length slot would make every instant its own
    // quantum (and divide by zero below).
    (time_frame / FRANG_FREQ as u32).max(Duration::from_millis(1))
}

/// The quantum (slot number since `epoch`) that `now` falls into.
pub(crate) fn quantum(epoch: Instant, now: Instant, slot: Duration) -> u64 {
    let nanos = now.saturating_duration_since(epoch).as_nanos() / slot.as_nanos().max(1);
    u64::try_from(nanos).unwrap_or(u64::MAX)
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    quantum: u64,
    count: u32,
}

/// Counts after adding one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Events in the current slot (what `*_burst` limits).
    pub in_slot: u32,
    /// Events in the whole time frame (what `*_rate` limits).
    pub in_frame: u32,
}

/// One counter's history over `FRANG_FREQ` slots.
#[derive(Debug, Clone, Default)]
pub(crate) struct SlotRing {
    slots: [Slot; FRANG_FREQ as usize],
}

impl SlotRing {
    /// Counts one event at quantum `q`.
    pub fn add(&mut self, q: u64) -> Counts {
        let index = usize::try_from(q % FRANG_FREQ).unwrap_or(0);
        let in_slot = match self.slots.get_mut(index) {
            Some(slot) => {
                // Worker threads pass their own `now`; one that is a little
                // behind may find its slot already taken by a newer quantum.
                // Count it there rather than wiping the newer history.
                if slot.quantum < q {
                    *slot = Slot {
                        quantum: q,
                        count: 0,
                    };
                }
                slot.count = slot.count.saturating_add(1);
                slot.count
            }
            None => 0,
        };
        Counts {
            in_slot,
            in_frame: self.sum(q),
        }
    }

    /// Counts `events` events at quantum `q` at once (the counts [`SlotRing::add`] would
    /// leave after as many calls).
    pub fn add_many(&mut self, q: u64, events: u32) {
        let index = usize::try_from(q % FRANG_FREQ).unwrap_or(0);
        if let Some(slot) = self.slots.get_mut(index) {
            if slot.quantum < q {
                *slot = Slot {
                    quantum: q,
                    count: 0,
                };
            }
            slot.count = slot.count.saturating_add(events);
        }
    }

    /// Events within the time frame that ends with quantum `q`.
    pub fn sum(&self, q: u64) -> u32 {
        self.slots
            .iter()
            .filter(|slot| slot.quantum.saturating_add(FRANG_FREQ) > q)
            .fold(0u32, |sum, slot| sum.saturating_add(slot.count))
    }

    /// Events within the time frame that ends with quantum `q`, none counted after it: for
    /// the rings numbered by the fleet's clock ([`super::FleetClock`]), which steps back
    /// with the wall clock, so that slots numbered before a step back are not taken for the
    /// frame's (they would stay in it until the wall clock came back to them).
    pub fn sum_to(&self, q: u64) -> u32 {
        self.slots
            .iter()
            .filter(|slot| slot.quantum <= q && slot.quantum.saturating_add(FRANG_FREQ) > q)
            .fold(0u32, |sum, slot| sum.saturating_add(slot.count))
    }

    /// Events counted in quantum `q` exactly.
    pub fn at(&self, q: u64) -> u32 {
        self.slots
            .iter()
            .filter(|slot| slot.quantum == q)
            .fold(0u32, |sum, slot| sum.saturating_add(slot.count))
    }

    /// Sets the count of quantum `q` (a total read from elsewhere), replacing an older one.
    pub fn set(&mut self, q: u64, count: u32) {
        let index = usize::try_from(q % FRANG_FREQ).unwrap_or(0);
        if let Some(slot) = self.slots.get_mut(index).filter(|s| s.quantum <= q) {
            *slot = Slot { quantum: q, count };
        }
    }

    /// The non-zero slots as `(quantum, count)`, oldest first, leaving the ring empty.
    pub fn take(&mut self) -> Vec<(u64, u32)> {
        let mut taken: Vec<(u64, u32)> = std::mem::take(&mut self.slots)
            .iter()
            .filter(|slot| slot.count > 0)
            .map(|slot| (slot.quantum, slot.count))
            .collect();
        taken.sort_unstable();
        taken
    }

    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(|slot| slot.count == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_events_at_once_count_as_one_by_one() {
        let (mut one_by_one, mut at_once) = (SlotRing::default(), SlotRing::default());
        for (q, n) in [(3, 5), (3, 2), (4, 7), (12, 1), (2, 9)] {
            for _ in 0..n {
                one_by_one.add(q);
            }
            at_once.add_many(q, n);
        }
        for q in [3, 4, 11, 12, 13] {
            assert_eq!(at_once.sum(q), one_by_one.sum(q), "frame ending at {q}");
            assert_eq!(at_once.at(q), one_by_one.at(q), "slot {q}");
        }
    }

    #[test]
    fn burst_counts_one_slot_rate_counts_the_frame() {
        let mut ring = SlotRing::default();
        assert_eq!(
            ring.add(0),
            Counts {
                in_slot: 1,
                in_frame: 1
            }
        );
        assert_eq!(
            ring.add(0),
            Counts {
                in_slot: 2,
                in_frame: 2
            }
        );
        assert_eq!(
            ring.add(7),
            Counts {
                in_slot: 1,
                in_frame: 3
            }
        );
        // Quantum 8 reuses slot 0: the events of quantum 0 leave the frame.
        assert_eq!(
            ring.add(8),
            Counts {
                in_slot: 1,
                in_frame: 2
            }
        );
        assert_eq!(ring.sum(15), 1);
        assert_eq!(ring.sum(16), 0);
    }

    #[test]
    fn late_event_does_not_wipe_newer_slot() {
        let mut ring = SlotRing::default();
        ring.add(9);
        ring.add(9);
        // A thread still at quantum 1 (same slot index) adds to the newer slot.
        assert_eq!(ring.add(1).in_slot, 3);
    }

    #[test]
    fn quanta_follow_the_slot_length() {
        let epoch = Instant::now();
        let slot = slot_len(Duration::from_secs(1));
        assert_eq!(slot, Duration::from_millis(125));
        assert_eq!(quantum(epoch, epoch + Duration::from_millis(124), slot), 0);
        assert_eq!(quantum(epoch, epoch + Duration::from_millis(125), slot), 1);
        assert_eq!(quantum(epoch + Duration::from_secs(1), epoch, slot), 0);
        assert_eq!(slot_len(Duration::from_secs(5)), Duration::from_millis(625));
        assert_eq!(slot_len(Duration::ZERO), Duration::from_millis(1));
    }
}
