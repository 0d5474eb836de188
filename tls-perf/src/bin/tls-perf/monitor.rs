//! The main thread during a run: once a second it samples the workers' counters, prints the
//! progress line, records a handshakes/sec sample once measuring has begun, and decides when
//! the run ends (time, `-n`, SIGINT/SIGTERM, or a server that stopped answering).

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use serde::Serialize;
use tls_perf::procstat;

use crate::stats::{Shared, Totals};
use crate::Output;

/// How often the main thread looks at the flags; bounds the reaction time to a stop.
const POLL: Duration = Duration::from_millis(10);
const SAMPLE_PERIOD: Duration = Duration::from_secs(1);
/// The run stops when this many seconds in a row had failures and no handshake at all.
pub const DEAD_SERVER_SECONDS: u32 = 3;
/// The last, partial second is kept as a sample only if it is at least this long (or if it is
/// the only one), so a few milliseconds of tail cannot make a misleading MIN.
const MIN_PARTIAL_SAMPLE: Duration = Duration::from_millis(250);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// `-T` elapsed.
    Time,
    /// `-n` handshakes done.
    Count,
    /// SIGINT or SIGTERM.
    Signal,
    /// Only failures for DEAD_SERVER_SECONDS.
    ServerDown,
}

/// What the monitor saw of the run.
pub struct RunRecord {
    /// Handshakes per second, one per measured interval, in order.
    pub samples: Vec<u64>,
    pub measuring_started: bool,
    /// Handshakes and server CPU seconds over the measured part (the whole run if measuring
    /// never began).
    pub window_handshakes: u64,
    pub server_cpu_seconds: Option<f64>,
    pub end: EndReason,
}

pub struct Monitor<'a> {
    pub shared: &'a Shared,
    pub signalled: &'a AtomicBool,
    pub duration: Option<Duration>,
    pub server_pid: Option<u32>,
    pub quiet: bool,
    pub out: Output,
}

struct Interval {
    start: Instant,
    base: Totals,
}

impl Monitor<'_> {
    pub fn watch(&self) -> RunRecord {
        let start = Instant::now();
        let deadline = self.duration.map(|d| start + d);
        let mut window_start = (self.shared.totals().handshakes, self.server_cpu());
        let mut interval = Interval {
            start,
            base: self.shared.totals(),
        };
        let mut record = RunRecord {
            samples: Vec::new(),
            measuring_started: false,
            window_handshakes: 0,
            server_cpu_seconds: None,
            end: EndReason::Time,
        };
        let mut failing_seconds = 0u32;
        loop {
            std::thread::sleep(POLL);
            let now = Instant::now();
            if !record.measuring_started && self.shared.measuring.load(Relaxed) {
                record.measuring_started = true;
                self.out
                    .line("( All peers are active, start to gather statistics )");
                // Samples start on a clean second from here.
                interval = Interval {
                    start: now,
                    base: self.shared.totals(),
                };
                window_start = (interval.base.handshakes, self.server_cpu());
            }
            if let Some(end) = self.end_reason(now, deadline, failing_seconds) {
                self.finish(&mut record, &interval, window_start, now, end);
                return record;
            }
            if now - interval.start >= SAMPLE_PERIOD {
                failing_seconds =
                    self.close_second(&mut record, &mut interval, now, failing_seconds);
            }
        }
    }

    /// The server's CPU seconds so far, when its pid is known and readable.
    fn server_cpu(&self) -> Option<f64> {
        self.server_pid
            .and_then(|pid| procstat::cpu_seconds(pid).ok())
    }

    /// Why the run ends now, if it does: a signal, `-n` reached, `-T` elapsed, or a server
    /// that stopped answering, in that order.
    fn end_reason(
        &self,
        now: Instant,
        deadline: Option<Instant>,
        failing_seconds: u32,
    ) -> Option<EndReason> {
        if self.signalled.load(Relaxed) {
            Some(EndReason::Signal)
        } else if self.shared.count_reached.load(Relaxed) {
            Some(EndReason::Count)
        } else if deadline.is_some_and(|d| now >= d) {
            Some(EndReason::Time)
        } else if failing_seconds >= DEAD_SERVER_SECONDS {
            Some(EndReason::ServerDown)
        } else {
            None
        }
    }

    /// Stops the workers and completes `record`: the last, partial second (kept only if long
    /// enough), the measured window's handshakes and server CPU, and why the run ended.
    fn finish(
        &self,
        record: &mut RunRecord,
        interval: &Interval,
        window_start: (u64, Option<f64>),
        now: Instant,
        end: EndReason,
    ) {
        self.shared.stop.store(true, Relaxed);
        let totals = self.shared.totals();
        let elapsed = now - interval.start;
        let per_sec = rate(totals.handshakes - interval.base.handshakes, elapsed);
        if elapsed >= MIN_PARTIAL_SAMPLE {
            self.progress(&totals, per_sec);
        }
        if record.measuring_started
            && !elapsed.is_zero()
            && (elapsed >= MIN_PARTIAL_SAMPLE || record.samples.is_empty())
        {
            record.samples.push(per_sec);
        }
        record.window_handshakes = totals.handshakes - window_start.0;
        record.server_cpu_seconds = match (window_start.1, self.server_cpu()) {
            (Some(before), Some(after)) => Some((after - before).max(0.0)),
            _ => None,
        };
        record.end = end;
    }

    /// A second has passed: prints the progress line, keeps the sample once measuring, and
    /// starts the next interval. Answers how many seconds in a row, this one included, had
    /// failures and no handshake.
    fn close_second(
        &self,
        record: &mut RunRecord,
        interval: &mut Interval,
        now: Instant,
        failing_seconds: u32,
    ) -> u32 {
        let totals = self.shared.totals();
        let done = totals.handshakes - interval.base.handshakes;
        let failed = totals.errors.total() - interval.base.errors.total();
        let per_sec = rate(done, now - interval.start);
        self.progress(&totals, per_sec);
        if record.measuring_started {
            record.samples.push(per_sec);
        }
        *interval = Interval {
            start: now,
            base: totals,
        };
        if done == 0 && failed > 0 {
            failing_seconds + 1
        } else {
            0
        }
    }
}

impl Monitor<'_> {
    /// Upstream's progress line.
    fn progress(&self, totals: &Totals, per_sec: u64) {
        if self.quiet {
            return;
        }
        self.out.line(&format!(
            "TLS hs in progress {} [{} h/s], TCP open conns {} [{} hs in progress], Errors {}",
            totals.handshaking,
            per_sec,
            totals.open,
            totals.connecting,
            totals.errors.total()
        ));
    }
}

/// Handshakes per second over `elapsed`, as upstream computes it: 1000 * count / milliseconds.
fn rate(count: u64, elapsed: Duration) -> u64 {
    let millis = elapsed.as_millis().max(1);
    u64::try_from(u128::from(count) * 1000 / millis).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_is_per_second() {
        assert_eq!(rate(500, Duration::from_millis(500)), 1000);
        assert_eq!(rate(7, Duration::from_secs(1)), 7);
        assert_eq!(rate(3, Duration::ZERO), 3000);
    }
}
