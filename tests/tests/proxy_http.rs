//! The real proxy in front of a recording origin, over plain HTTP: forwarding rules,
//! keep-alive, pipelining, large bodies both ways, smuggling refusals, upstream failures.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2e::origin::{pattern, Origin, Response};
use e2e::proxy::Setup;
use e2e::{curl, free_port, raw_exchange};

fn get(addr: std::net::SocketAddr, path: &str) -> Vec<u8> {
    let req = format!("GET {path} HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n");
    raw_exchange(addr, req.as_bytes(), Duration::from_secs(5)).expect("exchange")
}

fn status_of(response: &[u8]) -> u16 {
    std::str::from_utf8(response.get(9..12).unwrap_or(b"000"))
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn forwards_with_proxy_headers_and_without_hop_by_hop() {
    let origin = Origin::start(|_| {
        Response::ok("hello")
            .header("Keep-Alive", "timeout=5")
            .header("X-Origin", "1")
    });
    let setup = Setup::new("fwd");
    let conf = setup.config(origin.addr(), "", "");
    let proxy = setup.start(&conf);
    let addr = proxy_addr(&conf);
    let req = "GET /a?b=c HTTP/1.1\r\nHost: site.test\r\nConnection: close, X-Hop\r\nX-Hop: secret\r\nX-Forwarded-For: 10.0.0.1\r\nTE: trailers\r\nUser-Agent: t\r\n\r\n";
    let resp = raw_exchange(addr, req.as_bytes(), Duration::from_secs(5)).expect("exchange");
    let text = String::from_utf8_lossy(&resp);
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "{text}\n{}",
        proxy.proc.logs()
    );
    assert!(text.ends_with("hello"));
    assert!(text.contains("X-Origin: 1"));
    assert!(
        !text.to_ascii_lowercase().contains("keep-alive: timeout"),
        "hop-by-hop Keep-Alive leaked: {text}"
    );
    let seen = origin.requests();
    assert_eq!(seen.len(), 1);
    let r = &seen[0];
    assert_eq!(r.target, "/a?b=c");
    assert_eq!(r.header("host"), Some("site.test"));
    assert_eq!(r.header("x-forwarded-for"), Some("10.0.0.1, 127.0.0.1"));
    assert!(
        r.header("via").is_some_and(|v| v.starts_with("1.1 ")),
        "{:?}",
        r.headers
    );
    assert_eq!(
        r.header("x-hop"),
        None,
        "a field named by Connection must not be forwarded"
    );
    assert_eq!(r.header("te"), None);
    assert_eq!(r.header("user-agent"), Some("t"));
}

/// The listener address written by `Setup::config` (its first `listen`).
fn proxy_addr(conf: &str) -> std::net::SocketAddr {
    let line = conf.lines().next().expect("listen line");
    line.trim_start_matches("listen ")
        .trim_end_matches(';')
        .parse()
        .expect("listen address")
}

#[test]
fn keep_alive_reuses_client_and_upstream_connections() {
    let origin = Origin::start(|r| Response::ok(format!("path={}", r.path())));
    let setup = Setup::new("ka");
    let conf = setup.config(origin.addr(), "", "");
    let _proxy = setup.start(&conf);
    let mut s = TcpStream::connect(proxy_addr(&conf)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    for i in 0..5 {
        write!(s, "GET /k{i} HTTP/1.1\r\nHost: site.test\r\n\r\n").expect("write");
        let resp = read_one_response(&mut s);
        assert!(
            resp.ends_with(format!("path=/k{i}").as_bytes()),
            "{}",
            String::from_utf8_lossy(&resp)
        );
    }
    assert_eq!(origin.total_requests(), 5);
    assert_eq!(
        origin.connections(),
        1,
        "the pooled upstream connection should be reused"
    );
}

/// Reads one response with a Content-Length body from a keep-alive connection.
fn read_one_response(s: &mut TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut byte).expect("read head");
        assert!(
            n == 1,
            "connection closed mid-head: {}",
            String::from_utf8_lossy(&buf)
        );
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().expect("length"))
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).expect("read body");
    buf.extend_from_slice(&body);
    buf
}

#[test]
fn pipelined_responses_keep_request_order() {
    // The first request is the slowest: responses must still come back in request order.
    let origin = Origin::start(|r| {
        let delay = if r.path() == "/p0" { 300 } else { 0 };
        Response::ok(r.path().to_string()).delay(Duration::from_millis(delay))
    });
    let setup = Setup::new("pipe");
    let conf = setup.config(origin.addr(), "", "");
    let _proxy = setup.start(&conf);
    let mut s = TcpStream::connect(proxy_addr(&conf)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut batch = String::new();
    for i in 0..4 {
        batch.push_str(&format!("GET /p{i} HTTP/1.1\r\nHost: site.test\r\n\r\n"));
    }
    s.write_all(batch.as_bytes()).expect("write");
    for i in 0..4 {
        let resp = read_one_response(&mut s);
        assert!(
            resp.ends_with(format!("/p{i}").as_bytes()),
            "response {i}: {}",
            String::from_utf8_lossy(&resp)
        );
    }
}

#[test]
fn uploads_of_5mb_arrive_byte_exact_with_length_and_chunked() {
    let origin = Origin::start(|r| Response::ok(format!("{}", r.body.len())));
    let setup = Setup::new("up");
    let conf = setup.config(origin.addr(), "", "");
    let proxy = setup.start(&conf);
    let body = pattern(5 * 1024 * 1024);
    let file = proxy.dir.join("upload.bin");
    std::fs::write(&file, &body).expect("write upload");
    let url = format!("http://{}/upload", proxy_addr(&conf));
    let data = format!("@{}", file.display());
    let (st, out, err) = curl(&["-H", "Host: site.test", "--data-binary", &data, &url], 30);
    assert!(st.success(), "{err}");
    assert_eq!(out, body.len().to_string());
    let (st, out, err) = curl(
        &[
            "-H",
            "Host: site.test",
            "-H",
            "Transfer-Encoding: chunked",
            "--data-binary",
            &data,
            &url,
        ],
        30,
    );
    assert!(st.success(), "{err}");
    assert_eq!(out, body.len().to_string());
    let requests = origin.requests();
    assert_eq!(requests.len(), 2);
    assert!(!requests[0].chunked && requests[1].chunked);
    for r in &requests {
        assert!(r.body == body, "upload differs (chunked={})", r.chunked);
    }
}

#[test]
fn download_of_30mb_is_byte_exact_both_framings() {
    let origin = Origin::start(|r| {
        let resp = Response::pattern(30 * 1024 * 1024);
        if r.path() == "/chunked" {
            resp.chunked()
        } else {
            resp
        }
    });
    let setup = Setup::new("down");
    let conf = setup.config(origin.addr(), "", "");
    let proxy = setup.start(&conf);
    let expected = pattern(30 * 1024 * 1024);
    for path in ["/length", "/chunked"] {
        let file = proxy.dir.join("download.bin");
        let url = format!("http://{}{path}", proxy_addr(&conf));
        let out = file.display().to_string();
        let (st, _, err) = curl(&["-H", "Host: site.test", "-o", &out, &url], 60);
        assert!(st.success(), "{path}: {err}");
        let got = std::fs::read(&file).expect("read download");
        assert!(
            got.len() == expected.len() && got == expected,
            "{path}: {} bytes differ",
            got.len()
        );
    }
}

#[test]
fn smuggling_shapes_are_refused_and_never_reach_the_origin() {
    let origin = Origin::fixed(b"origin");
    let setup = Setup::new("smuggle");
    let conf = setup.config(origin.addr(), "", "");
    let proxy = setup.start(&conf);
    let addr = proxy_addr(&conf);
    let cases: &[(&str, &[u8], u16)] = &[
        ("CL and TE", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        ("two CLs", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde", 400),
        ("obs-fold", b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n", 400),
        ("bare LF", b"GET / HTTP/1.1\nHost: a\n\n", 400),
        ("bare CR", b"GET / HTTP/1.1\r\nHost: a\rX: y\r\n\r\n", 400),
        ("NUL in value", b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\0c\r\n\r\n", 400),
        ("space before colon", b"GET / HTTP/1.1\r\nHost: a\r\nX-A : b\r\n\r\n", 400),
        ("bad name", b"GET / HTTP/1.1\r\nHost: a\r\nX(A): b\r\n\r\n", 400),
        ("bad chunk size", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", 400),
        ("chunked not last", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", 400),
        ("no Host", b"GET / HTTP/1.1\r\nX: y\r\n\r\n", 400),
        ("two Hosts", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        ("negative CL", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400),
    ];
    for (name, request, status) in cases {
        let resp = raw_exchange(addr, request, Duration::from_secs(5)).expect("exchange");
        assert_eq!(
            status_of(&resp),
            *status,
            "{name}: {}\n{}",
            String::from_utf8_lossy(&resp),
            proxy.proc.logs()
        );
    }
    // A head larger than the limit is 431.
    let big = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
        "a".repeat(40_000)
    );
    let resp = raw_exchange(addr, big.as_bytes(), Duration::from_secs(5)).expect("exchange");
    assert_eq!(status_of(&resp), 431, "{}", String::from_utf8_lossy(&resp));
    assert_eq!(
        origin.total_requests(),
        0,
        "a refused request reached the origin"
    );
}

#[test]
fn dead_upstream_gives_502_within_a_second() {
    let dead = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let setup = Setup::new("dead");
    let conf = setup.config(dead, "", "");
    let _proxy = setup.start(&conf);
    for _ in 0..3 {
        let started = Instant::now();
        let resp = get(proxy_addr(&conf), "/");
        assert_eq!(status_of(&resp), 502, "{}", String::from_utf8_lossy(&resp));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "took {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn slow_upstream_gives_504() {
    let origin = Origin::start(|_| Response::ok("late").delay(Duration::from_secs(4)));
    let setup = Setup::new("slow");
    let conf = setup.config(origin.addr(), "server_forward_timeout 1;", "");
    let _proxy = setup.start(&conf);
    let started = Instant::now();
    let resp = get(proxy_addr(&conf), "/");
    assert_eq!(status_of(&resp), 504, "{}", String::from_utf8_lossy(&resp));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn stale_pooled_upstream_connection_is_retried_not_502() {
    // The origin answers the first request of each connection and silently drops the
    // connection on the second: exactly a keep-alive connection that went stale.
    let per_conn: Arc<Mutex<HashMap<usize, usize>>> = Arc::default();
    let counts = per_conn.clone();
    let origin = Origin::start(move |r| {
        let mut counts = counts.lock().unwrap_or_else(|e| e.into_inner());
        let n = counts.entry(r.conn_index).or_insert(0);
        *n += 1;
        if *n == 1 {
            Response::ok("fresh")
        } else {
            Response::dropped()
        }
    });
    let setup = Setup::new("stale");
    let conf = setup.config(origin.addr(), "", "");
    let proxy = setup.start(&conf);
    for i in 0..4 {
        let resp = get(proxy_addr(&conf), "/");
        assert_eq!(
            status_of(&resp),
            200,
            "request {i}: {}\n{}",
            String::from_utf8_lossy(&resp),
            proxy.proc.logs()
        );
    }
    assert!(
        origin.connections() >= 4,
        "each retry needs a fresh connection"
    );
}

#[test]
fn expect_100_continue_is_answered_by_the_proxy() {
    let origin =
        Origin::start(|r| Response::ok(format!("got {}", String::from_utf8_lossy(&r.body))));
    let setup = Setup::new("expect");
    let conf = setup.config(origin.addr(), "", "");
    let _proxy = setup.start(&conf);
    let mut s = TcpStream::connect(proxy_addr(&conf)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    s.write_all(
        b"POST /e HTTP/1.1\r\nHost: site.test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
    )
    .expect("head");
    let mut interim = [0u8; 25];
    s.read_exact(&mut interim)
        .expect("100 Continue before the body is sent");
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(b"hello").expect("body");
    let resp = read_one_response(&mut s);
    assert!(
        resp.starts_with(b"HTTP/1.1 200") && resp.ends_with(b"got hello"),
        "{}",
        String::from_utf8_lossy(&resp)
    );
}

#[test]
fn http10_clients_get_unchunked_bodies_and_their_keep_alive_rules() {
    let origin = Origin::start(|r| {
        let resp = Response::ok(format!(
            "ten bytes{}",
            if r.path() == "/chunked" { "!" } else { "." }
        ));
        if r.path() == "/chunked" {
            resp.chunked()
        } else {
            resp
        }
    });
    let setup = Setup::new("http10");
    let conf = setup.config(origin.addr(), "", "");
    let _proxy = setup.start(&conf);
    let addr = proxy_addr(&conf);
    // HTTP/1.0 requests carry no Host: under `http_strict_host_checking` (on by default, as
    // in Tempesta) a Host in a request older than HTTP/1.1 is refused.
    // No keep-alive: the response ends with the connection.
    let resp =
        raw_exchange(addr, b"GET /plain HTTP/1.0\r\n\r\n", Duration::from_secs(5)).expect("1.0");
    let text = String::from_utf8_lossy(&resp);
    assert!(
        text.starts_with("HTTP/1.1 200") && text.ends_with("ten bytes."),
        "{text}"
    );
    // A chunked origin response reaches an HTTP/1.0 client without chunked framing.
    let resp = raw_exchange(
        addr,
        b"GET /chunked HTTP/1.0\r\n\r\n",
        Duration::from_secs(5),
    )
    .expect("1.0");
    let text = String::from_utf8_lossy(&resp);
    assert!(
        !text.to_ascii_lowercase().contains("transfer-encoding"),
        "{text}"
    );
    assert!(text.ends_with("\r\n\r\nten bytes!"), "{text}");
    // Keep-alive asked for: granted, and a second request works on the same connection.
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    for _ in 0..2 {
        s.write_all(b"GET /plain HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .expect("write");
        let resp = read_one_response(&mut s);
        let text = String::from_utf8_lossy(&resp);
        assert!(
            text.contains("Connection: keep-alive") && text.ends_with("ten bytes."),
            "{text}"
        );
    }
}

#[test]
fn health_monitor_suspends_a_failing_server_and_brings_it_back() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let b_healthy = Arc::new(AtomicBool::new(false));
    let a = Origin::start(|r| {
        if r.path() == "/health" {
            Response::ok("ok")
        } else {
            Response::ok("A")
        }
    });
    let flag = b_healthy.clone();
    let b = Origin::start(move |r| match r.path() {
        "/health" if flag.load(Ordering::SeqCst) => Response::ok("ok"),
        "/health" => Response::ok("sick").status(500),
        _ => Response::ok("B"),
    });
    let setup = Setup::new("health");
    let conf = setup.config(a.addr(), &format!("server {}; health h;", b.addr()), "").replace(
        "srv_group default",
        "health_check h { request \"GET /health HTTP/1.0\\r\\n\\r\\n\"; resp_code 200; timeout 1; }\nsrv_group default",
    );
    let proxy = setup.start(&conf);
    let addr = proxy_addr(&conf);
    let body = |resp: Vec<u8>| {
        resp.rsplit(|&b| b == b'\n')
            .next()
            .map(|b| b.to_vec())
            .unwrap_or_default()
    };
    // After the first check (1 s), the sick server gets no traffic.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        b.hits("/health") >= 1,
        "B was never checked\n{}",
        proxy.proc.logs()
    );
    for _ in 0..20 {
        assert_eq!(
            body(get(addr, "/")),
            b"A",
            "a suspended server got a request"
        );
    }
    // Once healthy again, the next checks bring it back.
    b_healthy.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(8);
    let mut back = false;
    while Instant::now() < deadline && !back {
        back = body(get(addr, "/")) == b"B";
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        back,
        "the recovered server never got traffic again\n{}",
        proxy.proc.logs()
    );
}
