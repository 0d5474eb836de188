//! `http-perf` against the bundled `origin` (and the in-process recording origin): wrk's
//! report format, keep-alive vs `Connection: close`, pipelining, byte counting, rate mode,
//! HTTPS with and without resumption, a hold of 2000 TLS connections, and a dead target.

use std::net::SocketAddr;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use e2e::origin::{Origin, Response};
use e2e::{bin_path, free_port, gen_cert, raw_exchange, KeyKind, Proc, TempDir};

const T: Duration = Duration::from_secs(5);

fn start_origin(dir: &TempDir, listen_ip: &str, extra: &[&str]) -> (Proc, SocketAddr) {
    // A port free a moment ago can be taken by one of the thousands of ephemeral client
    // sockets this suite's parallel tests open: try a few fresh ones.
    let mut logs = String::new();
    for _ in 0..5 {
        let port = free_port();
        let listen = format!("{listen_ip}:{port}");
        let mut cmd = Command::new(bin_path("origin"));
        cmd.arg("--listen").arg(&listen).args(extra);
        let mut p = Proc::spawn("origin", cmd, dir.path());
        // Generous: the tests run in parallel on two cores, so a TLS origin with several
        // processes can take seconds to start; the bound only matters when it hangs.
        if p.wait_for_output(
            &format!("origin listening on {listen}"),
            Duration::from_secs(20),
        ) {
            return (p, format!("127.0.0.1:{port}").parse().unwrap());
        }
        logs = p.logs();
        if !logs.contains("Address already in use") {
            break;
        }
    }
    panic!("origin did not start\n{logs}");
}

/// Runs http-perf to completion, killed (by pid) if it overruns `limit`.
fn http_perf(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(bin_path("http-perf"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start http-perf");
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return child.wait_with_output().expect("http-perf output");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    e2e::send_signal(child.id(), libc::SIGKILL);
    let out = child.wait_with_output().expect("http-perf output");
    panic!(
        "http-perf {args:?} overran {limit:?}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "http-perf failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn origin_stats(addr: SocketAddr) -> serde_json::Value {
    let resp = raw_exchange(
        addr,
        b"GET /__origin/stats HTTP/1.1\r\nHost: o\r\nConnection: close\r\n\r\n",
        T,
    )
    .unwrap();
    let text = String::from_utf8_lossy(&resp);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(body).unwrap()
}

/// True if `s` is a number with two decimals followed by one of `units`.
fn is_value(s: &str, units: &[&str]) -> bool {
    units.iter().any(|u| {
        s.strip_suffix(u).is_some_and(|num| {
            num.split_once('.').is_some_and(|(a, b)| {
                !a.is_empty()
                    && a.bytes().all(|c| c.is_ascii_digit())
                    && b.len() == 2
                    && b.bytes().all(|c| c.is_ascii_digit())
            })
        })
    })
}

const TIME_UNITS: &[&str] = &["us", "ms", "s", "m", "h"];
const METRIC_UNITS: &[&str] = &["k", "M", "G", ""];
const BYTE_UNITS: &[&str] = &["KB", "MB", "GB", "TB", "B"];

#[test]
fn wrk_report_format_against_origin() {
    let dir = TempDir::new("hp-format");
    let (_o, addr) = start_origin(&dir, "127.0.0.1", &[]);
    let url = format!("http://{addr}/");
    let out = http_perf(
        &["-c", "4", "-t", "2", "-d", "1s", "--latency", &url],
        Duration::from_secs(20),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], format!("Running 1s test @ {url}"), "{text}");
    assert_eq!(lines[1], "  2 threads and 4 connections");
    assert_eq!(
        lines[2],
        "  Thread Stats   Avg      Stdev     Max   +/- Stdev"
    );
    for (line, name, units) in [
        (lines[3], "Latency", TIME_UNITS),
        (lines[4], "Req/Sec", METRIC_UNITS),
    ] {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 5, "{line}");
        assert_eq!(f[0], name);
        assert!(f[1..4].iter().all(|v| is_value(v, units)), "{line}");
        assert!(is_value(f[4], &["%"]), "{line}");
        assert!(line.starts_with(&format!("    {name}")));
    }
    assert_eq!(lines[5], "  Latency Distribution");
    for (line, p) in lines[6..12]
        .iter()
        .zip(["50%", "75%", "90%", "99%", "99.9%", "99.99%"])
    {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f[0], p, "{line}");
        assert!(is_value(f[1], TIME_UNITS), "{line}");
    }
    // "  N requests in X.XXs, Y.YYMB read"
    let summary = lines[12].trim_start();
    let (n, rest) = summary.split_once(" requests in ").expect(summary);
    let requests: u64 = n.parse().expect(summary);
    assert!(requests > 0);
    let (secs, read) = rest.split_once(", ").expect(summary);
    assert!(is_value(secs, &["s"]), "{summary}");
    assert!(
        is_value(read.strip_suffix(" read").expect(summary), BYTE_UNITS),
        "{summary}"
    );
    // A healthy run prints no error lines, like wrk.
    assert!(
        !text.contains("Socket errors") && !text.contains("Non-2xx"),
        "{text}"
    );
    let rps = lines[13].strip_prefix("Requests/sec: ").expect(lines[13]);
    assert!(rps.trim().parse::<f64>().unwrap() > 0.0);
    let tps = lines[14].strip_prefix("Transfer/sec: ").expect(lines[14]);
    assert!(is_value(tps.trim(), BYTE_UNITS));
    assert_eq!(lines.len(), 15, "{text}");
}

#[test]
fn keep_alive_reuses_connections_and_connection_close_does_not() {
    let dir = TempDir::new("hp-close");
    let (o, addr) = start_origin(&dir, "127.0.0.1", &[]);
    let url = format!("http://{addr}/");
    let pid = o.pid().to_string();
    let ka = json(&http_perf(
        &[
            "-c",
            "2",
            "-t",
            "1",
            "-d",
            "1s",
            "--server-pid",
            &pid,
            "--json",
            &url,
        ],
        Duration::from_secs(20),
    ));
    let after_ka = origin_stats(addr);
    let ka_requests = ka["requests"].as_u64().unwrap();
    assert!(ka_requests > 20, "{ka}");
    // --server-pid: the origin's CPU over the run, per 1000 requests.
    assert!(
        ka["server_cpu_secs_per_1000_requests"].as_f64().is_some(),
        "{ka}"
    );
    assert_eq!(ka["server_pid"].as_u64(), Some(u64::from(o.pid())));
    // Two load connections, the reachability probe and this stats request.
    assert!(after_ka["connections"].as_u64().unwrap() <= 4, "{after_ka}");
    let close = json(&http_perf(
        &[
            "-c",
            "2",
            "-t",
            "1",
            "-d",
            "1s",
            "-H",
            "Connection: close",
            "--json",
            &url,
        ],
        Duration::from_secs(20),
    ));
    let after_close = origin_stats(addr);
    let close_requests = close["requests"].as_u64().unwrap();
    let new_conns =
        after_close["connections"].as_u64().unwrap() - after_ka["connections"].as_u64().unwrap();
    assert!(close_requests > 10, "{close}");
    // One connection per request (plus the probe, the stats request and the ones in flight).
    assert!(
        new_conns >= close_requests,
        "{new_conns} connections for {close_requests} requests"
    );
    assert!(
        new_conns <= close_requests + 4,
        "{new_conns} connections for {close_requests} requests"
    );
    assert_eq!(close["errors"]["read"], 0, "{close}");
}

#[test]
fn pipelining_and_byte_counting() {
    let dir = TempDir::new("hp-pipe");
    let (_o, addr) = start_origin(&dir, "127.0.0.1", &[]);
    let url = format!("http://{addr}/bytes/1000");
    let r = json(&http_perf(
        &[
            "-c",
            "2",
            "-t",
            "1",
            "-d",
            "1s",
            "--pipeline",
            "8",
            "--json",
            &url,
        ],
        Duration::from_secs(20),
    ));
    let requests = r["requests"].as_u64().unwrap();
    let bytes = r["bytes"].as_u64().unwrap();
    assert!(requests > 16, "{r}");
    // Each response is its head plus 1000 bytes; bytes read also include responses still in
    // flight at the end (at most 2 connections x 8).
    let head = "HTTP/1.1 200 OK\r\nServer: origin\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\n".len() as u64;
    let each = head + 1000;
    assert!(
        bytes >= requests * each,
        "{bytes} bytes for {requests} requests"
    );
    assert!(
        bytes <= (requests + 16) * each,
        "{bytes} bytes for {requests} requests"
    );
    let served = origin_stats(addr)["requests"].as_u64().unwrap();
    assert!(
        served >= requests,
        "origin served {served}, http-perf counted {requests}"
    );
}

#[test]
fn chunked_responses_and_non_2xx_are_counted() {
    let origin = Origin::start(|_| Response::ok("hello chunked world").status(404).chunked());
    let url = format!("http://{}/", origin.addr());
    let r = json(&http_perf(
        &["-c", "2", "-t", "1", "-d", "1s", "--json", &url],
        Duration::from_secs(20),
    ));
    let requests = r["requests"].as_u64().unwrap();
    assert!(requests > 10, "{r}");
    assert_eq!(r["non_2xx_3xx"].as_u64().unwrap(), requests);
    // Keep-alive held across chunked responses: no reconnects.
    assert!(
        origin.connections() <= 3,
        "{} connections",
        origin.connections()
    );
    assert_eq!(r["errors"]["read"], 0, "{r}");
}

#[test]
fn rate_mode_holds_roughly_the_rate() {
    let dir = TempDir::new("hp-rate");
    let (_o, addr) = start_origin(&dir, "127.0.0.1", &[]);
    let url = format!("http://{addr}/");
    let r = json(&http_perf(
        &[
            "-c", "4", "-t", "1", "-d", "2s", "--rate", "200", "--json", &url,
        ],
        Duration::from_secs(20),
    ));
    let requests = r["requests"].as_u64().unwrap();
    // 400 expected; loose bounds, this machine is shared.
    assert!(
        (200..=600).contains(&requests),
        "{requests} requests at --rate 200 for 2s: {r}"
    );
}

/// Counters of a TLS `origin`, fetched with curl.
fn tls_origin_stats(addr: SocketAddr) -> serde_json::Value {
    let url = format!("https://127.0.0.1:{}/__origin/stats", addr.port());
    let (status, body, err) = e2e::curl(&["-k", &url], 5);
    assert!(status.success(), "{err}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn https_keep_alive_close_and_tickets() {
    let dir = TempDir::new("hp-tls");
    let (crt, key) = gen_cert(dir.path(), "o", KeyKind::EcdsaP256, &["tempesta-tech.com"]);
    let (_o, addr) = start_origin(
        &dir,
        "127.0.0.1",
        &[
            "--cert",
            crt.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ],
    );
    let connect = addr.to_string();
    // The URL names a host that does not resolve here; --connect says where to go.
    let url = "https://tempesta-tech.com/";
    for (extra, resumes) in [
        (&[][..], false),
        (&["-H", "Connection: close"][..], false),
        (&["-H", "Connection: close", "--tickets"][..], true),
    ] {
        let before = tls_origin_stats(addr)["tls_resumed"].as_u64().unwrap();
        let mut args = vec![
            "-c",
            "2",
            "-t",
            "1",
            "-d",
            "1s",
            "--json",
            "--connect",
            &connect,
        ];
        args.extend_from_slice(extra);
        args.push(url);
        let r = json(&http_perf(&args, Duration::from_secs(20)));
        let requests = r["requests"].as_u64().unwrap();
        assert!(requests > 5, "{extra:?}: {r}");
        let e = &r["errors"];
        assert_eq!(
            (e["connect"].as_u64(), e["read"].as_u64()),
            (Some(0), Some(0)),
            "{extra:?}: {r}"
        );
        let resumed = tls_origin_stats(addr)["tls_resumed"].as_u64().unwrap() - before;
        if resumes {
            // Reconnects resume once a ticket has arrived (the first handshakes cannot).
            assert!(
                resumed * 10 >= requests * 9,
                "{resumed} resumed for {requests} requests"
            );
        } else {
            assert_eq!(resumed, 0, "{extra:?}: sessions resumed without --tickets");
        }
    }
}

#[test]
fn hold_2000_tls_connections_two_rounds_over_two_processes() {
    let dir = TempDir::new("hp-hold");
    let (crt, key) = gen_cert(dir.path(), "o", KeyKind::EcdsaP256, &["localhost"]);
    let (o, addr) = start_origin(
        &dir,
        "0.0.0.0",
        &[
            "--cert",
            crt.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ],
    );
    let url = format!("https://{addr}/");
    let pid = o.pid().to_string();
    let r = json(&http_perf(
        &[
            "--hold",
            "2000",
            "-t",
            "2",
            "--hold-secs",
            "1",
            "--rounds",
            "2",
            "--addrs",
            "127.0.0.1,127.0.0.2",
            "--conns-per-process",
            "1000",
            "--server-pid",
            &pid,
            "--json",
            &url,
        ],
        Duration::from_secs(240),
    ));
    assert_eq!(r["pass"], true, "{r}");
    assert_eq!(r["processes"], 2);
    assert_eq!(r["established"], 2000);
    assert_eq!(r["dropped"], 0);
    let rounds = r["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2);
    assert!(
        rounds
            .iter()
            .all(|x| x["answered"] == 2000 && x["failed"] == 0),
        "{r}"
    );
    assert!(
        r["server"]["bytes_per_connection"].as_u64().unwrap() > 0,
        "{r}"
    );
    // Every request reached the server: 2 rounds x 2000, plus this one.
    let stats = tls_origin_stats(addr);
    assert_eq!(stats["requests"], 4001, "{stats}");
}

#[test]
fn hold_reports_fail_when_the_server_drops_idle_connections() {
    // The recording origin answers with Connection: close, so round 2 cannot be answered.
    let origin = Origin::start(|_| Response::ok("x").header("Connection", "close"));
    let url = format!("http://{}/", origin.addr());
    let out = http_perf(
        &[
            "--hold",
            "20",
            "-t",
            "1",
            "--hold-secs",
            "0",
            "--rounds",
            "2",
            "--round-timeout",
            "3s",
            &url,
        ],
        Duration::from_secs(30),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("Round 1:    20/20 answered"), "{text}");
    assert!(
        text.lines()
            .last()
            .unwrap_or("")
            .starts_with("FAIL: round 2: 0 of 20"),
        "{text}"
    );
}

#[test]
fn dead_target_is_a_clean_error() {
    let port = free_port(); // nothing listens there
    let started = Instant::now();
    let out = http_perf(
        &[
            "-c",
            "2",
            "-t",
            "1",
            "-d",
            "5s",
            "--timeout",
            "1s",
            &format!("http://127.0.0.1:{port}/"),
        ],
        Duration::from_secs(10),
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("unable to connect to 127.0.0.1:{port}")),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    // Bad command lines are errors too, with a hint.
    let out = http_perf(&["-c", "1", "-t", "1", "ftp://x/"], Duration::from_secs(10));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("http://HOST"));
}

#[test]
fn wrk_counts_version_and_progress_once_a_second() {
    let out = http_perf(&["-v"], Duration::from_secs(10));
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.starts_with("http-perf "), "{printed}");
    let dir = TempDir::new("perf-progress");
    let (_origin, addr) = start_origin(&dir, "127.0.0.1", &[]);
    let url = format!("http://{addr}/");
    let out = http_perf(
        &["-c", "1k", "-t", "1", "-d", "2s", "--progress", &url],
        Duration::from_secs(30),
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains("1 threads and 1000 connections"),
        "{report}"
    );
    // stderr, so the report (or its JSON) on stdout stays clean.
    let err = String::from_utf8_lossy(&out.stderr);
    let progress: Vec<&str> = err
        .lines()
        .filter(|l| l.contains(" requests ") && l.contains(" req/s ") && l.ends_with(" errors"))
        .collect();
    assert!(!progress.is_empty(), "no progress line:\n{err}");
    assert!(progress[0].trim_start().starts_with("1s "), "{err}");
}

#[test]
fn ctrl_c_ends_the_run_with_the_report_of_what_was_measured() {
    let dir = TempDir::new("perf-sigint");
    let (_origin, addr) = start_origin(&dir, "127.0.0.1", &[]);
    let url = format!("http://{addr}/");
    let mut child = Command::new(bin_path("http-perf"))
        .args(["-c", "4", "-t", "1", "-d", "60s", &url])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start http-perf");
    std::thread::sleep(Duration::from_millis(1500));
    e2e::send_signal(child.id(), libc::SIGINT);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    if matches!(child.try_wait(), Ok(None)) {
        e2e::send_signal(child.id(), libc::SIGKILL);
    }
    let out = child.wait_with_output().expect("http-perf output");
    let report = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{report}\n{err}", out.status);
    assert!(err.contains("interrupted after"), "{err}");
    // The report of the seconds that ran, not of the 60 asked for.
    let line = report
        .lines()
        .find(|l| l.contains(" requests in "))
        .unwrap_or_else(|| panic!("no report:\n{report}"));
    let requests: u64 = line
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(requests > 0, "{line}");
    assert!(report.contains("Requests/sec:"), "{report}");
    let took = line.split(" in ").nth(1).unwrap_or("");
    assert!(
        took.ends_with("read") && !took.starts_with("1.00m"),
        "{line}"
    );
}
