//! Counters shared between the worker threads and the main thread, which samples them once a
//! second. Each worker writes only its own cache-line-aligned block, so counting costs no
//! contended atomic; only the `-n` budget is one shared counter.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};

use serde::Serialize;

use crate::peer::Failure;

/// One worker's counters. Aligned to two cache lines so neighbours never share one (adjacent
/// line prefetch pairs lines on x86).
#[repr(align(128))]
#[derive(Default)]
pub struct ThreadCounters {
    pub handshakes: AtomicU64,
    pub resumed: AtomicU64,
    pub connect_errors: AtomicU64,
    pub reset_errors: AtomicU64,
    pub handshake_errors: AtomicU64,
    pub timeouts: AtomicU64,
    pub tickets_missed: AtomicU64,
    // Gauges, stored by the worker every sweep.
    pub connecting: AtomicU64,
    pub handshaking: AtomicU64,
    pub open: AtomicU64,
}

impl ThreadCounters {
    pub fn count_failure(&self, failure: Failure) {
        let counter = match failure {
            Failure::Connect => &self.connect_errors,
            Failure::Reset => &self.reset_errors,
            Failure::Handshake => &self.handshake_errors,
            Failure::Timeout => &self.timeouts,
        };
        counter.fetch_add(1, Relaxed);
    }
}

/// Failures by kind, as reported.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Errors {
    pub connect: u64,
    pub reset: u64,
    pub handshake: u64,
    pub timeout: u64,
}

impl Errors {
    pub fn total(&self) -> u64 {
        self.connect + self.reset + self.handshake + self.timeout
    }
}

/// A snapshot of all workers' counters.
#[derive(Debug, Default, Clone, Copy)]
pub struct Totals {
    pub handshakes: u64,
    pub resumed: u64,
    pub errors: Errors,
    pub tickets_missed: u64,
    pub connecting: u64,
    pub handshaking: u64,
    pub open: u64,
}

pub struct Shared {
    /// Set by the main thread (time, signal, dead server) or by the worker that completes
    /// the `-n`th handshake; workers leave their loops when they see it.
    pub stop: AtomicBool,
    /// Every thread has all its peers running: the measured part of the run has begun.
    pub measuring: AtomicBool,
    /// The `-n` budget was used up.
    pub count_reached: AtomicBool,
    ramped_threads: AtomicU32,
    thread_count: u32,
    claimed: AtomicU64,
    limit: u64,
    pub threads: Vec<ThreadCounters>,
}

impl Shared {
    pub fn new(thread_count: u32, limit: Option<u64>) -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            measuring: AtomicBool::new(false),
            count_reached: AtomicBool::new(false),
            ramped_threads: AtomicU32::new(0),
            thread_count,
            claimed: AtomicU64::new(0),
            limit: limit.unwrap_or(u64::MAX),
            threads: (0..thread_count)
                .map(|_| ThreadCounters::default())
                .collect(),
        }
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Relaxed)
    }

    /// A worker has started all its peers; when the last one does, measuring begins.
    pub fn thread_ramped(&self) {
        if self.ramped_threads.fetch_add(1, Relaxed) + 1 == self.thread_count {
            self.measuring.store(true, Relaxed);
        }
    }

    /// Takes one handshake from the `-n` budget. False when the budget was already spent by
    /// other peers: such a handshake is not counted, so the report shows exactly `-n`.
    pub fn claim_handshake(&self) -> bool {
        let before = self.claimed.fetch_add(1, Relaxed);
        if before + 1 >= self.limit {
            self.count_reached.store(true, Relaxed);
            self.stop.store(true, Relaxed);
        }
        before < self.limit
    }

    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for c in &self.threads {
            t.handshakes += c.handshakes.load(Relaxed);
            t.resumed += c.resumed.load(Relaxed);
            t.errors.connect += c.connect_errors.load(Relaxed);
            t.errors.reset += c.reset_errors.load(Relaxed);
            t.errors.handshake += c.handshake_errors.load(Relaxed);
            t.errors.timeout += c.timeouts.load(Relaxed);
            t.tickets_missed += c.tickets_missed.load(Relaxed);
            t.connecting += c.connecting.load(Relaxed);
            t.handshaking += c.handshaking.load(Relaxed);
            t.open += c.open.load(Relaxed);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_stops_at_exactly_n() {
        let shared = Shared::new(1, Some(3));
        let counted = (0..5).filter(|_| shared.claim_handshake()).count();
        assert_eq!(counted, 3);
        assert!(shared.stopping());
        assert!(shared.count_reached.load(Relaxed));
    }

    #[test]
    fn measuring_starts_when_every_thread_ramped() {
        let shared = Shared::new(2, None);
        shared.thread_ramped();
        assert!(!shared.measuring.load(Relaxed));
        shared.thread_ramped();
        assert!(shared.measuring.load(Relaxed));
    }
}
