//! Process counters and their Prometheus names. Every metric name lives in this module.
//!
//! Counters are relaxed atomics: each is an independent tally, read only for reporting.
//! The ones a request touches live in [`WorkerMetrics`], one block per worker thread on cache
//! lines of its own, written only by that worker (plain load and store, no locked
//! read-modify-write) and summed when the stats are scraped: a request never writes a cache
//! line another core also writes. The rest, per connection or rarer, are shared.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::close_reason::CloseReason;

/// How a TLS connection's records are handled after the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsPath {
    /// Both directions encrypted by the kernel; no user-space TLS state left.
    KtlsBoth,
    /// The kernel encrypts what the proxy sends; OpenSSL decrypts what it receives.
    KtlsSendOnly,
    /// The proxy's own record layer, both directions; no SSL object left.
    Records,
    /// OpenSSL's record layer (`tls_ktls off`, or a cipher the proxy's layer does not do).
    UserSpace,
}

/// One worker thread's counters. Only that worker writes them (the invariant that makes
/// [`WorkerMetrics::bump`]'s load-then-store exact); anyone may read them. Aligned to two
/// cache lines (the adjacent-line prefetcher pairs lines) so that no two workers' blocks
/// share one.
#[derive(Default)]
#[repr(align(128))]
pub struct WorkerMetrics {
    pub connections_accepted: AtomicU64,
    pub connections_open: AtomicU64,
    pub requests: AtomicU64,
    /// Entries in the worker's timer heap, stale ones included (a gauge).
    pub timers_queued: AtomicU64,
    /// Timer entries that came due and were fired, stale ones included: a handful per
    /// connection and timeout, so a count that races shows a timer re-arming into the past.
    pub timers_fired: AtomicU64,
    /// Responses sent to clients by status class: 1xx, 2xx, 3xx, 4xx, 5xx.
    responses: [AtomicU64; 5],
    /// From each answered request's parsed head to the end of its exchange.
    pub request_duration: crate::histogram::Histogram,
}

impl WorkerMetrics {
    /// Adds one to a counter of this worker's. Called only by the owning worker thread, so
    /// a plain load and store cannot lose a concurrent update (there is none), and readers
    /// see some recent value, as with any relaxed counter.
    pub fn bump(counter: &AtomicU64) {
        counter.store(
            counter.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
    }

    /// Takes one from a gauge of this worker's (same rule as [`WorkerMetrics::bump`]).
    pub fn drop_one(gauge: &AtomicU64) {
        gauge.store(
            gauge.load(Ordering::Relaxed).saturating_sub(1),
            Ordering::Relaxed,
        );
    }

    /// Counts one response to a client with `status`.
    pub fn count_status(&self, status: u16) {
        let class = match status {
            100..=199 => 0,
            200..=299 => 1,
            300..=399 => 2,
            400..=499 => 3,
            _ => 4,
        };
        WorkerMetrics::bump(&self.responses[class]);
    }
}

/// The counters of one process.
#[derive(Default)]
pub struct Metrics {
    pub handshakes_full: AtomicU64,
    pub handshakes_resumed: AtomicU64,
    pub handshakes_failed: AtomicU64,
    pub tls_path_ktls_both: AtomicU64,
    pub tls_path_ktls_send: AtomicU64,
    pub tls_path_records: AtomicU64,
    pub tls_path_user: AtomicU64,
    /// kTLS setup failures by reason label (bounded: the reasons of `ktls::offload`).
    pub ktls_fallbacks: std::sync::Mutex<Vec<(&'static str, u64)>>,
    /// Handshakes cut by their deadline, by OpenSSL's short state name at the cut (which
    /// flight of the client's was missing).
    pub handshake_timeouts: std::sync::Mutex<Vec<(&'static str, u64)>>,
    /// Failed handshakes by reason (the labels of `handshake_failure::REASONS`).
    pub handshake_failures: std::sync::Mutex<Vec<(&'static str, u64)>>,
    /// Blocked clients and requests by limit (frang directive names, `http_chain`, `tft` and
    /// `tfh` for the fingerprint limits).
    pub blocks: std::sync::Mutex<Vec<(&'static str, u64)>>,
    pub upstream_connect_errors: AtomicU64,
    pub upstream_timeouts: AtomicU64,
    pub upstream_retries: AtomicU64,
    pub upstream_errors: AtomicU64,
    /// Upstream connections closed instead of pooled because they may be out of step with
    /// their server (request body not fully sent, or a body may follow the response).
    pub upstream_not_reused: AtomicU64,
    /// Upstream responses refused for sending too many interim (1xx) responses.
    pub upstream_interim_floods: AtomicU64,
    pub parse_errors: AtomicU64,
    pub panics: AtomicU64,
    /// Client connections closed, by [`CloseReason::index`].
    pub connections_closed: [AtomicU64; CloseReason::ALL.len()],
    pub workers: Vec<WorkerMetrics>,
    pub h2: crate::metrics_h2::H2Metrics,
    pub quic: crate::metrics_quic::QuicMetrics,
    pub tunnels: crate::metrics_tunnel::TunnelMetrics,
    pub sticky: crate::sticky::metrics::StickyMetrics,
    pub upstream: crate::metrics_upstream::UpstreamMetrics,
    pub upstream_tls: crate::metrics_upstream::UpstreamTlsCounts,
}

impl Metrics {
    pub fn new(workers: usize) -> Arc<Metrics> {
        Arc::new(Metrics {
            workers: (0..workers).map(|_| WorkerMetrics::default()).collect(),
            upstream: crate::metrics_upstream::UpstreamMetrics::new(workers),
            ..Metrics::default()
        })
    }

    /// The sum over the workers of one of their counters.
    fn workers_sum(&self, f: impl Fn(&WorkerMetrics) -> &AtomicU64) -> u64 {
        self.workers
            .iter()
            .map(|w| f(w).load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }

    pub fn count_tls_path(&self, path: TlsPath) {
        bump(match path {
            TlsPath::KtlsBoth => &self.tls_path_ktls_both,
            TlsPath::KtlsSendOnly => &self.tls_path_ktls_send,
            TlsPath::Records => &self.tls_path_records,
            TlsPath::UserSpace => &self.tls_path_user,
        });
    }

    /// Counts one client connection closed for `reason`.
    pub fn count_close(&self, reason: CloseReason) {
        bump(&self.connections_closed[reason.index()]);
    }

    /// Counts a handshake cut by its deadline in OpenSSL state `state` (`SSL_state_string`).
    pub fn count_handshake_timeout(&self, state: &'static str) {
        count_label(&self.handshake_timeouts, state);
    }

    /// Counts a failed handshake (besides `handshakes_total{result="failed"}`) by `reason`.
    pub fn count_handshake_failure(&self, reason: &'static str) {
        count_label(&self.handshake_failures, reason);
    }

    pub fn count_block(&self, limit: &'static str) {
        count_label(&self.blocks, limit);
    }

    pub fn count_ktls_fallback(&self, reason: &'static str) {
        count_label(&self.ktls_fallbacks, reason);
    }

    /// The Prometheus text exposition of every counter.
    pub fn render(&self, cache: Option<&str>) -> String {
        let mut text = Exposition(String::with_capacity(4096));
        self.render_tls(&mut text);
        self.render_traffic(&mut text);
        self.render_workers(&mut text);
        let mut out = text.0;
        self.render_request_duration(&mut out);
        self.h2.render(&mut out);
        self.quic.render(&mut out);
        self.tunnels.render(&mut out);
        self.sticky.render(&mut out);
        if let Some(cache) = cache {
            out.push_str(cache);
        }
        out
    }

    /// Handshakes, record paths, fallbacks, blocks, the record layer's own events.
    fn render_tls(&self, text: &mut Exposition) {
        text.counter(
            "ktls_proxy_tls_handshakes_total",
            "TLS handshakes by outcome.",
            [
                ("{result=\"full\"}", get(&self.handshakes_full)),
                ("{result=\"resumed\"}", get(&self.handshakes_resumed)),
                ("{result=\"failed\"}", get(&self.handshakes_failed)),
            ],
        );
        text.counter(
            "ktls_proxy_tls_connections_total",
            "TLS connections by record path after the handshake.",
            [
                ("{path=\"ktls_both\"}", get(&self.tls_path_ktls_both)),
                ("{path=\"ktls_send_only\"}", get(&self.tls_path_ktls_send)),
                ("{path=\"records\"}", get(&self.tls_path_records)),
                ("{path=\"userspace\"}", get(&self.tls_path_user)),
            ],
        );
        for (name, help, key, counts) in [
            (
                "ktls_proxy_ktls_fallbacks_total",
                "Connections that could not use kTLS, by reason.",
                "reason",
                &self.ktls_fallbacks,
            ),
            (
                "ktls_proxy_blocks_total",
                "Clients and requests blocked, by limit.",
                "limit",
                &self.blocks,
            ),
            (
                "ktls_proxy_handshake_timeouts_total",
                "TLS handshakes cut by their deadline, by OpenSSL's state at the cut (PINIT: no complete ClientHello yet; TED: the server answered, the client's Finished is missing).",
                "state",
                &self.handshake_timeouts,
            ),
            (
                "ktls_proxy_tls_handshake_failures_total",
                "TLS handshakes that failed, by reason (unknown_server_name: no vhost has the name the client asked for; not_tls: the client spoke something else; protocol_version, no_shared_cipher, peer_alert: the client refused ours, peer_closed, other).",
                "reason",
                &self.handshake_failures,
            ),
        ] {
            text.counter(name, help, labeled(key, counts));
        }
        // The proxy's record layer counts its rare events itself (process-wide atomics).
        text.counter(
            "ktls_proxy_tls_record_errors_total",
            "Connections the proxy's record layer closed, by the alert sent (peer_alert: the peer sent a fatal one).",
            ktls::record::stats::errors()
                .into_iter()
                .map(|(reason, n)| (format!("{{reason=\"{reason}\"}}"), n)),
        );
        let (updates_received, updates_sent) = ktls::record::stats::key_updates();
        text.counter(
            "ktls_proxy_tls_key_updates_total",
            "TLS 1.3 KeyUpdates on the proxy's record layer.",
            [
                ("{direction=\"received\"}", updates_received),
                ("{direction=\"sent\"}", updates_sent),
            ],
        );
    }

    /// Responses, upstream failures, refused requests, panics, closes.
    fn render_traffic(&self, text: &mut Exposition) {
        text.counter(
            "ktls_proxy_responses_total",
            "Responses sent to clients by status class.",
            [
                ("{class=\"1xx\"}", self.workers_sum(|w| &w.responses[0])),
                ("{class=\"2xx\"}", self.workers_sum(|w| &w.responses[1])),
                ("{class=\"3xx\"}", self.workers_sum(|w| &w.responses[2])),
                ("{class=\"4xx\"}", self.workers_sum(|w| &w.responses[3])),
                ("{class=\"5xx\"}", self.workers_sum(|w| &w.responses[4])),
            ],
        );
        text.counter(
            "ktls_proxy_upstream_errors_total",
            "Upstream failures by kind.",
            [
                ("{kind=\"connect\"}", get(&self.upstream_connect_errors)),
                ("{kind=\"timeout\"}", get(&self.upstream_timeouts)),
                ("{kind=\"retried\"}", get(&self.upstream_retries)),
                ("{kind=\"response\"}", get(&self.upstream_errors)),
                (
                    "{kind=\"interim_flood\"}",
                    get(&self.upstream_interim_floods),
                ),
            ],
        );
        let tls = &self.upstream_tls;
        text.counter(
            "ktls_proxy_upstream_tls_handshakes_total",
            "TLS handshakes with servers (server_tls) by result: full, resumed (the server's last session), verify_failed (its certificate refused), failed (any other reason; both failures also count as connect errors).",
            [
                ("{result=\"full\"}", get(&tls.full)),
                ("{result=\"resumed\"}", get(&tls.resumed)),
                ("{result=\"verify_failed\"}", get(&tls.verify_failed)),
                ("{result=\"failed\"}", get(&tls.failed)),
            ],
        );
        text.counter(
            "ktls_proxy_upstream_not_reused_total",
            "Upstream connections closed rather than pooled because a request body was not fully sent or a response body might still follow.",
            [("", get(&self.upstream_not_reused))],
        );
        text.counter(
            "ktls_proxy_parse_errors_total",
            "Malformed client requests refused.",
            [("", get(&self.parse_errors))],
        );
        text.counter(
            "ktls_proxy_panics_total",
            "Connections closed after a panic while serving them.",
            [("", get(&self.panics))],
        );
        text.counter(
            "ktls_proxy_connections_closed_total",
            "Client connections closed, by reason (handshake_timeout: the TLS handshake did not finish in time).",
            CloseReason::ALL.iter().map(|r| {
                let label = format!("{{reason=\"{}\"}}", r.as_str());
                (label, get(&self.connections_closed[r.index()]))
            }),
        );
    }

    /// The request-latency histogram, summed over the workers.
    fn render_request_duration(&self, out: &mut String) {
        let mut all = crate::histogram::Snapshot::default();
        for w in &self.workers {
            all.add(&w.request_duration.snapshot());
        }
        let name = "ktls_proxy_request_duration_seconds";
        crate::histogram::header(
            out,
            name,
            "Seconds from a request's parsed head to the end of its exchange (the access log's rt=), answered requests only.",
        );
        all.render(out, name, "");
    }

    /// The samples each worker thread keeps for itself, labelled by worker.
    fn render_workers(&self, text: &mut Exposition) {
        let per_worker = |f: fn(&WorkerMetrics) -> &AtomicU64| {
            self.workers
                .iter()
                .enumerate()
                .map(move |(i, w)| (format!("{{worker=\"{i}\"}}"), get(f(w))))
        };
        text.counter(
            "ktls_proxy_connections_accepted_total",
            "Client connections accepted.",
            per_worker(|w| &w.connections_accepted),
        );
        text.counter(
            "ktls_proxy_requests_total",
            "Client requests received.",
            per_worker(|w| &w.requests),
        );
        text.gauge(
            "ktls_proxy_connections_open",
            "Client connections open now.",
            per_worker(|w| &w.connections_open),
        );
        text.gauge(
            "ktls_proxy_timers_queued",
            "Deadlines queued in the worker's timer heap, stale ones included.",
            per_worker(|w| &w.timers_queued),
        );
        text.counter(
            "ktls_proxy_timers_fired_total",
            "Timer entries that came due and were fired, stale ones included.",
            per_worker(|w| &w.timers_fired),
        );
    }
}

fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// The Prometheus text being written: families of samples, each under its HELP and TYPE.
struct Exposition(String);

impl Exposition {
    fn counter<L: AsRef<str>>(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (L, u64)>,
    ) {
        self.family(name, help, "counter", samples);
    }

    fn gauge<L: AsRef<str>>(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (L, u64)>,
    ) {
        self.family(name, help, "gauge", samples);
    }

    fn family<L: AsRef<str>>(
        &mut self,
        name: &str,
        help: &str,
        kind: &str,
        samples: impl IntoIterator<Item = (L, u64)>,
    ) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(self.0, "{name}{} {value}", labels.as_ref());
        }
    }
}

/// Adds one to `label`'s count; the labels are a small fixed set of static names.
fn count_label(counts: &std::sync::Mutex<Vec<(&'static str, u64)>>, label: &'static str) {
    let mut counts = counts.lock().unwrap_or_else(|e| e.into_inner());
    match counts.iter_mut().find(|(l, _)| *l == label) {
        Some((_, n)) => *n += 1,
        None => counts.push((label, 1)),
    }
}

/// `{key="label"}` samples of a labelled count.
fn labeled(key: &str, counts: &std::sync::Mutex<Vec<(&'static str, u64)>>) -> Vec<(String, u64)> {
    let counts = counts.lock().unwrap_or_else(|e| e.into_inner()).clone();
    counts
        .into_iter()
        .map(|(l, n)| (format!("{{{key}=\"{l}\"}}"), n))
        .collect()
}

pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

pub fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_with_labels() {
        let m = Metrics::new(2);
        m.workers[0].count_status(204);
        m.workers[1].count_status(502);
        m.workers[1].count_status(200);
        m.count_tls_path(TlsPath::UserSpace);
        m.count_ktls_fallback("no_kernel_support");
        m.count_ktls_fallback("no_kernel_support");
        WorkerMetrics::bump(&m.workers[1].requests);
        m.count_close(CloseReason::HandshakeTimeout);
        m.count_close(CloseReason::HandshakeTimeout);
        m.count_handshake_timeout("PINIT");
        let text = m.render(None);
        assert!(
            text.contains("ktls_proxy_connections_closed_total{reason=\"handshake_timeout\"} 2")
        );
        assert!(text.contains("ktls_proxy_connections_closed_total{reason=\"client\"} 0"));
        assert!(text.contains("ktls_proxy_handshake_timeouts_total{state=\"PINIT\"} 1"));
        assert!(text.contains("ktls_proxy_responses_total{class=\"2xx\"} 2"));
        assert!(text.contains("ktls_proxy_responses_total{class=\"5xx\"} 1"));
        assert!(text.contains("ktls_proxy_tls_connections_total{path=\"userspace\"} 1"));
        assert!(text.contains("ktls_proxy_ktls_fallbacks_total{reason=\"no_kernel_support\"} 2"));
        assert!(text.contains("ktls_proxy_requests_total{worker=\"1\"} 1"));
    }

    #[test]
    fn workers_counters_share_no_cache_line() {
        let m = Metrics::new(3);
        assert!(std::mem::align_of::<WorkerMetrics>() >= 128);
        let at = |i: usize| std::ptr::addr_of!(m.workers[i]) as usize;
        assert!(at(1) - at(0) >= 128 && at(2) - at(1) >= 128);
        WorkerMetrics::bump(&m.workers[2].connections_open);
        WorkerMetrics::drop_one(&m.workers[2].connections_open);
        WorkerMetrics::drop_one(&m.workers[2].connections_open);
        assert_eq!(m.workers[2].connections_open.load(Ordering::Relaxed), 0);
    }
}
