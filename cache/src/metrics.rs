//! Cache counters: relaxed atomics bumped on the hot path, read as a
//! snapshot the proxy prints in Prometheus text format.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::storability::NotStoredReason;

const REASONS: usize = NotStoredReason::ALL.len();

#[derive(Debug, Default)]
pub(crate) struct Metrics {
    hits: AtomicU64,
    misses: AtomicU64,
    bypasses: AtomicU64,
    stores: AtomicU64,
    evictions: AtomicU64,
    purges: AtomicU64,
    invalidations: AtomicU64,
    not_modified: AtomicU64,
    stale_served: AtomicU64,
    revalidations: AtomicU64,
    coalesced_waits: AtomicU64,
    not_stored: [AtomicU64; REASONS],
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

impl Metrics {
    fn counter(&self, c: Counter) -> &AtomicU64 {
        match c {
            Counter::Hit => &self.hits,
            Counter::Miss => &self.misses,
            Counter::Bypass => &self.bypasses,
            Counter::Store => &self.stores,
            Counter::Eviction => &self.evictions,
            Counter::Purge => &self.purges,
            Counter::Invalidation => &self.invalidations,
            Counter::NotModified => &self.not_modified,
            Counter::StaleServed => &self.stale_served,
            Counter::Revalidation => &self.revalidations,
            Counter::CoalescedWait => &self.coalesced_waits,
        }
    }

    pub fn add(&self, c: Counter, n: u64) {
        self.counter(c).fetch_add(n, Ordering::Relaxed);
    }

    pub fn not_stored(&self, reason: NotStoredReason) {
        if let Some(c) = self.not_stored.get(reason.index()) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn snapshot(&self, bytes: u64, entries: u64) -> MetricsSnapshot {
        let get = |c: Counter| self.counter(c).load(Ordering::Relaxed);
        let mut not_stored = [(NotStoredReason::Disabled, 0); REASONS];
        for (slot, (reason, counter)) in not_stored
            .iter_mut()
            .zip(NotStoredReason::ALL.iter().zip(self.not_stored.iter()))
        {
            *slot = (*reason, counter.load(Ordering::Relaxed));
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
