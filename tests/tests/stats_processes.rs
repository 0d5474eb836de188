//! The stats endpoint with `worker_processes 2`: one scrape sums the counters of both
//! processes (proxy/src/stats_merge.rs), and a frang block answered with its status is
//! counted as a `frang` close, not a `server` one. The sockets the processes talk over live
//! in a private directory of the supervisor's (proxy/src/runtime_dir.rs).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{curl, free_port, wait_for_port};

const T: Duration = Duration::from_secs(10);

fn start(tag: &str) -> (Origin, Supervised, SocketAddr, SocketAddr) {
    start_with_env(tag, &[])
}

fn start_with_env(
    tag: &str,
    env: &[(&str, &std::path::Path)],
) -> (Origin, Supervised, SocketAddr, SocketAddr) {
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
    let proxy = Supervised(Proxy::start_with_env(setup.dir, &conf, http, env));
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

/// A scrape that covers both processes: the second one may still be starting when the first
/// one serves, so ask until both answer.
fn scrape_both(stats: SocketAddr) -> String {
    let both = "ktls_proxy_stats_processes{state=\"answered\"} 2\n";
    let deadline = std::time::Instant::now() + T;
    let mut metrics = scrape(stats);
    while !metrics.contains(both) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        metrics = scrape(stats);
    }
    assert!(metrics.contains(both), "{metrics}");
    metrics
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
    let before = scrape_both(stats);
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

/// Every entry of `dir`, as names.
fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The readiness and statistics sockets are not at predictable paths in the shared temporary
/// directory (where another local user could take them first) but in a directory of mode
/// 0700 under systemd's `$RUNTIME_DIRECTORY`, removed when the supervisor stops.
#[test]
fn the_processes_sockets_live_in_a_private_directory_removed_at_stop() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = e2e::TempDir::new("stats-runtime-dir");
    let runtime = scratch.join("run");
    let tmp = scratch.join("tmp");
    std::fs::create_dir_all(&runtime).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    let env = [
        ("RUNTIME_DIRECTORY", runtime.as_path()),
        ("TMPDIR", tmp.as_path()),
    ];
    let (_origin, proxy, _http, stats) = start_with_env("stats-runtime-dir-proxy", &env);
    scrape_both(stats);
    let deadline = std::time::Instant::now() + T;
    assert_eq!(entries(&tmp), Vec::<String>::new(), "sockets in TMPDIR");
    let made = entries(&runtime);
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(made[0].starts_with("ktls-proxy-"), "{made:?}");
    let private = runtime.join(&made[0]);
    let mode = std::fs::metadata(&private).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "mode {mode:o}");
    // `notify` goes once both processes have said they are ready.
    while entries(&private).len() > 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(entries(&private), vec!["stats.1".to_string()]);
    drop(proxy);
    assert_eq!(
        entries(&runtime),
        Vec::<String>::new(),
        "left after the stop"
    );
}
