//! Keep-alive and pipelining: how exchanges follow each other on one client connection and
//! reuse one upstream connection.

use std::time::Duration;

use super::harness::{get, response, Harness};

/// Two requests one after the other on one client connection: both relayed, on one
/// upstream connection (the first one is pooled, then reused).
#[test]
fn keep_alive_reuses_the_client_and_the_upstream_connection() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    client.send(&get("/a"));
    let mut up = h.upstream();
    let req = h.message(&mut up, "the first request upstream");
    assert_eq!(req.line(), "GET /a HTTP/1.1");
    up.send(&response(200, "", "first"));
    let resp = h.message(&mut client, "the first response");
    assert_eq!((resp.status(), &resp.body[..]), (200, &b"first"[..]));
    client.send(&get("/b"));
    let req = h.message(
        &mut up,
        "the second request on the same upstream connection",
    );
    assert_eq!(req.line(), "GET /b HTTP/1.1");
    up.send(&response(200, "", "second"));
    let resp = h.message(&mut client, "the second response");
    assert_eq!(&resp.body[..], b"second");
    assert_eq!(h.dialled(), 0, "a second upstream connection was opened");
    assert!(!client.eof && !up.eof);
}

/// Two requests in one write: the second waits in the client's buffer until the first is
/// answered, then goes out on the same upstream connection; the answers come back in order.
#[test]
fn pipelined_requests_are_served_one_after_the_other_in_order() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    let mut both = get("/1");
    both.extend_from_slice(&get("/2"));
    client.send(&both);
    let mut up = h.upstream();
    let req = h.message(&mut up, "the first pipelined request");
    assert_eq!(req.line(), "GET /1 HTTP/1.1");
    h.idle(Duration::from_millis(50));
    up.pump();
    assert!(
        up.got.is_empty(),
        "the second request went out before the first answer"
    );
    up.send(&response(200, "", "one"));
    let req = h.message(&mut up, "the second pipelined request");
    assert_eq!(req.line(), "GET /2 HTTP/1.1");
    up.send(&response(200, "", "two"));
    let first = h.message(&mut client, "the first answer");
    let second = h.message(&mut client, "the second answer");
    assert_eq!(
        (&first.body[..], &second.body[..]),
        (&b"one"[..], &b"two"[..])
    );
    assert_eq!(h.dialled(), 0);
}

/// The upstream answers before the request body is complete: the answer reaches the client
/// at once; the rest of the body is discarded, never sent to an upstream; that upstream
/// connection (its request half sent) is closed, and the client's next request goes out on
/// a new one.
#[test]
fn an_early_answer_is_relayed_and_the_rest_of_the_body_discarded() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    client.send(b"POST /upload HTTP/1.1\r\nHost: site\r\nContent-Length: 10\r\n\r\nabc");
    let mut up = h.upstream();
    h.until("the request head and the first body bytes upstream", |_| {
        up.pump();
        up.got.ends_with(b"\r\n\r\nabc").then_some(())
    });
    up.send(&response(413, "", "early"));
    let resp = h.message(&mut client, "the early answer");
    assert_eq!((resp.status(), &resp.body[..]), (413, &b"early"[..]));
    h.closed(&mut up, "the half-used upstream connection closed");
    client.send(b"defghij");
    client.send(&get("/next"));
    let mut up2 = h.upstream();
    let req = h.message(&mut up2, "the next request on a new upstream connection");
    assert_eq!(req.line(), "GET /next HTTP/1.1");
    assert!(!req.head.contains("defghij"));
    up2.send(&response(200, "", "next"));
    let resp = h.message(&mut client, "the next answer");
    assert_eq!(&resp.body[..], b"next");
    up2.pump();
    assert!(
        up2.got.is_empty(),
        "discarded body bytes reached the upstream"
    );
}

/// A request with two different Content-Lengths (a smuggling attempt) is refused with 400
/// and never reaches an upstream.
#[test]
fn a_request_with_conflicting_lengths_is_refused_before_the_upstream() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    client.send(
        b"POST / HTTP/1.1\r\nHost: site\r\nContent-Length: 1\r\nContent-Length: 5\r\n\r\nabcde",
    );
    let resp = h.message(&mut client, "the refusal");
    assert_eq!(resp.status(), 400);
    h.closed(
        &mut client,
        "the client connection closed after the refusal",
    );
    assert_eq!(h.dialled(), 0, "the request was sent upstream");
}

/// A client that half-closes after its request (EOF while the exchange is at the upstream)
/// is still answered, then its connection is closed; the upstream connection, its response
/// complete, goes back to the pool and serves the next client.
#[test]
fn a_client_half_closed_mid_exchange_is_answered_then_closed() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    client.send(&get("/last"));
    let mut up = h.upstream();
    h.message(&mut up, "the request upstream");
    client.finish_sending();
    h.idle(Duration::from_millis(30));
    up.send(&response(200, "", "bye"));
    let resp = h.message(&mut client, "the answer after the half-close");
    assert_eq!(&resp.body[..], b"bye");
    h.closed(
        &mut client,
        "the half-closed client closed after its answer",
    );
    h.next_client_reuses(&mut up);
}

/// An idle keep-alive connection is closed after `keepalive_timeout`, not before.
#[test]
fn an_idle_client_is_closed_after_the_keepalive_timeout() {
    let mut h = Harness::new("keepalive_timeout 1;", "");
    let mut client = h.client();
    client.send(&get("/once"));
    let mut up = h.upstream();
    h.message(&mut up, "the request");
    up.send(&response(200, "", "done"));
    h.message(&mut client, "the answer");
    let idle_since = std::time::Instant::now();
    h.closed(&mut client, "the idle connection closed");
    assert!(
        idle_since.elapsed() >= Duration::from_millis(900),
        "closed after {:?}",
        idle_since.elapsed()
    );
}

/// Each answer moves the idle deadline later without queueing a timer of its own: the one
/// queued for the first answer fires early, queues itself again for the last deadline, and
/// the connection is closed `keepalive_timeout` after its last answer, not after its first.
#[test]
fn a_later_request_moves_the_idle_deadline() {
    let mut h = Harness::new("keepalive_timeout 1;", "");
    let mut client = h.client();
    client.send(&get("/first"));
    let mut up = h.upstream();
    h.message(&mut up, "the first request");
    up.send(&response(200, "", "one"));
    h.message(&mut client, "the first answer");
    h.idle(Duration::from_millis(600));
    client.send(&get("/second"));
    h.message(&mut up, "the second request");
    up.send(&response(200, "", "two"));
    h.message(&mut client, "the second answer");
    let second_answer = std::time::Instant::now();
    h.closed(&mut client, "the idle connection closed");
    assert!(
        second_answer.elapsed() >= Duration::from_millis(900),
        "closed {:?} after the last answer",
        second_answer.elapsed()
    );
}
