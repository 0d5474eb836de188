//! The `--h3-flood` report: a few lines of text, or one JSON object.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::json;

use super::{H3FloodKind, Tally};
use crate::flood::rss::Memory;

pub struct Report<'a> {
    pub url: &'a str,
    pub kind: H3FloodKind,
    pub connections: usize,
    pub elapsed: Duration,
    pub tally: &'a Tally,
    pub memory: Option<&'a Memory>,
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

impl Report<'_> {
    /// Bytes received for each byte sent, over all sockets.
    fn ratio(&self) -> f64 {
        match self.tally.bytes_sent {
            0 => 0.0,
            sent => self.tally.bytes_received as f64 / sent as f64,
        }
    }

    pub fn text(&self) -> String {
        let t = self.tally;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "HTTP/3 flood `{}` @ {}\n  {} {}, {:.2}s",
            self.kind,
            self.url,
            self.connections,
            match self.kind {
                H3FloodKind::Handshake => "sockets",
                _ => "connections",
            },
            self.elapsed.as_secs_f64()
        );
        if self.kind == H3FloodKind::Handshake {
            let _ = writeln!(
                s,
                "  Sent:        {} Initials, {} bytes\n  Received:    {} bytes ({:.2}x what was sent; worst socket {:.2}x), {} Retry packets",
                t.initials,
                t.bytes_sent,
                t.bytes_received,
                self.ratio(),
                t.worst_ratio,
                t.retries
            );
        } else {
            let _ = writeln!(
                s,
                "  Established: {}\n  Streams:     {} opened, at most {} open on one connection, {} rounds waited for stream credit\n  Resets:      {} sent, {} responses completed\n  Received:    {} bytes",
                t.established, t.streams, t.most_open, t.credit_waits, t.resets, t.responses, t.bytes_received
            );
            for (why, n) in &t.ends {
                let _ = writeln!(s, "  Ended:       {why} x{n}");
            }
        }
        if let Some(m) = self.memory {
            let _ =
                writeln!(
                s,
                "  Server:      RSS {} at the start, peak {} (+{}), {} at the end; {:.2} CPU s{}",
                mib(m.start()),
                mib(m.peak()),
                mib(m.growth()),
                mib(m.end()),
                m.cpu_secs,
                if m.vanished() { "; the process VANISHED" } else { "" }
            );
        }
        s
    }

    pub fn json(&self) -> String {
        let t = self.tally;
        let memory = self.memory.map(|m| {
            json!({
                "pid": m.pid, "start": m.start(), "peak": m.peak(), "end": m.end(),
                "growth": m.growth(), "cpu_secs": m.cpu_secs, "vanished": m.vanished(),
            })
        });
        json!({
            "url": self.url,
            "kind": self.kind.name(),
            "connections": self.connections,
            "elapsed_secs": self.elapsed.as_secs_f64(),
            "initials": t.initials,
            "bytes_sent": t.bytes_sent,
            "bytes_received": t.bytes_received,
            "amplification": self.ratio(),
            "worst_socket_amplification": t.worst_ratio,
            "retries": t.retries,
            "established": t.established,
            "streams": t.streams,
            "most_open": t.most_open,
            "credit_waits": t.credit_waits,
            "resets": t.resets,
            "responses": t.responses,
            "ends": t.ends,
            "server_memory": memory,
        })
        .to_string()
    }
}
