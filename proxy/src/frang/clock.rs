//! The clock the fleet's rate slots are numbered by (docs/FLEET.md, "The model"): Unix
//! time, so that every node numbers a slot alike, read through this process's monotonic
//! clock, so that a worker maps the `Instant` it already has to a slot without a system
//! call.
//!
//! The two clocks are tied by an offset (Unix time at `epoch`), and that offset is taken
//! again whenever the wall clock has moved against the monotonic one: an NTP step, a `date
//! -s`. [`FleetClock::follow`] does it, once per turn of the side thread (which calls it
//! before it takes the pending counts: frang's and the fingerprint limits' `fleet_drain`),
//! so that the slots the workers count in, the keys the side thread adds them to and the
//! frame it reads back are numbered by the same clock, the wall clock of the turn. An offset
//! taken once at start would keep a stepped node counting in the old time, in keys no
//! other node reads, while its reads followed the new time (the fingerprint limits' frame
//! is numbered from the wall clock of the turn): its events lost for the fleet, and the
//! fleet's for it.
//!
//! One clock per process ([`FleetClock::system`]), shared by frang and the fingerprint
//! limits and kept across reloads; tests make their own with a wall clock they step.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How far the wall clock may move against the monotonic one before the offset is taken
/// again: well above the jitter of reading the two (microseconds), well below a slot.
const TOLERANCE: Duration = Duration::from_millis(1);

/// Unix time, as the fleet's slots are numbered.
pub struct FleetClock {
    epoch: Instant,
    /// Unix time at `epoch`, in nanoseconds (u64: until the year 2554).
    unix_at_epoch: AtomicU64,
    /// The wall clock: Unix time now.
    wall: Box<dyn Fn() -> Duration + Send + Sync>,
}

impl std::fmt::Debug for FleetClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetClock")
            .field("unix_at_epoch", &self.unix_at_epoch.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

fn system_wall() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl FleetClock {
    /// The process's clock, on the system's wall clock.
    pub fn system() -> Arc<FleetClock> {
        static CLOCK: OnceLock<Arc<FleetClock>> = OnceLock::new();
        Arc::clone(CLOCK.get_or_init(|| Arc::new(FleetClock::with_wall(system_wall))))
    }

    /// A clock on the wall clock `wall` (Unix time now), tied to it now.
    pub fn with_wall(wall: impl Fn() -> Duration + Send + Sync + 'static) -> FleetClock {
        let epoch = Instant::now();
        let unix_at_epoch = AtomicU64::new(nanos(wall()));
        FleetClock {
            epoch,
            unix_at_epoch,
            wall: Box::new(wall),
        }
    }

    /// `now` as Unix time (an `Instant` from before the clock was made included).
    pub fn unix(&self, now: Instant) -> Duration {
        let at_epoch = Duration::from_nanos(self.unix_at_epoch.load(Ordering::Relaxed));
        match now.checked_duration_since(self.epoch) {
            Some(after) => at_epoch.saturating_add(after),
            None => at_epoch.saturating_sub(self.epoch.duration_since(now)),
        }
    }

    /// The fleet's slot number of `now` for slots of `slot`.
    pub fn slot(&self, now: Instant, slot: Duration) -> u64 {
        let n = self.unix(now).as_nanos() / slot.as_nanos().max(1);
        u64::try_from(n).unwrap_or(u64::MAX)
    }

    /// Ties the clock to the wall clock again if the wall clock moved against the monotonic
    /// one by more than [`TOLERANCE`] (stepped). True if it did. A reading interrupted
    /// for longer than the tolerance (the thread preempted between the two clocks) is not
    /// trusted: the next turn reads again.
    pub fn follow(&self) -> bool {
        let before = Instant::now();
        let wall = (self.wall)();
        let after = Instant::now();
        let taken = after.saturating_duration_since(before);
        if taken > TOLERANCE {
            return false;
        }
        let mid = before + taken / 2;
        let since_epoch = mid.saturating_duration_since(self.epoch);
        let Some(at_epoch) = wall.checked_sub(since_epoch) else {
            return false;
        };
        let now = Duration::from_nanos(self.unix_at_epoch.load(Ordering::Relaxed));
        let moved = at_epoch.abs_diff(now);
        if moved <= TOLERANCE {
            return false;
        }
        self.unix_at_epoch.store(nanos(at_epoch), Ordering::Relaxed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wall clock the test sets, in milliseconds of Unix time.
    fn stepped_wall(start_ms: u64) -> (Arc<AtomicU64>, FleetClock) {
        let wall = Arc::new(AtomicU64::new(start_ms));
        let read = Arc::clone(&wall);
        let clock =
            FleetClock::with_wall(move || Duration::from_millis(read.load(Ordering::Relaxed)));
        (wall, clock)
    }

    const SLOT: Duration = Duration::from_millis(125);

    #[test]
    fn the_slots_follow_a_step_of_the_wall_clock_both_ways_at_the_next_turn() {
        // 60 ms into a slot: a few microseconds either way are the same slot.
        let (wall, clock) = stepped_wall(1_700_000_000_060);
        let now = Instant::now();
        let before = clock.slot(now, SLOT);
        assert_eq!(before, 1_700_000_000_060 / 125);
        assert!(!clock.follow(), "nothing moved");
        // NTP steps the wall clock an hour ahead; the monotonic clock does not move.
        wall.store(1_700_003_600_060, Ordering::Relaxed);
        assert_eq!(clock.slot(now, SLOT), before, "until the next turn");
        assert!(clock.follow());
        let ahead = clock.slot(now, SLOT);
        assert_eq!(ahead, before + 3600 * 8);
        // And back by two hours.
        wall.store(1_699_996_400_060, Ordering::Relaxed);
        assert!(clock.follow());
        assert_eq!(clock.slot(now, SLOT), before - 3600 * 8);
        // Instants from before the clock was made map to the time before.
        let earlier = now.checked_sub(Duration::from_secs(1));
        if let Some(earlier) = earlier {
            assert_eq!(clock.slot(earlier, SLOT), before - 3600 * 8 - 8);
        }
    }

    #[test]
    fn the_process_clock_is_one_and_on_the_wall_clock() {
        let a = FleetClock::system();
        assert!(Arc::ptr_eq(&a, &FleetClock::system()));
        let unix = a.unix(Instant::now());
        let wall = system_wall();
        let apart = unix.abs_diff(wall);
        assert!(apart < Duration::from_secs(1), "{apart:?}");
    }
}
