//! Issue 30 (second security review), attacks from a misbehaving origin on the response
//! framing facts, through the real binary:
//! - item 3: a 204 or 304 that announces a body (Content-Length: 87) and sends a "response"
//!   0.8 s later. Pooling the connection hands those bytes to the next client's request as its
//!   answer, and the cache keeps them for everyone. Rule: a response without a body by
//!   definition that announced one leaves its connection unpooled (RFC 9110 §8.6, RFC 9112
//!   §6.3), whatever the status and method.
//! - item 5: a close-delimited body (no Content-Length, not chunked) cut by a TCP reset. A
//!   reset is not the end of such a body (RFC 9112 §8): it is never stored (RFC 9111 §3.3),
//!   an HTTP/1.1 client gets a reset (not the FIN that would end the body cleanly), an
//!   HTTP/2 client RST_STREAM (not END_STREAM).
//!
//! The cache stores everything (`cache_fulfill * *`) so that a wrong answer would be kept and
//! seen again, and `conns_n=1` makes the next request take the pooled connection.

use std::net::SocketAddr;
use std::process::Command;
use std::thread;
use std::time::Duration;

use e2e::evil_origin::{expect_status, EvilConn, EvilOrigin};
use e2e::proxy::{Proxy, Setup};
use e2e::rawclient::{get, Outcome, RawClient};
use e2e::{free_port, wait_for_port};

const T: Duration = Duration::from_secs(5);

/// What the late "response" says; no client may ever read it.
const POISON: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nCache-Control: max-age=600\r\n\r\nPOISONED";

/// One worker, one upstream connection at most, caching everything; plus an h2c listener.
fn caching_proxy(tag: &str, origin: &EvilOrigin) -> (Proxy, SocketAddr, SocketAddr) {
    let h2c = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let setup = Setup::new(tag);
    let extra = format!("worker_threads 1;\nlisten {h2c} proto=h2c;\ncache 1;\ncache_fulfill * *;");
    let conf = setup
        .config(origin.addr(), "server_forward_timeout 3;", &extra)
        .replace(
            &format!("server {};", origin.addr()),
            &format!("server {} conns_n=1;", origin.addr()),
        );
    let http = setup.http;
    let proxy = setup.start(&conf);
    assert!(wait_for_port(h2c, T), "h2c listens");
    (proxy, http, h2c)
}

/// An origin that answers `/bodiless` with `head` (a bodiless status announcing 87 bytes),
/// then, 0.8 s later, with [`POISON`]; every other request with its target.
fn late_body_origin(head: &'static str) -> EvilOrigin {
    EvilOrigin::start(move |conn| {
        conn.serve(move |conn, seen| {
            if seen.target != "/bodiless" {
                return false;
            }
            conn.write(head.as_bytes());
            thread::sleep(Duration::from_millis(800));
            conn.write(POISON);
            true
        })
    })
}

/// Item 3 for one bodiless status: `/victim`, asked while the late bytes are still to come
/// and again after they came, is answered by the origin both times.
fn a_late_body_never_answers_the_next_request(tag: &str, head: &'static str, status: u16) {
    let origin = late_body_origin(head);
    let (proxy, http, _) = caching_proxy(tag, &origin);
    let mut a = RawClient::connect(http).expect("connect");
    expect_status(
        a.request(&get("/bodiless", "site.test"), T),
        status,
        "the bodiless response",
        &proxy,
        &origin,
    );
    // The next request goes out before the late bytes arrive, then once more after them (a
    // poisoned cache would answer it).
    thread::sleep(Duration::from_millis(100));
    for when in ["while the late bytes are due", "after they came"] {
        let mut b = RawClient::connect(http).expect("connect");
        let r = expect_status(
            b.request(&get("/victim", "site.test"), T),
            200,
            when,
            &proxy,
            &origin,
        );
        assert_eq!(
            String::from_utf8_lossy(&r.body),
            "origin:/victim",
            "{when}: origin saw {:?}\n{}",
            origin.seen_lines(),
            proxy.proc.logs()
        );
        thread::sleep(Duration::from_millis(1000));
    }
}

#[test]
fn item3_a_late_body_after_a_204_never_answers_the_next_request() {
    a_late_body_never_answers_the_next_request(
        "frame-204",
        "HTTP/1.1 204 No Content\r\nContent-Length: 87\r\n\r\n",
        204,
    );
}

#[test]
fn item3_a_late_body_after_a_304_never_answers_the_next_request() {
    a_late_body_never_answers_the_next_request(
        "frame-304",
        "HTTP/1.1 304 Not Modified\r\nContent-Length: 87\r\n\r\n",
        304,
    );
}

/// An origin that answers every request for `/cut` with a cacheable 200 whose body has no
/// length (1000 bytes, then a reset), and anything else with its target. The pause lets the
/// proxy relay the head and body before the reset, as a slow origin would.
fn resetting_origin() -> EvilOrigin {
    EvilOrigin::start(|conn: &mut EvilConn| {
        while let Some(seen) = conn.read_head(Duration::from_secs(20)) {
            if seen.target == "/cut" {
                conn.write(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\n\r\n");
                conn.write(&[b'c'; 1000]);
                thread::sleep(Duration::from_millis(200));
                conn.reset_on_return();
                return;
            }
            if !conn.echo(&seen.target) {
                return;
            }
        }
    })
}

/// Requests for `/cut` the origin has read.
fn cuts_seen(origin: &EvilOrigin) -> usize {
    origin.seen().iter().filter(|s| s.target == "/cut").count()
}

#[test]
fn item5_a_close_delimited_body_cut_by_a_reset_reaches_an_http1_client_as_a_reset() {
    let origin = resetting_origin();
    let (proxy, http, _) = caching_proxy("frame-rst-h1", &origin);
    let outcomes: Vec<Outcome> = (0..2)
        .map(|_| {
            let mut c = RawClient::connect(http).expect("connect");
            c.request(&get("/cut", "site.test"), T)
        })
        .collect();
    // Never a hit: the cut body was not stored, the origin is asked again.
    assert_eq!(
        cuts_seen(&origin),
        2,
        "the second request was answered from the cache: {}\n{}",
        outcomes[1],
        proxy.proc.logs()
    );
    // A FIN would end the body cleanly: the client must see the reset.
    for outcome in &outcomes {
        assert!(
            matches!(outcome, Outcome::Reset),
            "{outcome}\n{}",
            proxy.proc.logs()
        );
    }
    // The proxy still serves.
    let mut c = RawClient::connect(http).expect("connect");
    let r = expect_status(
        c.request(&get("/after", "site.test"), T),
        200,
        "after",
        &proxy,
        &origin,
    );
    assert_eq!(r.body, b"origin:/after");
}

/// curl over h2c for `path`: (exit code, body length, stderr).
fn curl_h2(h2c: SocketAddr, path: &str) -> (Option<i32>, usize, String) {
    let out = Command::new("timeout")
        .args(["10", "curl", "-sS", "--http2-prior-knowledge", "-o", "-"])
        .args(["-H", "Host: site.test"])
        .arg(format!("http://127.0.0.1:{}{path}", h2c.port()))
        .output()
        .expect("run curl");
    (
        out.status.code(),
        out.stdout.len(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn item5_a_close_delimited_body_cut_by_a_reset_reaches_an_http2_client_as_rst_stream() {
    let origin = resetting_origin();
    let (proxy, _, h2c) = caching_proxy("frame-rst-h2", &origin);
    for attempt in 1..=2 {
        let (code, len, stderr) = curl_h2(h2c, "/cut");
        // curl exits 0 only after END_STREAM; RST_STREAM is a stream error (92).
        assert!(
            code.is_some_and(|c| c != 0 && c != 124),
            "attempt {attempt}: curl exit {code:?}, {len} body bytes, {stderr}\n{}",
            proxy.proc.logs()
        );
        assert_eq!(cuts_seen(&origin), attempt, "{}", proxy.proc.logs());
    }
    let (code, len, stderr) = curl_h2(h2c, "/after");
    assert_eq!(code, Some(0), "after: {stderr}");
    assert_eq!(len, "origin:/after".len());
}
