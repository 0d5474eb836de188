//! The flood's report: a few lines of text, or one JSON object (for benches/h2flood).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{json, Value};

use super::attack::FloodKind;
use super::reader::Tally;
use super::rss::Memory;
use super::wire::error_name;
use crate::units;

pub struct FloodReport<'a> {
    pub url: &'a str,
    pub kind: FloodKind,
    pub connections: usize,
    pub reconnect: bool,
    pub elapsed: Duration,
    pub tally: &'a Tally,
    pub memory: Option<&'a Memory>,
}

/// min, median, max of `ms`.
fn spread(ms: &[u64]) -> Option<(u64, u64, u64)> {
    let mut v = ms.to_vec();
    v.sort_unstable();
    Some((*v.first()?, v[v.len() / 2], *v.last()?))
}

fn by_code(codes: &BTreeMap<u32, u64>) -> BTreeMap<String, u64> {
    codes.iter().map(|(c, n)| (error_name(*c), *n)).collect()
}

fn list(map: &BTreeMap<String, u64>) -> String {
    if map.is_empty() {
        return "none".into();
    }
    let parts: Vec<String> = map.iter().map(|(k, n)| format!("{k} x{n}")).collect();
    parts.join(", ")
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

impl FloodReport<'_> {
    pub fn text(&self) -> String {
        let mut s = String::new();
        self.text_traffic(&mut s);
        self.text_closes(&mut s);
        self.text_server(&mut s);
        s
    }

    /// What ran, what was sent and what the server answered.
    fn text_traffic(&self, s: &mut String) {
        let t = self.tally;
        let _ = writeln!(
            s,
            "HTTP/2 flood `{}` @ {}\n  {} connections{}, {:.2}s",
            self.kind,
            self.url,
            self.connections,
            if self.reconnect {
                " (reconnecting)"
            } else {
                ""
            },
            self.elapsed.as_secs_f64()
        );
        let _ = writeln!(
            s,
            "  Sent:        {} attack frames, {} in all",
            t.frames_sent,
            units::binary(t.bytes_sent as f64)
        );
        let statuses: BTreeMap<String, u64> = t
            .responses
            .iter()
            .map(|(k, n)| (k.to_string(), *n))
            .collect();
        let _ = writeln!(
            s,
            "  Answers:     {} PING acks, {} SETTINGS acks, responses {}, RST_STREAM {}, DATA {}",
            t.ping_acks,
            t.settings_acks,
            list(&statuses),
            list(&by_code(&t.resets)),
            units::binary(t.data_bytes as f64)
        );
    }

    /// How many connections the server closed, how soon, and the client's errors.
    fn text_closes(&self, s: &mut String) {
        let t = self.tally;
        let _ = write!(
            s,
            "  Closed:      {} of {} flooding connections by the server (GOAWAY {}; {} without GOAWAY); {} still open",
            t.closed_ms.len(),
            t.flooded,
            list(&by_code(&t.goaways)),
            t.closed_without_goaway,
            t.still_open
        );
        match spread(&t.closed_ms) {
            Some((lo, mid, hi)) => {
                let _ = writeln!(
                    s,
                    "\n  Time to close: min {lo} ms, median {mid} ms, max {hi} ms"
                );
            }
            None => s.push('\n'),
        }
        if t.connect_errors + t.handshake_errors + t.not_h2 + t.bad_frames > 0 {
            let _ = writeln!(
                s,
                "  Errors:      connect {}, handshake {}, no h2 by ALPN {}, bad frames {}",
                t.connect_errors, t.handshake_errors, t.not_h2, t.bad_frames
            );
        }
    }

    /// The server's memory and CPU, when its pid was given.
    fn text_server(&self, s: &mut String) {
        if let Some(m) = self.memory {
            let _ = writeln!(
                s,
                "  Server:      pid {}, memory {} at start, peak {} (+{}), {} at end; CPU {:.2}s in {:.2}s{}",
                m.pid,
                mib(m.start()),
                mib(m.peak()),
                mib(m.growth()),
                mib(m.end()),
                m.cpu_secs,
                m.wall_secs,
                if m.vanished() {
                    "; the process was gone at a sample"
                } else {
                    ""
                }
            );
        }
    }

    pub fn json(&self) -> Value {
        let t = self.tally;
        let ms =
            |v: &[u64]| spread(v).map(|(lo, mid, hi)| json!({"min": lo, "median": mid, "max": hi}));
        let memory = self.memory.map(|m| {
            json!({
                "pid": m.pid,
                "start_bytes": m.start(),
                "peak_bytes": m.peak(),
                "end_bytes": m.end(),
                "growth_bytes": m.growth(),
                "vanished": m.vanished(),
                "cpu_secs": m.cpu_secs,
                "wall_secs": m.wall_secs,
                "samples": m.samples,
            })
        });
        let statuses: BTreeMap<String, u64> = t
            .responses
            .iter()
            .map(|(k, n)| (k.to_string(), *n))
            .collect();
        json!({
            "kind": self.kind.name(),
            "url": self.url,
            "connections": self.connections,
            "reconnect": self.reconnect,
            "elapsed_s": self.elapsed.as_secs_f64(),
            "frames_sent": t.frames_sent,
            "bytes_sent": t.bytes_sent,
            "ping_acks": t.ping_acks,
            "settings_acks": t.settings_acks,
            "responses": statuses,
            "resets": by_code(&t.resets),
            "data_bytes": t.data_bytes,
            "goaways": by_code(&t.goaways),
            "flooded": t.flooded,
            "closed": t.closed_ms.len(),
            "closed_without_goaway": t.closed_without_goaway,
            "still_open": t.still_open,
            "goaway_ms": ms(&t.goaway_ms),
            "closed_ms": ms(&t.closed_ms),
            "errors": {
                "connect": t.connect_errors,
                "handshake": t.handshake_errors,
                "not_h2": t.not_h2,
                "bad_frames": t.bad_frames,
            },
            "server_memory": memory,
        })
    }
}
