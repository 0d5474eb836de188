//! HTTP/2 clients (h2c by prior knowledge) through the worker: streams become exchanges,
//! answers go back on their streams, and a stream or connection the client gives up ends
//! its exchanges.

use std::time::Duration;

use h2::ErrorCode;

use super::harness::{response, Harness};

/// A GET on stream 1 goes upstream as HTTP/1.1 with the authority as Host, and the answer
/// comes back on stream 1: status, fields, body, END_STREAM.
#[test]
fn a_stream_is_forwarded_as_http1_and_answered_on_its_stream() {
    let mut h = Harness::new("", "");
    let mut client = h.h2_client();
    client.get(1, "/a?q=1");
    let mut up = h.upstream();
    let req = h.message(&mut up, "the request upstream");
    assert_eq!(req.line(), "GET /a?q=1 HTTP/1.1");
    assert_eq!(req.header("host"), Some("site"));
    up.send(&response(200, "X-From: origin\r\n", "hello"));
    let resp = h.h2_response(&mut client, 1, "the answer on stream 1");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.field("x-from"), Some("origin"));
    assert_eq!(resp.body, b"hello");
    assert!(resp.reset.is_none());
}

/// Two streams at once are two exchanges on two upstream connections; each answer reaches
/// its own stream, whatever order the upstreams answer in.
#[test]
fn concurrent_streams_are_answered_on_their_own_streams() {
    let mut h = Harness::new("", "");
    let mut client = h.h2_client();
    client.get(1, "/one");
    client.get(3, "/three");
    let mut first = h.upstream();
    let mut second = h.upstream();
    let a = h.message(&mut first, "a request upstream");
    let b = h.message(&mut second, "the other request upstream");
    let mut lines = [a.line().to_string(), b.line().to_string()];
    lines.sort();
    assert_eq!(lines, ["GET /one HTTP/1.1", "GET /three HTTP/1.1"]);
    // Answer the later one first.
    let (one, three) = if a.line().contains("/one") {
        (&mut first, &mut second)
    } else {
        (&mut second, &mut first)
    };
    three.send(&response(200, "", "for three"));
    let r3 = h.h2_response(&mut client, 3, "stream 3's answer");
    assert_eq!(r3.body, b"for three");
    one.send(&response(200, "", "for one"));
    let r1 = h.h2_response(&mut client, 1, "stream 1's answer");
    assert_eq!(r1.body, b"for one");
}

/// A POST's DATA frames are the upstream request's body, framed by a Content-Length when
/// the client sent one.
#[test]
fn a_streams_data_is_the_upstream_body() {
    let mut h = Harness::new("", "");
    let mut client = h.h2_client();
    client.request(1, "POST", "/upload", &[("content-length", "10")], false);
    client.data(1, b"hello", false);
    client.data(1, b"world", true);
    let mut up = h.upstream();
    let req = h.message(&mut up, "the upload upstream");
    assert_eq!(req.line(), "POST /upload HTTP/1.1");
    assert_eq!(req.header("content-length"), Some("10"));
    assert_eq!(req.body, b"helloworld");
    up.send(&response(201, "", "made"));
    let resp = h.h2_response(&mut client, 1, "the answer");
    assert_eq!((resp.status(), &resp.body[..]), (201, &b"made"[..]));
}

/// A client's RST_STREAM while its request is at the upstream ends that exchange: the
/// upstream connection (mid-message) is closed, and the connection's other stream is still
/// answered.
#[test]
fn a_reset_stream_abandons_its_upstream_and_spares_the_others() {
    let mut h = Harness::new("", "");
    let mut client = h.h2_client();
    client.get(1, "/kept");
    client.get(3, "/dropped");
    let mut x = h.upstream();
    let mut y = h.upstream();
    let a = h.message(&mut x, "a request upstream");
    h.message(&mut y, "the other request upstream");
    let (kept, dropped) = if a.line().contains("/kept") {
        (&mut x, &mut y)
    } else {
        (&mut y, &mut x)
    };
    client.rst_stream(3, ErrorCode::CANCEL);
    h.closed(dropped, "the cancelled stream's upstream connection closed");
    kept.send(&response(200, "", "still here"));
    let r1 = h.h2_response(&mut client, 1, "the other stream's answer");
    assert_eq!(r1.body, b"still here");
}

/// An HTTP/2 client's FIN ends the connection at once: HTTP/2 has no half-closed
/// connection, so the exchange at the upstream is abandoned (its connection closed) and
/// nothing waits for an answer nobody can read.
#[test]
fn an_h2_clients_fin_ends_its_exchanges() {
    let mut h = Harness::new("", "");
    let mut client = h.h2_client();
    client.get(1, "/gone");
    let mut up = h.upstream();
    h.message(&mut up, "the request upstream");
    // Everything the worker sent so far is read: the FIN that follows is a clean one.
    h.until("the worker's SETTINGS", |_| {
        client.pump();
        (client.settings > 0).then_some(())
    });
    client.peer.finish_sending();
    h.closed(&mut up, "the abandoned upstream connection closed");
    h.closed(&mut client.peer, "the client connection closed");
}

/// A PING is answered with the same payload.
#[test]
fn a_ping_is_acknowledged_with_its_payload() {
    let mut h = Harness::new("", "");
    let mut client = h.h2_client();
    client.ping(*b"pingpong");
    h.until("the PING ack", |_| {
        client.pump();
        client.ping_acks.first().copied()
    });
    assert_eq!(client.ping_acks, [*b"pingpong"]);
}

/// An h2 connection with no stream for `keepalive_timeout` gets GOAWAY and is closed.
#[test]
fn an_idle_h2_connection_gets_goaway_after_the_keepalive_timeout() {
    let mut h = Harness::new("keepalive_timeout 1;", "");
    let mut client = h.h2_client();
    client.get(1, "/once");
    let mut up = h.upstream();
    h.message(&mut up, "the request");
    up.send(&response(200, "", "done"));
    h.h2_response(&mut client, 1, "the answer");
    let since = std::time::Instant::now();
    h.until("GOAWAY", |_| {
        client.pump();
        client.goaways.first().copied()
    });
    assert!(
        since.elapsed() >= Duration::from_millis(900),
        "GOAWAY after {:?}",
        since.elapsed()
    );
    assert_eq!(client.goaways[0], (1, ErrorCode::NO_ERROR));
    h.closed(&mut client.peer, "the idle connection closed");
}

/// A response stored from an HTTP/1.1 miss answers an HTTP/2 request from the cache, with
/// an `age` field, and nothing goes upstream.
#[test]
fn an_entry_stored_from_http1_answers_an_h2_stream() {
    let mut h = Harness::new("cache 1;\ncache_fulfill * *;", "");
    let mut h1 = h.client();
    h1.send(&super::harness::get("/shared"));
    let mut up = h.upstream();
    h.message(&mut up, "the miss upstream");
    up.send(&response(200, "Cache-Control: max-age=60\r\n", "cached"));
    h.message(&mut h1, "the miss");
    let mut client = h.h2_client();
    client.get(1, "/shared");
    let hit = h.h2_response(&mut client, 1, "the hit over h2");
    assert_eq!((hit.status(), &hit.body[..]), (200, &b"cached"[..]));
    assert!(hit.field("age").is_some(), "a hit carries age: {hit:?}");
    up.pump();
    assert!(up.got.is_empty(), "the hit went upstream");
    assert_eq!(h.dialled(), 0);
}

/// An upstream that closes without answering a POST (never retried: not idempotent) gives
/// the stream a 502, and the connection serves the next stream.
#[test]
fn an_upstream_gone_without_an_answer_gives_the_stream_502() {
    let mut h = Harness::new("", "");
    let mut client = h.h2_client();
    client.request(1, "POST", "/form", &[("content-length", "2")], false);
    client.data(1, b"ok", true);
    let mut up = h.upstream();
    h.message(&mut up, "the request upstream");
    drop(up);
    let resp = h.h2_response(&mut client, 1, "the 502");
    assert_eq!(resp.status(), 502);
    client.get(3, "/next");
    let mut up2 = h.upstream();
    h.message(&mut up2, "the next stream's request");
    up2.send(&response(200, "", "fine"));
    assert_eq!(
        h.h2_response(&mut client, 3, "the next answer").body,
        b"fine"
    );
}

/// A chunked upstream body arrives as DATA with END_STREAM, the chunk framing gone.
#[test]
fn a_chunked_upstream_body_becomes_data_frames() {
    let mut h = Harness::new("", "");
    let mut client = h.h2_client();
    client.get(1, "/chunks");
    let mut up = h.upstream();
    h.message(&mut up, "the request upstream");
    up.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
    h.idle(Duration::from_millis(20));
    up.send(b"6\r\n world\r\n0\r\n\r\n");
    let resp = h.h2_response(&mut client, 1, "the chunked answer");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.body, b"hello world");
    assert!(resp.field("transfer-encoding").is_none(), "{resp:?}");
}

/// A HEAD is answered with the head only: the upstream's Content-Length kept, no DATA.
#[test]
fn a_head_request_gets_fields_and_no_data() {
    let mut h = Harness::new("", "");
    let mut client = h.h2_client();
    client.request(1, "HEAD", "/size", &[], true);
    let mut up = h.upstream();
    let req = h.message(&mut up, "the HEAD upstream");
    assert_eq!(req.line(), "HEAD /size HTTP/1.1");
    up.send(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n");
    let resp = h.h2_response(&mut client, 1, "the HEAD answer");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.field("content-length"), Some("1234"));
    assert!(resp.body.is_empty());
}

/// A connection-specific field is malformed in HTTP/2 (RFC 9113 §8.2.2): the stream is
/// refused and nothing goes upstream.
#[test]
fn a_connection_specific_field_is_refused_before_the_upstream() {
    let mut h = Harness::new("", "");
    let mut client = h.h2_client();
    client.request(
        1,
        "GET",
        "/smuggle",
        &[("transfer-encoding", "chunked")],
        true,
    );
    let resp = h.h2_response(&mut client, 1, "the refusal");
    assert!(
        resp.reset.is_some() || resp.status() == 400,
        "a malformed request was answered: {resp:?}"
    );
    h.idle(Duration::from_millis(30));
    assert_eq!(h.dialled(), 0, "the malformed request went upstream");
}
