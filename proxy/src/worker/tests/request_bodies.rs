//! HTTP/1 request bodies on their way upstream (`request_body.rs`): a chunked body is
//! re-framed and its trailer filtered, a Content-Length body goes as received in pieces,
//! a malformed chunk is refused, frang's body limit blocks, a body the client cuts short
//! closes its connection.

use std::time::Duration;

use super::harness::{response, Harness, Peer};

/// Steps until `up` has received bytes ending with `tail`; returns all it received.
fn upstream_bytes(h: &mut Harness, up: &mut Peer, tail: &[u8], what: &str) -> String {
    h.until(what, |_| {
        up.pump();
        up.got.ends_with(tail).then_some(())
    });
    String::from_utf8_lossy(&std::mem::take(&mut up.got)).into_owned()
}

/// Chunk extensions are dropped, the data re-framed, and of the trailer only the fields
/// the proxy lets through go upstream (no `Content-Type`, no `Content-Length`, no `If-`).
#[test]
fn a_chunked_body_is_reframed_and_its_trailer_filtered() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    client.send(
        b"POST /up HTTP/1.1\r\nHost: site\r\nTransfer-Encoding: chunked\r\n\r\n\
          3;ext=1\r\nabc\r\n",
    );
    let mut up = h.upstream();
    let sent = upstream_bytes(&mut h, &mut up, b"abc\r\n", "the first chunk upstream");
    assert!(sent.starts_with("POST /up HTTP/1.1\r\n"), "{sent}");
    assert!(sent.ends_with("\r\n\r\n3\r\nabc\r\n"), "{sent}");
    client.send(
        b"2\r\nde\r\n0\r\nX-Sum: 5\r\nContent-Type: x\r\nContent-Length: 0\r\nIf-Match: *\r\n\r\n",
    );
    let rest = upstream_bytes(&mut h, &mut up, b"\r\n\r\n", "the rest of the body");
    assert_eq!(rest, "2\r\nde\r\n0\r\nX-Sum: 5\r\n\r\n");
    up.send(&response(200, "", "stored"));
    assert_eq!(&h.message(&mut client, "the answer").body[..], b"stored");
}

/// A Content-Length body arriving in pieces goes upstream as it arrives, unchanged.
#[test]
fn a_content_length_body_goes_upstream_as_it_arrives() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    client.send(b"POST /p HTTP/1.1\r\nHost: site\r\nContent-Length: 9\r\n\r\none");
    let mut up = h.upstream();
    upstream_bytes(
        &mut h,
        &mut up,
        b"\r\n\r\none",
        "the head and the first piece",
    );
    client.send(b"two");
    assert_eq!(
        upstream_bytes(&mut h, &mut up, b"two", "the second piece"),
        "two"
    );
    client.send(b"333");
    assert_eq!(
        upstream_bytes(&mut h, &mut up, b"333", "the last piece"),
        "333"
    );
    up.send(&response(201, "", ""));
    assert_eq!(h.message(&mut client, "the answer").status(), 201);
}

/// A chunk size that is not hexadecimal, after the head went upstream: the client gets 400
/// and its connection closes; the upstream connection, its request half sent, closes too.
#[test]
fn a_malformed_chunk_is_refused_and_both_connections_close() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    client.send(b"POST /up HTTP/1.1\r\nHost: site\r\nTransfer-Encoding: chunked\r\n\r\n");
    let mut up = h.upstream();
    upstream_bytes(&mut h, &mut up, b"\r\n\r\n", "the head upstream");
    client.send(b"zz\r\nabc\r\n");
    let resp = h.message(&mut client, "the refusal");
    assert_eq!(resp.status(), 400);
    h.closed(&mut client, "the refused client closed");
    h.closed(&mut up, "the half-sent upstream connection closed");
}

/// frang's `http_body_len` on a chunked body (no length known from the head): the chunk
/// that passes it is blocked with 403 and goes nowhere.
#[test]
fn a_chunked_body_over_http_body_len_is_blocked() {
    let mut h = Harness::new(
        "frang_limits { http_body_len 8; }\nblock_action attack reply;",
        "",
    );
    let mut client = h.client();
    client.send(b"POST /up HTTP/1.1\r\nHost: site\r\nTransfer-Encoding: chunked\r\n\r\n");
    let mut up = h.upstream();
    upstream_bytes(&mut h, &mut up, b"\r\n\r\n", "the head upstream");
    client.send(b"c\r\n0123456789ab\r\n");
    let resp = h.message(&mut client, "the block");
    assert_eq!(resp.status(), 403);
    h.closed(&mut client, "the blocked client closed");
    h.closed(
        &mut up,
        "the upstream connection of the blocked body closed",
    );
    assert!(
        !String::from_utf8_lossy(&up.got).contains("0123"),
        "{:?}",
        up.got
    );
}

/// A client whose FIN comes with bytes of a body that stays short: its connection closes,
/// and so does the upstream connection that was waiting for the rest; no answer is relayed.
#[test]
fn a_body_cut_short_by_the_client_closes_both_connections() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    client.send(b"POST /up HTTP/1.1\r\nHost: site\r\nContent-Length: 10\r\n\r\nabc");
    let mut up = h.upstream();
    upstream_bytes(
        &mut h,
        &mut up,
        b"\r\n\r\nabc",
        "the head and the first bytes",
    );
    // Both before the worker's next turn: one read takes the bytes and sees the end.
    client.send(b"de");
    client.finish_sending();
    h.closed(&mut client, "the client that cut its body closed");
    h.closed(
        &mut up,
        "the upstream connection waiting for the rest closed",
    );
    h.idle(Duration::from_millis(20));
    assert!(client.got.is_empty(), "{:?}", client.got);
}
