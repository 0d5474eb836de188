//! HTTP/2 counters: connections and streams, RST_STREAM by code both ways, GOAWAYs, and the
//! flood defences that tripped, by kind. The `h2` crate counts per connection; the worker
//! adds a connection's counts here when it ends, and its flood trips as they happen.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use h2::{ErrorCode, Flood};

/// RST_STREAM codes counted by name (RFC 9113 §7); others are `unknown`.
const CODES: [ErrorCode; 14] = [
    ErrorCode::NO_ERROR,
    ErrorCode::PROTOCOL_ERROR,
    ErrorCode::INTERNAL_ERROR,
    ErrorCode::FLOW_CONTROL_ERROR,
    ErrorCode::SETTINGS_TIMEOUT,
    ErrorCode::STREAM_CLOSED,
    ErrorCode::FRAME_SIZE_ERROR,
    ErrorCode::REFUSED_STREAM,
    ErrorCode::CANCEL,
    ErrorCode::COMPRESSION_ERROR,
    ErrorCode::CONNECT_ERROR,
    ErrorCode::ENHANCE_YOUR_CALM,
    ErrorCode::INADEQUATE_SECURITY,
    ErrorCode::HTTP_1_1_REQUIRED,
];

#[derive(Default)]
pub struct H2Metrics {
    pub connections: AtomicU64,
    pub streams_open: AtomicU64,
    /// The sum of ended connections' counters, kept as the crate's own type.
    sums: Mutex<Sums>,
}

#[derive(Default)]
struct Sums {
    streams: u64,
    refused: u64,
    goaways_sent: u64,
    goaways_received: u64,
    resets_sent: [u64; 14],
    resets_received: [u64; 14],
    floods: [u64; 14],
}

impl H2Metrics {
    /// A connection tripped the `kind` defence `times` times (counted as it happens).
    pub fn add_floods(&self, kind: Flood, times: u64) {
        let mut s = self.sums.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = Flood::ALL.iter().position(|k| *k == kind) {
            s.floods[i] += times;
        }
    }

    /// Adds the counts of a connection that ended (its floods were added as they tripped).
    pub fn add(&self, c: &h2::Counters) {
        let mut s = self.sums.lock().unwrap_or_else(|e| e.into_inner());
        s.streams += c.streams_total;
        s.refused += c.streams_refused;
        s.goaways_sent += c.goaways_sent;
        s.goaways_received += c.goaways_received;
        for (i, code) in CODES.iter().enumerate() {
            s.resets_sent[i] += c.resets_sent(*code);
            s.resets_received[i] += c.resets_received(*code);
        }
    }

    pub fn render(&self, out: &mut String) {
        let s = self.sums.lock().unwrap_or_else(|e| e.into_inner());
        let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, u64)>| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in samples {
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        };
        let one = |v: u64| vec![(String::new(), v)];
        family(
            "ktls_proxy_h2_connections_total",
            "counter",
            "Client connections that spoke HTTP/2.",
            one(self.connections.load(Ordering::Relaxed)),
        );
        family(
            "ktls_proxy_h2_streams_open",
            "gauge",
            "HTTP/2 streams with an exchange in progress.",
            one(self.streams_open.load(Ordering::Relaxed)),
        );
        family(
            "ktls_proxy_h2_streams_total",
            "counter",
            "HTTP/2 streams accepted (of ended connections).",
            one(s.streams),
        );
        family(
            "ktls_proxy_h2_streams_refused_total",
            "counter",
            "HTTP/2 streams refused (REFUSED_STREAM), of ended connections.",
            one(s.refused),
        );
        family(
            "ktls_proxy_h2_goaways_total",
            "counter",
            "GOAWAY frames by direction.",
            vec![
                ("{dir=\"sent\"}".into(), s.goaways_sent),
                ("{dir=\"received\"}".into(), s.goaways_received),
            ],
        );
        let by_code = |counts: &[u64; 14], dir: &str| {
            CODES
                .iter()
                .zip(counts)
                .filter(|(_, &n)| n > 0)
                .map(|(code, &n)| (format!("{{dir=\"{dir}\",code=\"{}\"}}", code.name()), n))
                .collect::<Vec<_>>()
        };
        let mut resets = by_code(&s.resets_sent, "sent");
        resets.extend(by_code(&s.resets_received, "received"));
        family(
            "ktls_proxy_h2_resets_total",
            "counter",
            "RST_STREAM frames by direction and error code.",
            resets,
        );
        family(
            "ktls_proxy_h2_floods_total",
            "counter",
            "HTTP/2 flood defences that tripped, by kind.",
            Flood::ALL
                .iter()
                .zip(&s.floods)
                .map(|(kind, &n)| (format!("{{kind=\"{}\"}}", kind.name()), n))
                .collect(),
        );
    }
}
