//! The `stats_listen ADDR;` extension: Prometheus text metrics at `/metrics` and a live
//! dashboard at `/` (one static page that scrapes `/metrics` and plots the counters), over
//! plain HTTP, served by one small thread with blocking sockets (a scrape is rare; it must
//! not touch the workers).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, SystemTime};

use crate::server::ServeError;
use crate::worker::Shared;

/// The dashboard page: no external scripts, so it works on hosts without internet access.
const DASHBOARD: &str = include_str!("dashboard.html");

/// When this process started serving statistics (at its start): for the uptime.
static STARTED: OnceLock<SystemTime> = OnceLock::new();

pub fn start(addr: SocketAddr, shared: Arc<Shared>) -> Result<(), ServeError> {
    STARTED.get_or_init(SystemTime::now);
    // Bound exclusively (no SO_REUSEPORT): a second instance on the same address must fail
    // loudly rather than answer some of the scrapes with its own counters.
    let listener = TcpListener::bind(addr).map_err(|reason| ServeError::Bind { addr, reason })?;
    thread::Builder::new()
        .name("stats".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                answer(stream, &shared);
            }
        })
        .map_err(|e| ServeError::Setup(format!("cannot start the stats thread: {e}")))?;
    Ok(())
}

fn answer(mut stream: TcpStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let mut req = [0u8; 1024];
    let n = stream.read(&mut req).unwrap_or(0);
    let (status, content_type, body) = match page(&req[..n]) {
        Some(Page::Metrics) => {
            // Every worker process's counters, summed (`stats_merge`).
            let processes = shared.runtime().config.worker_processes;
            let mut text = crate::stats_merge::all_processes(metrics(shared), processes);
            // Not summed over the processes: one version, one start.
            text.push_str(&process_info());
            (200, "text/plain; version=0.0.4", text)
        }
        Some(Page::Dashboard) => (200, "text/html; charset=utf-8", DASHBOARD.to_string()),
        None => (404, "text/plain", "not found\n".to_string()),
    };
    let head = response_head(status, content_type, body.len());
    let _ = stream.write_all(&head);
    let _ = stream.write_all(body.as_bytes());
}

/// A page's response head, written by http1's writer: not stored, and the connection closes
/// after it (one request per connection).
fn response_head(status: u16, content_type: &str, body_len: usize) -> Vec<u8> {
    use http1::FieldSink as _;
    let mut head = Vec::with_capacity(160);
    let mut text = http1::HeadText { out: &mut head };
    text.status(status, http1::reason_phrase(status).as_bytes());
    text.field(b"Content-Type", content_type.as_bytes());
    text.field(b"Content-Length", body_len.to_string().as_bytes());
    text.field(b"Cache-Control", b"no-store");
    text.field(b"Connection", b"close");
    text.end();
    head
}

#[derive(Debug, PartialEq, Eq)]
enum Page {
    Metrics,
    Dashboard,
}

/// Which page a request line asks for (the query string is ignored).
fn page(request: &[u8]) -> Option<Page> {
    let line = request.split(|&b| b == b'\r' || b == b'\n').next()?;
    let mut parts = line.split(|&b| b == b' ');
    let (method, target) = (parts.next()?, parts.next()?);
    if method != b"GET" {
        return None;
    }
    let path = target.split(|&b| b == b'?').next()?;
    match path {
        b"/metrics" => Some(Page::Metrics),
        b"/" | b"/index.html" => Some(Page::Dashboard),
        _ => None,
    }
}

/// The version and the start time, for the dashboard's header.
fn process_info() -> String {
    let started = STARTED.get().copied().unwrap_or_else(SystemTime::now);
    let since_epoch = started
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let uptime = started.elapsed().unwrap_or_default().as_secs();
    format!(
        "# HELP ktls_proxy_build_info The proxy's version, in the label.\n\
         # TYPE ktls_proxy_build_info gauge\n\
         ktls_proxy_build_info{{version=\"{}\"}} 1\n\
         # HELP ktls_proxy_start_time_seconds When the proxy started, seconds since the Unix epoch.\n\
         # TYPE ktls_proxy_start_time_seconds gauge\n\
         ktls_proxy_start_time_seconds {since_epoch}\n\
         # HELP ktls_proxy_uptime_seconds Seconds since the proxy started.\n\
         # TYPE ktls_proxy_uptime_seconds gauge\n\
         ktls_proxy_uptime_seconds {uptime}\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// This process's metrics as Prometheus text.
pub(crate) fn metrics(shared: &Shared) -> String {
    let mut text = String::new();
    shared.cache.metrics().write_prometheus(&mut text);
    let runtime = shared.runtime();
    if runtime
        .config
        .cluster
        .as_ref()
        .is_some_and(|c| c.redis.is_some())
    {
        text.push_str(&format!(
            "# HELP ktls_proxy_fleet_redis_up Whether Redis answered the cluster's last sync (0: local limits only).\n\
             # TYPE ktls_proxy_fleet_redis_up gauge\nktls_proxy_fleet_redis_up {}\n",
            u8::from(crate::frang::redis_up())
        ));
        let (waiting, dropped) = crate::fleet::backlog();
        text.push_str(&format!(
            "# HELP ktls_proxy_fleet_backlog Clients whose new counts wait for a sync turn.\n\
             # TYPE ktls_proxy_fleet_backlog gauge\nktls_proxy_fleet_backlog {waiting}\n\
             # HELP ktls_proxy_fleet_dropped_total Clients' counts dropped unsent: more waiting than the backlog holds.\n\
             # TYPE ktls_proxy_fleet_dropped_total counter\nktls_proxy_fleet_dropped_total {dropped}\n\
             # HELP ktls_proxy_fleet_blocks_lost_total Blocks of other nodes trimmed from the stream before this node read them.\n\
             # TYPE ktls_proxy_fleet_blocks_lost_total counter\nktls_proxy_fleet_blocks_lost_total {}\n\
             # HELP ktls_proxy_fleet_sticky_dropped_total Sticky pins and challenge passes kept local: more made between two sync turns than the outbox holds.\n\
             # TYPE ktls_proxy_fleet_sticky_dropped_total counter\nktls_proxy_fleet_sticky_dropped_total {}\n\
             # HELP ktls_proxy_fleet_sticky_lost_total Sticky pins and challenge passes trimmed from the stream before this node read them.\n\
             # TYPE ktls_proxy_fleet_sticky_lost_total counter\nktls_proxy_fleet_sticky_lost_total {}\n",
            crate::fleet::blocks_lost(),
            crate::sticky::fleet::dropped(),
            crate::fleet::sticky_lost()
        ));
    }
    if runtime.resolved.is_some() {
        let (ok, failed, changes) = crate::resolve::counts();
        text.push_str(&format!(
            "# HELP ktls_proxy_dns_queries_total The resolver's questions about server names, by result.\n\
             # TYPE ktls_proxy_dns_queries_total counter\n\
             ktls_proxy_dns_queries_total{{result=\"answered\"}} {ok}\n\
             ktls_proxy_dns_queries_total{{result=\"failed\"}} {failed}\n\
             # HELP ktls_proxy_dns_changes_total Answers that changed the servers of a running configuration.\n\
             # TYPE ktls_proxy_dns_changes_total counter\nktls_proxy_dns_changes_total {changes}\n"
        ));
    }
    if runtime.tier.is_some() {
        let (to_owner, fallback) = crate::fleet::tier::counts();
        text.push_str(&format!(
            "# HELP ktls_proxy_cache_tier_total Cache misses sent to the key's owner among the peers, and of those sent to the origin after the owner gave no answer.\n\
             # TYPE ktls_proxy_cache_tier_total counter\n\
             ktls_proxy_cache_tier_total{{kind=\"owner\"}} {to_owner}\n\
             ktls_proxy_cache_tier_total{{kind=\"fallback\"}} {fallback}\n"
        ));
    }
    let tracked = runtime.frang.tracked_clients();
    text.push_str(&format!(
        "# HELP ktls_proxy_frang_clients Clients tracked for frang limits.\n\
         # TYPE ktls_proxy_frang_clients gauge\nktls_proxy_frang_clients {tracked}\n"
    ));
    shared.metrics.upstream.render(&shared.runtime(), &mut text);
    shared.metrics.render(Some(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pages_head_is_the_status_its_type_length_no_store_and_close() {
        let expected = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
            Content-Length: 42\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n";
        let head = response_head(200, "text/plain; version=0.0.4", 42);
        assert_eq!(String::from_utf8_lossy(&head), expected);
        let missing = response_head(404, "text/plain", 10);
        assert!(missing.starts_with(b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n"));
    }

    #[test]
    fn pages_by_request_line() {
        assert_eq!(page(b"GET /metrics HTTP/1.1\r\n"), Some(Page::Metrics));
        assert_eq!(page(b"GET /metrics?x=1 HTTP/1.1\r\n"), Some(Page::Metrics));
        assert_eq!(page(b"GET / HTTP/1.1\r\n"), Some(Page::Dashboard));
        assert_eq!(page(b"GET /metricsx HTTP/1.1\r\n"), None);
        assert_eq!(page(b"POST /metrics HTTP/1.1\r\n"), None);
        assert_eq!(page(b""), None);
    }

    #[test]
    fn dashboard_reads_only_metrics_this_process_exports() {
        // Every metric the page plots must exist, or its panel stays empty forever.
        let upstream = {
            let text = "srv_group default { server 127.0.0.1:1; }\n";
            let loaded = config::parse_str("t.conf", text, std::path::Path::new("/"));
            let rt = crate::runtime::Runtime::build(loaded.expect("config loads").config);
            let metrics = crate::metrics::Metrics::new(1);
            metrics
                .upstream
                .record_response(0, "default", Duration::from_millis(3));
            let mut t = String::new();
            metrics
                .upstream
                .render(&rt.expect("runtime builds"), &mut t);
            t
        };
        let exported = [
            crate::metrics::Metrics::new(1).render(None),
            process_info(),
            upstream,
            {
                let mut t = String::new();
                cache::Cache::new(cache::CacheLimits::default())
                    .metrics()
                    .write_prometheus(&mut t);
                t
            },
        ]
        .concat();
        let plotted: Vec<&str> = DASHBOARD
            .split('"')
            .filter(|s| s.starts_with("ktls_"))
            .collect();
        assert!(plotted.len() >= 8, "{plotted:?}");
        for name in plotted {
            assert!(
                exported.contains(name),
                "dashboard plots {name}, not exported"
            );
        }
    }
}
