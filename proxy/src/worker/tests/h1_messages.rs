//! What an HTTP/1.1 exchange carries and how each side's connection continues: the fields
//! the proxy removes and adds, bodies framed by length, chunks or the close, HEAD and 304,
//! and the `Connection: close` of either side.

use std::time::Duration;

use super::harness::{get, response, Harness};

/// Hop-by-hop fields (those `Connection` names, Keep-Alive, Upgrade-less Connection) stay
/// on the client's hop; the origin sees X-Forwarded-For and Via added, Host kept.
#[test]
fn hop_by_hop_fields_stay_and_forwarding_fields_are_added() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    client.send(
        b"GET /f HTTP/1.1\r\nHost: site\r\nConnection: keep-alive, X-Hop\r\n\
          X-Hop: secret\r\nKeep-Alive: timeout=5\r\nX-End: kept\r\n\r\n",
    );
    let mut up = h.upstream();
    let req = h.message(&mut up, "the forwarded request");
    assert_eq!(req.header("host"), Some("site"));
    assert_eq!(req.header("x-end"), Some("kept"));
    assert!(req.header("x-hop").is_none(), "{}", req.head);
    assert!(req.header("keep-alive").is_none(), "{}", req.head);
    assert_eq!(req.header("x-forwarded-for"), Some("127.0.0.1"));
    assert!(req.header("via").is_some(), "{}", req.head);
}

/// `Connection: close` from the client: answered, then the client connection closes while
/// the upstream connection, its exchange complete, is pooled for the next client.
#[test]
fn a_closing_client_is_answered_and_its_upstream_pooled() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    client.send(b"GET /bye HTTP/1.1\r\nHost: site\r\nConnection: close\r\n\r\n");
    let mut up = h.upstream();
    h.message(&mut up, "the request");
    up.send(&response(200, "", "bye"));
    let resp = h.message(&mut client, "the answer");
    assert_eq!(resp.header("connection"), Some("close"));
    h.closed(&mut client, "the client connection closed");
    h.next_client_reuses(&mut up);
}

/// `Connection: close` from the upstream: its connection is closed after the answer, the
/// client's stays open, and the next request goes out on a new upstream connection.
#[test]
fn a_closing_upstream_is_not_pooled_and_the_client_continues() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    client.send(&get("/a"));
    let mut up = h.upstream();
    h.message(&mut up, "the request");
    up.send(&response(200, "Connection: close\r\n", "last"));
    let resp = h.message(&mut client, "the answer");
    assert_eq!(&resp.body[..], b"last");
    assert_ne!(resp.header("connection"), Some("close"));
    h.closed(&mut up, "the upstream connection closed");
    client.send(&get("/b"));
    let mut up2 = h.upstream();
    let req = h.message(&mut up2, "the next request on a new connection");
    assert_eq!(req.line(), "GET /b HTTP/1.1");
    assert!(!client.eof);
}

/// A chunked response reaches an HTTP/1.1 client whole, and the connection serves the next
/// request.
#[test]
fn a_chunked_response_is_relayed_whole() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    client.send(&get("/chunks"));
    let mut up = h.upstream();
    h.message(&mut up, "the request");
    up.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n");
    h.idle(Duration::from_millis(20));
    up.send(b"2\r\nde\r\n0\r\n\r\n");
    let raw = h.until("the whole chunked answer", |_| {
        client.pump();
        client
            .got
            .ends_with(b"0\r\n\r\n")
            .then(|| client.got.split_off(0))
    });
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.contains("3\r\nabc\r\n") && text.contains("2\r\nde\r\n"),
        "{text}"
    );
    client.send(&get("/after"));
    let req = h.message(&mut up, "the next request on the same upstream");
    assert_eq!(req.line(), "GET /after HTTP/1.1");
}

/// A body delimited by the upstream's close reaches the client whole, and that upstream
/// connection is never used again: the client's next request goes out on a new one.
#[test]
fn a_close_delimited_response_is_relayed_and_its_connection_dropped() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    client.send(&get("/stream"));
    let mut up = h.upstream();
    h.message(&mut up, "the request");
    up.send(b"HTTP/1.1 200 OK\r\n\r\nuntil the end");
    up.finish_sending();
    let raw = h.until("the answer", |_| {
        client.pump();
        let text = String::from_utf8_lossy(&client.got).into_owned();
        (text.contains("until the end") && (client.eof || text.ends_with("0\r\n\r\n")))
            .then_some(text)
    });
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    // The proxy closes its side of the ended connection.
    h.closed(&mut up, "the close-delimited upstream connection closed");
    if client.eof {
        // Relayed close-delimited to this client: its connection ends with the body.
        return;
    }
    client.got.clear();
    client.send(&get("/again"));
    let mut up2 = h.upstream();
    let req = h.message(&mut up2, "the next request on a new connection");
    assert_eq!(req.line(), "GET /again HTTP/1.1");
    up.pump();
    assert!(up.got.is_empty(), "the ended connection was reused");
}

/// HEAD: the head with the upstream's Content-Length and no body. A HEAD answer that
/// announces a length leaves its upstream connection closed (a faulty server could send
/// the body late, into the next exchange: docs/PROXY.md); the client's connection carries
/// the next exchange, on a new upstream connection.
#[test]
fn a_head_answer_has_no_body_and_the_client_continues() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    client.send(b"HEAD /big HTTP/1.1\r\nHost: site\r\n\r\n");
    let mut up = h.upstream();
    h.message(&mut up, "the HEAD upstream");
    up.send(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n");
    let head = h.until("the HEAD answer", |_| client.take_head());
    assert!(
        head.to_ascii_lowercase().contains("content-length: 5000"),
        "{head}"
    );
    h.closed(
        &mut up,
        "the upstream connection after a HEAD that announced a body",
    );
    client.send(&get("/next"));
    let mut up2 = h.upstream();
    let req = h.message(&mut up2, "the next request");
    assert_eq!(req.line(), "GET /next HTTP/1.1");
    up2.send(&response(200, "", "n"));
    let resp = h.message(&mut client, "the next answer");
    assert_eq!(
        &resp.body[..],
        b"n",
        "a body byte was expected after the HEAD answer"
    );
}

/// A 304 carries no body whatever its fields say, and both connections continue.
#[test]
fn a_304_is_relayed_without_a_body() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    client.send(b"GET /c HTTP/1.1\r\nHost: site\r\nIf-None-Match: \"v1\"\r\n\r\n");
    let mut up = h.upstream();
    let req = h.message(&mut up, "the conditional request");
    assert_eq!(req.header("if-none-match"), Some("\"v1\""));
    up.send(b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n");
    let resp = h.message(&mut client, "the 304");
    assert_eq!(resp.status(), 304);
    assert!(resp.body.is_empty());
    client.send(&get("/d"));
    let req = h.message(&mut up, "the next request on the same upstream");
    assert_eq!(req.line(), "GET /d HTTP/1.1");
}

/// An HTTP/1.0 client without keep-alive is answered and its connection closed.
#[test]
fn an_http10_request_is_answered_then_closed() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    // No Host: under the default strict host checking an HTTP/1.0 request must not carry
    // one (frang/request.rs), as in Tempesta.
    client.send(b"GET /old HTTP/1.0\r\n\r\n");
    let mut up = h.upstream();
    h.message(&mut up, "the request upstream");
    up.send(&response(200, "", "1.0"));
    let resp = h.message(&mut client, "the answer");
    assert_eq!(&resp.body[..], b"1.0");
    h.closed(&mut client, "the HTTP/1.0 connection closed");
}

/// A request pipelined behind one that says `Connection: close` is never served.
#[test]
fn nothing_is_served_after_a_closing_request() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    let mut both = b"GET /last HTTP/1.1\r\nHost: site\r\nConnection: close\r\n\r\n".to_vec();
    both.extend_from_slice(&get("/ignored"));
    client.send(&both);
    let mut up = h.upstream();
    h.message(&mut up, "the closing request");
    up.send(&response(200, "", "last"));
    h.message(&mut client, "its answer");
    h.closed(&mut client, "the connection closed");
    up.pump();
    assert!(up.got.is_empty(), "the pipelined request went upstream");
}
