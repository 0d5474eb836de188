//! An HTTP/2 stream's request as the neutral head the worker builds from its header block:
//! judged by the HTTP/1.1 parser's byte rules, its body without a length sent chunked with
//! its trailers, its fields what frang compares a trailer with and what the cache keys on.

use std::time::Duration;

use super::harness::{response, Harness};

/// A control byte in a field value passes HTTP/2's own checks (only NUL, CR and LF are
/// malformed there) but not the rules every request is judged by: 400 on the stream,
/// nothing upstream, and the connection serves the next stream.
#[test]
fn a_control_byte_in_a_field_value_is_400_before_the_upstream() {
    let mut h = Harness::new("", "");
    let mut client = h.h2_client();
    client.request(1, "GET", "/ctl", &[("x-note", "a\u{1}b")], true);
    let resp = h.h2_response(&mut client, 1, "the refusal");
    assert_eq!(resp.status(), 400, "{resp:?}");
    h.idle(Duration::from_millis(30));
    assert_eq!(h.dialled(), 0, "the refused request went upstream");
    client.get(3, "/next");
    let mut up = h.upstream();
    h.message(&mut up, "the next stream's request");
    up.send(&response(200, "", "fine"));
    assert_eq!(
        h.h2_response(&mut client, 3, "the next answer").body,
        b"fine"
    );
}

/// A body without content-length goes upstream chunked, its trailer fields in the last
/// chunk; the head carries the client's fields in order after the authority's Host.
#[test]
fn a_body_without_a_length_goes_upstream_chunked_with_its_trailers() {
    let mut h = Harness::new("", "");
    let mut client = h.h2_client();
    client.request(
        1,
        "POST",
        "/stream",
        &[
            ("x-first", "1"),
            ("content-type", "text/plain"),
            ("x-last", "2"),
        ],
        false,
    );
    client.data(1, b"hello", false);
    client.trailers(1, &[("x-checksum", "abc")]);
    let mut up = h.upstream();
    let raw = h.until("the chunked request upstream", |_| {
        up.pump();
        let text = String::from_utf8_lossy(&up.got).into_owned();
        text.ends_with("\r\n\r\n")
            .then_some(text)
            .filter(|t| t.contains("\r\n0\r\n"))
    });
    let (head, body) = raw.split_once("\r\n\r\n").expect("a head");
    let lower = head.to_ascii_lowercase();
    assert!(
        lower.starts_with("post /stream http/1.1\r\nhost: site\r\n"),
        "{head}"
    );
    assert!(lower.contains("\r\ntransfer-encoding: chunked"), "{head}");
    let (first, last) = (lower.find("x-first: 1"), lower.find("x-last: 2"));
    assert!(
        first.is_some() && first < last,
        "the fields out of order: {head}"
    );
    assert!(!lower.contains("content-length"), "{head}");
    assert_eq!(body, "5\r\nhello\r\n0\r\nx-checksum: abc\r\n\r\n");
    up.send(&response(200, "", "got it"));
    let resp = h.h2_response(&mut client, 1, "the answer");
    assert_eq!((resp.status(), &resp.body[..]), (200, &b"got it"[..]));
}

/// A trailer field the head also has is a frang block (`http_trailer_split_allowed` off, its
/// default), as on HTTP/1.1: the trailer's value never reaches the upstream.
#[test]
fn a_trailer_field_the_head_has_is_blocked() {
    let mut h = Harness::new(
        "frang_limits { http_methods get post; }\nblock_action attack reply;",
        "",
    );
    let mut client = h.h2_client();
    client.request(1, "POST", "/split", &[("x-split", "head")], false);
    client.data(1, b"hello", false);
    // The head and the body go upstream as they come; the trailer decides.
    let mut up = h.upstream();
    client.trailers(1, &[("x-split", "trailer")]);
    let resp = h.h2_response(&mut client, 1, "the block");
    assert!(
        resp.status() == 403 || resp.reset.is_some(),
        "a split field was accepted: {resp:?}"
    );
    h.idle(Duration::from_millis(30));
    up.pump();
    let seen = String::from_utf8_lossy(&up.got).to_ascii_lowercase();
    assert!(seen.contains("x-split: head"), "{seen}");
    assert!(
        !seen.contains("trailer"),
        "the trailer went upstream: {seen}"
    );
}

/// A response stored from an HTTP/2 miss answers the next stream from the cache: the fill
/// keys it by the stream's neutral request (authority, path, fields) as it keys an HTTP/1.1
/// one.
#[test]
fn an_entry_stored_from_an_h2_miss_answers_the_next_stream() {
    let mut h = Harness::new("cache 1;\ncache_fulfill * *;", "");
    let mut client = h.h2_client();
    client.request(1, "GET", "/h2page", &[("accept", "text/html")], true);
    let mut up = h.upstream();
    let miss = h.message(&mut up, "the miss upstream");
    assert_eq!(miss.header("accept"), Some("text/html"));
    up.send(&response(
        200,
        "Cache-Control: max-age=60\r\n",
        "stored over h2",
    ));
    let first = h.h2_response(&mut client, 1, "the miss");
    assert_eq!(first.body, b"stored over h2");
    client.request(3, "GET", "/h2page", &[("accept", "text/html")], true);
    let hit = h.h2_response(&mut client, 3, "the hit");
    assert_eq!((hit.status(), &hit.body[..]), (200, &b"stored over h2"[..]));
    assert!(hit.field("age").is_some(), "a hit carries age: {hit:?}");
    up.pump();
    assert!(up.got.is_empty(), "the hit went upstream");
    assert_eq!(h.dialled(), 0);
}

/// A stored entry answers an HTTP/2 stream's conditional request with a 304 and its Range
/// with a 206, from the entry's fields (ETag kept in the 304, Content-Range in the 206, an
/// age in both), nothing upstream.
#[test]
fn a_stored_entry_answers_an_h2_streams_304_and_206() {
    let mut h = Harness::new("cache 1;\ncache_fulfill * *;", "");
    let mut h1 = h.client();
    h1.send(&super::harness::get("/doc"));
    let mut up = h.upstream();
    h.message(&mut up, "the miss upstream");
    up.send(&response(
        200,
        "Cache-Control: max-age=60\r\nETag: \"v1\"\r\nX-Kind: doc\r\n",
        "0123456789",
    ));
    h.message(&mut h1, "the miss");
    let mut client = h.h2_client();
    client.request(1, "GET", "/doc", &[("if-none-match", "\"v1\"")], true);
    let not_modified = h.h2_response(&mut client, 1, "the 304");
    assert_eq!(not_modified.status(), 304, "{not_modified:?}");
    assert_eq!(not_modified.field("etag"), Some("\"v1\""));
    assert!(not_modified.field("x-kind").is_none(), "{not_modified:?}");
    assert!(not_modified.field("age").is_some() && not_modified.body.is_empty());
    client.request(3, "GET", "/doc", &[("range", "bytes=2-4")], true);
    let partial = h.h2_response(&mut client, 3, "the 206");
    assert_eq!(partial.status(), 206, "{partial:?}");
    assert_eq!(partial.field("content-range"), Some("bytes 2-4/10"));
    assert_eq!(partial.field("x-kind"), Some("doc"));
    assert!(partial.field("age").is_some());
    assert_eq!(partial.body, b"234");
    up.pump();
    assert!(up.got.is_empty(), "a hit went upstream");
    assert_eq!(h.dialled(), 0);
}
