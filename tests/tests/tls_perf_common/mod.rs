//! Shared by the `tls-perf` suites (tls_perf.rs, tls_perf_errors.rs): an `openssl s_server`
//! to measure, tls-perf runs with their output, and the report's fields.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use e2e::{bin_path, free_port, gen_cert, wait_for_port, KeyKind, Proc, TempDir};

pub static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An `openssl s_server` on a free loopback port with an ECDSA P-256 certificate. It issues
/// session tickets for TLS 1.2 and 1.3 by default.
pub struct TlsServer {
    pub proc: Proc,
    pub addr: SocketAddr,
}

pub fn start_server(dir: &TempDir, host: &str) -> TlsServer {
    start_server_with(dir, host, &[])
}

pub fn start_server_with(dir: &TempDir, host: &str, extra: &[&str]) -> TlsServer {
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

pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

/// Runs tls-perf against `addr` with `args`, killed if it outlives `limit`.
pub fn tls_perf(logs: &Path, args: &[&str], addr: Option<SocketAddr>, limit: Duration) -> Run {
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
pub struct Report {
    pub seconds: u64,
    pub handshakes: u64,
    /// MAX, AVG, 95P, MIN
    pub rates: [u64; 4],
    /// MIN, AVG, 95P, MAX
    pub latency_ms: [f64; 4],
    pub resumed: u64,
    pub errors: u64,
}

/// The values after each `key ` in `fields` ("MAX 1; AVG 2" with keys [MAX, AVG]).
pub fn values<T: std::str::FromStr>(fields: &str, keys: &[&str]) -> Option<Vec<T>> {
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

pub fn parse_report(stdout: &str) -> Report {
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
