//! QUIC counters (issue 33, "Under attack"): handshakes, address validation (Retry),
//! refusals, stateless resets, connection closes by reason and error code, and the HTTP/3
//! flood defences that tripped. The worker's QUIC owner (`worker/quic/`) counts as things
//! happen.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use h3::Flood;

/// Why a new QUIC connection was refused (the `reason` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// frang's per-address connection limits.
    Frang,
    /// `h3_max_handshakes` handshakes in progress on the worker.
    Handshakes,
    /// quinn-proto would not accept it (a bad or expired Retry token, say).
    Quic,
}

/// The QUIC side's own flood defences (beside the `h3` crate's kinds), each closing a
/// connection with H3_EXCESSIVE_LOAD: `floods_total{kind}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuicFlood {
    /// Exchanges stopped (STOP_SENDING) or abandoned (RESET_STREAM before the request was
    /// complete) faster than they complete: the reset budget ran out (rapid reset).
    StreamResets,
    /// More ACK frames than the datagrams received allow (`quic/budget.rs`).
    AckFrames,
    /// More CRYPTO frames than a handshake needs (`quic/budget.rs`).
    CryptoFrames,
    /// More datagrams that move the connection nowhere (PING, ACK only) than what we sent
    /// and the time passed allow (`quic/budget.rs`).
    IdleDatagrams,
}

impl QuicFlood {
    pub const ALL: [QuicFlood; 4] = [
        QuicFlood::StreamResets,
        QuicFlood::AckFrames,
        QuicFlood::CryptoFrames,
        QuicFlood::IdleDatagrams,
    ];

    pub fn name(self) -> &'static str {
        match self {
            QuicFlood::StreamResets => "stream_resets",
            QuicFlood::AckFrames => "ack_frames",
            QuicFlood::CryptoFrames => "crypto_frames",
            QuicFlood::IdleDatagrams => "idle_datagrams",
        }
    }
}

impl Refusal {
    const ALL: [Refusal; 3] = [Refusal::Frang, Refusal::Handshakes, Refusal::Quic];

    fn name(self) -> &'static str {
        match self {
            Refusal::Frang => "frang",
            Refusal::Handshakes => "handshakes",
            Refusal::Quic => "quic",
        }
    }
}

#[derive(Default)]
pub struct QuicMetrics {
    /// Connections accepted (their handshake started).
    pub handshakes: AtomicU64,
    /// Handshakes that completed.
    pub handshakes_done: AtomicU64,
    /// Handshakes in progress now, all workers.
    pub handshaking: AtomicU64,
    /// Retry packets sent (address validation asked for).
    pub retries: AtomicU64,
    /// Initials that came back with our Retry token (the address validated).
    pub validated: AtomicU64,
    refused: [AtomicU64; Refusal::ALL.len()],
    /// Stateless resets sent for datagrams of connections no worker knows.
    pub stateless_resets: AtomicU64,
    /// Datagrams another worker got for a connection it does not own, moved to the owner
    /// (the client's address changed), and those dropped because the owner's queue was full.
    pub moved: AtomicU64,
    pub moved_dropped: AtomicU64,
    /// Connection ends by reason and error code (a bounded label set: see `count_close`).
    closes: Mutex<BTreeMap<(&'static str, String), u64>>,
    floods: [AtomicU64; Flood::ALL.len()],
    /// Connections closed by the QUIC side's own defences, by [`QuicFlood::ALL`].
    quic_floods: [AtomicU64; QuicFlood::ALL.len()],
    /// ACK and CRYPTO frames received from clients, the two kinds `quic/budget.rs` bounds.
    pub frames: [AtomicU64; 2],
}

impl QuicMetrics {
    pub fn refused(&self, why: Refusal) {
        if let Some(i) = Refusal::ALL.iter().position(|r| *r == why) {
            self.refused[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A connection ended for `reason`, with QUIC or HTTP/3 error `code` when it had one.
    /// Codes are the peer's to choose: those above 0x2ff (past the transport, TLS alert,
    /// HTTP/3 and QPACK ranges) are counted together as `other`, so the label set stays
    /// bounded.
    pub fn count_close(&self, reason: &'static str, code: Option<u64>) {
        let code = match code {
            Some(c) if c <= 0x2ff => format!("0x{c:x}"),
            Some(_) => "other".to_string(),
            None => String::new(),
        };
        let mut closes = self.closes.lock().unwrap_or_else(|e| e.into_inner());
        *closes.entry((reason, code)).or_default() += 1;
    }

    /// A connection's `kind` defence tripped `times` more times.
    pub fn add_floods(&self, kind: Flood, times: u64) {
        if let Some(i) = Flood::ALL.iter().position(|k| *k == kind) {
            self.floods[i].fetch_add(times, Ordering::Relaxed);
        }
    }

    /// A connection was closed by the QUIC side's `kind` defence.
    pub fn quic_flood(&self, kind: QuicFlood) {
        if let Some(i) = QuicFlood::ALL.iter().position(|k| *k == kind) {
            self.quic_floods[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn render(&self, out: &mut String) {
        let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, u64)>| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in samples {
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        };
        let one = |v: &AtomicU64| vec![(String::new(), v.load(Ordering::Relaxed))];
        let handshakes = vec![
            (
                "{state=\"started\"}".into(),
                self.handshakes.load(Ordering::Relaxed),
            ),
            (
                "{state=\"done\"}".into(),
                self.handshakes_done.load(Ordering::Relaxed),
            ),
        ];
        family(
            "ktls_proxy_quic_handshakes_total",
            "counter",
            "QUIC handshakes started (connections accepted) and completed.",
            handshakes,
        );
        family(
            "ktls_proxy_quic_handshakes_in_progress",
            "gauge",
            "QUIC handshakes in progress, all workers.",
            one(&self.handshaking),
        );
        family(
            "ktls_proxy_quic_retries_sent_total",
            "counter",
            "Retry packets sent to validate a client's address (RFC 9000 8.1.2).",
            one(&self.retries),
        );
        family(
            "ktls_proxy_quic_addresses_validated_total",
            "counter",
            "Initials that returned a valid Retry token.",
            one(&self.validated),
        );
        let frames = ["ack", "crypto"].iter().zip(&self.frames);
        family(
            "ktls_proxy_quic_frames_received_total",
            "counter",
            "ACK and CRYPTO frames received from clients (each bounded per connection), by type.",
            frames
                .map(|(t, n)| (format!("{{type=\"{t}\"}}"), n.load(Ordering::Relaxed)))
                .collect(),
        );
        self.render_ends(&mut family);
    }

    /// Refusals, resets, closes and flood trips.
    fn render_ends(&self, family: &mut impl FnMut(&str, &str, &str, Vec<(String, u64)>)) {
        let one = |v: &AtomicU64| vec![(String::new(), v.load(Ordering::Relaxed))];
        let refused = Refusal::ALL.iter().zip(&self.refused);
        family(
            "ktls_proxy_quic_refused_total",
            "counter",
            "New QUIC connections refused (CONNECTION_REFUSED), by reason.",
            refused
                .map(|(r, n)| {
                    (
                        format!("{{reason=\"{}\"}}", r.name()),
                        n.load(Ordering::Relaxed),
                    )
                })
                .collect(),
        );
        family(
            "ktls_proxy_quic_stateless_resets_total",
            "counter",
            "Stateless resets sent for datagrams of unknown connections.",
            one(&self.stateless_resets),
        );
        family(
            "ktls_proxy_quic_datagrams_moved_total",
            "counter",
            "Datagrams routed by connection ID to the worker that owns the connection (moved), or dropped for a full queue.",
            vec![
                ("{result=\"moved\"}".into(), self.moved.load(Ordering::Relaxed)),
                ("{result=\"dropped\"}".into(), self.moved_dropped.load(Ordering::Relaxed)),
            ],
        );
        let closes = self.closes.lock().unwrap_or_else(|e| e.into_inner());
        let closes = closes
            .iter()
            .map(|((reason, code), &n)| match code.is_empty() {
                true => (format!("{{reason=\"{reason}\"}}"), n),
                false => (format!("{{reason=\"{reason}\",code=\"{code}\"}}"), n),
            });
        family(
            "ktls_proxy_quic_closes_total",
            "counter",
            "QUIC connections ended, by reason and error code.",
            closes.collect(),
        );
        let floods = Flood::ALL.iter().zip(&self.floods);
        let mut floods: Vec<_> = floods
            .map(|(k, n)| {
                (
                    format!("{{kind=\"{}\"}}", k.name()),
                    n.load(Ordering::Relaxed),
                )
            })
            .collect();
        for (kind, n) in QuicFlood::ALL.iter().zip(&self.quic_floods) {
            let labels = format!("{{kind=\"{}\"}}", kind.name());
            floods.push((labels, n.load(Ordering::Relaxed)));
        }
        family(
            "ktls_proxy_quic_floods_total",
            "counter",
            "HTTP/3, QPACK and QUIC flood defences that tripped (the h3 crate's kinds; rapid reset, ACK and CRYPTO frame floods), by kind.",
            floods,
        );
    }
}
