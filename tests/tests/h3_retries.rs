//! QUIC connections that go through a Retry while many others are open (issue 33, the
//! `h3_idle_conn_bytes` row that hung): the client's next Initial is sent to the connection
//! ID the Retry gave it, which quinn-proto looks up among the IDs of the open connections
//! first. An ID of the Retry's equal to one of theirs sent that Initial to an open
//! connection, which dropped it, and the handshake never ended. With the proxy's 3-byte
//! nonce, about 6 of 5 000 connections through a Retry did, with 8 IDs per open connection;
//! now none.

mod h3_common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use e2e::bin_path;
use h3_common::*;

/// Connections held at once, each through a Retry (`h3_retry_above 0`), on one worker.
const CONNECTIONS: u64 = 5000;

#[test]
fn every_connection_through_a_retry_completes_its_handshake() {
    let origin = origin();
    // Every connection comes from 127.0.0.1: frang's default of 1 000 per address is off.
    let site = start(
        &origin,
        "h3-retry-ids",
        "h3_retry_above 0;\nworker_threads 1;\nkeepalive_timeout 120;\n\
         frang_limits { concurrent_tcp_connections 0; }",
    );
    let pid = site.proxy.proc.pid().to_string();
    let mut child = Command::new(bin_path("http-perf"))
        .args(["--h3", "--json", "--hold", &CONNECTIONS.to_string()])
        .args(["--hold-secs", "1", "--rounds", "1", "-t", "1"])
        .args(["--ramp-limit", "90s", "--handshake-timeout", "10s"])
        .args(["--connect", &site.h3.to_string(), "--server-pid", &pid])
        .arg(format!("https://site.test:{}/", site.h3.port()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start http-perf");
    let deadline = Instant::now() + Duration::from_secs(150);
    while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    if matches!(child.try_wait(), Ok(None)) {
        e2e::send_signal(child.id(), libc::SIGKILL);
    }
    let out = child.wait_with_output().expect("http-perf output");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "http-perf ({}): {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    eprintln!("{report}");
    // Every connection went through a Retry (and the probe before them).
    let retries = metric(&site, "ktls_proxy_quic_retries_sent_total");
    assert!(retries > CONNECTIONS, "{retries} Retries: {report}");
    assert_eq!(report["established"], CONNECTIONS, "{report}");
    assert_eq!(report["handshake_timeouts"], 0, "{report}");
    assert_eq!(report["pass"], true, "{report}");
    let started = metric(&site, "ktls_proxy_quic_handshakes_total{state=\"started\"}");
    let done = metric(&site, "ktls_proxy_quic_handshakes_total{state=\"done\"}");
    assert_eq!(
        (started, done),
        (CONNECTIONS + 1, CONNECTIONS + 1),
        "{report}"
    );
    no_panic(&site);
}
