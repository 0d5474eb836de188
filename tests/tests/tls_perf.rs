//! End-to-end tests of `tls-perf` against a real TLS server (`openssl s_server`).
//!
//! Run with the binary from any target dir, e.g.
//! `KTLS_PROXY_BIN_DIR=$PWD/target/debug cargo test -p e2e --test tls_perf`.
//! The tests run one at a time (a lock in tls_perf_common): they compare handshake rates, which other
//! load on a 2-core machine would distort.

mod tls_perf_common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::{free_port, gen_cert, wait_for_port, KeyKind, Proc, TempDir};
use tls_perf_common::*;

#[test]
fn report_has_upstream_layout_and_sane_statistics() {
    let _serial = serial();
    let dir = TempDir::new("tls-perf-format");
    let server = start_server(&dir, "127.0.0.1");
    let run = tls_perf(
        dir.path(),
        &["-l", "4", "-T", "3"],
        Some(server.addr),
        Duration::from_secs(20),
    );
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    // Upstream's settings block, progress lines and start-of-measurement line.
    assert!(run
        .stdout
        .contains("Running TLS benchmark with following settings:"));
    assert!(run.stdout.contains("TLS version: 1.2"));
    assert!(run
        .stdout
        .contains("( All peers are active, start to gather statistics )"));
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("TLS hs in progress ")
                && l.contains(" h/s], TCP open conns ")
                && l.contains(" hs in progress], Errors ")),
        "{}",
        run.stdout
    );
    let report = parse_report(&run.stdout);
    assert!(report.handshakes > 0, "{report:?}");
    assert!((1..=4).contains(&report.seconds), "{report:?}");
    let [max, avg, p95, min] = report.rates;
    assert!(
        max >= avg && avg >= min && min > 0 && p95 <= max,
        "{report:?}"
    );
    let [lmin, lavg, lp95, lmax] = report.latency_ms;
    assert!(
        lmin > 0.0 && lmin <= lavg && lavg <= lmax && lp95 <= lmax,
        "{report:?}"
    );
    assert_eq!((report.resumed, report.errors), (0, 0), "{report:?}");
}

#[test]
fn quiet_mode_prints_only_the_start_line_and_report() {
    let _serial = serial();
    let dir = TempDir::new("tls-perf-quiet");
    let server = start_server(&dir, "127.0.0.1");
    let run = tls_perf(
        dir.path(),
        &["-q", "-n", "20"],
        Some(server.addr),
        Duration::from_secs(20),
    );
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert!(
        !run.stdout.contains("Running TLS benchmark"),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("TLS hs in progress"), "{}", run.stdout);
    assert_eq!(parse_report(&run.stdout).handshakes, 20);
}

#[test]
fn n_stops_at_exactly_n_handshakes() {
    let _serial = serial();
    let dir = TempDir::new("tls-perf-n");
    let server = start_server(&dir, "127.0.0.1");
    let run = tls_perf(
        dir.path(),
        &["-q", "-l", "8", "-t", "2", "-n", "150"],
        Some(server.addr),
        Duration::from_secs(30),
    );
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(parse_report(&run.stdout).handshakes, 150, "{}", run.stdout);
}

#[test]
fn t_stops_in_time() {
    let _serial = serial();
    let dir = TempDir::new("tls-perf-time");
    let server = start_server(&dir, "127.0.0.1");
    let run = tls_perf(
        dir.path(),
        &["-q", "-l", "4", "-T", "2"],
        Some(server.addr),
        Duration::from_secs(15),
    );
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.elapsed >= Duration::from_secs(2) && run.elapsed < Duration::from_secs(6),
        "{:?}",
        run.elapsed
    );
    assert!(parse_report(&run.stdout).handshakes > 0);
}

/// Handshakes and resumed handshakes of a short run.
fn counts(server: &TlsServer, dir: &TempDir, tls: &str, tickets: &str, secs: &str) -> Report {
    let run = tls_perf(
        dir.path(),
        &[
            "-q",
            "-l",
            "4",
            "-T",
            secs,
            "--tls",
            tls,
            "--tickets",
            tickets,
        ],
        Some(server.addr),
        Duration::from_secs(30),
    );
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    let report = parse_report(&run.stdout);
    assert_eq!(report.errors, 0, "{}", run.stdout);
    report
}

fn check_resumption(tls: &str) {
    let _serial = serial();
    let dir = TempDir::new("tls-perf-resume");
    let server = start_server(&dir, "127.0.0.1");
    let on = counts(&server, &dir, tls, "on", "2");
    assert!(on.handshakes > 10, "{on:?}");
    // Every peer's first handshake is full; nearly all later ones resume.
    assert!(
        on.resumed * 10 >= on.handshakes * 8,
        "TLS {tls} tickets on: {on:?}"
    );
    for mode in ["off", "advertise"] {
        let other = counts(&server, &dir, tls, mode, "1");
        assert!(other.handshakes > 0, "{other:?}");
        assert_eq!(other.resumed, 0, "TLS {tls} tickets {mode}: {other:?}");
    }
}

#[test]
fn tls12_tickets_on_resume_and_off_does_not() {
    check_resumption("1.2");
}

#[test]
fn tls13_tickets_on_resume_and_off_does_not() {
    check_resumption("1.3");
}

#[test]
fn tls13_server_without_tickets_does_not_stall_the_loop() {
    let _serial = serial();
    let dir = TempDir::new("tls-perf-noticket");
    let server = start_server_with(&dir, "127.0.0.1", &["-num_tickets", "0"]);
    let run = tls_perf(
        dir.path(),
        &[
            "-q",
            "-l",
            "4",
            "-T",
            "6",
            "--tls",
            "1.3",
            "--tickets",
            "on",
        ],
        Some(server.addr),
        Duration::from_secs(20),
    );
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    let report = parse_report(&run.stdout);
    assert_eq!(report.resumed, 0, "{}", run.stdout);
    // s_server serves one connection at a time, so each wait for a ticket holds it up; the
    // tool gives the wait up after a few misses, then handshakes run at full speed.
    assert!(
        run.stderr.contains("no longer waiting for tickets"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.contains(" TICKETS MISSED:  "), "{}", run.stdout);
    assert!(report.handshakes > 100, "{}", run.stdout);
}

#[test]
fn resumed_handshakes_are_clearly_faster_than_full_ones() {
    let _serial = serial();
    let dir = TempDir::new("tls-perf-rates");
    let server = start_server(&dir, "127.0.0.1");
    // TLS 1.2 resumption skips all public-key work on both sides. Runs alternate, so a
    // burst of other load on the machine hits both kinds alike.
    let (mut full, mut resumed) = (0, 0);
    for _ in 0..2 {
        full += counts(&server, &dir, "1.2", "off", "2").handshakes;
        resumed += counts(&server, &dir, "1.2", "on", "2").handshakes;
    }
    eprintln!("equal runs: {resumed} resumed vs {full} full handshakes");
    assert!(
        resumed * 10 >= full * 13,
        "resumed {resumed} vs full {full} handshakes in equal runs"
    );
}

#[test]
fn key_log_file_gets_secrets() {
    let _serial = serial();
    let dir = TempDir::new("tls-perf-keylog");
    let server = start_server(&dir, "127.0.0.1");
    let log = dir.join("keys.log");
    let log_arg = log.to_string_lossy().into_owned();
    let run = tls_perf(
        dir.path(),
        &[
            "-q",
            "-n",
            "3",
            "--tls",
            "1.3",
            "--keylogfile",
            &log_arg,
            "--sni",
            "localhost",
        ],
        Some(server.addr),
        Duration::from_secs(20),
    );
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    let keys = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        keys.lines()
            .filter(|l| l.starts_with("CLIENT_HANDSHAKE_TRAFFIC_SECRET "))
            .count()
            >= 3,
        "{keys}"
    );
}

/// The proxy binary, if one has been built: `TLS_PERF_PROXY` names one explicitly, else the
/// usual build directories are searched. The proxy has its own tests; this one only checks
/// that tls-perf measures it (full and resumed handshakes, both versions).
fn find_proxy() -> Option<std::path::PathBuf> {
    if let Some(path) = std::env::var_os("TLS_PERF_PROXY") {
        return Some(path.into());
    }
    let mut dirs: Vec<std::path::PathBuf> = Vec::new();
    if let Some(dir) = std::env::var_os("KTLS_PROXY_BIN_DIR") {
        dirs.push(dir.into());
    }
    dirs.push(e2e::workspace_root().join("target/release"));
    dirs.into_iter()
        .map(|d| d.join("proxy"))
        .find(|p| p.is_file())
}

#[test]
fn measures_the_proxy_when_it_is_built() {
    let _serial = serial();
    let Some(proxy_bin) = find_proxy() else {
        eprintln!("no proxy binary built yet; skipping");
        return;
    };
    let dir = TempDir::new("tls-perf-proxy");
    let (crt, key) = gen_cert(dir.path(), "proxy", KeyKind::EcdsaP256, &["localhost"]);
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("proxy address");
    let config = format!(
        "listen 127.0.0.1:{port} proto=https;\n\
         srv_group default {{ server 127.0.0.1:{backend}; }}\n\
         tls_match_any_server_name;\n\
         vhost localhost {{\n\
             tls_certificate {crt};\n\
             tls_certificate_key {key};\n\
             tls_tickets secret=\"tls-perf e2e\" lifetime=600;\n\
             proxy_pass default;\n\
         }}\n",
        backend = free_port(),
        crt = crt.display(),
        key = key.display()
    );
    let config_path = dir.join("proxy.conf");
    e2e::write_file(&config_path, &config);
    let mut cmd = Command::new(&proxy_bin);
    cmd.arg("-c").arg(&config_path);
    let mut proxy = Proc::spawn("proxy", cmd, dir.path());
    let deadline = Instant::now() + Duration::from_secs(10);
    let listening = loop {
        if wait_for_port(addr, Duration::from_millis(200)) {
            break true;
        }
        if proxy.wait_exit(Duration::ZERO).is_some() || Instant::now() >= deadline {
            break false;
        }
    };
    if !listening {
        eprintln!(
            "{} does not serve TLS yet; skipping\n{}",
            proxy_bin.display(),
            proxy.logs()
        );
        return;
    }
    for tls in ["1.2", "1.3"] {
        let run = tls_perf(
            dir.path(),
            &["-q", "-l", "8", "-T", "2", "--tls", tls, "--tickets", "on"],
            Some(addr),
            Duration::from_secs(20),
        );
        assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
        let report = parse_report(&run.stdout);
        assert_eq!(
            report.errors,
            0,
            "TLS {tls}: {}\n{}",
            run.stdout,
            proxy.logs()
        );
        assert!(
            report.handshakes > 0 && report.resumed * 10 >= report.handshakes * 8,
            "TLS {tls}: {report:?}"
        );
    }
}
