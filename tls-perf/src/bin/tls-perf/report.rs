//! The final report: upstream's four lines, computed as upstream computes them, then this
//! tool's extension lines; or the same figures as JSON.

use std::fmt::Write as _;

use serde::Serialize;

use crate::monitor::{EndReason, RunRecord};
use crate::stats::{Errors, Totals};
use crate::worker::Latencies;

pub const RULE: &str = "========================================";

/// Statistics of the per-second handshake rates.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Rates {
    pub max: u64,
    pub avg: u64,
    /// 95% of the seconds had at least this rate.
    pub p95: u64,
    /// The lowest non-zero second (upstream ignores empty seconds here).
    pub min: u64,
}

/// Handshake latency, milliseconds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    pub min: f64,
    pub avg: f64,
    /// 95% of the handshakes took at most this long.
    pub p95: f64,
    pub max: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ServerCpu {
    pub pid: u32,
    pub seconds: f64,
    /// Handshakes in the same window as `seconds`.
    pub handshakes: u64,
    pub ms_per_handshake: f64,
    pub handshakes_per_cpu_second: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Measured seconds (samples), as upstream's TOTAL SECONDS.
    pub seconds: usize,
    /// All handshakes, including the ramp-up, as upstream's TOTAL HANDSHAKES.
    pub handshakes: u64,
    pub handshakes_per_sec: Rates,
    pub latency_ms: Latency,
    pub resumed: u64,
    pub errors: Errors,
    pub errors_total: u64,
    /// TLS 1.3 connections closed without a ticket after waiting for one.
    pub tickets_missed: u64,
    pub server_cpu: Option<ServerCpu>,
    pub end: EndReason,
}

/// Upstream's statistics of the per-second samples: MAX; AVG (integer); 95P, the sample at
/// index len*95/100 of the list sorted in descending order; MIN of the non-zero samples.
pub fn rate_stats(samples: &[u64]) -> Rates {
    if samples.is_empty() {
        return Rates::default();
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let len = sorted.len();
    Rates {
        max: sorted[0],
        avg: samples.iter().sum::<u64>() / len as u64,
        p95: sorted[len * 95 / 100],
        min: sorted.iter().rev().copied().find(|&s| s > 0).unwrap_or(0),
    }
}

pub fn latency_stats(latencies: &Latencies) -> Latency {
    if latencies.is_empty() {
        return Latency::default();
    }
    let ms = |micros: u64| micros as f64 / 1000.0;
    Latency {
        min: ms(latencies.min()),
        // Whole microseconds, like the other figures.
        avg: round_to(latencies.mean() / 1000.0, 3),
        p95: ms(latencies.value_at_quantile(0.95)),
        max: ms(latencies.max()),
    }
}

pub fn build(
    record: &RunRecord,
    totals: &Totals,
    latencies: &Latencies,
    server_pid: Option<u32>,
) -> Report {
    let server_cpu = server_pid
        .zip(record.server_cpu_seconds)
        .map(|(pid, seconds)| {
            let handshakes = record.window_handshakes;
            // /proc counts in 10 ms ticks: drop the float noise of the subtraction.
            let seconds = round_to(seconds, 2);
            ServerCpu {
                pid,
                seconds,
                handshakes,
                ms_per_handshake: if handshakes > 0 {
                    round_to(seconds * 1000.0 / handshakes as f64, 6)
                } else {
                    0.0
                },
                handshakes_per_cpu_second: if seconds > 0.0 {
                    round_to(handshakes as f64 / seconds, 1)
                } else {
                    0.0
                },
            }
        });
    Report {
        seconds: record.samples.len(),
        handshakes: totals.handshakes,
        handshakes_per_sec: rate_stats(&record.samples),
        latency_ms: latency_stats(latencies),
        resumed: totals.resumed,
        errors: totals.errors,
        errors_total: totals.errors.total(),
        tickets_missed: totals.tickets_missed,
        server_cpu,
        end: record.end,
    }
}

/// The report as text: upstream's lines first, byte for byte in their layout, then ours.
pub fn text(report: &Report) -> String {
    let r = &report.handshakes_per_sec;
    let l = &report.latency_ms;
    let e = &report.errors;
    let mut out = String::new();
    let _ = writeln!(out, "{RULE}");
    let _ = writeln!(
        out,
        " TOTAL:           SECONDS {}; HANDSHAKES {}",
        report.seconds, report.handshakes
    );
    let _ = writeln!(
        out,
        " HANDSHAKES/sec:  MAX {}; AVG {}; 95P {}; MIN {}",
        r.max, r.avg, r.p95, r.min
    );
    let _ = writeln!(
        out,
        " LATENCY (ms):    MIN {}; AVG {}; 95P {}; MAX {}",
        general(l.min),
        general(l.avg),
        general(l.p95),
        general(l.max)
    );
    let _ = writeln!(
        out,
        " RESUMED:         {} of {}",
        report.resumed, report.handshakes
    );
    let _ = writeln!(
        out,
        " ERRORS:          {} (connect {}; reset {}; handshake {}; timeout {})",
        report.errors_total, e.connect, e.reset, e.handshake, e.timeout
    );
    if report.tickets_missed > 0 {
        let _ = writeln!(
            out,
            " TICKETS MISSED:  {} (TLS 1.3 connections closed without a session ticket)",
            report.tickets_missed
        );
    }
    if let Some(cpu) = &report.server_cpu {
        let _ = writeln!(
            out,
            " SERVER CPU:      {} s for {} handshakes; {} ms per handshake; {} handshakes per \
             CPU-second",
            general(cpu.seconds),
            cpu.handshakes,
            general(cpu.ms_per_handshake),
            cpu.handshakes_per_cpu_second.round()
        );
    }
    out
}

fn round_to(value: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (value * scale).round() / scale
}

/// A float as C++ streams print it by default (`%g`, 6 significant digits), which is how
/// upstream prints latencies.
pub fn general(value: f64) -> String {
    if value == 0.0 || !value.is_finite() {
        return if value.is_finite() {
            "0".to_string()
        } else {
            value.to_string()
        };
    }
    let exponent = value.abs().log10().floor() as i32;
    if !(-5..6).contains(&exponent) {
        return format!("{value:e}");
    }
    let decimals = usize::try_from(5 - exponent).unwrap_or(0);
    let fixed = format!("{value:.decimals$}");
    if fixed.contains('.') {
        fixed
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    } else {
        fixed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_follow_upstream() {
        // Ten samples: index 10*95/100 = 9 of the descending list, i.e. the lowest.
        let samples = [5, 9, 7, 8, 6, 10, 4, 3, 2, 1];
        let r = rate_stats(&samples);
        assert_eq!(
            r,
            Rates {
                max: 10,
                avg: 5,
                p95: 1,
                min: 1
            }
        );
        let with_zero = rate_stats(&[0, 100, 50]);
        assert_eq!((with_zero.min, with_zero.p95, with_zero.avg), (50, 0, 50));
        assert_eq!(rate_stats(&[]), Rates::default());
        let many: Vec<u64> = (1..=100).collect();
        assert_eq!(rate_stats(&many).p95, 5);
    }

    #[test]
    fn latency_in_milliseconds() {
        let mut h = crate::worker::new_latencies();
        for micros in [1000u64, 2000, 3000, 4000] {
            h.record(micros).expect("in range");
        }
        let l = latency_stats(&h);
        // The histogram keeps 3 significant digits.
        assert_eq!(l.min, 1.0);
        assert!((l.avg - 2.5).abs() < 0.01, "{l:?}");
        assert!((l.p95 - 4.0).abs() < 0.01, "{l:?}");
        assert!((l.max - 4.0).abs() < 0.01, "{l:?}");
    }

    #[test]
    fn floats_print_like_cpp_streams() {
        assert_eq!(general(0.0), "0");
        assert_eq!(general(14.0), "14");
        assert_eq!(general(0.8125), "0.8125");
        assert_eq!(general(1.23456789), "1.23457");
        assert_eq!(general(123456.7), "123457");
        assert_eq!(general(0.000123), "0.000123");
    }
}
