//! Latency histograms in Prometheus' form: counts per bucket (`_bucket{le="..."}`,
//! cumulative when rendered), `_sum` in seconds and `_count`.
//!
//! The buckets run from 0.5 ms (a cache hit on loopback) to 10 s (a slow origin near the
//! default forward timeout), about 2.5x apart, so p50 and p99 read from them are within a
//! bucket of the truth across what a proxy sees.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in seconds; `+Inf` follows.
pub const BOUNDS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

const SLOTS: usize = BOUNDS.len() + 1;

/// Observations counted by bucket (not cumulative: one add per observation).
#[derive(Default)]
pub struct Histogram {
    counts: [AtomicU64; SLOTS],
    sum_micros: AtomicU64,
}

/// A histogram's counts at one moment, to be summed and rendered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshot {
    counts: [u64; SLOTS],
    sum_micros: u64,
}

fn slot(d: Duration) -> usize {
    let secs = d.as_secs_f64();
    BOUNDS
        .iter()
        .position(|&bound| secs <= bound)
        .unwrap_or(BOUNDS.len())
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Histogram {
    /// Counts `d` where only one thread writes this histogram (a worker's own): a load and a
    /// store, as `WorkerMetrics::bump`, no locked instruction.
    pub fn record_owned(&self, d: Duration) {
        let add = |c: &AtomicU64, n: u64| {
            c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed)
        };
        add(&self.counts[slot(d)], 1);
        add(&self.sum_micros, micros(d));
    }

    /// Counts `d` where several threads may write at once.
    pub fn record(&self, d: Duration) {
        self.counts[slot(d)].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(micros(d), Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            counts: std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed)),
            sum_micros: self.sum_micros.load(Ordering::Relaxed),
        }
    }
}

impl Snapshot {
    pub fn add(&mut self, other: &Snapshot) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a = a.wrapping_add(b);
        }
        self.sum_micros = self.sum_micros.wrapping_add(other.sum_micros);
    }

    /// The samples of this histogram: `labels` is empty or `key="value",...` (no braces).
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0u64;
        for (i, n) in self.counts.iter().enumerate() {
            cumulative = cumulative.wrapping_add(*n);
            let le = BOUNDS.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
            );
        }
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let sum = self.sum_micros as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {cumulative}");
    }
}

/// `# HELP` and `# TYPE ... histogram` of a family.
pub fn header(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_cumulative_buckets_sum_and_count() {
        let h = Histogram::default();
        h.record_owned(Duration::from_micros(300));
        h.record(Duration::from_millis(300));
        h.record(Duration::from_secs(20));
        let mut out = String::new();
        h.snapshot().render(&mut out, "x_seconds", "group=\"g\"");
        assert!(
            out.contains("x_seconds_bucket{group=\"g\",le=\"0.0005\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{group=\"g\",le=\"0.25\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{group=\"g\",le=\"0.5\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{group=\"g\",le=\"10\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{group=\"g\",le=\"+Inf\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_sum{group=\"g\"} 20.3003\n"),
            "{out}"
        );
        assert!(out.contains("x_seconds_count{group=\"g\"} 3\n"), "{out}");
        let mut plain = String::new();
        Snapshot::default().render(&mut plain, "y", "");
        assert!(
            plain.contains("y_bucket{le=\"+Inf\"} 0\ny_sum 0\ny_count 0\n"),
            "{plain}"
        );
    }
}
