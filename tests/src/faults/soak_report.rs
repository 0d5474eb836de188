//! The soak's report: a table of its windows (per protocol: requests sent, answered by
//! status, lost/cut/not sent, p50/p99; the server's RSS and descriptors at the window's end)
//! and the three criteria judged from them, each met or not met with its numbers:
//!
//! - RSS drift < 1 %: the highest RSS sampled after the warm-up window against the RSS at
//!   the warm-up window's end;
//! - no descriptor growth: the descriptors open with no load (the origin's connections
//!   dropped) after the run, against the same count before it (under load the count follows
//!   the connections in flight; the windows show it);
//! - p99 stable: for each protocol, the highest p99 of a window after the warm-up within
//!   twice the median of those windows' p99s.

use serde_json::{json, Value};

use super::driver::Counts;
use super::report::Report;
use super::server::Sample;
use super::window::Window;

/// RSS growth after the warm-up below this fraction (the 1 %).
pub const RSS_DRIFT_MAX: f64 = 0.01;
/// A window's p99 at most this many times the median window's.
pub const P99_SPREAD_MAX: f64 = 2.0;

/// The soak's own figures, beside the report's totals.
#[derive(Clone, Debug)]
pub struct SoakFigures {
    /// Window width, seconds.
    pub window: u64,
    /// Windows left out of the drift and stability judgements (the first).
    pub warmup_windows: u64,
    /// The WebSocket sessions (answered 101: a session whole).
    pub ws: Counts,
    /// The server at the end of each window.
    pub samples: Vec<Sample>,
    /// Requests for cacheable paths that reached the origin (fills: the rest were hits).
    pub origin_fills: u64,
    /// WebSocket handshakes the origin accepted.
    pub origin_websockets: u64,
}

/// One criterion: its name, met (None: too few windows to judge), and its numbers.
pub struct Judgement {
    pub name: &'static str,
    pub met: Option<bool>,
    pub text: String,
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

impl SoakFigures {
    fn protocols<'a>(&'a self, r: &'a Report) -> [(&'static str, &'a Counts); 3] {
        [("h1", &r.h1), ("h2", &r.h2), ("ws", &self.ws)]
    }

    fn rss(&self) -> Judgement {
        let warm = self.warmup_windows as usize;
        let (Some(base), Some(max)) = (
            self.samples.get(warm.saturating_sub(1)).map(|s| s.rss_kib),
            self.samples.iter().skip(warm).map(|s| s.rss_kib).max(),
        ) else {
            return Judgement {
                name: "RSS drift < 1 %",
                met: None,
                text: "too few windows".into(),
            };
        };
        let drift = (max as f64 - base as f64) / (base.max(1) as f64);
        let last = self.samples.last().map_or(0, |s| s.rss_kib);
        Judgement {
            name: "RSS drift < 1 %",
            met: Some(drift < RSS_DRIFT_MAX),
            text: format!(
                "{:+.2} %: {base} KiB at the end of window {warm} (the warm-up), highest after it {max} KiB, last {last} KiB",
                drift * 100.0
            ),
        }
    }

    fn fds(&self, r: &Report) -> Judgement {
        let under: Vec<u64> = self.samples.iter().map(|s| s.fds).collect();
        let range = match (under.iter().min(), under.iter().max()) {
            (Some(lo), Some(hi)) => format!("{lo}-{hi}"),
            _ => "-".into(),
        };
        Judgement {
            name: "no descriptor growth",
            met: Some(r.after.fds <= r.before.fds),
            text: format!(
                "{} open with no load before the run, {} after it; {range} at the windows' ends under load",
                r.before.fds, r.after.fds
            ),
        }
    }

    fn p99(&self, r: &Report) -> Judgement {
        let mut met = Some(true);
        let mut parts = Vec::new();
        for (proto, counts) in self.protocols(r) {
            let mut p99s: Vec<(u64, f64)> = counts
                .windows
                .iter()
                .filter(|(i, _)| **i >= self.warmup_windows)
                .filter_map(|(i, w)| Some((*i + 1, w.latency.quantile_ms(0.99)?)))
                .collect();
            if p99s.len() < 2 {
                met = None;
                parts.push(format!("{proto}: too few windows"));
                continue;
            }
            let &(worst_at, worst) = p99s
                .iter()
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .unwrap_or(&(0, 0.0));
            p99s.sort_by(|a, b| a.1.total_cmp(&b.1));
            let median = p99s[p99s.len() / 2].1;
            let spread = worst / median.max(0.001);
            if spread > P99_SPREAD_MAX {
                met = met.map(|_| false);
            }
            parts.push(format!(
                "{proto} median {median:.2} ms, highest {worst:.2} ms (window {worst_at}), x{spread:.2}"
            ));
        }
        Judgement {
            name: "p99 stable",
            met,
            text: parts.join("; "),
        }
    }

    pub fn judgements(&self, r: &Report) -> Vec<Judgement> {
        vec![self.rss(), self.fds(r), self.p99(r)]
    }

    /// What the soak adds to the report's violations: criteria not met, WebSocket sessions
    /// not whole.
    pub fn violations(&self, r: &Report) -> Vec<String> {
        let mut v: Vec<String> = self
            .judgements(r)
            .into_iter()
            .filter(|j| j.met == Some(false))
            .map(|j| format!("{} not met: {}", j.name, j.text))
            .collect();
        let ws = &self.ws;
        if ws.sent == 0 {
            v.push("ws: no session was begun".into());
        }
        let whole = ws.status(101);
        if whole < ws.sent {
            v.push(format!(
                "ws: {whole} of {} sessions whole ({} lost, {} cut, statuses {:?})",
                ws.sent,
                ws.lost(),
                ws.cut,
                ws.answered
            ));
        }
        v
    }

    fn cells(w: Option<&Window>) -> String {
        let Some(w) = w else {
            return "- | - | - | -".into();
        };
        let statuses: Vec<String> = w.answered.iter().map(|(s, n)| format!("{s}:{n}")).collect();
        format!(
            "{} | {} | {}/{}/{} | {}/{}",
            w.sent,
            statuses.join(" "),
            w.lost,
            w.cut,
            w.not_sent,
            ms(w.latency.quantile_ms(0.5)),
            ms(w.latency.quantile_ms(0.99))
        )
    }

    /// The windows' table and the judgements under it (Markdown).
    pub fn table(&self, r: &Report) -> String {
        let mut out = format!(
            "\n### soak, {}: windows of {} s (window {} is the warm-up)\n\n\
             | window | h1 sent | h1 answered | h1 lost/cut/not sent | h1 p50/p99 ms \
             | h2 sent | h2 answered | h2 lost/cut/not sent | h2 p50/p99 ms \
             | ws sessions | ws answered | ws lost/cut/not sent | ws message p50/p99 ms | RSS KiB | fds |\n\
             |{}\n",
            r.server,
            self.window,
            self.warmup_windows,
            "---|".repeat(15)
        );
        for (i, sample) in self.samples.iter().enumerate() {
            let i = i as u64;
            let [h1, h2, ws] = self
                .protocols(r)
                .map(|(_, c)| Self::cells(c.windows.get(&i)));
            out += &format!(
                "| {} | {h1} | {h2} | {ws} | {} | {} |\n",
                i + 1,
                sample.rss_kib,
                sample.fds
            );
        }
        out += &format!(
            "\nCache: {} requests for the cacheable paths reached the origin (the rest were hits); \
             the origin accepted {} WebSocket handshakes.\n\n",
            self.origin_fills, self.origin_websockets
        );
        for j in self.judgements(r) {
            let verdict = match j.met {
                Some(true) => "met",
                Some(false) => "NOT MET",
                None => "not judged",
            };
            out += &format!("- {}: {verdict}: {}\n", j.name, j.text);
        }
        out
    }

    pub fn to_json(&self, r: &Report) -> Value {
        let window = |w: Option<&Window>| {
            w.map_or(Value::Null, |w| {
                json!({
                    "sent": w.sent,
                    "answered": w.answered.iter().map(|(s, n)| (s.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
                    "lost": w.lost, "cut": w.cut, "not_sent": w.not_sent,
                    "p50_ms": w.latency.quantile_ms(0.5), "p99_ms": w.latency.quantile_ms(0.99),
                })
            })
        };
        let windows: Vec<Value> = (0..self.samples.len() as u64)
            .map(|i| {
                let s = self.samples[i as usize];
                json!({
                    "window": i + 1,
                    "h1": window(r.h1.windows.get(&i)),
                    "h2": window(r.h2.windows.get(&i)),
                    "ws": window(self.ws.windows.get(&i)),
                    "rss_kib": s.rss_kib, "fds": s.fds, "processes": s.processes,
                })
            })
            .collect();
        let judgements: Vec<Value> = self
            .judgements(r)
            .into_iter()
            .map(|j| json!({"criterion": j.name, "met": j.met, "figures": j.text}))
            .collect();
        json!({
            "window_secs": self.window,
            "warmup_windows": self.warmup_windows,
            "ws": {"sent": self.ws.sent, "whole": self.ws.status(101), "lost": self.ws.lost(),
                   "cut": self.ws.cut, "not_sent": self.ws.not_sent},
            "origin_fills": self.origin_fills,
            "origin_websockets": self.origin_websockets,
            "windows": windows,
            "judgements": judgements,
        })
    }
}
