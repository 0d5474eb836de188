//! Operating the real proxy: `-t` checks, the published benchmark configurations, reload on
//! SIGHUP, graceful stop on SIGTERM, several worker processes, the statistics endpoint.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::origin::Origin;
use e2e::proxy::Setup;
use e2e::{
    bin_path, curl, free_port, gen_cert, raw_exchange, send_signal, wait_for_port, write_file,
    KeyKind, TempDir,
};

fn check(config: &std::path::Path) -> (bool, String) {
    let out = Command::new(bin_path("proxy"))
        .arg("-t")
        .arg("-c")
        .arg(config)
        .output()
        .expect("run proxy -t");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn get_status(addr: SocketAddr) -> u16 {
    let resp = raw_exchange(
        addr,
        b"GET / HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
    .unwrap_or_default();
    std::str::from_utf8(resp.get(9..12).unwrap_or(b"0"))
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn check_mode_accepts_good_and_reports_every_error_with_position() {
    let dir = TempDir::new("check");
    let (crt, key) = gen_cert(dir.path(), "c", KeyKind::EcdsaP256, &["c.test"]);
    let good = dir.join("good.conf");
    write_file(
        &good,
        &format!(
            "listen 127.0.0.1:1 proto=https;\nsrv_group g {{ server 127.0.0.1:2; }}\n\
             vhost v {{ tls_certificate {}; tls_certificate_key {}; proxy_pass g; }}\nhttp_chain {{ -> v; }}\n",
            crt.display(),
            key.display()
        ),
    );
    let (ok, out) = check(&good);
    assert!(ok && out.contains("is valid"), "{out}");

    let bad = dir.join("bad.conf");
    write_file(
        &bad,
        "listen 127.0.0.1:1;\nlisen 2;\nsrv_group g { server 127.0.0.1:2 conns_n=many; }\n",
    );
    let (ok, out) = check(&bad);
    assert!(!ok, "{out}");
    let name = bad.display().to_string();
    assert!(
        out.contains(&format!("{name}:2:1: error")) && out.contains("did you mean `listen`"),
        "{out}"
    );
    assert!(
        out.contains(&format!("{name}:3:")),
        "every error is reported, not just the first:\n{out}"
    );

    // Certificates are loaded and matched against their keys.
    let (other_crt, _) = gen_cert(dir.path(), "o", KeyKind::EcdsaP256, &["o.test"]);
    let mismatch = dir.join("mismatch.conf");
    write_file(
        &mismatch,
        &format!(
            "listen 127.0.0.1:1 proto=https;\nsrv_group g {{ server 127.0.0.1:2; }}\n\
             vhost v {{ tls_certificate {}; tls_certificate_key {}; proxy_pass g; }}\nhttp_chain {{ -> v; }}\n",
            other_crt.display(),
            key.display()
        ),
    );
    let (ok, out) = check(&mismatch);
    assert!(!ok && out.contains("does not match"), "{out}");
    let missing = dir.join("missing.conf");
    write_file(
        &missing,
        &std::fs::read_to_string(&good)
            .expect("read")
            .replace(&crt.display().to_string(), "/nonexistent.crt"),
    );
    let (ok, out) = check(&missing);
    assert!(!ok && out.contains("/nonexistent.crt"), "{out}");
}

/// The Tempesta configurations published with the Tempesta-vs-nginx benchmarks, extracted
/// from the seed write-up: from a marker line to the end of the main `http_chain` block.
fn seed_configs() -> Option<Vec<String>> {
    let text = e2e::shared_file("seeds/tempesta-vs-nginx-benchmarks.txt")?;
    let mut configs = Vec::new();
    for marker in ["Tempesta config:", "with config"] {
        let extract = || {
            let start = text.find(marker)? + marker.len();
            let rest = &text[start..];
            let main_chain = rest.find("\nhttp_chain {\n")?;
            let end = main_chain + rest[main_chain..].find("\n}\n")? + 3;
            Some(rest[..end].to_string())
        };
        let config = extract().unwrap_or_else(|| {
            panic!("the seed write-up changed: no config after {marker:?} up to its http_chain")
        });
        configs.push(config);
    }
    Some(configs)
}

#[test]
fn published_benchmark_configs_pass_the_check_verbatim_but_for_certificate_paths() {
    let Some(configs) = seed_configs() else {
        return;
    };
    assert_eq!(configs.len(), 2);
    let dir = TempDir::new("seed");
    let (crt, key) = gen_cert(
        dir.path(),
        "tfw-root",
        KeyKind::EcdsaP256,
        &["tempesta-tech.com"],
    );
    for (i, text) in configs.iter().enumerate() {
        assert!(
            text.contains("tfw-root.crt") && text.contains("http_chain"),
            "extraction went wrong:\n{text}"
        );
        let text = text
            .replace(
                "/root/tempesta/etc/tfw-root.crt",
                &crt.display().to_string(),
            )
            .replace(
                "/root/tempesta/etc/tfw-root.key",
                &key.display().to_string(),
            );
        let file = dir.join(&format!("seed{i}.conf"));
        write_file(&file, &text);
        let (ok, out) = check(&file);
        assert!(ok, "published config {i} refused:\n{out}\n{text}");
    }
}

#[test]
fn sighup_with_a_broken_file_keeps_serving_and_a_good_one_applies() {
    let origin = Origin::fixed(b"up");
    let setup = Setup::new("hup");
    let http = setup.http;
    let conf = setup.config(origin.addr(), "", "");
    let mut proxy = setup.start(&conf);
    assert_eq!(get_status(http), 200);
    write_file(&proxy.config, "this is { not a config");
    proxy.proc.signal(libc::SIGHUP);
    assert!(
        proxy
            .proc
            .wait_for_output("reload of", Duration::from_secs(15)),
        "{}",
        proxy.proc.logs()
    );
    assert!(
        proxy
            .proc
            .stderr()
            .contains("still serving the previous configuration"),
        "{}",
        proxy.proc.logs()
    );
    assert_eq!(get_status(http), 200, "stopped serving after a bad reload");
    // A good file takes effect: now every request is blocked by the chain.
    let blocking = conf.replace(
        "http_chain { -> site; }",
        "block_action attack reply;\nhttp_chain { -> block; }",
    );
    write_file(&proxy.config, &blocking);
    proxy.proc.signal(libc::SIGHUP);
    assert!(
        proxy
            .proc
            .wait_for_output("reloaded", Duration::from_secs(15)),
        "{}",
        proxy.proc.logs()
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while get_status(http) != 403 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(get_status(http), 403, "{}", proxy.proc.logs());
}

#[test]
fn sigterm_stops_gracefully() {
    let origin = Origin::fixed(b"bye");
    let setup = Setup::new("term");
    let conf = setup.config(origin.addr(), "", "");
    let mut proxy = setup.start(&conf);
    let started = Instant::now();
    proxy.proc.signal(libc::SIGTERM);
    let status = proxy
        .proc
        .wait_exit(Duration::from_secs(12))
        .expect("proxy did not exit after SIGTERM");
    assert!(status.success(), "{status:?}\n{}", proxy.proc.logs());
    assert!(started.elapsed() < Duration::from_secs(11));
}

#[test]
fn worker_processes_serve_and_stop_together() {
    let origin = Origin::fixed(b"multi");
    let setup = Setup::new("procs");
    let http = setup.http;
    let conf = setup.config(origin.addr(), "", "worker_processes 2;\nworker_threads 1;");
    let mut proxy = setup.start(&conf);
    for _ in 0..20 {
        assert_eq!(get_status(http), 200);
    }
    assert_eq!(
        child_pids(proxy.proc.pid()).len(),
        2,
        "{}",
        proxy.proc.logs()
    );
    proxy.proc.signal(libc::SIGTERM);
    assert!(
        proxy.proc.wait_exit(Duration::from_secs(20)).is_some(),
        "{}",
        proxy.proc.logs()
    );
    assert!(
        child_pids(proxy.proc.pid()).is_empty(),
        "children left running"
    );
}

/// The children of `worker_processes` must not outlive a supervisor killed without a chance
/// to stop them (SIGKILL, the OOM killer): an orphan would keep serving on its SO_REUSEPORT
/// listener beside the next instance.
#[test]
fn worker_processes_stop_when_the_supervisor_is_killed() {
    let origin = Origin::fixed(b"orphan");
    let setup = Setup::new("orphans");
    let http = setup.http;
    let conf = setup.config(origin.addr(), "", "worker_processes 2;\nworker_threads 1;");
    let mut proxy = setup.start(&conf);
    assert_eq!(get_status(http), 200);
    let children = child_pids(proxy.proc.pid());
    assert_eq!(children.len(), 2, "{}", proxy.proc.logs());
    proxy.proc.signal(libc::SIGKILL);
    assert!(proxy.proc.wait_exit(Duration::from_secs(5)).is_some());
    let alive = |pid: &u32| Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(*pid);
    let deadline = Instant::now() + Duration::from_secs(15);
    while children.iter().any(alive) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<&u32> = children.iter().filter(|p| alive(p)).collect();
    for pid in &left {
        send_signal(**pid, libc::SIGKILL);
    }
    assert!(
        left.is_empty(),
        "worker processes outlived their supervisor: {left:?}"
    );
    let refused = std::net::TcpStream::connect_timeout(&http, Duration::from_secs(1));
    assert!(
        refused.is_err(),
        "the port still answers after every process stopped"
    );
}

/// The pids of `parent`'s children (the worker processes of a supervisor).
fn child_pids(parent: u32) -> Vec<u32> {
    let out = Command::new("pgrep")
        .arg("-P")
        .arg(parent.to_string())
        .output()
        .expect("pgrep");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// A process re-parented to init and already exited shows as a zombie until reaped.
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[test]
fn stats_endpoint_counts_requests_and_tls_paths() {
    let origin = Origin::fixed(b"s");
    let setup = Setup::new("stats");
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let https = setup.https;
    let conf = setup.config(origin.addr(), "", &format!("stats_listen {stats};"));
    let proxy = setup.start(&conf);
    assert!(wait_for_port(stats, Duration::from_secs(5)));
    let url = format!("https://site.test:{}/", https.port());
    let resolve = format!("site.test:{}:127.0.0.1", https.port());
    for _ in 0..3 {
        let (st, _, err) = curl(&["-k", "--resolve", &resolve, &url], 10);
        assert!(st.success(), "{err}");
    }
    let (st, metrics, err) = curl(&[&format!("http://{stats}/metrics")], 5);
    assert!(st.success(), "{err}");
    let value = |needle: &str| -> u64 {
        metrics
            .lines()
            .filter(|l| l.starts_with(needle))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    assert!(
        value("ktls_proxy_responses_total{class=\"2xx\"}") >= 3,
        "{metrics}\n{}",
        proxy.proc.logs()
    );
    assert!(
        value("ktls_proxy_tls_handshakes_total{result=\"full\"}") >= 1,
        "{metrics}"
    );
    // This machine's kernel has no kTLS: every connection takes the proxy's own record layer
    // (`tls_ktls auto`), and the reason the kernel was not used is counted.
    let tls_paths = value("ktls_proxy_tls_connections_total");
    assert!(tls_paths >= 3, "{metrics}");
    if !std::path::Path::new("/proc/net/tls_stat").exists() {
        assert_eq!(
            value("ktls_proxy_tls_connections_total{path=\"records\"}"),
            tls_paths,
            "{metrics}"
        );
        assert!(
            value("ktls_proxy_ktls_fallbacks_total{reason=\"no_kernel_support\"}") >= 3,
            "{metrics}"
        );
    }
}

/// Each worker thread counts its own requests and responses (no counter shared between
/// cores on the request path) and the stats endpoint sums them: over two workers the sums
/// must be what a load of keep-alive requests over TLS made, and both workers must have
/// counted (16 connections spread over two SO_REUSEPORT listeners: all on one worker has
/// odds of 2 in 65536).
#[test]
fn stats_endpoint_sums_the_workers_own_counters() {
    let origin = Origin::fixed(b"s");
    let setup = Setup::new("stats-workers");
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let https = setup.https;
    let conf = setup.config(
        origin.addr(),
        "",
        &format!("stats_listen {stats};\nworker_threads 2;"),
    );
    let proxy = setup.start(&conf);
    assert!(wait_for_port(stats, Duration::from_secs(5)));
    let out = Command::new("timeout")
        .arg("30")
        .arg(bin_path("http-perf"))
        .args(["-c", "16", "-t", "2", "-d", "2", "--json"])
        .args(["--connect", &https.to_string()])
        .arg("https://site.test/")
        .output()
        .expect("run http-perf");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "http-perf: {report}");
    let report: serde_json::Value = serde_json::from_str(report.trim()).expect("http-perf JSON");
    let sent = report["requests"].as_u64().expect("requests");
    assert!(sent > 100, "{report}");
    let (st, metrics, err) = curl(&[&format!("http://{stats}/metrics")], 5);
    assert!(st.success(), "{err}");
    let value = |needle: &str| -> u64 {
        metrics
            .lines()
            .filter(|l| l.starts_with(needle))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    // The client stops counting at its deadline: up to one answered request per connection
    // may be missing from its count.
    let in_range = |n: u64| n >= sent && n <= sent + 16;
    let workers = [0, 1].map(|w| value(&format!("ktls_proxy_requests_total{{worker=\"{w}\"}}")));
    assert!(workers.iter().all(|&n| n > 0), "{workers:?}\n{metrics}");
    assert!(in_range(workers[0] + workers[1]), "{sent} sent\n{metrics}");
    let ok = value("ktls_proxy_responses_total{class=\"2xx\"}");
    assert!(
        in_range(ok),
        "{sent} sent\n{metrics}\n{}",
        proxy.proc.logs()
    );
    let accepted = value("ktls_proxy_connections_accepted_total");
    assert!(accepted >= 16, "{metrics}");
}

#[test]
fn access_log_lines_follow_tempesta_format() {
    let origin = Origin::fixed(b"logged");
    let setup = Setup::new("alog");
    let http = setup.http;
    let log = setup.dir.join("access.log");
    let conf = setup.config(
        origin.addr(),
        "",
        &format!("access_log_file {};", log.display()),
    );
    let _proxy = setup.start(&conf);
    let req = b"GET /a/b?c=1 HTTP/1.1\r\nHost: site.test\r\nReferer: http://r.test/\r\nUser-Agent: agent/1.0\r\nConnection: close\r\n\r\n";
    let resp = raw_exchange(http, req, Duration::from_secs(5)).expect("exchange");
    assert!(resp.starts_with(b"HTTP/1.1 200"));
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut text = String::new();
    while Instant::now() < deadline && text.is_empty() {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        std::thread::sleep(Duration::from_millis(20));
    }
    // The time first, then Tempesta's fields (the fingerprints last: plain TCP has no TLS
    // one, the request's is computed), then the proxy's (docs/OPERATIONS.md, Logs).
    let line = text.trim_end();
    let (time, rest) = line.split_once(' ').unwrap_or_default();
    assert!(time.len() == 20 && time.ends_with('Z'), "time: {line:?}");
    let (tempesta, ours) = rest.rsplit_once("\" ").unwrap_or_default();
    let (tempesta, tfh) = tempesta.rsplit_once(" \"tfh=").unwrap_or_default();
    assert_eq!(
        tempesta,
        "127.0.0.1 \"site\" \"GET /a/b?c=1 HTTP/1.1\" 200 6 \"http://r.test/\" \"agent/1.0\" \"tft=0\"",
        "access log: {text:?}"
    );
    assert!(
        !tfh.is_empty() && tfh.bytes().all(|b| b.is_ascii_hexdigit()),
        "tfh: {line:?}"
    );
    let ours: Vec<&str> = ours.split(' ').collect();
    assert!(ours[0].starts_with("rt=0."), "{line:?}");
    assert!(ours[2].starts_with("urt=0."), "{line:?}");
    assert_eq!(
        ours[1..],
        [
            &*format!("upstream={}", origin.addr()),
            ours[2],
            "cache=-",
            "ja4=-"
        ],
        "{line:?}"
    );
}

#[test]
fn a_reused_connection_slot_does_not_inherit_the_previous_timer() {
    // One worker, so the second connection takes the first one's slot. The first leaves a
    // 2 s keep-alive timer behind; it must not close the second connection at that time.
    let origin = Origin::fixed(b"alive");
    let setup = Setup::new("slot");
    let http = setup.http;
    let conf = setup.config(origin.addr(), "", "worker_threads 1;\nkeepalive_timeout 2;");
    let proxy = setup.start(&conf);
    let first = std::net::TcpStream::connect(http).expect("first");
    std::thread::sleep(Duration::from_millis(100));
    drop(first);
    std::thread::sleep(Duration::from_millis(1400));
    let mut second = std::net::TcpStream::connect(http).expect("second");
    // Past the first connection's deadline, well within the second's.
    std::thread::sleep(Duration::from_millis(1000));
    use std::io::{Read, Write};
    second
        .set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    second
        .write_all(b"GET / HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n")
        .expect("write");
    let mut resp = Vec::new();
    let _ = second.read_to_end(&mut resp);
    assert!(
        resp.starts_with(b"HTTP/1.1 200"),
        "closed by a stale timer: {:?}\n{}",
        String::from_utf8_lossy(&resp),
        proxy.proc.logs()
    );
}

#[test]
fn reload_to_fewer_groups_while_a_request_is_in_flight() {
    let fast = Origin::fixed(b"fast");
    let slow =
        Origin::start(|_| e2e::origin::Response::ok("slow").delay(Duration::from_millis(1500)));
    let setup = Setup::new("reload-shrink");
    let http = setup.http;
    let stats = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let before = setup
        .config(
            fast.addr(),
            "",
            &format!(
                "stats_listen {stats};\nsrv_group slow {{ server {}; }}",
                slow.addr()
            ),
        )
        .replace("proxy_pass default; }", "proxy_pass slow; }");
    let after = setup.config(fast.addr(), "", &format!("stats_listen {stats};"));
    let mut proxy = setup.start(&before);
    let in_flight = std::thread::spawn(move || {
        raw_exchange(
            http,
            b"GET /x HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n",
            Duration::from_secs(10),
        )
        .unwrap_or_default()
    });
    std::thread::sleep(Duration::from_millis(400));
    write_file(&proxy.config, &after);
    proxy.proc.signal(libc::SIGHUP);
    assert!(
        proxy
            .proc
            .wait_for_output("reloaded", Duration::from_secs(15)),
        "{}",
        proxy.proc.logs()
    );
    let resp = in_flight.join().expect("client thread");
    assert!(
        resp.starts_with(b"HTTP/1.1 200") && resp.ends_with(b"slow"),
        "{}",
        String::from_utf8_lossy(&resp)
    );
    // New requests use the new configuration; nothing panicked.
    let resp = raw_exchange(
        http,
        b"GET / HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
    .expect("after reload");
    assert!(
        resp.ends_with(b"fast"),
        "{}",
        String::from_utf8_lossy(&resp)
    );
    let (_, metrics, _) = curl(&[&format!("http://{stats}/metrics")], 5);
    assert!(metrics.contains("ktls_proxy_panics_total 0"), "{metrics}");
}
