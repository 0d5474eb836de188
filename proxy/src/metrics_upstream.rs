//! Upstream metrics: which servers are up (`ktls_proxy_upstream_server_up`), how long
//! each server group takes to answer (`ktls_proxy_upstream_response_seconds`), and what
//! HTTP/2 origins did to the proxy's client role (`ktls_proxy_upstream_h2_*`).
//!
//! Health is each worker's own view (its scheduler takes a failing server out): every worker
//! publishes the servers it has out, and a server is up when no worker has it out. The
//! response time runs from the request's last byte written to the server to the response
//! head read from it (the access log's `urt=`). Each worker counts into histograms of its own
//! (one writer each, on cache lines no other worker writes), summed when `/metrics` is read:
//! a forwarded response costs no lock or atomic that another core also writes.

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use crate::histogram::{self, Histogram};
use crate::runtime::Runtime;

/// TLS handshakes with servers (`server_tls`): by outcome, a failure also counted as a
/// connect error (`ktls_proxy_upstream_errors_total{kind="connect"}`).
#[derive(Default)]
pub struct UpstreamTlsCounts {
    /// A full handshake.
    pub full: std::sync::atomic::AtomicU64,
    /// The server's last session resumed.
    pub resumed: std::sync::atomic::AtomicU64,
    /// The server's certificate refused (untrusted, expired, another name).
    pub verify_failed: std::sync::atomic::AtomicU64,
    /// Any other failure (an alert from the server, e.g. a client certificate it wanted; the
    /// connection closed).
    pub failed: std::sync::atomic::AtomicU64,
}

/// What the HTTP/2 connections to origins (`server_proto h2`) met in one turn, counted by
/// the worker that drove them ([`H2ClientCounters::add`]).
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct H2ClientSeen {
    /// Connections cut for a flood (GOAWAY ENHANCE_YOUR_CALM: PING, SETTINGS, ...).
    pub floods: u64,
    /// Streams the origin refused (RST_STREAM REFUSED_STREAM), retried when they may be.
    pub refused: u64,
    /// GOAWAY frames received.
    pub goaways: u64,
    /// Other streams reset before their response ended (by the origin, or as their
    /// connection failed).
    pub resets: u64,
}

/// [`H2ClientSeen`] summed over the workers (added once per connection turn that saw
/// something, never per frame).
#[derive(Default)]
pub struct H2ClientCounters {
    floods: std::sync::atomic::AtomicU64,
    refused: std::sync::atomic::AtomicU64,
    goaways: std::sync::atomic::AtomicU64,
    resets: std::sync::atomic::AtomicU64,
}

impl H2ClientCounters {
    pub fn add(&self, seen: &H2ClientSeen) {
        use std::sync::atomic::Ordering::Relaxed;
        for (counter, n) in [
            (&self.floods, seen.floods),
            (&self.refused, seen.refused),
            (&self.goaways, seen.goaways),
            (&self.resets, seen.resets),
        ] {
            if n > 0 {
                counter.fetch_add(n, Relaxed);
            }
        }
    }

    fn render(&self, out: &mut String) {
        use std::sync::atomic::Ordering::Relaxed;
        for (name, help, counter) in [
            (
                "floods",
                "HTTP/2 connections to origins cut for a flood (GOAWAY ENHANCE_YOUR_CALM).",
                &self.floods,
            ),
            (
                "refused_streams",
                "Streams HTTP/2 origins refused (RST_STREAM REFUSED_STREAM).",
                &self.refused,
            ),
            (
                "goaways_received",
                "GOAWAY frames received from HTTP/2 origins.",
                &self.goaways,
            ),
            (
                "resets",
                "Other streams to HTTP/2 origins reset before their response ended.",
                &self.resets,
            ),
        ] {
            let name = format!("ktls_proxy_upstream_h2_{name}_total");
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}\n",
                counter.load(Relaxed)
            ));
        }
    }
}

/// A server by its group's name and its address, as the metrics label it.
pub type ServerKey = (String, String);

#[derive(Default)]
pub struct UpstreamMetrics {
    /// The servers each worker has taken out, by worker index.
    down: Vec<Mutex<Vec<ServerKey>>>,
    /// Response times by worker index, then by server group name.
    response_time: Vec<WorkerTimes>,
    /// The HTTP/2 client role's events (`server_proto h2`).
    pub h2_client: H2ClientCounters,
}

/// One worker's response-time histograms by server group name; a group appears at its
/// first response. Written by that worker only; the lock is taken for writing once per
/// group, and is the worker's own (two cache lines apart from the next worker's).
#[derive(Default)]
#[repr(align(128))]
struct WorkerTimes(RwLock<Vec<(String, Arc<Histogram>)>>);

impl UpstreamMetrics {
    pub fn new(workers: usize) -> UpstreamMetrics {
        UpstreamMetrics {
            down: (0..workers).map(|_| Mutex::default()).collect(),
            response_time: (0..workers).map(|_| WorkerTimes::default()).collect(),
            h2_client: H2ClientCounters::default(),
        }
    }

    /// Worker `worker` has exactly `servers` out now.
    pub fn publish_down(&self, worker: usize, servers: Vec<ServerKey>) {
        if let Some(slot) = self.down.get(worker) {
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = servers;
        }
    }

    /// One response of a server of `group`, read by worker `worker`, took `d` from request
    /// sent to head read.
    pub fn record_response(&self, worker: usize, group: &str, d: Duration) {
        let Some(WorkerTimes(times)) = self.response_time.get(worker) else {
            return;
        };
        {
            let groups = times.read().unwrap_or_else(PoisonError::into_inner);
            if let Some((_, h)) = groups.iter().find(|(g, _)| g == group) {
                // Only this worker writes its histograms.
                return h.record_owned(d);
            }
        }
        let h = Arc::new(Histogram::default());
        h.record_owned(d);
        times
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push((group.to_string(), h));
    }

    /// The health gauge of every server of `rt` and the response-time histograms.
    pub fn render(&self, rt: &Runtime, out: &mut String) {
        let down: Vec<ServerKey> = self
            .down
            .iter()
            .flat_map(|d| d.lock().unwrap_or_else(PoisonError::into_inner).clone())
            .collect();
        out.push_str(
            "# HELP ktls_proxy_upstream_server_up 1 while the server takes requests, 0 while a worker has it out after failures (with worker_processes N, the number of processes that take it).\n\
             # TYPE ktls_proxy_upstream_server_up gauge\n",
        );
        for group in &rt.groups {
            for server in &group.servers {
                let key = (group.name.clone(), server.addr.to_string());
                let up = u8::from(!down.contains(&key));
                out.push_str(&format!(
                    "ktls_proxy_upstream_server_up{{group=\"{}\",server=\"{}\"}} {up}\n",
                    key.0, key.1
                ));
            }
        }
        let name = "ktls_proxy_upstream_response_seconds";
        histogram::header(
            out,
            name,
            "Seconds from a request's last byte written to a server to its response head read, by server group.",
        );
        // The workers' histograms summed by group, in the order groups first answered.
        let mut sums: Vec<(String, histogram::Snapshot)> = Vec::new();
        for WorkerTimes(times) in &self.response_time {
            for (group, h) in times.read().unwrap_or_else(PoisonError::into_inner).iter() {
                match sums.iter_mut().find(|(g, _)| g == group) {
                    Some((_, sum)) => sum.add(&h.snapshot()),
                    None => sums.push((group.clone(), h.snapshot())),
                }
            }
        }
        for (group, sum) in &sums {
            sum.render(out, name, &format!("group=\"{group}\""));
        }
        self.h2_client.render(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_counts_apart_and_the_groups_are_summed_when_read() {
        let text = "srv_group a { server 127.0.0.1:1; }\nsrv_group b { server 127.0.0.1:2; }\n";
        let loaded = config::parse_str("t.conf", text, std::path::Path::new("/"));
        let rt = Runtime::build(loaded.expect("config loads").config).expect("runtime builds");
        let m = UpstreamMetrics::new(2);
        m.record_response(0, "a", Duration::from_millis(3));
        m.record_response(1, "a", Duration::from_millis(3));
        m.record_response(1, "b", Duration::from_millis(3));
        // A worker index the metrics were not made for is ignored, not a panic.
        m.record_response(7, "a", Duration::from_millis(3));
        let mut out = String::new();
        m.render(&rt, &mut out);
        let count = |group: &str| {
            let prefix =
                format!("ktls_proxy_upstream_response_seconds_count{{group=\"{group}\"}} ");
            out.lines()
                .find_map(|l| l.strip_prefix(prefix.as_str()))
                .map(str::to_owned)
        };
        assert_eq!(count("a").as_deref(), Some("2"), "{out}");
        assert_eq!(count("b").as_deref(), Some("1"), "{out}");
    }
}
