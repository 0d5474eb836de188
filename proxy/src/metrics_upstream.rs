//! Upstream metrics: which servers are up (`ktls_proxy_upstream_server_up`) and how long
//! each server group takes to answer (`ktls_proxy_upstream_response_seconds`).
//!
//! Health is each worker's own view (its scheduler takes a failing server out): every worker
//! publishes the servers it has out, and a server is up when no worker has it out. The
//! response time runs from the request's last byte written to the server to the response
//! head read from it (the access log's `urt=`).

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use crate::histogram::{self, Histogram};
use crate::runtime::Runtime;

/// A server by its group's name and its address, as the metrics label it.
pub type ServerKey = (String, String);

#[derive(Default)]
pub struct UpstreamMetrics {
    /// The servers each worker has taken out, by worker index.
    down: Vec<Mutex<Vec<ServerKey>>>,
    /// Response times by server group name; a group appears at its first response.
    response_time: RwLock<Vec<(String, Arc<Histogram>)>>,
}

impl UpstreamMetrics {
    pub fn new(workers: usize) -> UpstreamMetrics {
        UpstreamMetrics {
            down: (0..workers).map(|_| Mutex::default()).collect(),
            response_time: RwLock::default(),
        }
    }

    /// Worker `worker` has exactly `servers` out now.
    pub fn publish_down(&self, worker: usize, servers: Vec<ServerKey>) {
        if let Some(slot) = self.down.get(worker) {
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = servers;
        }
    }

    /// One response of a server of `group` took `d` from request sent to head read.
    pub fn record_response(&self, group: &str, d: Duration) {
        {
            let groups = self
                .response_time
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some((_, h)) = groups.iter().find(|(g, _)| g == group) {
                return h.record(d);
            }
        }
        let mut groups = self
            .response_time
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        match groups.iter().find(|(g, _)| g == group) {
            Some((_, h)) => h.record(d),
            None => {
                let h = Arc::new(Histogram::default());
                h.record(d);
                groups.push((group.to_string(), h));
            }
        }
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
        let groups = self
            .response_time
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        for (group, h) in groups.iter() {
            h.snapshot()
                .render(out, name, &format!("group=\"{group}\""));
        }
    }
}
