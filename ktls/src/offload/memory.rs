//! When the memory that handshakes freed goes back to the kernel.
//!
//! A handshake allocates tens of kilobytes (the SSL object, its record buffers, the key
//! exchange and the certificate work) and frees nearly all of it at the hand-over. With many
//! handshakes in flight the worker's heap grows to hold all of them at once; once they are
//! done the allocator keeps those pages resident unless they are returned. Connections keep
//! no small allocation of their own from that time (their record-layer state lives in the
//! worker's connection slab), so the freed pages are whole and `malloc_trim` can return them.
//!
//! Policy, per thread (an SSL is created, handed over and freed on one worker thread):
//! - when the last handshake in flight is handed over (the handshake queue drained), at least
//!   [`DRAINED_MIN_FREED`] SSL objects were freed since the last trim, and the last trim for
//!   a drained queue is [`DRAINED_INTERVAL`] old: trim. The end of a burst of handshakes (a
//!   ramp of new connections) is the moment the heap is largest and emptiest; a lone
//!   handshake now and then leaves too little to be worth a trim; and a steady churn of short
//!   connections drains the queue often, but would only fault the returned pages in again
//!   (hence at most one such trim per interval).
//!   A drained queue that finds the last such trim too recent owes one: the worker's event
//!   loop wakes up when the interval is over ([`cap_wait`]) and runs it then if the queue is
//!   still empty ([`run_owed_trim`]), so the end of a burst is always trimmed, within a
//!   second.
//! - and in any case every [`FREED_PER_TRIM`] SSL objects freed, so a thread that never runs
//!   out of handshakes (a steady stream of new connections) still returns what it can.
//!
//! The counters live in a thread-local: no lock, no sharing.

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::ossl;

/// SSL objects freed since the last trim for the drained queue to trigger one.
pub const DRAINED_MIN_FREED: u32 = 32;
/// SSL objects freed between two trims of a thread that always has handshakes in flight.
pub const FREED_PER_TRIM: u32 = 256;
/// Least time between two trims for a drained queue.
pub const DRAINED_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Default)]
struct Counters {
    /// Handshakes started by `prepare_ssl` on this thread and neither handed over nor freed.
    in_flight: u32,
    /// SSL objects freed on this thread since the last trim.
    freed_since_trim: u32,
    /// Trims done on this thread (for tests and diagnosis).
    trims: u64,
    /// The last trim for a drained queue.
    drained_trim_at: Option<Instant>,
    /// A drained queue's trim was put off until this time.
    owed_at: Option<Instant>,
}

thread_local! {
    static COUNTERS: Cell<Counters> = const {
        Cell::new(Counters {
            in_flight: 0,
            freed_since_trim: 0,
            trims: 0,
            drained_trim_at: None,
            owed_at: None,
        })
    };
}

fn update(f: impl FnOnce(&mut Counters)) -> Counters {
    COUNTERS.with(|c| {
        let mut v = c.get();
        f(&mut v);
        c.set(v);
        v
    })
}

/// An SSL object was given its slot (`prepare_ssl`): a handshake is in flight.
pub(crate) fn handshake_started() {
    update(|c| c.in_flight = c.in_flight.saturating_add(1));
}

/// A handshake is no longer in flight: handed over, or its SSL object freed before that.
pub(crate) fn handshake_ended() {
    // Saturating: a handshake ended on another thread than the one that started it (a test
    // harness might) must not wrap this thread's count.
    update(|c| c.in_flight = c.in_flight.saturating_sub(1));
}

/// A prepared SSL object was freed (its slot dropped).
pub(crate) fn ssl_freed() {
    update(|c| c.freed_since_trim = c.freed_since_trim.saturating_add(1));
}

/// Called after the SSL object of a hand-over was freed: trims if the policy above says so.
pub(crate) fn after_handover() {
    after_handover_at(Instant::now());
}

fn after_handover_at(now: Instant) {
    let c = update(|_| {});
    let drained = c.in_flight == 0 && c.freed_since_trim >= DRAINED_MIN_FREED;
    let next_drained_trim = c.drained_trim_at.map(|at| at + DRAINED_INTERVAL);
    let too_soon = next_drained_trim.is_some_and(|at| now < at);
    if drained && too_soon {
        update(|c| c.owed_at = next_drained_trim);
    }
    if drained && !too_soon {
        trim(now, true);
    } else if c.freed_since_trim >= FREED_PER_TRIM {
        trim(now, false);
    }
}

fn trim(now: Instant, drained: bool) {
    ossl::release_freed_handshake_memory();
    update(|c| {
        c.freed_since_trim = 0;
        c.trims += 1;
        if drained {
            c.drained_trim_at = Some(now);
            c.owed_at = None;
        }
    });
}

/// How long the thread's event loop may sleep: `wait`, or less if a put-off trim comes due
/// sooner (at least 1 ms).
pub fn cap_wait(wait: Option<Duration>, now: Instant) -> Option<Duration> {
    let Some(at) = COUNTERS.with(|c| c.get().owed_at) else {
        return wait;
    };
    let due = at
        .saturating_duration_since(now)
        .max(Duration::from_millis(1));
    Some(wait.map_or(due, |w| w.min(due)))
}

/// Runs a put-off trim once it is due, if the handshake queue is still empty (otherwise
/// the next drain decides again).
pub fn run_owed_trim(now: Instant) {
    let c = update(|_| {});
    let Some(at) = c.owed_at else { return };
    if now < at {
        return;
    }
    if c.in_flight == 0 {
        trim(now, true);
    } else {
        update(|c| c.owed_at = None);
    }
}

/// This thread's handshakes in flight (started and neither handed over nor freed).
pub fn handshakes_in_flight() -> u32 {
    COUNTERS.with(|c| c.get().in_flight)
}

/// How many times this thread returned freed handshake memory to the kernel.
pub fn trims() -> u64 {
    COUNTERS.with(|c| c.get().trims)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a hand-over does, in its order: the handshake ends, the SSL is freed, then the
    /// policy runs.
    fn handover() {
        handshake_ended();
        ssl_freed();
        after_handover();
    }

    #[test]
    fn a_drained_burst_trims_once_and_a_lone_handshake_does_not() {
        std::thread::spawn(|| {
            for _ in 0..DRAINED_MIN_FREED {
                handshake_started();
            }
            for i in 0..DRAINED_MIN_FREED {
                handover();
                // Only the last hand-over drains the queue.
                assert_eq!(trims(), u64::from(i + 1 == DRAINED_MIN_FREED));
            }
            assert_eq!(handshakes_in_flight(), 0);
            handshake_started();
            handover();
            assert_eq!(trims(), 1, "one handshake after a trim is not a burst");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_churn_that_drains_often_trims_for_it_once_per_interval() {
        std::thread::spawn(|| {
            let start = Instant::now();
            // Bursts of 40 handshakes that each drain, 100 ms apart: 30 of them (1200 SSL
            // objects) in 3 s.
            for burst in 0..30u32 {
                let now = start + burst * Duration::from_millis(100);
                for _ in 0..40 {
                    handshake_started();
                }
                for _ in 0..40 {
                    handshake_ended();
                    ssl_freed();
                    after_handover_at(now);
                }
            }
            // 3 drained trims (0 s, 1 s, 2 s), plus the counted ones in between.
            let drained = 3;
            let counted = (1200 - drained * DRAINED_MIN_FREED) / FREED_PER_TRIM;
            assert!(
                trims() <= u64::from(drained + counted + 1),
                "{} trims",
                trims()
            );
            assert!(trims() >= u64::from(drained), "{} trims", trims());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_burst_that_ends_soon_after_a_trim_is_trimmed_when_the_interval_is_over() {
        std::thread::spawn(|| {
            let start = Instant::now();
            let burst = |now: Instant| {
                for _ in 0..DRAINED_MIN_FREED {
                    handshake_started();
                }
                for _ in 0..DRAINED_MIN_FREED {
                    handshake_ended();
                    ssl_freed();
                    after_handover_at(now);
                }
            };
            burst(start);
            assert_eq!(trims(), 1);
            let later = start + Duration::from_millis(300);
            burst(later);
            assert_eq!(trims(), 1, "put off: the last drained trim is 300 ms old");
            // The event loop sleeps no longer than until the interval is over...
            let wait = cap_wait(Some(Duration::from_secs(60)), later);
            assert_eq!(wait, Some(DRAINED_INTERVAL - Duration::from_millis(300)));
            run_owed_trim(later + Duration::from_millis(100));
            assert_eq!(trims(), 1, "not due yet");
            // ...and then trims.
            run_owed_trim(start + DRAINED_INTERVAL);
            assert_eq!(trims(), 2);
            assert_eq!(
                cap_wait(None, start + DRAINED_INTERVAL),
                None,
                "nothing owed"
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn an_owed_trim_is_dropped_if_handshakes_are_in_flight_again() {
        std::thread::spawn(|| {
            let start = Instant::now();
            for round in 0..2u32 {
                for _ in 0..DRAINED_MIN_FREED {
                    handshake_started();
                }
                for _ in 0..DRAINED_MIN_FREED {
                    handshake_ended();
                    ssl_freed();
                    after_handover_at(start + round * Duration::from_millis(10));
                }
            }
            assert_eq!(trims(), 1);
            handshake_started();
            run_owed_trim(start + DRAINED_INTERVAL);
            assert_eq!(
                trims(),
                1,
                "a handshake is in flight: the next drain decides"
            );
            assert_eq!(cap_wait(None, start), None);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_queue_that_never_drains_still_trims_every_freed_per_trim() {
        std::thread::spawn(|| {
            handshake_started(); // always one more in flight
            for _ in 0..2 * FREED_PER_TRIM {
                handshake_started();
                handover();
            }
            assert_eq!(handshakes_in_flight(), 1);
            assert_eq!(trims(), 2);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn an_end_on_a_foreign_thread_does_not_wrap() {
        std::thread::spawn(|| {
            handshake_ended();
            assert_eq!(handshakes_in_flight(), 0);
        })
        .join()
        .unwrap();
    }
}
