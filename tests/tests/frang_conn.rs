//! Frang's connection-level limits end to end (TCP and TLS rates, concurrent connections,
//! header and body timeouts and chunk counts, ip_block, the client table bound), with clients
//! bound to their own loopback source addresses so each test is a fresh frang client.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::rawclient::{connect_from, get, Outcome, RawClient};
use e2e::{curl, free_port, wait_for_port};
use ktls::resume::ClientSession;
use openssl::ssl::{Ssl, SslContext, SslMethod, SslVerifyMode, SslVersion};

mod frang_common;

use frang_common::*;

fn worker_proxy(tag: &str, limits: &str) -> (Origin, Proxy, SocketAddr, SocketAddr) {
    let origin = Origin::start(|_| Response::ok(Vec::new()));
    let setup = Setup::new(tag);
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = setup.config(
        origin.addr(),
        "",
        &format!("frang_limits {{ {limits} }}\n{REPLY}\nstats_listen {stats};"),
    );
    let http = setup.http;
    let proxy = setup.start(&conf);
    assert!(wait_for_port(stats, T));
    (origin, proxy, http, stats)
}

/// The per-worker samples of `metric` from the stats endpoint.
fn per_worker(stats: SocketAddr, metric: &str) -> Vec<u64> {
    let (st, metrics, err) = curl(&[&format!("http://{stats}/metrics")], 5);
    assert!(st.success(), "{err}");
    let samples: Vec<u64> = metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{metric}{{worker=")))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(samples.len(), 2, "expected two workers: {metrics}");
    samples
}

/// Opens `n` connections from `src` first, then sends one request on each; returns the
/// counts of (200, 403, dropped) and the outcomes.
fn fan_out(http: SocketAddr, src: Ipv4Addr, n: usize) -> ((usize, usize, usize), Vec<Outcome>) {
    let mut clients: Vec<RawClient> = (0..n)
        .map(|_| RawClient::connect_from(src, http).expect("connect"))
        .collect();
    for c in &mut clients {
        let _ = c.send(&closing_get("/w"));
    }
    let outcomes: Vec<Outcome> = clients.iter_mut().map(|c| c.read_response(T)).collect();
    let count = |f: &dyn Fn(&Outcome) -> bool| outcomes.iter().filter(|o| f(o)).count();
    let counts = (
        count(&|o| o.status() == Some(200)),
        count(&|o| o.status() == Some(403)),
        count(&|o| o.is_dropped()),
    );
    (counts, outcomes)
}

#[test]
fn request_rate_is_shared_by_worker_threads() {
    let (origin, proxy, http, stats) = worker_proxy("frang-workers-rr", "request_rate 10;");
    // 20 connections from one address, spread by the kernel over both workers' listeners.
    let (counts, outcomes) = fan_out(http, ip(0, 2, 20), 20);
    assert_eq!(
        counts,
        (10, 10, 0),
        "(200, 403, dropped) of 20 connections: {outcomes:?}\n{}",
        proxy.proc.logs()
    );
    let requests = per_worker(stats, "ktls_proxy_requests_total");
    assert!(
        requests.iter().all(|&n| n > 0),
        "all requests landed on one worker: {requests:?}"
    );
    assert_eq!(requests.iter().sum::<u64>(), 20);
    assert_eq!(origin.total_requests(), 10);
}

#[test]
fn tcp_connection_rate_is_shared_by_worker_threads() {
    let (origin, proxy, http, stats) = worker_proxy("frang-workers-tcr", "tcp_connection_rate 10;");
    // The harness's readiness probe was accepted too: count from here.
    let before: u64 = per_worker(stats, "ktls_proxy_connections_accepted_total")
        .iter()
        .sum();
    let (counts, outcomes) = fan_out(http, ip(0, 2, 21), 20);
    assert_eq!(
        counts,
        (10, 0, 10),
        "(200, 403, dropped) of 20 connections: {outcomes:?}\n{}",
        proxy.proc.logs()
    );
    let accepted = per_worker(stats, "ktls_proxy_connections_accepted_total");
    assert_eq!(accepted.iter().sum::<u64>() - before, 10, "{accepted:?}");
    assert_eq!(origin.total_requests(), 10);
}

// ---------------------------------------------------------------------------------------
// Connections
// ---------------------------------------------------------------------------------------

#[test]
fn tcp_connection_rate_refuses_the_connection_over_the_limit() {
    let f = start("frang-tcr", "tcp_connection_rate 5;", REPLY);
    let src = ip(0, 3, 1);
    let started = Instant::now();
    for i in 1..=5 {
        f.served(src, &closing_get("/t"), &format!("connection {i}"));
    }
    let outcome = f.once(src, &closing_get("/t"));
    f.expect_dropped(
        outcome,
        &format!("6th connection within {:?}", started.elapsed()),
    );
    f.served(ip(0, 3, 2), &closing_get("/t"), "another address");
    // The rate is per second: later, the address is served again.
    thread::sleep(Duration::from_millis(1500));
    f.served(src, &closing_get("/t"), "after the window");
    assert_eq!(f.origin.total_requests(), 7);
}

#[test]
fn tcp_connection_burst() {
    let f = start("frang-tcb", "tcp_connection_burst 3;", REPLY);
    burst_attempts(3, |src| {
        let mut clients: Vec<RawClient> = (0..4).map(|_| f.client(src)).collect();
        let mut passed = 0;
        for c in &mut clients {
            match c.request(&closing_get("/b"), T) {
                Outcome::Response(r) if r.status == 200 => passed += 1,
                Outcome::Closed | Outcome::Reset => {}
                other => panic!("{other}\n{}", f.proxy.proc.logs()),
            }
        }
        passed
    });
}

#[test]
fn concurrent_tcp_connections() {
    let f = start("frang-conc", "concurrent_tcp_connections 4;", REPLY);
    let src = ip(0, 3, 10);
    let mut open: Vec<RawClient> = (0..4).map(|_| f.client(src)).collect();
    for (i, c) in open.iter_mut().enumerate() {
        f.expect(
            c.request(&get("/k", HOST), T),
            200,
            &format!("connection {i}"),
        );
    }
    let outcome = f.once(src, &closing_get("/k"));
    f.expect_dropped(outcome, "5th concurrent connection");
    f.served(ip(0, 3, 11), &closing_get("/k"), "another address");
    // Closing one makes room (the proxy learns of the close asynchronously: poll, bounded).
    drop(open.pop());
    let deadline = Instant::now() + T;
    loop {
        match f.once(src, &closing_get("/k")) {
            Outcome::Response(r) if r.status == 200 => break,
            Outcome::Closed | Outcome::Reset if Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(50))
            }
            other => panic!("after closing one: {other}\n{}", f.proxy.proc.logs()),
        }
    }
    // The open connections still work.
    for c in &mut open {
        f.expect(c.request(&get("/k", HOST), T), 200, "still open");
    }
}

// ---------------------------------------------------------------------------------------
// TLS
// ---------------------------------------------------------------------------------------

/// One HTTPS request from `src`, resuming `session` if given. Returns whether it was served,
/// whether the session was resumed, and the session to resume next time.
fn tls_request(
    https: SocketAddr,
    src: Ipv4Addr,
    session: Option<&ClientSession>,
) -> (Outcome, bool, Option<ClientSession>) {
    // A resumption is made from the session's own context (ClientSession::offer checks it).
    let ctx = match session {
        Some(s) => s.context().to_owned(),
        None => {
            let mut b = SslContext::builder(SslMethod::tls_client()).expect("context");
            b.set_verify(SslVerifyMode::NONE);
            b.set_max_proto_version(Some(SslVersion::TLS1_2))
                .expect("max version");
            b.build()
        }
    };
    let mut ssl = Ssl::new(&ctx).expect("ssl");
    ssl.set_hostname(HOST).expect("sni");
    if let Some(s) = session {
        s.offer(&mut ssl).expect("offer the session");
    }
    let tcp = match connect_from(src, https, T) {
        Ok(tcp) => tcp,
        Err(e) => return (Outcome::Error(format!("connect: {e}")), false, None),
    };
    tcp.set_read_timeout(Some(T)).expect("timeout");
    let tls = match ssl.connect(tcp) {
        Ok(tls) => tls,
        Err(e) => return (Outcome::Error(format!("handshake: {e}")), false, None),
    };
    let mut c = RawClient::new(tls);
    let outcome = c.request(&closing_get("/tls"), T);
    let _ = c.wait_closed(T);
    let mut tls = c.into_stream();
    let _ = tls.shutdown();
    let resumed = tls.ssl().session_reused();
    let next = ClientSession::of(tls.ssl());
    (outcome, resumed, next)
}

#[test]
fn tls_connection_rate_counts_full_handshakes_only() {
    let f = start("frang-tls", "tls_connection_rate 3;", REPLY);
    let src = ip(0, 4, 1);
    let started = Instant::now();
    let (outcome, resumed, session) = tls_request(f.https, src, None);
    f.expect(outcome, 200, "full handshake 1");
    assert!(!resumed);
    let session = session.expect("a session");
    for i in 0..4 {
        let (outcome, resumed, _) = tls_request(f.https, src, Some(&session));
        f.expect(outcome, 200, &format!("resumed handshake {i}"));
        assert!(resumed, "handshake {i} was not resumed");
    }
    for i in 2..=3 {
        let (outcome, resumed, _) = tls_request(f.https, src, None);
        f.expect(outcome, 200, &format!("full handshake {i}"));
        assert!(!resumed);
    }
    let (outcome, _, _) = tls_request(f.https, src, None);
    assert!(
        outcome.status().is_none(),
        "4th full handshake within {:?} was served: {outcome}\n{}",
        started.elapsed(),
        f.proxy.proc.logs()
    );
    let (outcome, _, _) = tls_request(f.https, ip(0, 4, 2), None);
    f.expect(outcome, 200, "another address");
}

/// Sends `bytes` on a TLS listener (not a valid handshake), half-closes if asked, and waits
/// until the proxy closes.
fn bad_handshake(https: SocketAddr, src: Ipv4Addr, bytes: &[u8], half_close: bool) {
    let mut c = RawClient::new(connect_from(src, https, T).expect("connect"));
    let _ = c.send(bytes);
    if half_close {
        let _ = c.stream().shutdown(std::net::Shutdown::Write);
    }
    let outcome = c.read_response(T);
    assert!(
        outcome.is_dropped(),
        "a bad handshake got {outcome} instead of a close"
    );
}

#[test]
fn tls_incomplete_connection_rate_blocks_the_address() {
    let f = start(
        "frang-tls-inc",
        "tls_incomplete_connection_rate 2;\nip_block 5;",
        REPLY,
    );
    let src = ip(0, 4, 5);
    bad_handshake(
        f.https,
        src,
        b"GET / HTTP/1.1\r\nHost: site.test\r\n\r\n",
        false,
    );
    // A ClientHello record header and then nothing more.
    bad_handshake(f.https, src, &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01], true);
    let (outcome, _, _) = tls_request(f.https, src, None);
    f.expect(outcome, 200, "after 2 incomplete handshakes");
    bad_handshake(
        f.https,
        src,
        &[0x16, 0x03, 0x01, 0x00, 0x05, 0xff, 0xff, 0xff, 0xff, 0xff],
        false,
    );
    let (outcome, _, _) = tls_request(f.https, src, None);
    assert!(
        outcome.status().is_none(),
        "after 3 incomplete handshakes (limit 2, ip_block): {outcome}\n{}",
        f.proxy.proc.logs()
    );
    f.expect_dropped(
        f.once(src, &closing_get("/plain")),
        "plain HTTP after the block",
    );
    let (outcome, _, _) = tls_request(f.https, ip(0, 4, 6), None);
    f.expect(outcome, 200, "another address");
}

// ---------------------------------------------------------------------------------------
// Slow clients and chunk counts
// ---------------------------------------------------------------------------------------

fn pieces(text: &[u8], n: usize) -> Vec<&[u8]> {
    let size = text.len().div_ceil(n);
    text.chunks(size).collect()
}

#[test]
fn client_header_timeout_cuts_a_slowloris_head() {
    let f = start("frang-cht", "client_header_timeout 1;", REPLY);
    // A prompt client in three pieces.
    let head = closing_get("/prompt");
    let mut c = f.client(ip(0, 5, 1));
    let t = c.trickle(&pieces(&head, 3), Duration::from_millis(100), T);
    f.expect(t.outcome, 200, "prompt head");
    // A slowloris: a field every 400 ms, for up to 4 s.
    let mut slow: Vec<Vec<u8>> = vec![b"GET /slow HTTP/1.1\r\nHost: site.test\r\n".to_vec()];
    for i in 0..10 {
        slow.push(format!("X-Pad-{i}: y\r\n").into_bytes());
    }
    slow.push(b"\r\n".to_vec());
    let slow: Vec<&[u8]> = slow.iter().map(Vec::as_slice).collect();
    let mut c = f.client(ip(0, 5, 2));
    let started = Instant::now();
    let t = c.trickle(&slow, Duration::from_millis(400), T);
    let elapsed = t.at - started;
    assert!(
        t.sent < slow.len(),
        "the whole slow head was accepted: {:?}",
        t.outcome
    );
    f.expect(t.outcome, 403, "slowloris");
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_millis(3500),
        "cut after {elapsed:?} with a 1 s limit"
    );
    assert_eq!(f.origin.hits("/slow"), 0);
    assert_eq!(f.origin.hits("/prompt"), 1);
}

#[test]
fn client_header_timeout_cuts_a_silent_head_with_drop() {
    // The default `block_action attack drop`: a reset, no response.
    let f = start("frang-cht-drop", "client_header_timeout 1;", "");
    let mut c = f.client(ip(0, 5, 3));
    c.send(b"GET / HTTP/1.1\r\n").expect("send");
    let started = Instant::now();
    let outcome = c.read_response(Duration::from_secs(4));
    let elapsed = started.elapsed();
    f.expect_dropped(outcome, "silent head");
    assert!(
        elapsed >= Duration::from_millis(900),
        "cut after {elapsed:?}"
    );
}

const BODY_HEAD: &[u8] = b"POST /up HTTP/1.1\r\nHost: site.test\r\nContent-Type: text/plain\r\nContent-Length: 6\r\nConnection: close\r\n\r\n";

#[test]
fn client_body_timeout_cuts_a_body_trickle() {
    let f = start("frang-cbt", "client_body_timeout 1;", REPLY);
    let mut c = f.client(ip(0, 5, 10));
    let t = c.trickle(
        &[BODY_HEAD, b"ab", b"cd", b"ef"],
        Duration::from_millis(200),
        T,
    );
    let r = f.expect(t.outcome, 200, "prompt body");
    assert_eq!(r.header("x-got"), Some("/up:6"));
    // Pauses of 2 s between pieces: cut at the latest when the late piece arrives.
    let mut c = f.client(ip(0, 5, 11));
    c.send(BODY_HEAD).expect("send head");
    let started = Instant::now();
    let t = c.trickle(&[b"ab", b"cd", b"ef"], Duration::from_secs(2), T);
    let elapsed = t.at - started;
    assert!(
        t.sent < 3,
        "the whole slow body was accepted: {:?}",
        t.outcome
    );
    f.expect(t.outcome, 403, "body trickle");
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_millis(3500),
        "cut after {elapsed:?} with a 1 s limit"
    );
    assert_eq!(f.origin.total_requests(), 1);
}

#[test]
fn client_body_timeout_cuts_a_silent_body() {
    let f = start("frang-cbt-silent", "client_body_timeout 1;", REPLY);
    let mut c = f.client(ip(0, 5, 12));
    c.send(BODY_HEAD).expect("send head");
    let started = Instant::now();
    let t = c.trickle(&[b"ab", b"cd"], Duration::from_secs(3), T);
    let elapsed = t.at - started;
    assert_eq!(t.sent, 1, "not cut during a 3 s pause: {:?}", t.outcome);
    f.expect(t.outcome, 403, "silent body");
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_millis(2900),
        "cut after {elapsed:?} with a 1 s limit"
    );
    assert_eq!(f.origin.total_requests(), 0);
}

#[test]
fn http_header_chunk_cnt() {
    let f = start("frang-hcc", "http_header_chunk_cnt 3;", REPLY);
    let head = closing_get("/h");
    let pause = Duration::from_millis(150);
    let t = f.client(ip(0, 6, 1)).trickle(&pieces(&head, 3), pause, T);
    f.expect(t.outcome, 200, "head in 3 reads");
    let mut c = f.client(ip(0, 6, 2));
    let t = c.trickle(&pieces(&head, 4), pause, T);
    f.expect(t.outcome, 403, "head in 4 reads");
    assert_eq!(f.origin.total_requests(), 1);
}

#[test]
fn http_body_chunk_cnt() {
    let f = start("frang-bcc", "http_body_chunk_cnt 3;", REPLY);
    let head = b"POST /b HTTP/1.1\r\nHost: site.test\r\nContent-Type: text/plain\r\nContent-Length: 8\r\nConnection: close\r\n\r\n";
    let pause = Duration::from_millis(150);
    let mut c = f.client(ip(0, 6, 3));
    let t = c.trickle(&[head, b"aaa", b"bbb", b"cc"], pause, T);
    f.expect(t.outcome, 200, "body in 3 reads");
    let mut c = f.client(ip(0, 6, 4));
    let t = c.trickle(&[head, b"aa", b"bb", b"cc", b"dd"], pause, T);
    f.expect(t.outcome, 403, "body in 4 reads");
    assert_eq!(f.origin.total_requests(), 1);
}

// ---------------------------------------------------------------------------------------
// Request contents
// ---------------------------------------------------------------------------------------

#[test]
fn ip_block_refuses_new_connections_for_a_while() {
    let f = start("frang-ipblock", "ip_block 2;\nhttp_methods GET;", REPLY);
    let src = ip(0, 8, 5);
    f.served(src, &closing_get("/before"), "before");
    let blocked_at = Instant::now();
    f.blocked(
        src,
        &post("/p", "Content-Type: text/plain\r\n", "x"),
        "POST",
    );
    f.expect_dropped(
        f.once(src, &closing_get("/during")),
        "right after the violation",
    );
    f.served(ip(0, 8, 6), &closing_get("/other"), "another address");
    // Served again once the 2 s are over (polled, bounded).
    loop {
        let elapsed = blocked_at.elapsed();
        match f.once(src, &closing_get("/after")) {
            Outcome::Response(r) if r.status == 200 => {
                assert!(
                    elapsed >= Duration::from_millis(1500),
                    "unblocked after {elapsed:?} of 2 s"
                );
                break;
            }
            Outcome::Closed | Outcome::Reset if elapsed < Duration::from_secs(6) => {
                thread::sleep(Duration::from_millis(200))
            }
            other => panic!("after {elapsed:?}: {other}\n{}", f.proxy.proc.logs()),
        }
    }
    assert_eq!(f.origin.hits("/during"), 0);
}

// ---------------------------------------------------------------------------------------
// client_lru_size
// ---------------------------------------------------------------------------------------

const LRU_CLIENTS: usize = 5000;

fn frang_clients(stats: SocketAddr) -> u64 {
    let (st, metrics, err) = curl(&[&format!("http://{stats}/metrics")], 5);
    assert!(st.success(), "{err}");
    metrics
        .lines()
        .find(|l| l.starts_with("ktls_proxy_frang_clients "))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no ktls_proxy_frang_clients in {metrics}"))
}

#[test]
fn client_lru_size_bounds_tracked_clients() {
    // An empty body: the origin writes a response in one piece (no Nagle/delayed-ACK stall).
    let origin = Origin::start(|_| Response::ok(Vec::new()));
    let setup = Setup::new("frang-lru");
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = setup.config(
        origin.addr(),
        "",
        &format!(
            "client_lru_size 1000;\nfrang_limits {{ request_rate 10; }}\n{REPLY}\nstats_listen {stats};"
        ),
    );
    let http = setup.http;
    let proxy = setup.start(&conf);
    assert!(wait_for_port(stats, T));
    let started = Instant::now();
    let threads = 4;
    let mut max_seen = 0;
    for batch in 0..LRU_CLIENTS / 1000 {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                thread::spawn(move || {
                    let mut failures = Vec::new();
                    for i in (t..1000).step_by(threads) {
                        let n = batch * 1000 + i;
                        let src = Ipv4Addr::new(127, 1, (n / 250) as u8, (n % 250 + 1) as u8);
                        let outcome = match connect_from(src, http, T) {
                            Ok(tcp) => {
                                RawClient::<TcpStream>::new(tcp).request(&closing_get("/lru"), T)
                            }
                            Err(e) => Outcome::Error(format!("connect: {e}")),
                        };
                        if outcome.status() != Some(200) {
                            failures.push(format!("{src}: {outcome}"));
                        }
                    }
                    failures
                })
            })
            .collect();
        let failures: Vec<String> = handles
            .into_iter()
            .flat_map(|h| h.join().expect("client thread"))
            .collect();
        assert!(failures.is_empty(), "{failures:?}\n{}", proxy.proc.logs());
        let tracked = frang_clients(stats);
        max_seen = max_seen.max(tracked);
        assert!(
            tracked <= 1000,
            "{tracked} clients tracked after {} clients",
            (batch + 1) * 1000
        );
    }
    assert!(
        max_seen >= 900,
        "only {max_seen} of 1000 tracked: is the gauge counting?"
    );
    assert_eq!(origin.total_requests(), LRU_CLIENTS);
    eprintln!("{LRU_CLIENTS} clients in {:?}", started.elapsed());
    // A hot client is still limited.
    let hot = ip(2, 0, 1);
    let mut c = RawClient::connect_from(hot, http).expect("connect");
    for i in 1..=10 {
        let outcome = c.request(&get("/hot", HOST), T);
        assert_eq!(outcome.status(), Some(200), "hot request {i}: {outcome}");
    }
    let outcome = c.request(&get("/hot", HOST), T);
    assert_eq!(outcome.status(), Some(403), "11th hot request: {outcome}");
}
