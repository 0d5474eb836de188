//! Cache counters: relaxed atomics bumped on the hot path, read as a
//! snapshot the proxy prints in Prometheus text format.
//!
//! The cache is shared by every worker thread and a hit bumps a counter, so the counters
//! are striped: each thread adds to one of [`STRIPES`] blocks, each on cache lines of its
//! own, picked once per thread, and a snapshot sums the blocks. Up to [`STRIPES`] threads
//! never write a line another thread writes; beyond that threads share blocks, and the
//! atomic adds keep the counts exact either way.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::storability::NotStoredReason;

const REASONS: usize = NotStoredReason::ALL.len();
/// The [`Counter`]s, then one count per [`NotStoredReason`].
const SLOTS: usize = Counter::ALL.len() + REASONS;
/// Blocks of counters: more than the worker threads of any machine this runs on with one
/// worker per core, few enough that a snapshot stays cheap.
const STRIPES: usize = 16;

/// One thread's block, aligned to two cache lines (the adjacent-line prefetcher pairs
/// lines) so that no two blocks share one.
#[derive(Debug)]
#[repr(align(128))]
struct Stripe([AtomicU64; SLOTS]);

#[derive(Debug)]
pub(crate) struct Metrics {
    stripes: Box<[Stripe]>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            stripes: (0..STRIPES)
                .map(|_| Stripe(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
        }
    }
}

/// A gauge-or-counter field of [`Metrics`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Counter {
    Hit,
    Miss,
    Bypass,
    Store,
    Eviction,
    Purge,
    Invalidation,
    NotModified,
    StaleServed,
    Revalidation,
    CoalescedWait,
}

impl Counter {
    const ALL: [Counter; 11] = [
        Counter::Hit,
        Counter::Miss,
        Counter::Bypass,
        Counter::Store,
        Counter::Eviction,
        Counter::Purge,
        Counter::Invalidation,
        Counter::NotModified,
        Counter::StaleServed,
        Counter::Revalidation,
        Counter::CoalescedWait,
    ];
}

/// The calling thread's stripe, assigned round-robin on its first count.
fn stripe_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
}

impl Metrics {
    fn slot(&self, index: usize) -> Option<&AtomicU64> {
        self.stripes.get(stripe_index())?.0.get(index)
    }

    /// The sum over the stripes of one slot.
    fn total(&self, index: usize) -> u64 {
        self.stripes
            .iter()
            .filter_map(|s| s.0.get(index))
            .map(|c| c.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }

    pub fn add(&self, c: Counter, n: u64) {
        if let Some(counter) = self.slot(c as usize) {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub fn not_stored(&self, reason: NotStoredReason) {
        if let Some(c) = self.slot(Counter::ALL.len() + reason.index()) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn snapshot(&self, bytes: u64, entries: u64) -> MetricsSnapshot {
        let get = |c: Counter| self.total(c as usize);
        let mut not_stored = [(NotStoredReason::Disabled, 0); REASONS];
        for (i, (slot, reason)) in not_stored
            .iter_mut()
            .zip(NotStoredReason::ALL.iter())
            .enumerate()
        {
            *slot = (*reason, self.total(Counter::ALL.len() + i));
        }
        MetricsSnapshot {
            hits: get(Counter::Hit),
            misses: get(Counter::Miss),
            bypasses: get(Counter::Bypass),
            stores: get(Counter::Store),
            evictions: get(Counter::Eviction),
            purges: get(Counter::Purge),
            invalidations: get(Counter::Invalidation),
            not_modified: get(Counter::NotModified),
            stale_served: get(Counter::StaleServed),
            revalidations: get(Counter::Revalidation),
            coalesced_waits: get(Counter::CoalescedWait),
            bytes,
            entries,
            not_stored,
        }
    }
}

/// Point-in-time copy of the counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSnapshot {
    pub hits: u64,
    pub misses: u64,
    pub bypasses: u64,
    pub stores: u64,
    pub evictions: u64,
    pub purges: u64,
    /// Keys removed by responses to unsafe methods (RFC 9111 §4.4).
    pub invalidations: u64,
    /// 304s answered from cache.
    pub not_modified: u64,
    /// Stale entries sent under `cache_use_stale`.
    pub stale_served: u64,
    /// Conditional fetches started for stale entries.
    pub revalidations: u64,
    /// Misses that waited for another request's fetch.
    pub coalesced_waits: u64,
    /// Bytes accounted in storage (payload + per-entry overhead).
    pub bytes: u64,
    /// Stored entries (variants).
    pub entries: u64,
    pub not_stored: [(NotStoredReason, u64); REASONS],
}

impl MetricsSnapshot {
    pub fn not_stored_for(&self, reason: NotStoredReason) -> u64 {
        self.not_stored
            .iter()
            .find(|(r, _)| *r == reason)
            .map_or(0, |(_, n)| *n)
    }

    /// Prometheus text exposition, metric names prefixed `ktls_cache_`.
    pub fn write_prometheus(&self, out: &mut String) {
        let counters = [
            ("hits_total", "Requests answered from cache", self.hits),
            (
                "misses_total",
                "Cacheable requests not answered from cache",
                self.misses,
            ),
            (
                "bypasses_total",
                "Requests that bypassed the cache",
                self.bypasses,
            ),
            ("stores_total", "Responses stored", self.stores),
            (
                "evictions_total",
                "Entries evicted to stay within the byte budget",
                self.evictions,
            ),
            ("purges_total", "Keys purged", self.purges),
            (
                "invalidations_total",
                "Keys invalidated by responses to unsafe methods",
                self.invalidations,
            ),
            (
                "not_modified_total",
                "304 responses answered from cache",
                self.not_modified,
            ),
            (
                "stale_served_total",
                "Stale entries served under cache_use_stale",
                self.stale_served,
            ),
            (
                "revalidations_total",
                "Conditional fetches for stale entries",
                self.revalidations,
            ),
            (
                "coalesced_waits_total",
                "Misses that waited for a concurrent fetch",
                self.coalesced_waits,
            ),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(out, "# HELP ktls_cache_{name} {help}\n# TYPE ktls_cache_{name} counter\nktls_cache_{name} {value}");
        }
        let _ = writeln!(out, "# HELP ktls_cache_bytes Bytes held by the cache\n# TYPE ktls_cache_bytes gauge\nktls_cache_bytes {}", self.bytes);
        let _ = writeln!(out, "# HELP ktls_cache_entries Stored entries\n# TYPE ktls_cache_entries gauge\nktls_cache_entries {}", self.entries);
        let _ = writeln!(out, "# HELP ktls_cache_not_stored_total Responses not stored, by reason\n# TYPE ktls_cache_not_stored_total counter");
        for (reason, value) in &self.not_stored {
            let _ = writeln!(
                out,
                "ktls_cache_not_stored_total{{reason=\"{}\"}} {value}",
                reason.as_str()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_many_threads_add_up() {
        let m = Metrics::default();
        std::thread::scope(|s| {
            for _ in 0..STRIPES + 3 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        m.add(Counter::Hit, 1);
                    }
                    m.not_stored(NotStoredReason::ALL[2]);
                });
            }
        });
        m.add(Counter::Eviction, 5);
        let snap = m.snapshot(7, 1);
        assert_eq!(snap.hits, 1000 * (STRIPES as u64 + 3));
        assert_eq!(snap.evictions, 5);
        assert_eq!(snap.misses, 0);
        assert_eq!(
            snap.not_stored_for(NotStoredReason::ALL[2]),
            STRIPES as u64 + 3
        );
        assert_eq!(snap.not_stored_for(NotStoredReason::ALL[3]), 0);
    }

    #[test]
    fn stripes_share_no_cache_line() {
        let m = Metrics::default();
        assert!(std::mem::align_of::<Stripe>() >= 128);
        let a = std::ptr::addr_of!(m.stripes[0]) as usize;
        let b = std::ptr::addr_of!(m.stripes[1]) as usize;
        assert!(b - a >= 128);
    }
}
