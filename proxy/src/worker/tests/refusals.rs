//! Requests the worker refuses or cannot serve: malformed input, frang's limits, a slow
//! head, an upstream that answers garbage. Each gets its status (or its connection cut)
//! and nothing reaches an upstream that should not.

use std::time::{Duration, Instant};

use super::harness::{get, Harness};

/// A request line that is not HTTP gets 400, the connection closes, nothing goes upstream.
#[test]
fn a_malformed_request_line_gets_400_and_no_upstream() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    client.send(b"GET /a b c HTTP/1.1\r\nHost: site\r\n\r\n");
    let resp = h.message(&mut client, "the refusal");
    assert_eq!(resp.status(), 400);
    h.closed(&mut client, "the connection closed after the refusal");
    assert_eq!(h.dialled(), 0);
}

/// A method frang does not allow is a block: 403 (`block_action attack reply`), the
/// connection closed, nothing upstream.
#[test]
fn a_method_frang_refuses_is_blocked_with_403() {
    let mut h = Harness::new(
        "frang_limits { http_methods get; }\nblock_action attack reply;",
        "",
    );
    let mut client = h.client();
    client.send(b"DELETE /x HTTP/1.1\r\nHost: site\r\n\r\n");
    let resp = h.message(&mut client, "the block");
    assert_eq!(resp.status(), 403);
    h.closed(&mut client, "the blocked connection closed");
    assert_eq!(h.dialled(), 0);
}

/// A head still incomplete after `client_header_timeout` is cut; nothing goes upstream.
#[test]
fn a_slow_head_is_cut_after_the_header_timeout() {
    let mut h = Harness::new("frang_limits { client_header_timeout 1; }", "");
    let mut client = h.client();
    let start = Instant::now();
    client.send(b"GET /slow HTTP/1.1\r\nHost: si");
    h.closed(&mut client, "the slow head cut");
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "cut after {:?}",
        start.elapsed()
    );
    assert_eq!(h.dialled(), 0);
}

/// An upstream answering bytes that are not HTTP gives 502, and its connection is closed.
#[test]
fn an_upstream_answering_garbage_gives_502() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    client.send(&get("/g"));
    let mut up = h.upstream();
    h.message(&mut up, "the request");
    up.send(b"SSH-2.0-OpenSSH_9.2\r\n\r\n");
    let resp = h.message(&mut client, "the 502");
    assert_eq!(resp.status(), 502);
    h.closed(&mut up, "the garbage upstream closed");
}

/// Two requests for one path: a `no-store` answer is not stored, so the second goes
/// upstream too.
#[test]
fn a_no_store_answer_is_not_stored() {
    let mut h = Harness::new("cache 1;\ncache_fulfill * *;", "");
    let mut client = h.client();
    client.send(&get("/private"));
    let mut up = h.upstream();
    h.message(&mut up, "the first request");
    up.send(&super::harness::response(
        200,
        "Cache-Control: no-store\r\n",
        "mine",
    ));
    h.message(&mut client, "the first answer");
    client.send(&get("/private"));
    let req = h.message(&mut up, "the second request upstream");
    assert_eq!(req.line(), "GET /private HTTP/1.1");
}

/// A HEAD is answered from the stored GET entry: the head, no body, nothing upstream.
#[test]
fn a_head_is_answered_from_the_stored_get() {
    let mut h = Harness::new("cache 1;\ncache_fulfill * *;", "");
    let mut client = h.client();
    client.send(&get("/doc"));
    let mut up = h.upstream();
    h.message(&mut up, "the miss");
    up.send(&super::harness::response(
        200,
        "Cache-Control: max-age=60\r\n",
        "document",
    ));
    h.message(&mut client, "the miss answer");
    client.send(b"HEAD /doc HTTP/1.1\r\nHost: site\r\n\r\n");
    let head = h.until("the HEAD answer", |_| client.take_head());
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("content-length: 8"),
        "{head}"
    );
    h.idle(Duration::from_millis(30));
    client.pump();
    assert!(client.got.is_empty(), "a body followed the HEAD answer");
    up.pump();
    assert!(up.got.is_empty(), "the HEAD went upstream");
}
