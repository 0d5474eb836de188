//! stale-while-revalidate's background revalidation (an exchange with no client, whose
//! response only updates the cache): a 304 freshens the entry, a 200 (chunked here) replaces
//! it, an error, a garbage head, an interim flood, a cut body or a closed connection leave
//! it as it was, an interim `100` before the 304 is read past. Each case checks the entry
//! through the next client's request: a hit (nothing upstream) or the stale entry again (a
//! new revalidation upstream). One case starts the revalidation from an HTTP/2 stream.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::harness::{get, response, Harness, Message, Peer};

const CACHE_SWR: &str = "cache 1;\ncache_fulfill * *;";

/// The origin's first answer: stale at once, within its stale-while-revalidate window.
const STALE: &str = "Cache-Control: max-age=0, stale-while-revalidate=60\r\nETag: \"v1\"\r\n";

/// A stored entry of `path` that is stale within its window, and the upstream connection it
/// came on (pooled).
fn stale_entry(h: &mut Harness, path: &str) -> Peer {
    let mut client = h.client();
    client.send(&get(path));
    let mut up = h.upstream();
    h.message(&mut up, "the miss upstream");
    up.send(&response(200, STALE, "v1"));
    assert_eq!(&h.message(&mut client, "the miss").body[..], b"v1");
    up
}

/// A new client asks for `path` and gets the stale entry at once; the background
/// revalidation it starts arrives on `up` (the pooled connection).
fn revalidation_starts(h: &mut Harness, path: &str, up: &mut Peer) -> Message {
    let mut client = h.client();
    client.send(&get(path));
    let resp = h.message(&mut client, "the stale answer");
    assert_eq!((resp.status(), &resp.body[..]), (200, &b"v1"[..]));
    let req = h.message(up, "the background revalidation upstream");
    assert_eq!(req.line(), format!("GET {path} HTTP/1.1"));
    assert_eq!(req.header("if-none-match"), Some("\"v1\""));
    req
}

/// A new client's request for `path` is a hit (nothing goes upstream); its answer.
fn hit(h: &mut Harness, path: &str, up: &mut Peer) -> Message {
    h.idle(Duration::from_millis(30));
    let mut client = h.client();
    client.send(&get(path));
    let resp = h.message(&mut client, "the hit");
    assert!(
        resp.header("age").is_some(),
        "a hit carries Age: {}",
        resp.head
    );
    h.idle(Duration::from_millis(30));
    up.pump();
    assert!(up.got.is_empty(), "the hit went upstream");
    assert_eq!(h.dialled(), 0);
    resp
}

/// A new client's request for `path` gets the stale entry again and starts another
/// revalidation, which arrives on a new connection (the last one was closed).
fn still_stale(h: &mut Harness, path: &str) {
    h.idle(Duration::from_millis(30));
    let mut client = h.client();
    client.send(&get(path));
    let resp = h.message(&mut client, "the stale entry again");
    assert_eq!((resp.status(), &resp.body[..]), (200, &b"v1"[..]));
    let mut fresh = h.upstream();
    let req = h.message(&mut fresh, "another revalidation");
    assert_eq!(req.header("if-none-match"), Some("\"v1\""));
}

#[test]
fn a_304_to_a_background_revalidation_freshens_the_entry_and_pools_the_connection() {
    let mut h = Harness::new(CACHE_SWR, "");
    let mut up = stale_entry(&mut h, "/nm");
    revalidation_starts(&mut h, "/nm", &mut up);
    up.send(&response(
        304,
        "Cache-Control: max-age=60\r\nETag: \"v1\"\r\n",
        "",
    ));
    let resp = hit(&mut h, "/nm", &mut up);
    assert_eq!(&resp.body[..], b"v1");
    assert_eq!(
        resp.header("cache-control"),
        Some("max-age=60"),
        "{}",
        resp.head
    );
    h.next_client_reuses(&mut up);
}

#[test]
fn an_interim_100_before_the_304_is_read_past() {
    let mut h = Harness::new(CACHE_SWR, "");
    let mut up = stale_entry(&mut h, "/interim");
    revalidation_starts(&mut h, "/interim", &mut up);
    up.send(b"HTTP/1.1 100 Continue\r\n\r\n");
    h.idle(Duration::from_millis(20));
    up.send(&response(304, "Cache-Control: max-age=60\r\n", ""));
    let resp = hit(&mut h, "/interim", &mut up);
    assert_eq!(
        resp.header("cache-control"),
        Some("max-age=60"),
        "{}",
        resp.head
    );
    h.next_client_reuses(&mut up);
}

#[test]
fn a_200_to_a_background_revalidation_replaces_the_entry() {
    let mut h = Harness::new(CACHE_SWR, "");
    let mut up = stale_entry(&mut h, "/new");
    revalidation_starts(&mut h, "/new", &mut up);
    up.send(
        b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nETag: \"v2\"\r\n\
          Transfer-Encoding: chunked\r\n\r\n3\r\nv2!\r\n0\r\n\r\n",
    );
    let resp = hit(&mut h, "/new", &mut up);
    assert_eq!((resp.status(), &resp.body[..]), (200, &b"v2!"[..]));
    assert_eq!(resp.header("etag"), Some("\"v2\""));
    h.next_client_reuses(&mut up);
}

#[test]
fn a_5xx_the_stale_entry_may_stand_in_for_leaves_the_entry() {
    let mut h = Harness::new(&format!("{CACHE_SWR}\ncache_use_stale 5*;"), "");
    let mut up = stale_entry(&mut h, "/err");
    revalidation_starts(&mut h, "/err", &mut up);
    up.send(&response(503, "", "down"));
    // The response was not read to its end: its connection is not pooled.
    h.closed(&mut up, "the upstream connection closed");
    still_stale(&mut h, "/err");
}

/// A garbage head is a bad response of the upstream, counted as one whoever asked (the one
/// relay; the background relay before it counted nothing).
#[test]
fn a_garbage_head_leaves_the_entry_and_closes_the_connection() {
    let mut h = Harness::new(CACHE_SWR, "");
    let mut up = stale_entry(&mut h, "/garbage");
    revalidation_starts(&mut h, "/garbage", &mut up);
    up.send(b"NOT HTTP AT ALL\r\n\r\n");
    h.closed(&mut up, "the upstream connection closed");
    assert_eq!(h.metrics().upstream_errors.load(Relaxed), 1);
    still_stale(&mut h, "/garbage");
}

/// More interim responses than a request may get: a flood, counted, and the entry stays.
#[test]
fn an_interim_flood_leaves_the_entry() {
    let mut h = Harness::new(CACHE_SWR, "");
    let mut up = stale_entry(&mut h, "/flood");
    revalidation_starts(&mut h, "/flood", &mut up);
    up.send(&b"HTTP/1.1 103 Early Hints\r\n\r\n".repeat(9));
    h.closed(&mut up, "the upstream connection closed");
    assert_eq!(h.metrics().upstream_interim_floods.load(Relaxed), 1);
    still_stale(&mut h, "/flood");
}

#[test]
fn a_body_cut_by_the_close_leaves_the_entry() {
    let mut h = Harness::new(CACHE_SWR, "");
    let mut up = stale_entry(&mut h, "/cut");
    revalidation_starts(&mut h, "/cut", &mut up);
    up.send(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 10\r\n\r\nv2");
    h.idle(Duration::from_millis(20));
    drop(up);
    still_stale(&mut h, "/cut");
}

/// The pooled connection closes before any response byte: the revalidation is retried on
/// a new connection as any replayable request; when that one closes too, the entry stays.
#[test]
fn a_closed_connection_is_retried_then_leaves_the_entry() {
    let mut h = Harness::new(CACHE_SWR, "");
    let mut up = stale_entry(&mut h, "/gone");
    revalidation_starts(&mut h, "/gone", &mut up);
    drop(up);
    let mut retry = h.upstream();
    let req = h.message(&mut retry, "the retried revalidation");
    assert_eq!(req.header("if-none-match"), Some("\"v1\""));
    drop(retry);
    still_stale(&mut h, "/gone");
}

/// An HTTP/2 client's request starts the revalidation as an HTTP/1.1 one does: the stale
/// entry answers its stream at once, the background response (200) replaces the entry, and
/// the connection's next stream is a hit on the new one.
#[test]
fn an_h2_clients_stale_answer_starts_the_same_background_revalidation() {
    let mut h = Harness::new(CACHE_SWR, "");
    let mut up = stale_entry(&mut h, "/h2");
    let mut client = h.h2_client();
    client.get(1, "/h2");
    let stale = h.h2_response(&mut client, 1, "the stale answer over h2");
    assert_eq!((stale.status(), &stale.body[..]), (200, &b"v1"[..]));
    let req = h.message(&mut up, "the background revalidation upstream");
    assert_eq!(req.header("if-none-match"), Some("\"v1\""));
    up.send(&response(200, "Cache-Control: max-age=60\r\n", "v2"));
    h.idle(Duration::from_millis(30));
    client.get(3, "/h2");
    let hit = h.h2_response(&mut client, 3, "the hit over h2");
    assert_eq!((hit.status(), &hit.body[..]), (200, &b"v2"[..]));
    assert!(hit.field("age").is_some(), "a hit carries age: {hit:?}");
    up.pump();
    assert!(up.got.is_empty(), "the hit went upstream");
    assert_eq!(h.dialled(), 0);
}

/// Issue 37's review: a revalidation's response too large to store is not read to its end.
/// The body is chunked (its size known only as it comes); once it passes
/// `cache_max_object_size` the fill gives up, nothing else takes the body (no client), and
/// the upstream connection is closed, however much more the origin would send. Before, the
/// proxy read the whole body for no one.
#[test]
fn a_revalidation_s_body_too_large_to_store_is_not_read_to_its_end() {
    let mut h = Harness::new(&format!("{CACHE_SWR}\ncache_max_object_size 4096;"), "");
    let mut up = stale_entry(&mut h, "/huge");
    revalidation_starts(&mut h, "/huge", &mut up);
    up.send(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nTransfer-Encoding: chunked\r\n\r\n");
    let chunk = format!("400\r\n{}\r\n", "x".repeat(0x400)).into_bytes();
    let mut sent = 0;
    // The worker runs only within `turn`: a close it makes is seen by the next `pump`.
    while sent < 1 << 20 {
        up.pump();
        if up.eof {
            break;
        }
        up.send(&chunk);
        sent += chunk.len();
        h.turn();
    }
    assert!(
        up.eof,
        "{sent} bytes of a body nobody stores were read, and more would be"
    );
    assert!(sent <= 16 * 1024, "{sent} bytes sent before the close");
    // Not an error of the upstream's: it sent a valid response.
    assert_eq!(h.metrics().upstream_errors.load(Relaxed), 0);
}
