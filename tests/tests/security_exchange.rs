//! Issue 12, attacks on the end of an exchange through the real binary: an exchange that
//! ends before its request body does — an early answer from the origin, a revalidation
//! answered 304 or replaced by a stale entry (item 1) — and PURGE and `only-if-cached`
//! answers that ignore the body (item 4). Upstream misbehaviour (items 7, 10) and the timer
//! suspicions are in `security_upstream.rs`.
//!
//! Each test says which item it attacks. They use the misbehaving origin of
//! `e2e::evil_origin` and assert what the origin received, request by request.

use std::net::{Ipv4Addr, SocketAddr};
use std::thread;
use std::time::Duration;

use e2e::evil_origin::{expect_status, one_worker_proxy as start, EvilOrigin};
use e2e::proxy::{Proxy, Setup};
use e2e::rawclient::{get, Outcome, RawClient};

const T: Duration = Duration::from_secs(5);

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
        conn.serve(|conn, seen| {
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
        conn.serve(|conn, seen| {
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
    let origin = EvilOrigin::start(|conn| conn.serve(|_, _| false));
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
    let origin = EvilOrigin::start(|conn| conn.serve(|_, _| false));
    let (proxy, addr) = purge_proxy("sec-oic", &origin);

    let mut c = RawClient::connect(addr).expect("connect");
    // A GET (with a body) is what reaches the cache lookup; chunked, since a Content-Length
    // on GET is refused at once (as in Tempesta, issue 35).
    let body = "GET /smuggled HTTP/1.1\r\nHost: site.test\r\n\r\n";
    let req = format!(
        "GET /not-cached HTTP/1.1\r\nHost: site.test\r\nCache-Control: only-if-cached\r\n\
         Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    )
    .into_bytes();
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

/// An origin whose `/page*` responses are cacheable for 1 s with an ETag; a revalidation
/// (If-None-Match) of `/page304` is answered 304 and of `/page503` 503, both at once, without
/// reading the request body (what follows is "the next request", as in item 1).
fn revalidating_origin() -> EvilOrigin {
    EvilOrigin::start(|conn| {
        conn.serve(|conn, seen| {
            if !seen.target.starts_with("/page") {
                return false;
            }
            if seen.header("if-none-match").is_some() {
                if seen.target == "/page304" {
                    conn.write(b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nCache-Control: max-age=1\r\n\r\n");
                } else {
                    conn.write(b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy");
                }
                return true;
            }
            if conn.read_body(seen, T).is_none() {
                return true;
            }
            conn.write(b"HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nCache-Control: max-age=1\r\nContent-Length: 6\r\n\r\nstored");
            true
        })
    })
}

/// A GET for `path` with a chunked body whose first chunk declares `declared` bytes, of which
/// only `prefix` is sent. Chunked: a Content-Length (or a Content-Type) on GET is refused
/// before any of this can happen, as in Tempesta (issue 35); a chunked body is not, as there.
fn get_with_partial_body(path: &str, declared: usize, prefix: &[u8]) -> Vec<u8> {
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: site.test\r\nTransfer-Encoding: chunked\r\n\r\n{declared:x}\r\n"
    )
    .into_bytes();
    req.extend_from_slice(prefix);
    req
}

/// Item 1 (confirmed), the `answer_from_cache` path: a stale entry is revalidated for a GET
/// whose body is still arriving; the origin answers 304 at once. The proxy answers from the
/// cache and pools the upstream connection with the request body half sent, so the next
/// client's request completes the attacker's `GET /chosen`.
#[test]
fn item1_revalidation_304_before_body_does_not_poison_the_pooled_connection() {
    let origin = revalidating_origin();
    let (proxy, addr) = start(
        Setup::new("sec-reval304"),
        origin.addr(),
        "server_forward_timeout 3;",
        "cache 2;\ncache_fulfill * *;\ncache_use_stale 5*;",
    );
    let r = expect_status(
        once(addr, &get("/page304", "site.test")),
        200,
        "fill",
        &proxy,
        &origin,
    );
    assert_eq!(r.body, b"stored");
    thread::sleep(Duration::from_millis(2100));

    let declared = 400;
    let prefix = b"GET /chosen HTTP/1.1\r\nX-Ignore: ";
    let mut attacker = RawClient::connect(addr).expect("connect");
    let req = get_with_partial_body("/page304", declared, prefix);
    let r = expect_status(
        attacker.request(&req, T),
        200,
        "revalidated",
        &proxy,
        &origin,
    );
    assert_eq!(r.body, b"stored");
    thread::sleep(Duration::from_millis(300));

    let r = expect_status(
        once(addr, &get("/victim", "site.test")),
        200,
        "victim",
        &proxy,
        &origin,
    );
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        "origin:/victim",
        "the victim got another request's response\norigin saw {:?}",
        origin.seen_lines()
    );
    let _ = attacker.send(&request_line_padded("/smuggled", declared - prefix.len()));
    expect_no_more_responses(
        &mut attacker,
        Duration::from_millis(1500),
        "item 1 (304)",
        &origin,
    );
    assert_eq!(
        origin.seen_lines(),
        ["GET /page304", "GET /page304", "GET /victim"],
        "{}",
        origin.raw_text()
    );
}

/// Item 1 (confirmed), the stale-instead-of-error path: the origin answers a revalidation 503
/// at once; `cache_use_stale 5*` serves the stale entry. The rest of the client's body must
/// not then be parsed as a request of its own.
#[test]
fn item1_stale_answer_before_body_never_parses_the_rest_as_a_request() {
    let origin = revalidating_origin();
    let (proxy, addr) = start(
        Setup::new("sec-stale"),
        origin.addr(),
        "server_forward_timeout 3;",
        "cache 2;\ncache_fulfill * *;\ncache_use_stale 5*;",
    );
    expect_status(
        once(addr, &get("/page503", "site.test")),
        200,
        "fill",
        &proxy,
        &origin,
    );
    thread::sleep(Duration::from_millis(2100));

    let declared = 300;
    let mut attacker = RawClient::connect(addr).expect("connect");
    let req = get_with_partial_body("/page503", declared, &[b'x'; 50]);
    let r = expect_status(attacker.request(&req, T), 200, "stale", &proxy, &origin);
    assert_eq!(r.body, b"stored");
    let _ = attacker.send(&request_line_padded("/smuggled", declared - 50));
    expect_no_more_responses(
        &mut attacker,
        Duration::from_millis(1500),
        "item 1 (stale)",
        &origin,
    );
    assert!(
        origin.seen().iter().all(|s| s.target != "/smuggled"),
        "{:?}",
        origin.seen_lines()
    );
}

/// One request on a new connection.
fn once(addr: SocketAddr, request: &[u8]) -> Outcome {
    let mut c = RawClient::connect(addr).expect("connect");
    c.request(request, T)
}
