//! End-to-end tests of `tls-perf` against a real TLS server (`openssl s_server`).
//!
//! Run with the binary from any target dir, e.g.
//! `KTLS_PROXY_BIN_DIR=$PWD/target/debug cargo test -p e2e --test tls_perf`.
//! The tests run one at a time (a lock below): they compare handshake rates, which other
//! load on a 2-core machine would distort.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use e2e::{bin_path, free_port, gen_cert, wait_for_port, KeyKind, Proc, TempDir};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An `openssl s_server` on a free loopback port with an ECDSA P-256 certificate. It issues
/// session tickets for TLS 1.2 and 1.3 by default.
struct TlsServer {
    proc: Proc,
    addr: SocketAddr,
}

fn start_server(dir: &TempDir, host: &str) -> TlsServer {
    start_server_with(dir, host, &[])
}

fn start_server_with(dir: &TempDir, host: &str, extra: &[&str]) -> TlsServer {
    let (crt, key) = gen_cert(dir.path(), "server", KeyKind::EcdsaP256, &["localhost"]);
    let port = free_port();
    let addr: SocketAddr = format!("{host}:{port}").parse().expect("server address");
    let mut cmd = Command::new("openssl");
    cmd.args(["s_server", "-quiet", "-www", "-accept"])
        .arg(addr.to_string())
        .arg("-cert")
        .arg(&crt)
        .arg("-key")
        .arg(&key)
        .args(extra);
    let proc = Proc::spawn("s_server", cmd, dir.path());
    assert!(
        wait_for_port(addr, Duration::from_secs(10)),
        "s_server did not listen on {addr}\n{}",
        proc.logs()
    );
    TlsServer { proc, addr }
}

struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

/// Runs tls-perf against `addr` with `args`, killed if it outlives `limit`.
fn tls_perf(logs: &Path, args: &[&str], addr: Option<SocketAddr>, limit: Duration) -> Run {
    let mut cmd = Command::new(bin_path("tls-perf"));
    cmd.args(args);
    if let Some(addr) = addr {
        cmd.arg(addr.ip().to_string()).arg(addr.port().to_string());
    }
    let started = Instant::now();
    let mut proc = Proc::spawn("tls-perf", cmd, logs);
    let status = proc
        .wait_exit(limit)
        .unwrap_or_else(|| panic!("tls-perf {args:?} ran over {limit:?}\n{}", proc.logs()));
    Run {
        status,
        stdout: proc.stdout(),
        stderr: proc.stderr(),
        elapsed: started.elapsed(),
    }
}

/// The numbers of the report, found by the exact line layouts.
#[derive(Debug)]
struct Report {
    seconds: u64,
    handshakes: u64,
    /// MAX, AVG, 95P, MIN
    rates: [u64; 4],
    /// MIN, AVG, 95P, MAX
    latency_ms: [f64; 4],
    resumed: u64,
    errors: u64,
}

/// The values after each `key ` in `fields` ("MAX 1; AVG 2" with keys [MAX, AVG]).
fn values<T: std::str::FromStr>(fields: &str, keys: &[&str]) -> Option<Vec<T>> {
    let parts: Vec<&str> = fields.split("; ").collect();
    if parts.len() != keys.len() {
        return None;
    }
    parts
        .iter()
        .zip(keys)
        .map(|(part, key)| part.strip_prefix(key)?.strip_prefix(' ')?.parse().ok())
        .collect()
}

fn parse_report(stdout: &str) -> Report {
    let lines: Vec<&str> = stdout.lines().collect();
    let rule = lines
        .iter()
        .position(|l| *l == "========================================")
        .unwrap_or_else(|| panic!("no report rule in:\n{stdout}"));
    let line = |i: usize, prefix: &str| -> &str {
        lines
            .get(rule + i)
            .and_then(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("line {i} of the report must start {prefix:?}:\n{stdout}"))
    };
    let bad = |what: &str| -> ! { panic!("malformed {what} line:\n{stdout}") };
    let total: Vec<u64> = values(line(1, " TOTAL:           "), &["SECONDS", "HANDSHAKES"])
        .unwrap_or_else(|| bad("TOTAL"));
    let rates: Vec<u64> = values(line(2, " HANDSHAKES/sec:  "), &["MAX", "AVG", "95P", "MIN"])
        .unwrap_or_else(|| bad("HANDSHAKES/sec"));
    let latency: Vec<f64> = values(line(3, " LATENCY (ms):    "), &["MIN", "AVG", "95P", "MAX"])
        .unwrap_or_else(|| bad("LATENCY"));
    let resumed = line(4, " RESUMED:         ");
    let (resumed, of) = resumed.split_once(" of ").unwrap_or_else(|| bad("RESUMED"));
    let errors = line(5, " ERRORS:          ");
    let errors = errors
        .split_once(' ')
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| bad("ERRORS"));
    let report = Report {
        seconds: total[0],
        handshakes: total[1],
        rates: [rates[0], rates[1], rates[2], rates[3]],
        latency_ms: [latency[0], latency[1], latency[2], latency[3]],
        resumed: resumed.parse().unwrap_or_else(|_| bad("RESUMED")),
        errors,
    };
    assert_eq!(of.parse::<u64>().ok(), Some(report.handshakes), "{stdout}");
    report
}

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
