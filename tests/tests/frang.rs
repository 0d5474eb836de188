//! Frang limits end to end: each limit just under (served) and just over (blocked: 403 with
//! `block_action attack reply`, or the connection dropped), with small limits so that the
//! tests are quick. Clients bind their own loopback source addresses (127.x.y.z), so that each
//! test's client is a fresh frang client and the harness's readiness probe from 127.0.0.1
//! counts for nobody.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::rawclient::{connect_from, get, get_with, Outcome, RawClient, RawResponse};
use e2e::{curl, free_port, wait_for_port};
use openssl::ssl::{Ssl, SslContext, SslMethod, SslSession, SslVerifyMode, SslVersion};

const T: Duration = Duration::from_secs(5);
const HOST: &str = "site.test";

struct Frang {
    origin: Origin,
    proxy: Proxy,
    http: SocketAddr,
    https: SocketAddr,
}

/// A proxy with `frang_limits { limits }` at top level and `extra` directives (by default
/// `block_action attack reply;`), in front of an origin that answers 200 with `X-Got: PATH:BODY
/// LENGTH`, or 404 for paths starting with /missing. Responses have no body, so the origin
/// writes each in one piece and no Nagle/delayed-ACK stall stretches the rate tests.
fn start(tag: &str, limits: &str, extra: &str) -> Frang {
    let origin = Origin::start(|r| {
        if r.path().starts_with("/missing") {
            Response::ok(Vec::new()).status(404)
        } else {
            Response::ok(Vec::new()).header("X-Got", &format!("{}:{}", r.path(), r.body.len()))
        }
    });
    let setup = Setup::new(tag);
    let conf = setup.config(
        origin.addr(),
        "",
        &format!("frang_limits {{\n{limits}\n}}\n{extra}\n"),
    );
    let (http, https) = (setup.http, setup.https);
    let proxy = setup.start(&conf);
    Frang {
        origin,
        proxy,
        http,
        https,
    }
}

const REPLY: &str = "block_action attack reply;";

fn ip(a: u8, b: u8, c: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, a, b, c)
}

impl Frang {
    fn client(&self, src: Ipv4Addr) -> RawClient {
        RawClient::connect_from(src, self.http).expect("connect")
    }

    /// One request on a new connection from `src`.
    fn once(&self, src: Ipv4Addr, request: &[u8]) -> Outcome {
        match RawClient::connect_from(src, self.http) {
            Ok(mut c) => c.request(request, T),
            Err(e) => Outcome::Error(format!("connect: {e}")),
        }
    }

    fn expect(&self, outcome: Outcome, status: u16, what: &str) -> RawResponse {
        match outcome {
            Outcome::Response(r) if r.status == status => r,
            other => panic!(
                "{what}: expected {status}, got {other}\n{}",
                self.proxy.proc.logs()
            ),
        }
    }

    fn expect_dropped(&self, outcome: Outcome, what: &str) {
        assert!(
            matches!(outcome, Outcome::Closed | Outcome::Reset),
            "{what}: expected the connection dropped without a response, got {outcome}\n{}",
            self.proxy.proc.logs()
        );
    }

    /// Expects a 403 and then the connection closed.
    fn expect_blocked(&self, c: &mut RawClient, outcome: Outcome, what: &str) {
        self.expect(outcome, 403, what);
        let after = c.wait_closed(T);
        assert!(after.is_dropped(), "{what}: open after the 403: {after}");
    }

    /// Sends `request` from a new connection and expects 403 then close.
    fn blocked(&self, src: Ipv4Addr, request: &[u8], what: &str) {
        let mut c = self.client(src);
        let outcome = c.request(request, T);
        self.expect_blocked(&mut c, outcome, what);
    }

    /// As [`Frang::blocked`], for a proxy with `ip_block`: then a new connection from `src`
    /// is refused.
    fn blocked_and_banned(&self, src: Ipv4Addr, request: &[u8], what: &str) {
        self.blocked(src, request, what);
        let outcome = self.once(src, &closing_get("/after"));
        self.expect_dropped(outcome, &format!("{what}: a new connection under ip_block"));
    }

    /// Sends `request` from a new connection and expects 200.
    fn served(&self, src: Ipv4Addr, request: &[u8], what: &str) -> RawResponse {
        self.expect(self.once(src, request), 200, what)
    }
}

fn closing_get(path: &str) -> Vec<u8> {
    get_with(path, HOST, "Connection: close\r\n")
}

// ---------------------------------------------------------------------------------------
// Request rates
// ---------------------------------------------------------------------------------------

#[test]
fn request_rate_on_one_keep_alive_connection() {
    let f = start("frang-rr-ka", "request_rate 5;", REPLY);
    let mut c = f.client(ip(0, 1, 1));
    let started = Instant::now();
    for i in 1..=5 {
        f.expect(
            c.request(&get(&format!("/r{i}"), HOST), T),
            200,
            &format!("request {i}"),
        );
    }
    let outcome = c.request(&get("/r6", HOST), T);
    let elapsed = started.elapsed();
    assert_eq!(
        outcome.status(),
        Some(403),
        "6th request within {elapsed:?} (rate 5/s): {outcome}\n{}",
        f.proxy.proc.logs()
    );
    assert!(c.wait_closed(T).is_dropped());
    assert_eq!(f.origin.total_requests(), 5);
    // Another client is not affected.
    f.served(ip(0, 1, 2), &closing_get("/other"), "another address");
}

#[test]
fn request_rate_across_connections() {
    let f = start("frang-rr-conns", "request_rate 5;", REPLY);
    let src = ip(0, 1, 3);
    let started = Instant::now();
    for i in 1..=5 {
        f.served(
            src,
            &closing_get(&format!("/c{i}")),
            &format!("connection {i}"),
        );
    }
    let mut c = f.client(src);
    let outcome = c.request(&closing_get("/c6"), T);
    let what = format!("6th connection within {:?}", started.elapsed());
    f.expect_blocked(&mut c, outcome, &what);
    assert_eq!(f.origin.total_requests(), 5);
}

#[test]
fn request_rate_with_attack_drop_resets_without_a_response() {
    let f = start(
        "frang-rr-drop",
        "request_rate 3;",
        "block_action attack drop;",
    );
    let mut c = f.client(ip(0, 1, 4));
    for i in 1..=3 {
        f.expect(c.request(&get("/d", HOST), T), 200, &format!("request {i}"));
    }
    let outcome = c.request(&get("/d", HOST), T);
    f.expect_dropped(outcome, "4th request with block_action attack drop");
    assert_eq!(f.origin.total_requests(), 3);
}

/// A burst counts within one eighth of a second, whose boundaries the test cannot see: a
/// burst of `limit + 1` quick events is blocked unless it straddles a boundary, in which case
/// all pass and the attempt is repeated from a fresh address. `attempt` returns how many
/// events passed before the first refusal.
fn burst_attempts(limit: usize, mut attempt: impl FnMut(Ipv4Addr) -> usize) {
    let mut results = Vec::new();
    for n in 0..4u8 {
        let passed = attempt(ip(0, 9, 10 + n));
        assert!(
            passed == limit || passed == limit + 1,
            "burst limit {limit}: {passed} of {} passed (attempts so far: {results:?})",
            limit + 1
        );
        results.push(passed);
        if passed == limit {
            return;
        }
    }
    panic!("burst limit {limit} never applied: {results:?}");
}

#[test]
fn request_burst_on_one_connection_and_across_connections() {
    let f = start("frang-rb", "request_burst 3;", REPLY);
    // Pipelined on one keep-alive connection.
    burst_attempts(3, |src| {
        let mut c = f.client(src);
        let mut all = Vec::new();
        for i in 0..4 {
            all.extend_from_slice(&get(&format!("/p{i}"), HOST));
        }
        c.send(&all).expect("send");
        let mut passed = 0;
        for _ in 0..4 {
            match c.read_response(T) {
                Outcome::Response(r) if r.status == 200 => passed += 1,
                Outcome::Response(r) if r.status == 403 => break,
                other => panic!("pipelined burst: {other}\n{}", f.proxy.proc.logs()),
            }
        }
        passed
    });
    // One request per connection, the connections opened together.
    burst_attempts(3, |src| {
        let mut clients: Vec<RawClient> = (0..4)
            .map(|_| f.client(ip(0, 8, src.octets()[3])))
            .collect();
        for c in &mut clients {
            c.send(&closing_get("/b")).expect("send");
        }
        let statuses: Vec<Option<u16>> = clients
            .iter_mut()
            .map(|c| c.read_response(T).status())
            .collect();
        assert!(
            statuses.iter().all(|s| matches!(s, Some(200 | 403))),
            "{statuses:?}"
        );
        statuses.iter().filter(|s| **s == Some(200)).count()
    });
}

/// A proxy with `limits`, a stats endpoint and an origin answering 200 with no body.
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
    session: Option<&SslSession>,
) -> (Outcome, bool, Option<SslSession>) {
    let mut b = SslContext::builder(SslMethod::tls_client()).expect("context");
    b.set_verify(SslVerifyMode::NONE);
    b.set_max_proto_version(Some(SslVersion::TLS1_2))
        .expect("max version");
    let ctx = b.build();
    let mut ssl = Ssl::new(&ctx).expect("ssl");
    ssl.set_hostname(HOST).expect("sni");
    if let Some(s) = session {
        // SAFETY: the session comes from a client context of the same kind (TLS 1.2 client),
        // as set_session requires.
        unsafe { ssl.set_session(s).expect("set session") };
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
    let next = tls.ssl().session().map(|s| s.to_owned());
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
fn http_uri_len() {
    let f = start("frang-uri", "http_uri_len 20;\nip_block 5;", REPLY);
    let at_limit = format!("/{}", "a".repeat(19));
    let over = format!("/{}", "a".repeat(20));
    f.served(ip(0, 7, 1), &closing_get(&at_limit), "URI of 20 bytes");
    f.blocked_and_banned(ip(0, 7, 2), &closing_get(&over), "URI of 21 bytes");
    assert_eq!(f.origin.total_requests(), 1);
}

#[test]
fn http_hdr_len() {
    let f = start("frang-hdr-len", "http_hdr_len 30;\nip_block 5;", REPLY);
    // "X-Long: " is 8 bytes: a 22-byte value makes a 30-byte field.
    let at_limit = format!("X-Long: {}\r\n", "v".repeat(22));
    let over = format!("X-Long: {}\r\n", "v".repeat(23));
    f.served(
        ip(0, 7, 3),
        &get_with("/h", HOST, &at_limit),
        "30-byte field",
    );
    f.blocked_and_banned(ip(0, 7, 4), &get_with("/h", HOST, &over), "31-byte field");
    assert_eq!(f.origin.total_requests(), 1);
}

#[test]
fn http_header_cnt() {
    let f = start("frang-hdr-cnt", "http_header_cnt 5;\nip_block 5;", REPLY);
    // Host plus four.
    let four = "A: 1\r\nB: 2\r\nC: 3\r\nConnection: close\r\n";
    f.served(ip(0, 7, 5), &get_with("/c", HOST, four), "5 fields");
    f.blocked_and_banned(
        ip(0, 7, 6),
        &get_with("/c", HOST, &format!("D: 4\r\n{four}")),
        "6 fields",
    );
    assert_eq!(f.origin.total_requests(), 1);
}

fn post(path: &str, extra: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {HOST}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn http_body_len_content_length() {
    let f = start("frang-body", "http_body_len 10;\nip_block 5;", REPLY);
    let ct = "Content-Type: text/plain\r\n";
    let r = f.served(ip(0, 7, 7), &post("/p", ct, "0123456789"), "10-byte body");
    assert_eq!(r.header("x-got"), Some("/p:10"));
    f.blocked_and_banned(ip(0, 7, 8), &post("/p", ct, "0123456789a"), "11-byte body");
    assert_eq!(f.origin.total_requests(), 1);
}

#[test]
fn http_body_len_chunked() {
    // Chunked: the length is known only as the body arrives.
    let f = start(
        "frang-body-chunked",
        "http_body_len 10;\nip_block 5;",
        REPLY,
    );
    let chunked = "POST /c HTTP/1.1\r\nHost: site.test\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    let ok = format!("{chunked}5\r\n01234\r\n5\r\n56789\r\n0\r\n\r\n");
    let r = f.served(ip(0, 7, 9), ok.as_bytes(), "10 bytes chunked");
    assert_eq!(r.header("x-got"), Some("/c:10"));
    let over = format!("{chunked}5\r\n01234\r\n6\r\n56789a\r\n0\r\n\r\n");
    f.blocked_and_banned(ip(0, 7, 10), over.as_bytes(), "11 bytes chunked");
    assert_eq!(f.origin.total_requests(), 1);
}

#[test]
fn http_methods() {
    let f = start("frang-methods", "http_methods get head;", REPLY);
    f.served(ip(0, 7, 11), &closing_get("/m"), "GET");
    let head = format!("HEAD /m HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n");
    f.served(ip(0, 7, 11), head.as_bytes(), "HEAD");
    f.blocked(
        ip(0, 7, 12),
        &post("/m", "Content-Type: text/plain\r\n", "x"),
        "POST",
    );
    let delete = format!("DELETE /m HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
    f.blocked(ip(0, 7, 13), delete.as_bytes(), "DELETE");
    assert_eq!(f.origin.total_requests(), 2);
}

#[test]
fn http_ct_required_and_ct_vals() {
    let f = start("frang-ct-req", "http_ct_required true;", REPLY);
    f.blocked(
        ip(0, 7, 14),
        &post("/p", "", "x"),
        "POST without Content-Type",
    );
    f.served(
        ip(0, 7, 15),
        &post("/p", "Content-Type: text/plain\r\n", "x"),
        "with",
    );
    f.served(ip(0, 7, 15), &closing_get("/g"), "GET needs none");
    assert_eq!(f.origin.total_requests(), 2);

    let f = start(
        "frang-ct-vals",
        "http_ct_vals \"text/plain\" \"application/json\";",
        REPLY,
    );
    for ct in [
        "text/plain",
        "application/json; charset=utf-8",
        "Application/JSON",
    ] {
        f.served(
            ip(0, 7, 16),
            &post("/p", &format!("Content-Type: {ct}\r\n"), "x"),
            ct,
        );
    }
    for ct in ["text/html", "application/xml"] {
        f.blocked(
            ip(0, 7, 17),
            &post("/p", &format!("Content-Type: {ct}\r\n"), "x"),
            ct,
        );
    }
    f.blocked(
        ip(0, 7, 18),
        &post("/p", "", "x"),
        "POST without Content-Type",
    );
    assert_eq!(f.origin.total_requests(), 3);
}

#[test]
fn http_strict_host_checking() {
    let f = start("frang-host", "", REPLY);
    let src = ip(0, 7, 20);
    let abs = |uri_host: &str, host: &str| {
        format!("GET http://{uri_host}/a HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
    };
    f.served(src, abs("site.test", "site.test").as_bytes(), "matching");
    f.served(
        src,
        abs("SITE.test", "site.TEST").as_bytes(),
        "matching, other case",
    );
    f.blocked(src, abs("other.test", "site.test").as_bytes(), "mismatch");
    f.blocked(
        src,
        abs("site.test:81", "site.test").as_bytes(),
        "port mismatch",
    );
    let ip_host = b"GET /a HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    f.blocked(src, ip_host, "IP address as Host");
    assert_eq!(f.origin.total_requests(), 2);

    let f = start("frang-host-off", "http_strict_host_checking false;", REPLY);
    f.served(
        ip(0, 7, 21),
        abs("other.test", "site.test").as_bytes(),
        "mismatch allowed",
    );
}

#[test]
fn http_method_override_allowed() {
    let f = start("frang-override", "", REPLY);
    let req = |method: &str| {
        get_with(
            "/o",
            HOST,
            &format!("X-HTTP-Method-Override: {method}\r\nConnection: close\r\n"),
        )
    };
    f.blocked(ip(0, 7, 22), &req("HEAD"), "override by default");
    let f = start(
        "frang-override-on",
        "http_method_override_allowed true;",
        REPLY,
    );
    f.served(ip(0, 7, 23), &req("HEAD"), "override allowed");
    f.blocked(
        ip(0, 7, 24),
        &req("DELETE"),
        "override to a method not allowed",
    );
    assert_eq!(f.origin.total_requests(), 1);
}

// ---------------------------------------------------------------------------------------
// Responses and ip_block
// ---------------------------------------------------------------------------------------

#[test]
fn http_resp_code_block_blocks_after_too_many_404s() {
    let f = start(
        "frang-resp",
        "http_resp_code_block 404 403 3 5;\nip_block 5;",
        REPLY,
    );
    let src = ip(0, 8, 1);
    let mut c = f.client(src);
    for i in 1..=3 {
        f.expect(
            c.request(&get(&format!("/missing{i}"), HOST), T),
            404,
            &format!("404 #{i}"),
        );
    }
    // The 4th still goes out, then the connection closes and the address is blocked.
    f.expect(c.request(&get("/missing4", HOST), T), 404, "404 #4");
    let after = c.wait_closed(T);
    assert!(after.is_dropped(), "open after the 4th 404: {after}");
    f.expect_dropped(f.once(src, &closing_get("/ok")), "blocked address");
    f.served(ip(0, 8, 2), &closing_get("/ok"), "another address");
    assert_eq!(f.origin.total_requests(), 5);
}

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
