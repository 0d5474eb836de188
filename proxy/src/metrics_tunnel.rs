//! WebSocket tunnel counters: tunnels opened, open now, bytes each way, and tunnels closed by
//! why they ended.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a tunnel ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TunnelEnd {
    /// The client closed its side; its last bytes were passed on.
    Client,
    /// The origin closed its side; its last bytes were passed on.
    Origin,
    /// No byte moved either way for `client_ws_timeout`.
    IdleTimeout,
    /// A write failed, or serving the connection panicked.
    Error,
    /// A graceful stop of the proxy.
    Shutdown,
    /// A reload removed the origin's server and its `grace_shutdown_time` ran out.
    ServerRemoved,
}

impl TunnelEnd {
    pub const ALL: [TunnelEnd; 6] = [
        TunnelEnd::Client,
        TunnelEnd::Origin,
        TunnelEnd::IdleTimeout,
        TunnelEnd::Error,
        TunnelEnd::Shutdown,
        TunnelEnd::ServerRemoved,
    ];

    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            TunnelEnd::Client => "client",
            TunnelEnd::Origin => "origin",
            TunnelEnd::IdleTimeout => "idle_timeout",
            TunnelEnd::Error => "error",
            TunnelEnd::Shutdown => "shutdown",
            TunnelEnd::ServerRemoved => "server_removed",
        }
    }
}

#[derive(Default)]
pub struct TunnelMetrics {
    pub opened: AtomicU64,
    pub open: AtomicU64,
    pub bytes_to_origin: AtomicU64,
    pub bytes_to_client: AtomicU64,
    closed: [AtomicU64; TunnelEnd::ALL.len()],
}

impl TunnelMetrics {
    pub fn count_open(&self) {
        self.opened.fetch_add(1, Ordering::Relaxed);
        self.open.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count_close(&self, end: TunnelEnd) {
        self.closed[end as usize].fetch_add(1, Ordering::Relaxed);
        let _ = self
            .open
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    pub fn render(&self, out: &mut String) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut family = |name: &str, kind: &str, help: &str, samples: &[(String, u64)]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in samples {
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        };
        family(
            "ktls_proxy_websocket_tunnels_total",
            "counter",
            "WebSocket tunnels opened (the origin answered 101).",
            &[(String::new(), get(&self.opened))],
        );
        family(
            "ktls_proxy_websocket_tunnels_open",
            "gauge",
            "WebSocket tunnels open now.",
            &[(String::new(), get(&self.open))],
        );
        family(
            "ktls_proxy_websocket_bytes_total",
            "counter",
            "Bytes passed through WebSocket tunnels, by direction.",
            &[
                (
                    "{direction=\"to_origin\"}".into(),
                    get(&self.bytes_to_origin),
                ),
                (
                    "{direction=\"to_client\"}".into(),
                    get(&self.bytes_to_client),
                ),
            ],
        );
        let closed: Vec<(String, u64)> = TunnelEnd::ALL
            .iter()
            .map(|e| {
                (
                    format!("{{reason=\"{}\"}}", e.as_str()),
                    get(&self.closed[*e as usize]),
                )
            })
            .collect();
        family(
            "ktls_proxy_websocket_tunnels_closed_total",
            "counter",
            "WebSocket tunnels closed, by reason.",
            &closed,
        );
    }
}
