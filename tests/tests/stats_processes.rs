//! The stats endpoint with `worker_processes 2`: one scrape sums the counters of both
//! processes (proxy/src/stats_merge.rs), and a frang block answered with its status is
//! counted as a `frang` close, not a `server` one.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{curl, free_port, wait_for_port};

const T: Duration = Duration::from_secs(10);

fn start(tag: &str) -> (Origin, Supervised, SocketAddr, SocketAddr) {
    let origin = Origin::start(|_| Response::ok(b"hello".to_vec()));
    let setup = Setup::new(tag);
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = setup.config(
        origin.addr(),
        "",
        &format!(
            "worker_processes 2;\nworker_threads 1;\nstats_listen {stats};\n\
             frang_limits {{ http_methods GET HEAD; }}\nblock_action attack reply;\n"
        ),
    );
    let http = setup.http;
    let proxy = Supervised(setup.start(&conf));
    assert!(wait_for_port(stats, T));
    (origin, proxy, http, stats)
}

/// The supervisor, stopped with SIGTERM when the test ends (also when it fails), which stops
/// its worker processes: dropping `Proxy` would SIGKILL the supervisor alone and leave them
/// running.
struct Supervised(Proxy);

impl Drop for Supervised {
    fn drop(&mut self) {
        self.0.proc.signal(libc::SIGTERM);
        if self.0.proc.wait_exit(Duration::from_secs(20)).is_none() {
            eprintln!("the supervisor did not stop:\n{}", self.0.proc.logs());
        }
    }
}

fn scrape(stats: SocketAddr) -> String {
    let (st, metrics, err) = curl(&[&format!("http://{stats}/metrics")], 5);
    assert!(st.success(), "{err}");
    metrics
}

/// The samples of `name` whose labels contain `label` (or all of them for ""), with their
/// label sets.
fn samples(metrics: &str, name: &str, label: &str) -> Vec<(String, u64)> {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| l.contains(label))
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            Some((key.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn total(metrics: &str, name: &str, label: &str) -> u64 {
    samples(metrics, name, label).iter().map(|s| s.1).sum()
}

/// One request on its own connection, read to the end; the status line.
fn request(http: SocketAddr, method: &str) -> String {
    let mut s = TcpStream::connect(http).expect("connect");
    s.set_read_timeout(Some(T)).unwrap();
    let req = format!(
        "{method} /x HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    String::from_utf8_lossy(&got)
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

#[test]
fn one_scrape_sums_both_processes() {
    let (_origin, _proxy, http, stats) = start("stats-processes");
    let before = scrape(stats);
    assert!(
        before.contains("ktls_proxy_stats_processes{state=\"answered\"} 2\n"),
        "{before}"
    );
    const SENT: u64 = 40;
    for _ in 0..SENT {
        assert_eq!(request(http, "GET"), "HTTP/1.1 200 OK");
    }
    let after = scrape(stats);
    let grew = |name: &str, label: &str| total(&after, name, label) - total(&before, name, label);
    assert_eq!(grew("ktls_proxy_requests_total", ""), SENT, "{after}");
    assert_eq!(
        grew("ktls_proxy_responses_total", "class=\"2xx\""),
        SENT,
        "{after}"
    );
    assert_eq!(
        grew("ktls_proxy_connections_closed_total", "reason=\"server\""),
        SENT,
        "{after}"
    );
    // SO_REUSEPORT spread the 40 connections: both processes served some (each connection
    // lands on either with equal chance), and their per-thread samples are kept apart.
    for process in ["process=\"0\"", "process=\"1\""] {
        let served = total(&after, "ktls_proxy_requests_total", process);
        assert!(served > 0, "no request counted for {process}: {after}");
    }
}

#[test]
fn a_frang_block_answered_with_a_status_is_a_frang_close() {
    let (_origin, _proxy, http, stats) = start("stats-frang-close");
    let before = scrape(stats);
    assert_eq!(request(http, "POST"), "HTTP/1.1 403 Forbidden");
    let after = scrape(stats);
    let grew = |label: &str| {
        total(&after, "ktls_proxy_connections_closed_total", label)
            - total(&before, "ktls_proxy_connections_closed_total", label)
    };
    assert_eq!(grew("reason=\"frang\""), 1, "{after}");
    assert_eq!(grew("reason=\"server\""), 0, "{after}");
}
