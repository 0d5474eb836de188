//! The one request entry (`exchange::admit`) and its order on every protocol: frang counts a
//! request before it becomes an exchange, so a request over `request_rate` is refused where
//! its protocol refuses a request without one (HTTP/1.1: the connection; HTTP/2: the
//! stream, then GOAWAY), gets no access-log line and leaves no exchange behind.

use std::path::PathBuf;
use std::time::Duration;

use h2::ErrorCode;

use super::harness::{get, response, Harness};

/// A harness with `request_rate 1`, blocks answered, and the access log in a file of its
/// own (removed first).
fn rate_limited(name: &str) -> (Harness, PathBuf) {
    let log = std::env::temp_dir().join(format!("ktls-entry-{}-{name}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let top = format!(
        "frang_limits {{ request_rate 1; }}\nblock_action attack reply;\naccess_log_file {};",
        log.display()
    );
    (Harness::new(&top, ""), log)
}

/// The access log's lines so far.
fn logged(log: &PathBuf) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().map(str::to_string).collect()
}

/// HTTP/1.1: the first request is served; the second, over the rate, is counted and
/// refused with 403 before it has an exchange, and the connection closes. Only the served
/// request is in the access log; the block is counted; nothing more goes upstream.
#[test]
fn an_http1_request_over_the_rate_is_refused_before_its_exchange() {
    let (mut h, log) = rate_limited("h1");
    let mut client = h.client();
    client.send(&get("/first"));
    let mut up = h.upstream();
    h.message(&mut up, "the first request upstream");
    up.send(&response(200, "", "one"));
    assert_eq!(h.message(&mut client, "the first answer").status(), 200);
    client.send(&get("/second"));
    let refusal = h.message(&mut client, "the refusal");
    assert_eq!(refusal.status(), 403);
    h.closed(&mut client, "the refused connection closed");
    assert_eq!(h.blocks("request_rate"), 1);
    assert_eq!(h.requests_counted(), 2);
    assert_eq!(
        h.exchanges_open(),
        0,
        "the refused request left an exchange"
    );
    h.idle(Duration::from_millis(30));
    assert_eq!(h.dialled(), 0);
    let lines = logged(&log);
    assert_eq!(lines.len(), 1, "access log: {lines:?}");
    assert!(lines[0].contains("/first"), "access log: {lines:?}");
    let _ = std::fs::remove_file(&log);
}

/// HTTP/2: the same order as HTTP/1.1. The second stream, over the rate, gets 403 on the
/// stream and the connection a GOAWAY; it never had an exchange (no access-log line, none
/// left open), and the block is counted once.
#[test]
fn an_h2_stream_over_the_rate_is_refused_before_its_exchange() {
    let (mut h, log) = rate_limited("h2");
    let mut client = h.h2_client();
    client.get(1, "/first");
    let mut up = h.upstream();
    h.message(&mut up, "the first stream's request upstream");
    up.send(&response(200, "", "one"));
    assert_eq!(
        h.h2_response(&mut client, 1, "the first answer").status(),
        200
    );
    client.get(3, "/second");
    let refusal = h.h2_response(&mut client, 3, "the refusal on the stream");
    assert_eq!(refusal.status(), 403, "{refusal:?}");
    h.until("a GOAWAY after the block", |_| {
        client.pump();
        (!client.goaways.is_empty()).then_some(())
    });
    assert_eq!(client.goaways[0].1, ErrorCode::NO_ERROR);
    assert_eq!(h.blocks("request_rate"), 1);
    assert_eq!(h.requests_counted(), 2);
    assert_eq!(h.exchanges_open(), 0, "the refused stream left an exchange");
    h.idle(Duration::from_millis(30));
    assert_eq!(h.dialled(), 0);
    let lines = logged(&log);
    assert_eq!(lines.len(), 1, "access log: {lines:?}");
    assert!(lines[0].contains("/first"), "access log: {lines:?}");
    let _ = std::fs::remove_file(&log);
}

/// A stream the codec cannot turn into a request is counted at the same point as one it
/// can: after a malformed stream (400 on the stream) the next stream is over the rate and
/// is refused; neither reached an upstream, and neither left an exchange.
#[test]
fn an_unservable_stream_counts_at_the_same_point_as_a_request() {
    let (mut h, log) = rate_limited("h2-unservable");
    let mut client = h.h2_client();
    client.request(1, "GET", "/ctl", &[("x-note", "a\u{1}b")], true);
    assert_eq!(h.h2_response(&mut client, 1, "the 400").status(), 400);
    client.get(3, "/next");
    let refusal = h.h2_response(&mut client, 3, "the refusal on the stream");
    assert_eq!(refusal.status(), 403, "{refusal:?}");
    assert_eq!(h.blocks("request_rate"), 1);
    assert_eq!(h.requests_counted(), 2);
    assert_eq!(h.exchanges_open(), 0);
    h.idle(Duration::from_millis(30));
    assert_eq!(h.dialled(), 0);
    assert!(logged(&log).is_empty(), "access log: {:?}", logged(&log));
    let _ = std::fs::remove_file(&log);
}

/// With `block_action attack drop` the stream over the rate gets nothing: the connection is
/// reset, and no exchange is left behind.
#[test]
fn an_h2_stream_over_the_rate_with_drop_resets_the_connection() {
    let top = "frang_limits { request_rate 1; }\nblock_action attack drop;";
    let mut h = Harness::new(top, "");
    let mut client = h.h2_client();
    client.get(1, "/first");
    let mut up = h.upstream();
    h.message(&mut up, "the first stream's request upstream");
    up.send(&response(200, "", "one"));
    assert_eq!(
        h.h2_response(&mut client, 1, "the first answer").status(),
        200
    );
    client.get(3, "/second");
    h.closed(&mut client.peer, "the dropped connection");
    assert!(
        client.take_response(3).is_none(),
        "the dropped stream was answered"
    );
    assert_eq!(h.blocks("request_rate"), 1);
    assert_eq!(h.exchanges_open(), 0);
}
