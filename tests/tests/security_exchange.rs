//! Issue 12, attacks on the exchange lifecycle through the real binary: an exchange that ends
//! before its request body (item 1), PURGE and `only-if-cached` answers that ignore the body
//! (item 4), a late body after a HEAD response and stray bytes on a pooled upstream
//! connection (item 7), a flood of interim responses (item 10), and the suspected timer holes
//! (`server_forward_timeout` as a fixed deadline, no timer for a queued request).
//!
//! Each test says which item it attacks. They use the misbehaving origin of
//! `e2e::evil_origin` and assert what the origin received, request by request.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use e2e::evil_origin::{EvilConn, EvilOrigin};
use e2e::origin::{pattern, pattern_byte};
use e2e::proxy::{Proxy, Setup};
use e2e::rawclient::{get, Outcome, RawClient, RawResponse};

const T: Duration = Duration::from_secs(5);

/// The usual answer of the origins below: 200 with `origin:TARGET` as the body.
fn echo(conn: &mut EvilConn, target: &str) -> bool {
    conn.respond(200, format!("origin:{target}").as_bytes())
}

/// Serves every request normally (reads its body, echoes its target) except those for which
/// `special` returns true: it has handled them itself.
fn serve_with(
    conn: &mut EvilConn,
    special: impl Fn(&mut EvilConn, &e2e::evil_origin::Seen) -> bool,
) {
    while let Some(seen) = conn.read_head(Duration::from_secs(20)) {
        if special(conn, &seen) {
            continue;
        }
        if conn.read_body(&seen, T).is_none() || !echo(conn, &seen.target) {
            return;
        }
    }
}

/// A proxy with one worker thread (upstream pools are per worker: one worker makes the
/// connection a later request gets deterministic), `group_extra` in the server group and
/// `extra` at top level.
fn start(setup: Setup, origin: SocketAddr, group_extra: &str, extra: &str) -> (Proxy, SocketAddr) {
    let conf = setup.config(origin, group_extra, &format!("worker_threads 1;\n{extra}"));
    let addr = setup.http;
    (setup.start(&conf), addr)
}

fn expect_status(
    outcome: Outcome,
    status: u16,
    what: &str,
    proxy: &Proxy,
    origin: &EvilOrigin,
) -> RawResponse {
    match outcome {
        Outcome::Response(r) if r.status == status => r,
        other => panic!(
            "{what}: expected {status}, got {other}\norigin saw {:?}\n{}\n{}",
            origin.seen_lines(),
            origin.raw_text(),
            proxy.proc.logs()
        ),
    }
}

/// Asserts that nothing more comes on `client` for `wait` (a close or reset is fine).
fn expect_no_more_responses(
    client: &mut RawClient,
    wait: Duration,
    what: &str,
    origin: &EvilOrigin,
) {
    if let Outcome::Response(r) = client.read_response(wait) {
        panic!(
            "{what}: the rest of the request body was parsed as a new request: got a second \
             response {} {:?}\norigin saw {:?}",
            r.status,
            String::from_utf8_lossy(&r.body),
            origin.seen_lines()
        );
    }
}

/// A complete GET for `path`, padded with a header to exactly `total_len` bytes.
fn request_line_padded(path: &str, total_len: usize) -> Vec<u8> {
    let base = format!("GET {path} HTTP/1.1\r\nHost: site.test\r\nX-Pad: \r\n\r\n");
    let pad = total_len.saturating_sub(base.len());
    format!(
        "GET {path} HTTP/1.1\r\nHost: site.test\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(pad)
    )
    .into_bytes()
}

/// Item 1 (confirmed): the origin answers a POST (403) before the proxy has sent the whole
/// request body, and treats what follows as its next request, as a careless origin does.
/// The body the attacker sent so far begins `GET /chosen HTTP/1.1\r\nX-Ignore: `. If the
/// proxy pools that upstream connection, the next client's `GET /victim` completes the
/// attacker's request and gets the response for `/chosen`; the rest of the attacker's body
/// is then parsed as a request of its own. Rule: an upstream connection whose request body
/// was not completely sent is closed, never pooled; a client connection whose body was not
/// completely read is drained or closed after the response.
#[test]
fn item1_early_answer_before_body_does_not_poison_the_pooled_connection() {
    let origin = EvilOrigin::start(|conn| {
        serve_with(conn, |conn, seen| {
            if seen.method == "POST" {
                // Answer at once and do not read the body: what follows is "the next request".
                conn.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 6\r\n\r\nno way");
                return true;
            }
            false
        })
    });
    let (proxy, addr) = start(
        Setup::new("sec-early"),
        origin.addr(),
        "server_forward_timeout 3;",
        "",
    );

    let declared = 400;
    let prefix = b"GET /chosen HTTP/1.1\r\nX-Ignore: ";
    let mut attacker = RawClient::connect(addr).expect("connect");
    let mut first = format!(
        "POST /upload HTTP/1.1\r\nHost: site.test\r\nContent-Type: text/plain\r\nContent-Length: {declared}\r\n\r\n"
    )
    .into_bytes();
    first.extend_from_slice(prefix);
    let r = expect_status(
        attacker.request(&first, T),
        403,
        "early answer",
        &proxy,
        &origin,
    );
    assert_eq!(r.body, b"no way");
    thread::sleep(Duration::from_millis(300));

    // Another client, after the attacker's exchange ended.
    let mut victim = RawClient::connect(addr).expect("connect");
    let r = expect_status(
        victim.request(&get("/victim", "site.test"), T),
        200,
        "victim",
        &proxy,
        &origin,
    );
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        "origin:/victim",
        "the victim got another request's response (the upstream connection was pooled with \
         the attacker's body half sent)\norigin saw {:?}\n{}",
        origin.seen_lines(),
        origin.raw_text()
    );

    // The rest of the attacker's body is a complete request: it must never be one.
    let rest = request_line_padded("/smuggled", declared - prefix.len());
    let _ = attacker.send(&rest);
    expect_no_more_responses(
        &mut attacker,
        Duration::from_millis(1500),
        "item 1",
        &origin,
    );

    let seen = origin.seen_lines();
    assert_eq!(
        seen,
        ["POST /upload", "GET /victim"],
        "the origin must receive exactly the accepted requests\n{}",
        origin.raw_text()
    );
    let conns: Vec<usize> = origin.seen().iter().map(|s| s.conn).collect();
    assert_ne!(
        conns[0], conns[1],
        "an upstream connection with a half-sent request body was reused"
    );
}

/// Item 1 (confirmed), the careful-origin variant: the origin answers 200 early and then
/// reads and discards the body, as nginx does. The proxy must not pool the connection while
/// the origin still waits for body bytes (the victim's request would be eaten as body), and
/// must not parse the attacker's late body bytes as a request.
#[test]
fn item1_early_200_then_the_rest_of_the_body_is_never_a_request() {
    let origin = EvilOrigin::start(|conn| {
        serve_with(conn, |conn, seen| {
            if seen.method == "POST" {
                conn.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly");
                // Then discard the body, however long it takes.
                let len = seen.content_length().unwrap_or(0);
                conn.read_exact_body(len, Duration::from_secs(20));
                return true;
            }
            false
        })
    });
    let (proxy, addr) = start(
        Setup::new("sec-early200"),
        origin.addr(),
        "server_forward_timeout 3;",
        "",
    );

    let declared = 300;
    let mut attacker = RawClient::connect(addr).expect("connect");
    let mut first = format!(
        "POST /form HTTP/1.1\r\nHost: site.test\r\nContent-Type: text/plain\r\nContent-Length: {declared}\r\n\r\n"
    )
    .into_bytes();
    first.extend_from_slice(&[b'x'; 100]);
    let r = expect_status(
        attacker.request(&first, T),
        200,
        "early 200",
        &proxy,
        &origin,
    );
    assert_eq!(r.body, b"early");
    thread::sleep(Duration::from_millis(300));

    let mut victim = RawClient::connect(addr).expect("connect");
    let r = expect_status(
        victim.request(&get("/victim", "site.test"), T),
        200,
        "victim",
        &proxy,
        &origin,
    );
    assert_eq!(String::from_utf8_lossy(&r.body), "origin:/victim");

    let rest = request_line_padded("/smuggled", declared - 100);
    let _ = attacker.send(&rest);
    expect_no_more_responses(
        &mut attacker,
        Duration::from_millis(1500),
        "item 1 (early 200)",
        &origin,
    );
    assert_eq!(
        origin.seen_lines(),
        ["POST /form", "GET /victim"],
        "the origin must receive exactly the accepted requests\n{}",
        origin.raw_text()
    );
}

/// A proxy with a cache whose PURGE is allowed from 127.0.0.1 (and allowed by frang).
fn purge_proxy(tag: &str, origin: &EvilOrigin) -> (Proxy, SocketAddr) {
    start(
        Setup::new(tag),
        origin.addr(),
        "",
        "cache 2;\ncache_fulfill * *;\ncache_purge immediate;\ncache_purge_acl 127.0.0.1;\n\
         frang_limits { http_methods GET HEAD POST PURGE; }\n",
    )
}

/// A request with `head_lines`, whose body is a complete `GET /smuggled` request.
fn with_smuggled_body(start_line: &str, head_lines: &str) -> Vec<u8> {
    let body = "GET /smuggled HTTP/1.1\r\nHost: site.test\r\n\r\n";
    format!(
        "{start_line}\r\nHost: site.test\r\n{head_lines}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Item 4 (confirmed): a PURGE answered by the proxy (200 from the ACL, 403 from another
/// address) ignores its request body, so the body is parsed as the next request. Same rule
/// as item 1: the body is read and discarded (within a bound) or the connection closes.
#[test]
fn item4_purge_body_is_never_parsed_as_a_request() {
    let origin = EvilOrigin::start(|conn| serve_with(conn, |_, _| false));
    let (proxy, addr) = purge_proxy("sec-purge", &origin);

    let mut c = RawClient::connect(addr).expect("connect");
    let req = with_smuggled_body("PURGE /page HTTP/1.1", "");
    expect_status(
        c.request(&req, T),
        200,
        "PURGE from the ACL",
        &proxy,
        &origin,
    );
    expect_no_more_responses(
        &mut c,
        Duration::from_millis(1500),
        "item 4 (PURGE 200)",
        &origin,
    );

    // From an address outside the ACL: 403, and the same rule.
    let mut c = RawClient::connect_from(Ipv4Addr::new(127, 0, 0, 2), addr).expect("connect");
    expect_status(
        c.request(&req, T),
        403,
        "PURGE outside the ACL",
        &proxy,
        &origin,
    );
    expect_no_more_responses(
        &mut c,
        Duration::from_millis(1500),
        "item 4 (PURGE 403)",
        &origin,
    );

    assert!(
        origin.seen().is_empty(),
        "a PURGE body reached the origin as a request: {:?}",
        origin.seen_lines()
    );
}

/// Item 4 (confirmed): `Cache-Control: only-if-cached` on a miss is answered 504 by the proxy
/// without reading the request body, which is then parsed as the next request.
#[test]
fn item4_only_if_cached_body_is_never_parsed_as_a_request() {
    let origin = EvilOrigin::start(|conn| serve_with(conn, |_, _| false));
    let (proxy, addr) = purge_proxy("sec-oic", &origin);

    let mut c = RawClient::connect(addr).expect("connect");
    // A GET (with a body) is what reaches the cache lookup.
    let req = with_smuggled_body(
        "GET /not-cached HTTP/1.1",
        "Cache-Control: only-if-cached\r\n",
    );
    expect_status(
        c.request(&req, T),
        504,
        "only-if-cached miss",
        &proxy,
        &origin,
    );
    expect_no_more_responses(
        &mut c,
        Duration::from_millis(1500),
        "item 4 (only-if-cached)",
        &origin,
    );
    assert!(
        origin.seen().iter().all(|s| s.target != "/smuggled"),
        "an only-if-cached body reached the origin as a request: {:?}",
        origin.seen_lines()
    );
}

/// Item 7 (confirmed): a faulty origin sends a body 0.5 s after its response to HEAD (the head
/// announced one, as HEAD responses do). The bytes look like a response. Pooling the
/// connection hands them to the next request on it as its response. Rule: no pooling after a
/// HEAD response that announces a body; unexpected bytes on an idle pooled connection are
/// fatal for that connection.
#[test]
fn item7_late_body_after_head_does_not_answer_the_next_request() {
    let poison = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\npoison";
    let origin = EvilOrigin::start(move |conn| {
        serve_with(conn, |conn, seen| {
            if seen.method == "HEAD" {
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                    poison.len()
                );
                conn.write(head.as_bytes());
                thread::sleep(Duration::from_millis(500));
                conn.write(poison);
                return true;
            }
            false
        })
    });
    let (proxy, addr) = start(
        Setup::new("sec-head"),
        origin.addr(),
        "server_forward_timeout 3;",
        "",
    );

    // A HEAD response announces a body it does not carry: read its head only.
    let mut a = TcpStream::connect_timeout(&addr, T).expect("connect");
    a.set_read_timeout(Some(T)).expect("timeout");
    a.write_all(b"HEAD /h HTTP/1.1\r\nHost: site.test\r\n\r\n")
        .expect("send");
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") && a.read(&mut byte).is_ok_and(|n| n == 1) {
        got.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "HEAD: {text:?}\n{}",
        proxy.proc.logs()
    );
    // The next request goes out before the late body arrives.
    thread::sleep(Duration::from_millis(100));

    let mut b = RawClient::connect(addr).expect("connect");
    let r = expect_status(
        b.request(&get("/next", "site.test"), T),
        200,
        "next",
        &proxy,
        &origin,
    );
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        "origin:/next",
        "the late HEAD body answered another request\norigin saw {:?}",
        origin.seen_lines()
    );
    assert_eq!(origin.seen_lines(), ["HEAD /h", "GET /next"]);
}

/// Item 7, second half of the rule: an origin sends an unsolicited extra response 0.5 s
/// after a complete one, while the connection idles in the pool. Those bytes must end that
/// connection, not answer the next request sent on it. (Today's main already closes such a
/// connection: this test guards that.)
#[test]
fn item7_stray_bytes_on_an_idle_pooled_connection_are_fatal() {
    let origin = EvilOrigin::start(|conn| {
        serve_with(conn, |conn, seen| {
            if seen.target == "/first" {
                conn.read_body(seen, T);
                echo(conn, &seen.target);
                thread::sleep(Duration::from_millis(500));
                conn.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\npoison");
                return true;
            }
            false
        })
    });
    let (proxy, addr) = start(
        Setup::new("sec-stray"),
        origin.addr(),
        "server_forward_timeout 3;",
        "",
    );

    let mut a = RawClient::connect(addr).expect("connect");
    let r = expect_status(
        a.request(&get("/first", "site.test"), T),
        200,
        "first",
        &proxy,
        &origin,
    );
    assert_eq!(r.body, b"origin:/first");
    thread::sleep(Duration::from_millis(1000));

    let mut b = RawClient::connect(addr).expect("connect");
    let r = expect_status(
        b.request(&get("/next", "site.test"), T),
        200,
        "next",
        &proxy,
        &origin,
    );
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        "origin:/next",
        "stray bytes on a pooled connection answered another request\norigin saw {:?}",
        origin.seen_lines()
    );
}

/// Item 10 (confirmed): an origin floods 20,000 `102 Processing` interim responses before its
/// answer. The proxy must bound them (drop the excess or fail the exchange), not relay them
/// all. At most 1,000 may reach the client; the client still gets a final response.
#[test]
fn item10_interim_response_flood_is_bounded() {
    const FLOOD: usize = 20_000;
    let origin = EvilOrigin::start(|conn| {
        serve_with(conn, |conn, seen| {
            if seen.target != "/flood" {
                return false;
            }
            let one = b"HTTP/1.1 102 Processing\r\n\r\n";
            let batch: Vec<u8> = one.iter().copied().cycle().take(one.len() * 1000).collect();
            for _ in 0..FLOOD / 1000 {
                if !conn.write(&batch) {
                    return true;
                }
            }
            echo(conn, &seen.target);
            true
        })
    });
    let (proxy, addr) = start(
        Setup::new("sec-1xx"),
        origin.addr(),
        "server_forward_timeout 5;",
        "",
    );

    let mut c = RawClient::connect(addr).expect("connect");
    c.send(&get("/flood", "site.test")).expect("send");
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut interim = 0usize;
    let last = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match c.read_response(left) {
            Outcome::Response(r) if (100..200).contains(&r.status) => interim += 1,
            other => break other,
        }
    };
    assert!(
        interim <= 1000,
        "{interim} of {FLOOD} interim responses were relayed to the client (unbounded)"
    );
    match last {
        Outcome::Response(r) if r.status == 200 || r.status == 502 => {}
        other => panic!(
            "after the flood: {other} (expected the final 200 or a 502)\n{}",
            proxy.proc.logs()
        ),
    }
}

/// Suspected: `server_forward_timeout` is a fixed deadline for the whole exchange, so a slow
/// but healthy download (steady progress, 16 KiB every 150 ms for about 6 s) is cut after
/// 2 s. It should be a no-progress timeout, as nginx's `proxy_read_timeout`.
#[test]
fn suspected_forward_timeout_does_not_cut_a_slow_healthy_download() {
    const PIECE: usize = 16 * 1024;
    const PIECES: usize = 40;
    let origin = EvilOrigin::start(|conn| {
        serve_with(conn, |conn, seen| {
            if seen.target != "/slow" {
                return false;
            }
            slow_download(conn, PIECE, PIECES);
            true
        })
    });
    let (proxy, addr) = start(
        Setup::new("sec-slow"),
        origin.addr(),
        "server_forward_timeout 2;",
        "",
    );

    let mut c = RawClient::connect(addr).expect("connect");
    let started = Instant::now();
    let outcome = c.request(&get("/slow", "site.test"), Duration::from_secs(20));
    let r = match outcome {
        Outcome::Response(r) => r,
        other => panic!(
            "slow download after {:?}: {other} (cut by server_forward_timeout 2 while making \
             progress)\n{}",
            started.elapsed(),
            proxy.proc.logs()
        ),
    };
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body.len(),
        PIECE * PIECES,
        "download cut after {:?}",
        started.elapsed()
    );
    assert!(
        r.body == pattern((PIECE * PIECES) as u64),
        "download corrupted"
    );
}

/// Writes a 200 of `pieces` × `piece` pattern bytes, one piece every 150 ms.
fn slow_download(conn: &mut EvilConn, piece: usize, pieces: usize) {
    let total = piece * pieces;
    if !conn.write(format!("HTTP/1.1 200 OK\r\nContent-Length: {total}\r\n\r\n").as_bytes()) {
        return;
    }
    for i in 0..pieces {
        let chunk: Vec<u8> = (i * piece..(i + 1) * piece)
            .map(|n| pattern_byte(n as u64))
            .collect();
        if !conn.write(&chunk) {
            return;
        }
        thread::sleep(Duration::from_millis(150));
    }
}

/// Suspected: a request waiting in the server queue has no timer. One worker, one upstream
/// connection (`conns_n=1`) busy with a slow healthy download; a second request queues behind
/// it. It must get an answer (503/504) within about `server_forward_timeout` (2 s) of
/// waiting, not wait for the download, and the download must finish intact.
#[test]
fn suspected_queued_request_has_a_timer() {
    const PIECE: usize = 16 * 1024;
    const PIECES: usize = 40;
    let origin = EvilOrigin::start(|conn| {
        serve_with(conn, |conn, seen| {
            if seen.target != "/slow" {
                return false;
            }
            slow_download(conn, PIECE, PIECES);
            true
        })
    });
    let setup = Setup::new("sec-queue");
    let conf = format!(
        "listen {http};\nworker_threads 1;\n\
         srv_group default {{ server {origin} conns_n=1; server_forward_timeout 2; }}\n\
         vhost site {{ proxy_pass default; }}\nhttp_chain {{ -> site; }}\n",
        http = setup.http,
        origin = origin.addr()
    );
    let addr = setup.http;
    let proxy = Proxy::start(setup.dir, &conf, addr);

    let downloader = thread::spawn(move || {
        let mut c = RawClient::connect(addr).expect("connect");
        c.request(&get("/slow", "site.test"), Duration::from_secs(20))
    });
    thread::sleep(Duration::from_millis(400));
    let mut q = RawClient::connect(addr).expect("connect");
    let sent = Instant::now();
    let outcome = q.request(&get("/queued", "site.test"), Duration::from_secs(10));
    let waited = sent.elapsed();
    let seen_when_answered = origin.seen_lines();
    let download = downloader.join().expect("downloader thread");

    match &outcome {
        Outcome::Response(r) if r.status == 503 || r.status == 504 => {}
        other => panic!(
            "queued request: {other} after {waited:?} (expected 503/504 from its own timer); \
             origin saw {seen_when_answered:?} — it was served only when the first exchange \
             ended\n{}",
            proxy.proc.logs()
        ),
    }
    assert!(
        waited < Duration::from_millis(4500),
        "the queued request waited {waited:?} for server_forward_timeout 2"
    );
    assert!(
        !seen_when_answered.iter().any(|s| s.ends_with("/queued")),
        "{seen_when_answered:?}"
    );
    match download {
        Outcome::Response(r) => assert_eq!(r.body.len(), PIECE * PIECES, "download cut"),
        other => panic!("the slow download on the only connection: {other}"),
    }
}
