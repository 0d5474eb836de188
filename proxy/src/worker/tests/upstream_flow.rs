//! The upstream side of an exchange: retries on a stale pooled connection, the group's wait
//! queue and its bound, the forward timeout, a queued request across a reload, the timeout
//! of a removed server's connection, a close-delimited body cut by a reset and one ended in
//! order, a bodiless response that announced a body.

use std::time::{Duration, Instant};

use super::harness::{get, response, Harness, ORIGIN};

/// A pooled connection the server closed (a stale keep-alive connection) fails the next
/// request before any response byte: the request is sent again on a new connection and
/// the client never sees the failure.
#[test]
fn a_request_lost_on_a_stale_pooled_connection_is_retried() {
    let mut h = Harness::new("", "");
    let mut client = h.client();
    client.send(&get("/warm"));
    let mut up = h.upstream();
    h.message(&mut up, "the first request");
    up.send(&response(200, "", "warm"));
    h.message(&mut client, "the first answer");
    client.send(&get("/again"));
    h.message(&mut up, "the second request on the pooled connection");
    drop(up);
    let mut fresh = h.upstream();
    let req = h.message(&mut fresh, "the retried request on a new connection");
    assert_eq!(req.line(), "GET /again HTTP/1.1");
    fresh.send(&response(200, "", "retried"));
    let resp = h.message(&mut client, "the answer to the retried request");
    assert_eq!((resp.status(), &resp.body[..]), (200, &b"retried"[..]));
    let retries = h
        .metrics()
        .upstream_retries
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(retries, 1);
}

/// One connection allowed and a queue of one: the second request waits for the first
/// one's connection, the third finds the queue full and gets 503 at once; the waiting one
/// is served on the freed connection.
#[test]
fn the_group_queue_holds_its_size_and_refuses_beyond() {
    let mut h = Harness::with_server("", "conns_n=1", "server_queue_size 1;");
    let (mut a, mut b, mut c) = (h.client(), h.client(), h.client());
    a.send(&get("/a"));
    let mut up = h.upstream();
    h.message(&mut up, "the first request");
    b.send(&get("/b"));
    h.idle(Duration::from_millis(30));
    c.send(&get("/c"));
    let refused = h.message(&mut c, "the refusal of the request beyond the queue");
    assert_eq!(refused.status(), 503);
    assert_eq!(h.dialled(), 0, "a connection beyond conns_n was opened");
    up.send(&response(200, "", "a"));
    assert_eq!(&h.message(&mut a, "the first answer").body[..], b"a");
    let req = h.message(&mut up, "the queued request on the freed connection");
    assert_eq!(req.line(), "GET /b HTTP/1.1");
    up.send(&response(200, "", "b"));
    assert_eq!(
        &h.message(&mut b, "the queued request's answer").body[..],
        b"b"
    );
}

/// Tempesta's `server_queue_size` bounds the queue of each server connection: with two
/// connections and a size of one, two requests wait and the fifth is refused with 503.
#[test]
fn the_group_queue_holds_its_size_for_each_connection() {
    let mut h = Harness::with_server("", "conns_n=2", "server_queue_size 1;");
    let mut clients: Vec<_> = (0..5).map(|_| h.client()).collect();
    clients[0].send(&get("/a"));
    clients[1].send(&get("/b"));
    let mut ups = [h.upstream(), h.upstream()];
    for up in ups.iter_mut() {
        h.message(up, "a request on one of the two connections");
    }
    for (i, c) in clients.iter_mut().enumerate().skip(2).take(2) {
        c.send(&get(&format!("/{i}")));
        h.idle(Duration::from_millis(30));
    }
    clients[4].send(&get("/e"));
    let refused = h.message(&mut clients[4], "the refusal beyond two queued");
    assert_eq!(refused.status(), 503);
    assert_eq!(h.dialled(), 0, "a connection beyond conns_n was opened");
    for (i, up) in ups.iter_mut().enumerate() {
        up.send(&response(200, "", "done"));
        h.message(&mut clients[i], "an answer that frees a connection");
        let queued = h.message(up, "a queued request on the freed connection");
        assert_eq!(queued.line(), format!("GET /{} HTTP/1.1", i + 2));
    }
}

/// An upstream that takes the request and never answers: after `server_forward_timeout`
/// of silence the client gets 504 and the upstream connection is closed.
#[test]
fn a_silent_upstream_times_out_with_504() {
    let mut h = Harness::new("", "server_forward_timeout 1;");
    let mut client = h.client();
    client.send(&get("/slow"));
    let mut up = h.upstream();
    h.message(&mut up, "the request");
    let sent = Instant::now();
    let resp = h.message(&mut client, "the timeout answer");
    assert_eq!(resp.status(), 504);
    assert!(
        sent.elapsed() >= Duration::from_millis(900),
        "cut before the timeout"
    );
    h.closed(&mut up, "the timed-out upstream connection closed");
}

/// A reload that moves the group to another index while a request waits in its queue: the
/// request keeps its place in the group of the same name and is sent at once on a
/// connection of the new configuration's pool, not left to time out (504).
#[test]
fn a_request_queued_at_a_reload_is_sent_in_the_group_of_the_same_name() {
    let mut h = Harness::with_server("", "conns_n=1", "server_forward_timeout 3;");
    let (mut a, mut b) = (h.client(), h.client());
    a.send(&get("/a"));
    let mut first = h.upstream();
    h.message(&mut first, "the first request");
    b.send(&get("/b"));
    h.idle(Duration::from_millis(30));
    assert_eq!(h.dialled(), 0, "a connection beyond conns_n was opened");
    h.reload(&format!(
        "listen 127.0.0.1:1;\n\
         srv_group other {{ server 127.0.0.2:9; }}\n\
         srv_group default {{ server {ORIGIN} conns_n=1; server_forward_timeout 3; }}\n\
         vhost site {{ proxy_pass default; }}\n\
         http_chain {{ -> site; }}\n"
    ));
    // Before the fix the queue was dropped at the reload: no connection, 504 after 3 s.
    let mut second = h.upstream();
    let req = h.message(
        &mut second,
        "the queued request on the new pool's connection",
    );
    assert_eq!(req.line(), "GET /b HTTP/1.1");
    second.send(&response(200, "", "b"));
    assert_eq!(
        &h.message(&mut b, "the queued request's answer").body[..],
        b"b"
    );
    first.send(&response(200, "", "a"));
    assert_eq!(&h.message(&mut a, "the first answer").body[..], b"a");
}

/// A reload that removes the server a request is waiting on: the connection is timed by its
/// own group's `server_forward_timeout` (1 s: 504), not by whatever group now has its old
/// index (`other`, 30 s).
#[test]
fn a_removed_servers_connection_keeps_its_groups_forward_timeout() {
    let mut h = Harness::new("", "server_forward_timeout 1;");
    let mut client = h.client();
    client.send(&get("/slow"));
    let mut up = h.upstream();
    h.message(&mut up, "the request");
    h.reload(
        "listen 127.0.0.1:1;\n\
         srv_group other { server 127.0.0.2:9; server_forward_timeout 30; }\n\
         srv_group default { server 127.0.0.3:9; server_forward_timeout 1; }\n\
         vhost site { proxy_pass default; }\n\
         http_chain { -> site; }\n",
    );
    // Before the fix the timer looked the timeout up with the old group index: 30 s.
    let resp = h.message(&mut client, "the timeout answer");
    assert_eq!(resp.status(), 504);
    h.closed(&mut up, "the timed-out upstream connection closed");
}

/// A cacheable response whose body is delimited by the close (no Content-Length, not
/// chunked), from the scripted upstream; the caller ends the connection.
const UNFRAMED: &[u8] = b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n\r\nunframed body";

/// The upstream sends a close-delimited body and resets the connection (closing an AF_UNIX
/// socket with unread bytes — here the request — resets it, as SO_LINGER 0 does over TCP).
/// That is no end for such a body (RFC 9112 §8): the client's connection is cut and nothing
/// is stored, so the next request goes upstream again.
#[test]
fn a_close_delimited_body_cut_by_a_reset_is_not_stored() {
    let mut h = Harness::new("cache 1;\ncache_fulfill * *;", "");
    let mut client = h.client();
    client.send(&get("/cut"));
    let mut up = h.upstream();
    // Let the request arrive, and leave it unread.
    h.idle(Duration::from_millis(50));
    up.send(UNFRAMED);
    h.idle(Duration::from_millis(30));
    drop(up);
    h.closed(&mut client, "the cut client connection");
    let mut again = h.client();
    again.send(&get("/cut"));
    // Before the fix the reset ended the body cleanly and it was a hit here.
    let mut fresh = h.upstream();
    let req = h.message(&mut fresh, "the next request upstream, not a hit");
    assert_eq!(req.line(), "GET /cut HTTP/1.1");
}

/// The same body ended by an orderly close is complete: stored, and the next request is a
/// hit.
#[test]
fn a_close_delimited_body_ended_by_an_orderly_close_is_stored() {
    let mut h = Harness::new("cache 1;\ncache_fulfill * *;", "");
    let mut client = h.client();
    client.send(&get("/whole"));
    let mut up = h.upstream();
    h.message(&mut up, "the request");
    up.send(UNFRAMED);
    up.finish_sending();
    h.closed(&mut client, "the close that ends the body");
    assert!(client.got.ends_with(b"unframed body"), "{:?}", client.got);
    let mut again = h.client();
    again.send(&get("/whole"));
    let hit = h.message(&mut again, "the hit");
    assert_eq!(&hit.body[..], b"unframed body");
    assert_eq!(h.dialled(), 0, "the hit went upstream");
}

/// A 204 and a 304 that announce a body (which they cannot have) leave their connection
/// closed: the server may send that body late, and on a pooled connection it would be read
/// as the next request's response. The next request gets a new connection.
#[test]
fn a_bodiless_response_that_announced_a_body_leaves_its_connection_unpooled() {
    for status in [204, 304] {
        let mut h = Harness::with_server("", "conns_n=1", "");
        let mut client = h.client();
        client.send(&get("/bodiless"));
        let mut up = h.upstream();
        h.message(&mut up, "the request");
        up.send(format!("HTTP/1.1 {status} X\r\nContent-Length: 87\r\n\r\n").as_bytes());
        // Its head only: a 304 keeps the Content-Length (the representation's), no body follows.
        h.until("the bodiless answer", |_| {
            client.pump();
            client
                .got
                .windows(4)
                .any(|w| w == b"\r\n\r\n")
                .then_some(())
        });
        let head = String::from_utf8_lossy(&client.got).into_owned();
        assert!(head.starts_with(&format!("HTTP/1.1 {status} ")), "{head}");
        client.got.clear();
        h.closed(&mut up, "the connection a late body could follow on");
        client.send(&get("/next"));
        let mut fresh = h.upstream();
        let req = h.message(&mut fresh, "the next request on a new connection");
        assert_eq!(req.line(), "GET /next HTTP/1.1", "after {status}");
    }
}
