//! The soak's figures over time: each request counted in the window of its scheduled time
//! (a minute by default), with its latency in a log histogram (2 % wide buckets), so that a
//! long run's report shows each window's statuses, losses and p50/p99 and not only the sums.
//! `tests/py/faults_h2_load.py` keeps the same buckets for HTTP/2.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Bucket `k` holds latencies from GROWTH^k to GROWTH^(k+1) microseconds.
const GROWTH: f64 = 1.02;

/// Latencies in log buckets: quantiles within 2 %, a few hundred counters at most.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hist(pub BTreeMap<u32, u64>);

impl Hist {
    pub fn record(&mut self, latency: Duration) {
        let us = (latency.as_micros() as f64).max(1.0);
        let bucket = (us.ln() / GROWTH.ln()).floor() as u32;
        *self.0.entry(bucket).or_insert(0) += 1;
    }

    pub fn add(&mut self, other: &Hist) {
        for (b, n) in &other.0 {
            *self.0.entry(*b).or_insert(0) += n;
        }
    }

    pub fn count(&self) -> u64 {
        self.0.values().sum()
    }

    /// The latency under which a fraction `q` of the samples fall (the upper edge of its
    /// bucket), in milliseconds; None without samples.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (b, n) in &self.0 {
            seen += n;
            if seen >= rank {
                return Some(GROWTH.powf(f64::from(*b) + 1.0) / 1000.0);
            }
        }
        None
    }
}

/// What became of the requests (or WebSocket sessions) scheduled in one window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub sent: u64,
    /// Complete answers by status (WebSocket: 101 for a session whose every message came
    /// back and whose close was answered; another status for a refused handshake).
    pub answered: BTreeMap<u16, u64>,
    pub cut: u64,
    pub lost: u64,
    pub not_sent: u64,
    /// From the scheduled time to the complete answer (WebSocket: each message's round trip).
    pub latency: Hist,
}

impl Window {
    pub fn add(&mut self, other: &Window) {
        self.sent += other.sent;
        for (s, n) in &other.answered {
            *self.answered.entry(*s).or_insert(0) += n;
        }
        self.cut += other.cut;
        self.lost += other.lost;
        self.not_sent += other.not_sent;
        self.latency.add(&other.latency);
    }

    pub fn answered_total(&self) -> u64 {
        self.answered.values().sum()
    }
}

/// Windows by index from the load's start.
pub type Windows = BTreeMap<u64, Window>;

/// Adds `other`'s windows into `into`.
pub fn merge(into: &mut Windows, other: &Windows) {
    for (i, w) in other {
        into.entry(*i).or_default().add(w);
    }
}

/// The windows of a load: their width and the load's start.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub start: Instant,
    pub width: Duration,
}

impl Clock {
    pub fn index(&self, due: Instant) -> u64 {
        let since = due.saturating_duration_since(self.start);
        (since.as_secs_f64() / self.width.as_secs_f64().max(0.001)) as u64
    }
}

/// The h2 load's windows from its JSON report (`"windows": {"0": {...}}`).
pub fn from_json(v: &serde_json::Value) -> Windows {
    let Some(map) = v.as_object() else {
        return Windows::new();
    };
    let num = |w: &serde_json::Value, k: &str| w[k].as_u64().unwrap_or(0);
    let pairs = |w: &serde_json::Value| -> Vec<(String, u64)> {
        w.as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, n)| Some((k.clone(), n.as_u64()?)))
                    .collect()
            })
            .unwrap_or_default()
    };
    map.iter()
        .filter_map(|(i, w)| {
            let window = Window {
                sent: num(w, "sent"),
                answered: pairs(&w["answered"])
                    .into_iter()
                    .filter_map(|(s, n)| Some((s.parse().ok()?, n)))
                    .collect(),
                cut: num(w, "cut"),
                lost: num(w, "lost"),
                not_sent: num(w, "not_sent"),
                latency: Hist(
                    pairs(&w["hist"])
                        .into_iter()
                        .filter_map(|(b, n)| Some((b.parse().ok()?, n)))
                        .collect(),
                ),
            };
            Some((i.parse().ok()?, window))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_the_bucket_width() {
        let mut h = Hist::default();
        for ms in 1..=100u64 {
            h.record(Duration::from_millis(ms));
        }
        let p50 = h.quantile_ms(0.5).unwrap_or(0.0);
        let p99 = h.quantile_ms(0.99).unwrap_or(0.0);
        assert!((50.0..=51.0 * GROWTH).contains(&p50), "p50 {p50}");
        assert!((99.0..=99.0 * GROWTH * GROWTH).contains(&p99), "p99 {p99}");
        assert_eq!(Hist::default().quantile_ms(0.5), None);
    }
}
