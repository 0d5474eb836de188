//! `tls-perf` when things go wrong, and its command line: a server killed or stopped mid-run,
//! nothing listening, SIGINT, the JSON report with the server's CPU, an IPv6 target, unknown
//! options, more peers than descriptors, a bad cipher. Each bounded in time.

mod tls_perf_common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::{bin_path, free_port, Proc, TempDir};
use tls_perf_common::*;

#[test]
fn server_killed_mid_run_counts_errors_and_still_reports() {
    let _serial = serial();
    let dir = TempDir::new("tls-perf-kill");
    let mut server = start_server(&dir, "127.0.0.1");
    let addr = server.addr;
    let mut cmd = Command::new(bin_path("tls-perf"));
    cmd.args(["-q", "-l", "4", "-T", "20"])
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string());
    let started = Instant::now();
    let mut perf = Proc::spawn("tls-perf", cmd, dir.path());
    std::thread::sleep(Duration::from_millis(1500));
    server.proc.signal(libc::SIGKILL);
    server.proc.wait_exit(Duration::from_secs(5));
    // The tool notices the dead server (3 s of failures only) long before -T 20.
    let status = perf
        .wait_exit(Duration::from_secs(15))
        .unwrap_or_else(|| panic!("tls-perf hung after the server died\n{}", perf.logs()));
    assert!(started.elapsed() < Duration::from_secs(15));
    assert_eq!(status.code(), Some(3), "{}", perf.logs());
    let report = parse_report(&perf.stdout());
    assert!(report.handshakes > 0, "{report:?}");
    assert!(report.errors > 0, "{report:?}");
    assert!(
        perf.stderr().contains("is the server at"),
        "{}",
        perf.logs()
    );
}

#[test]
fn stopped_server_does_not_hang_a_timed_run() {
    let _serial = serial();
    let dir = TempDir::new("tls-perf-sigstop");
    let server = start_server(&dir, "127.0.0.1");
    // A server that accepts TCP (the kernel does) but never answers TLS.
    server.proc.signal(libc::SIGSTOP);
    let run = tls_perf(
        dir.path(),
        &["-q", "-l", "2", "-T", "2"],
        Some(server.addr),
        Duration::from_secs(10),
    );
    server.proc.signal(libc::SIGCONT);
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert!(run.elapsed < Duration::from_secs(5), "{:?}", run.elapsed);
    assert_eq!(parse_report(&run.stdout).handshakes, 0, "{}", run.stdout);
}

#[test]
fn nothing_listening_ends_with_connect_errors_not_a_hang() {
    let _serial = serial();
    let dir = TempDir::new("tls-perf-refused");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let run = tls_perf(
        dir.path(),
        &["-q", "-l", "2"],
        Some(addr),
        Duration::from_secs(15),
    );
    assert_eq!(run.status.code(), Some(3), "{}\n{}", run.stdout, run.stderr);
    let report = parse_report(&run.stdout);
    assert_eq!(report.handshakes, 0);
    assert!(run.stdout.contains("(connect "), "{}", run.stdout);
    assert!(report.errors > 0, "{report:?}");
}

#[test]
fn sigint_stops_the_run_and_prints_the_report() {
    let _serial = serial();
    let dir = TempDir::new("tls-perf-sigint");
    let server = start_server(&dir, "127.0.0.1");
    let mut cmd = Command::new(bin_path("tls-perf"));
    cmd.args(["-q", "-l", "2"])
        .arg(server.addr.ip().to_string())
        .arg(server.addr.port().to_string());
    let mut perf = Proc::spawn("tls-perf", cmd, dir.path());
    assert!(perf.wait_for_output("All peers are active", Duration::from_secs(10)));
    std::thread::sleep(Duration::from_millis(1200));
    perf.signal(libc::SIGINT);
    let status = perf
        .wait_exit(Duration::from_secs(5))
        .unwrap_or_else(|| panic!("SIGINT did not stop tls-perf\n{}", perf.logs()));
    assert!(status.success(), "{}", perf.logs());
    assert!(parse_report(&perf.stdout()).handshakes > 0);
}

#[test]
fn json_report_and_server_cpu() {
    let _serial = serial();
    let dir = TempDir::new("tls-perf-json");
    let server = start_server(&dir, "127.0.0.1");
    let pid = server.proc.pid().to_string();
    let run = tls_perf(
        dir.path(),
        &["--json", "-l", "4", "-T", "2", "--server-pid", &pid],
        Some(server.addr),
        Duration::from_secs(20),
    );
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    let json: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", run.stdout));
    assert!(json["handshakes"].as_u64().unwrap_or(0) > 0, "{json}");
    assert!(
        json["handshakes_per_sec"]["max"].as_u64().is_some(),
        "{json}"
    );
    assert!(json["latency_ms"]["p95"].as_f64().is_some(), "{json}");
    assert_eq!(json["end"], "time", "{json}");
    let cpu = &json["server_cpu"];
    assert!(cpu["seconds"].as_f64().unwrap_or(0.0) > 0.0, "{json}");
    assert!(
        cpu["ms_per_handshake"].as_f64().unwrap_or(0.0) > 0.0,
        "{json}"
    );
    // The progress lines went to stderr.
    assert!(run.stderr.contains("TLS hs in progress"), "{}", run.stderr);

    let text = tls_perf(
        dir.path(),
        &["-q", "-n", "20", "--server-pid", &pid],
        Some(server.addr),
        Duration::from_secs(20),
    );
    assert!(
        text.stdout
            .lines()
            .any(|l| l.starts_with(" SERVER CPU:      ") && l.contains(" ms per handshake; ")),
        "{}",
        text.stdout
    );
}

#[test]
fn ipv6_target() {
    let _serial = serial();
    let dir = TempDir::new("tls-perf-ipv6");
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback here; skipping");
        return;
    }
    let server = start_server(&dir, "[::1]");
    let run = tls_perf(
        dir.path(),
        &["-q", "-n", "10", "--tls", "any"],
        Some(server.addr),
        Duration::from_secs(20),
    );
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(parse_report(&run.stdout).handshakes, 10);
}

#[test]
fn unknown_option_prints_usage_and_exits_2() {
    let dir = TempDir::new("tls-perf-usage");
    for args in [&["--no-such-option"][..], &["127.0.0.1"]] {
        let run = tls_perf(dir.path(), args, None, Duration::from_secs(10));
        assert_eq!(run.status.code(), Some(2), "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains("Usage"), "{args:?}: {}", run.stderr);
    }
    for args in [&["-l", "0"][..], &["--tls", "1.1"], &["-t", "513"]] {
        let run = tls_perf(dir.path(), args, None, Duration::from_secs(10));
        assert_eq!(run.status.code(), Some(2), "{args:?}: {}", run.stderr);
    }
    let help = tls_perf(dir.path(), &["-h"], None, Duration::from_secs(10));
    assert!(help.status.success());
    for option in [
        "--tickets",
        "--tls",
        "--sni",
        "--keylogfile",
        "--server-pid",
        "--json",
    ] {
        assert!(help.stdout.contains(option), "{option}: {}", help.stdout);
    }
}

#[test]
fn more_peers_than_descriptors_is_a_clear_error() {
    let dir = TempDir::new("tls-perf-fds");
    let run = tls_perf(
        dir.path(),
        &["-l", "4000000000", "-t", "512", "-T", "1"],
        Some("127.0.0.1:9".parse().expect("addr")),
        Duration::from_secs(10),
    );
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("file descriptors"), "{}", run.stderr);
    assert!(run.stderr.contains("lower -l or -t"), "{}", run.stderr);
}

#[test]
fn bad_cipher_is_a_clear_error() {
    let dir = TempDir::new("tls-perf-cipher");
    let run = tls_perf(
        dir.path(),
        &["-c", "NO-SUCH-CIPHER", "-n", "1"],
        Some("127.0.0.1:9".parse().expect("addr")),
        Duration::from_secs(10),
    );
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("openssl ciphers"), "{}", run.stderr);
}
