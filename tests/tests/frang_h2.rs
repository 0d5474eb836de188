//! Frang's request limits over HTTP/2 give HTTP/1.1's verdict (issue 30, items 7 and 8): a
//! size limit (URI, field length, field count with the pseudo-headers counted, body length
//! by Content-Length or by DATA) is a block — 403 on the stream, the connection ended, a log
//! line naming the limit and the address, the address blocked by `ip_block` — and a head that
//! arrives too slowly or in too many pieces (`client_header_timeout`,
//! `http_header_chunk_cnt`) ends the connection. Before, h2 got a 414/431/413 on the stream,
//! nothing logged or blocked, and a HEADERS frame without END_HEADERS stayed open for good.
//! The client is Python `h2` (raw frames for the slow heads), from its own loopback address.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use e2e::{free_port, wait_for_port};

mod frang_common;

use frang_common::*;

/// Runs one case of tests/py/h2_frang_cases.py from `src`; returns its "ok" line.
fn case(f: &Frang, h2c: SocketAddr, src: std::net::Ipv4Addr, name: &str) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/h2_frang_cases.py");
    let out = Command::new("timeout")
        .args(["60", "python3", script])
        .args([&h2c.port().to_string(), &src.to_string(), name])
        .output()
        .expect("python3 (tests/run.sh installs the h2 package)");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.starts_with(&format!("ok {name}")),
        "{name}: {stdout}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        f.proxy.proc.logs()
    );
    stdout
}

fn start_h2c(tag: &str, limits: &str) -> (Frang, SocketAddr) {
    let h2c = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let f = start(tag, limits, &format!("{REPLY}\nlisten {h2c} proto=h2c;"));
    assert!(wait_for_port(h2c, Duration::from_secs(10)), "{h2c} listens");
    (f, h2c)
}

/// The proxy logged a block of `src` by `limit`.
fn logged_block(f: &Frang, src: std::net::Ipv4Addr, limit: &str) {
    let logs = f.proxy.proc.logs();
    let line = logs
        .lines()
        .find(|l| l.contains(&format!("blocked {src} ")) && l.contains(limit));
    assert!(
        line.is_some(),
        "no block of {src} by {limit} logged:\n{logs}"
    );
}

#[test]
fn size_limits_are_blocks_over_h2() {
    let limits = "http_uri_len 20;\nhttp_hdr_len 30;\nhttp_header_cnt 5;\n\
                  http_body_len 10;\nip_block 5;";
    let (f, h2c) = start_h2c("frang-h2-sizes", limits);
    // Four pseudo-headers and one field are five fields: served, as in Tempesta.
    case(&f, h2c, ip(0, 30, 1), "served");
    // Three cookie crumbs are one Cookie field, as over HTTP/1.1: five again (seven counted
    // apart, before: a browser with many cookies was reset under the default limit of 50).
    case(&f, h2c, ip(0, 30, 2), "served_crumbs");
    for (n, (name, limit)) in [
        ("blocked_fields", "http_header_cnt"),
        ("blocked_uri", "http_uri_len"),
        ("blocked_field_len", "http_hdr_len"),
        ("blocked_body_cl", "http_body_len"),
        ("blocked_body_data", "http_body_len"),
    ]
    .into_iter()
    .enumerate()
    {
        let src = ip(0, 30, 10 + n as u8);
        case(&f, h2c, src, name);
        logged_block(&f, src, limit);
        // ip_block: the address is refused from now on, on any listener.
        let outcome = f.once(src, &closing_get("/after"));
        f.expect_dropped(outcome, &format!("{name}: a new connection under ip_block"));
    }
    // The origin saw only the requests that were served.
    assert_eq!(f.origin.total_requests(), 2);
}

/// A block stops the connection's other requests, read in the same pass, as HTTP/1.1 stops
/// parsing at a block: with `block_action attack drop` (the default) the connection is reset
/// with nothing sent; with `reply` the blocked stream gets 403 and the others are refused
/// unprocessed (REFUSED_STREAM). Before, the 20 GETs written after the blocked stream were
/// served from the origin, and under `drop` the connection stayed open until they finished.
#[test]
fn a_block_stops_the_requests_behind_it_over_h2() {
    for (action, case_name) in [("drop", "dropped_batch"), ("reply", "replied_batch")] {
        let h2c = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let f = start(
            &format!("frang-h2-batch-{action}"),
            "http_uri_len 20;",
            &format!("block_action attack {action};\nlisten {h2c} proto=h2c;"),
        );
        assert!(wait_for_port(h2c, Duration::from_secs(10)), "{h2c} listens");
        case(&f, h2c, ip(0, 33, 1), case_name);
        logged_block(&f, ip(0, 33, 1), "http_uri_len");
        assert_eq!(
            f.origin.total_requests(),
            0,
            "{action}: requests reached the origin"
        );
    }
}

/// Malformed requests count against `request_rate` as requests do, although they never
/// become exchanges: over HTTP/2 a connection could otherwise send them without limit, each
/// costing a stream and a 400 (on HTTP/1.1 each costs a connection). Before, the 40 sent in
/// one write got 40 answers of 400 and the connection stayed open.
#[test]
fn malformed_requests_count_against_the_request_rate_over_h2() {
    let (f, h2c) = start_h2c("frang-h2-malformed", "request_rate 10;");
    case(&f, h2c, ip(0, 34, 1), "malformed_flood");
    logged_block(&f, ip(0, 34, 1), "request_rate");
    assert_eq!(f.origin.total_requests(), 0);
}

#[test]
fn slow_heads_are_cut_over_h2() {
    let limits = "client_header_timeout 2;\nhttp_header_chunk_cnt 3;";
    let (f, h2c) = start_h2c("frang-h2-slow", limits);
    let out = case(&f, h2c, ip(0, 31, 1), "slow_head");
    let after: f64 = out
        .split("closed_after=")
        .nth(1)
        .and_then(|s| s.trim().parse().ok())
        .expect("closed_after");
    // Cut by the 2 s header timeout, not by the 75 s keep-alive one.
    assert!(after < 6.0, "a stalled HEADERS was cut after {after} s");
    logged_block(&f, ip(0, 31, 1), "client_header_timeout");
    case(&f, h2c, ip(0, 31, 2), "head_chunks");
    logged_block(&f, ip(0, 31, 2), "http_header_chunk_cnt");
    assert_eq!(f.origin.total_requests(), 0);
    // Another client is served.
    f.served(ip(0, 31, 3), &closing_get("/other"), "another address");
}

/// Issue 30 item 9: `client_mem` accounts what the proxy holds for an address across its
/// connections (here HTTP/2 uploads queued behind a one-connection, slow origin) and resets
/// the connections of an address over the hard limit, blocking it under `ip_block`, as
/// Tempesta does. Before, 24 such connections held 25 MiB under `client_mem 2M 4M`.
#[test]
fn client_mem_resets_an_address_over_its_hard_limit() {
    let origin = e2e::origin::Origin::start(|r| {
        let answer = e2e::origin::Response::ok(format!("{}", r.body.len()));
        match r.path() {
            "/slow" => answer.delay(Duration::from_secs(3)),
            _ => answer,
        }
    });
    let setup = e2e::proxy::Setup::new("frang-h2-mem");
    let h2c = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = setup
        .config(
            origin.addr(),
            "",
            &format!(
                "frang_limits {{ ip_block 60; }}\n{REPLY}\nclient_mem 2M 4M;\n\
                 listen {h2c} proto=h2c;\n"
            ),
        )
        .replace(
            &format!("server {};", origin.addr()),
            &format!("server {} conns_n=1;", origin.addr()),
        );
    let http = setup.http;
    let f = Frang {
        origin,
        proxy: setup.start(&conf),
        http,
        https: http,
    };
    assert!(wait_for_port(h2c, Duration::from_secs(10)), "{h2c} listens");
    let src = ip(0, 32, 1);
    case(&f, h2c, src, "client_mem");
    logged_block(&f, src, "client_mem");
    let outcome = f.once(src, &closing_get("/after"));
    f.expect_dropped(outcome, "a new connection under ip_block");
    // Another address is served.
    f.served(ip(0, 32, 2), &closing_get("/other"), "another address");
}

/// `client_mem` counts what the proxy holds for a connection, not a stored body it shares
/// from the cache: a cache hit of 7 MB to a client that reads slowly (4 KiB receive buffer),
/// under `client_mem 2M 4M`, is delivered whole. Before, the outbox's shared bytes were
/// counted and the hit's connection was reset (and its address blocked) mid-body.
#[test]
fn client_mem_leaves_a_shared_cached_body_out() {
    const SIZE: usize = 7 << 20;
    let origin = e2e::origin::Origin::start(|_| {
        e2e::origin::Response::ok(vec![b'x'; SIZE]).header("Cache-Control", "max-age=600")
    });
    let setup = e2e::proxy::Setup::new("frang-mem-hit");
    let conf = setup.config(
        origin.addr(),
        "",
        &format!("frang_limits {{ ip_block 60; }}\n{REPLY}\nclient_mem 2M 4M;\ncache 1;\ncache_fulfill * *;\n"),
    );
    let http = setup.http;
    let proxy = setup.start(&conf);
    for what in ["the miss", "the hit"] {
        let got = slow_get(http, "/big");
        assert!(
            got.ends_with(&vec![b'x'; 1024]) && got.len() > SIZE,
            "{what}: {} bytes\n{}",
            got.len(),
            proxy.proc.logs()
        );
    }
    assert_eq!(
        origin.total_requests(),
        1,
        "the second request was not a hit"
    );
}

/// A GET on a new connection whose receive buffer is 4 KiB, read after a pause: the proxy
/// holds what the client has not taken. Returns everything read until the close.
fn slow_get(http: SocketAddr, path: &str) -> Vec<u8> {
    use std::io::{Read, Write};
    let sock =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    sock.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    sock.connect(&http.into()).expect("connect");
    let mut s: std::net::TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("read timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    std::thread::sleep(Duration::from_millis(300));
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    got
}

/// CONNECT over HTTP/2 is judged as over HTTP/1.1: frang's http_methods refuses it (403,
/// then GOAWAY under `block_action attack reply`), not the proxy's 501 (which the previous
/// binary answered on the stream, keeping the connection).
#[test]
fn connect_is_frangs_403_over_h2() {
    let (f, h2c) = start_h2c("frang-h2-connect", "http_methods get post;");
    let src = ip(0, 35, 1);
    case(&f, h2c, src, "blocked_connect");
    logged_block(&f, src, "http_methods");
}
