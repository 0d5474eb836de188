//! HTTP/2 floods through the real proxy, driven by `http-perf --h2-flood` (so the tool is
//! tested too): empty DATA, WINDOW_UPDATE, PRIORITY, the overhead ratio (frames of an
//! unknown type), MadeYouReset, the HPACK bomb, zero-window streams and a client that reads
//! nothing. Each attack must trip its documented limit (GOAWAY code or RST_STREAM), be
//! logged once per connection, leave another connection served, and cost the proxy a
//! bounded amount of memory. `block_action attack drop` resets instead of sending GOAWAY.
//! (PING, SETTINGS, rapid reset and CONTINUATION are in h2_proxy.rs, with Python `h2`.)

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{bin_path, free_port, wait_for_port};

/// The most a flood may grow the proxy's memory (the target for 30 s x 10
/// connections; these runs are shorter and smaller, so it is a loose bound).
const RSS_BOUND: u64 = 16 * 1024 * 1024;

struct Site {
    proxy: Proxy,
    /// `proto=h2` over TLS.
    h2: SocketAddr,
    /// `proto=h2c`.
    h2c: SocketAddr,
    stats: SocketAddr,
}

fn origin() -> Origin {
    Origin::start(|r| match r.path().strip_prefix("/pattern/") {
        Some(n) => Response::pattern(n.parse().unwrap_or(0)),
        None => Response::ok("ok"),
    })
}

fn start(origin: &Origin, tag: &str, extra: &str) -> Site {
    let setup = Setup::new(tag);
    let addr = || SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (h2, h2c, stats) = (addr(), addr(), addr());
    let conf = setup.config(
        origin.addr(),
        "",
        &format!(
            "listen {h2} proto=h2;\nlisten {h2c} proto=h2c;\nstats_listen {stats};\n\
             h2_stall_timeout 1;\n{extra}\n"
        ),
    );
    let proxy = setup.start(&conf);
    for a in [h2, h2c, stats] {
        assert!(wait_for_port(a, Duration::from_secs(10)), "{a} listens");
    }
    Site {
        proxy,
        h2,
        h2c,
        stats,
    }
}

/// `http-perf --h2-flood KIND -c CONNS -d SECS --json` against the h2c listener; its report.
fn flood(site: &Site, kind: &str, conns: u32, secs: u32, path: &str) -> serde_json::Value {
    let out = Command::new("timeout")
        .arg((secs + 20).to_string())
        .arg(bin_path("http-perf"))
        .args(["--h2-flood", kind, "-t", "1", "--json"])
        .args(["-c", &conns.to_string(), "-d", &secs.to_string()])
        .args(["--server-pid", &site.proxy.proc.pid().to_string()])
        .args(["--connect", &site.h2c.to_string()])
        .arg(format!("http://site.test{path}"))
        .output()
        .expect("run http-perf");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "http-perf --h2-flood {kind} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{kind}: {e}: {stdout}"))
}

/// A legitimate request on a fresh TLS connection: `2 200`.
fn served(site: &Site) -> String {
    let port = site.h2.port();
    let (_, out, err) = e2e::curl(
        &[
            "-k",
            "--http2",
            "--resolve",
            &format!("site.test:{port}:127.0.0.1"),
            "-o",
            "/dev/null",
            "-w",
            "%{http_version} %{http_code}",
            &format!("https://site.test:{port}/"),
        ],
        10,
    );
    format!("{out}{err}")
}

fn count(report: &serde_json::Value, section: &str, key: &str) -> u64 {
    report[section][key].as_u64().unwrap_or(0)
}

/// Lines the proxy logged for `kind` trips.
fn logged(site: &Site, kind: &str) -> usize {
    let needle = format!("h2 flood from 127.0.0.1: {kind} limit tripped");
    site.proxy
        .proc
        .stderr()
        .lines()
        .filter(|l| l.contains(&needle))
        .count()
}

fn metric(site: &Site, kind: &str) -> u64 {
    let (_, text, _) = e2e::curl(&[&format!("http://{}/metrics", site.stats)], 10);
    text.lines()
        .find(|l| l.starts_with("ktls_proxy_h2_floods_total") && l.contains(&format!("\"{kind}\"")))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

fn assert_bounded(report: &serde_json::Value, kind: &str) {
    let growth = report["server_memory"]["growth_bytes"]
        .as_u64()
        .unwrap_or(u64::MAX);
    assert!(
        growth <= RSS_BOUND,
        "{kind}: the proxy grew {growth} bytes: {report}"
    );
}

/// Each flood that must end the connection: (tool kind, limit label in log and metrics).
const CLOSING: [(&str, &str); 4] = [
    ("empty-data", "empty_data"),
    ("window", "window_update"),
    ("priority", "control_frames"),
    ("unknown", "overhead"),
];

#[test]
fn each_flood_trips_its_limit_and_other_clients_are_served() {
    let origin = origin();
    let site = start(&origin, "h2-floods", "block_action attack reply;");
    // The stall cases take their timeout (1 s, checked within the 5 s client timer):
    // they run meanwhile.
    let (stall_site_h2c, pid) = (site.h2c, site.proxy.proc.pid());
    let slow_reader = thread::spawn(move || slow_reader_is_cut(stall_site_h2c));
    let zero_window = thread::spawn(move || zero_window_flood(stall_site_h2c, pid));

    for (kind, label) in CLOSING {
        let r = flood(&site, kind, 2, 5, "/");
        assert_eq!(count(&r, "goaways", "ENHANCE_YOUR_CALM"), 2, "{kind}: {r}");
        assert_eq!(r["closed"], 2, "{kind}: both flooders closed: {r}");
        assert_eq!(served(&site), "2 200", "{kind}: another client is served");
        assert_bounded(&r, kind);
        assert_eq!(logged(&site, label), 2, "{kind}: one line per connection");
        assert!(metric(&site, label) >= 2, "{kind}: counted as {label}");
    }

    // MadeYouReset: every request is followed by a WINDOW_UPDATE of 0 on its stream; the
    // proxy resets each (PROTOCOL_ERROR) until the budget of 100 is spent, then GOAWAY.
    let r = flood(&site, "made-you-reset", 2, 5, "/");
    assert_eq!(count(&r, "goaways", "ENHANCE_YOUR_CALM"), 2, "{r}");
    let resets = count(&r, "resets", "PROTOCOL_ERROR");
    assert!(
        (200..=210).contains(&resets),
        "100 provoked resets per connection: {r}"
    );
    assert_eq!(logged(&site, "made_you_reset"), 2);
    assert_eq!(served(&site), "2 200");

    // HPACK bomb: 64 one-byte references to a 4 000-byte field, per request; each request is
    // answered 431 (the decoded list is over 16 KiB) and the connection goes on. Thousands
    // of trips, one log line per connection.
    let r = flood(&site, "hpack", 2, 1, "/");
    assert!(count(&r, "responses", "431") > 100, "{r}");
    assert_eq!(r["closed"], 0, "the connection goes on: {r}");
    assert_bounded(&r, "hpack");
    assert_eq!(
        logged(&site, "header_list"),
        2,
        "logged once per connection"
    );
    assert_eq!(served(&site), "2 200");

    stream_zero_window_update_is_a_protocol_error(site.h2c);
    zero_window.join().expect("zero-window case");
    slow_reader.join().expect("slow-reader case");
    assert_eq!(
        logged(&site, "send_window_stall"),
        1,
        "one line for all its streams"
    );
    assert_eq!(logged(&site, "output_stall"), 1);
    assert!(metric(&site, "output_stall") >= 1);
    assert_eq!(served(&site), "2 200");
}

/// Zero window: 100 streams for a 1 MB body that may not send a byte. Each that has a
/// response waiting is reset (CANCEL) once its window has stayed shut for h2_stall_timeout,
/// and replaced by the tool; memory stays bounded.
fn zero_window_flood(h2c: SocketAddr, pid: u32) {
    let out = Command::new("timeout")
        .arg("30")
        .arg(bin_path("http-perf"))
        .args([
            "--h2-flood",
            "zero-window",
            "-c",
            "1",
            "-t",
            "1",
            "-d",
            "7",
            "--json",
        ])
        .args([
            "--server-pid",
            &pid.to_string(),
            "--connect",
            &h2c.to_string(),
        ])
        .arg("http://site.test/pattern/1000000")
        .output()
        .expect("run http-perf");
    let r: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("http-perf --json report");
    // Streams beyond the upstream group's 32 connections wait in its queue without a
    // response head; those with one stall and are reset.
    assert!(
        count(&r, "resets", "CANCEL") >= 30,
        "stalled streams reset: {r}"
    );
    assert_eq!(r["data_bytes"], 0, "not a byte beyond the window: {r}");
    assert_bounded(&r, "zero-window");
}

/// A client that asks for 50 MB and then reads nothing is reset once its outbox has taken
/// no byte for h2_stall_timeout (the proxy stops reading its upstream meanwhile).
fn slow_reader_is_cut(h2c: SocketAddr) {
    let mut s = TcpStream::connect(h2c).expect("connect h2c");
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // SETTINGS: INITIAL_WINDOW_SIZE 2^31-1; the connection window +1 GiB.
    hello.extend_from_slice(&[0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 4, 0x7f, 0xff, 0xff, 0xff]);
    hello.extend_from_slice(&[0, 0, 4, 8, 0, 0, 0, 0, 0, 0x40, 0, 0, 0]);
    s.write_all(&hello).expect("preface");
    // Read the server's SETTINGS and acknowledge them, as a client must.
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut buf = [0u8; 4096];
    let _ = s.read(&mut buf).expect("server SETTINGS");
    let mut req = vec![0, 0, 0, 4, 1, 0, 0, 0, 0];
    let mut block = Vec::new();
    for (n, v) in [
        (":method", "GET"),
        (":scheme", "http"),
        (":authority", "site.test"),
        (":path", "/pattern/50000000"),
    ] {
        block.extend_from_slice(&[0, n.len() as u8]);
        block.extend_from_slice(n.as_bytes());
        block.push(v.len() as u8);
        block.extend_from_slice(v.as_bytes());
    }
    req.extend_from_slice(&[0, 0, block.len() as u8, 1, 0x5, 0, 0, 0, 1]);
    req.extend_from_slice(&block);
    s.write_all(&req).expect("request");
    thread::sleep(Duration::from_secs(7));
    // Now read: a cut connection ends (reset, or EOF) after what was in flight.
    let deadline = Instant::now() + Duration::from_secs(5);
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let mut total = 0usize;
    let cut = loop {
        if Instant::now() >= deadline {
            break false;
        }
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => total += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => break false,
        }
    };
    assert!(
        cut,
        "a client that reads nothing is cut (read {total} bytes after waiting)"
    );
    assert!(
        total < 40_000_000,
        "the proxy did not queue the whole response: {total}"
    );
}

/// A WINDOW_UPDATE of 0 on stream 0 is a connection PROTOCOL_ERROR (RFC 9113 §6.9).
fn stream_zero_window_update_is_a_protocol_error(h2c: SocketAddr) {
    let mut s = TcpStream::connect(h2c).expect("connect h2c");
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    hello.extend_from_slice(&[0, 0, 4, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    s.write_all(&hello).expect("write");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    // Walk the frames to the GOAWAY; its error code follows the last stream id.
    let mut at = 0;
    let mut code = None;
    while at + 9 <= got.len() {
        let len =
            usize::from(got[at]) << 16 | usize::from(got[at + 1]) << 8 | usize::from(got[at + 2]);
        if got[at + 3] == 7 && at + 17 <= got.len() {
            code = Some(u32::from_be_bytes([
                got[at + 13],
                got[at + 14],
                got[at + 15],
                got[at + 16],
            ]));
        }
        at += 9 + len;
    }
    assert_eq!(code, Some(1), "GOAWAY PROTOCOL_ERROR: {got:?}");
}

/// `block_action attack drop`: a flooder gets no GOAWAY, its connection is reset; the trip
/// is still logged and counted, and other clients are served.
#[test]
fn block_action_drop_resets_the_flooder() {
    let origin = origin();
    let site = start(&origin, "h2-floods-drop", "block_action attack drop;");
    let r = flood(&site, "ping", 2, 5, "/");
    assert_eq!(r["closed"], 2, "{r}");
    assert_eq!(r["closed_without_goaway"], 2, "reset, no GOAWAY: {r}");
    assert_eq!(served(&site), "2 200");
    let log = site.proxy.proc.stderr();
    assert_eq!(logged(&site, "ping"), 2, "{log}");
    assert!(
        log.contains("connection reset (block_action attack drop)"),
        "{log}"
    );
    assert!(metric(&site, "ping") >= 2);
}
