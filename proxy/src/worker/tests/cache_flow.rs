//! Exchanges that meet the cache: a miss stored then served as a hit, concurrent misses
//! coalesced onto one upstream request, a stale entry served when the upstream fails.

use std::time::Duration;

use super::harness::{get, response, Harness};

const CACHE_ALL: &str = "cache 1;\ncache_fulfill * *;";

/// The first request goes upstream and is stored; the second is answered from the cache
/// (with an Age) and nothing reaches the upstream.
#[test]
fn a_stored_response_answers_the_next_request_without_the_upstream() {
    let mut h = Harness::new(CACHE_ALL, "");
    let mut client = h.client();
    client.send(&get("/page"));
    let mut up = h.upstream();
    h.message(&mut up, "the miss upstream");
    up.send(&response(200, "Cache-Control: max-age=60\r\n", "stored"));
    let miss = h.message(&mut client, "the miss");
    assert_eq!(&miss.body[..], b"stored");
    let mut other = h.client();
    other.send(&get("/page"));
    let hit = h.message(&mut other, "the hit");
    assert_eq!((hit.status(), &hit.body[..]), (200, &b"stored"[..]));
    assert!(
        hit.header("age").is_some(),
        "a hit carries Age: {}",
        hit.head
    );
    h.idle(Duration::from_millis(30));
    up.pump();
    assert!(up.got.is_empty(), "the hit went upstream");
    assert_eq!(h.dialled(), 0);
}

/// Two clients miss the same key at once: one request goes upstream, the other exchange
/// waits for its fill and both get the body.
#[test]
fn concurrent_misses_are_coalesced_onto_one_upstream_request() {
    let mut h = Harness::new(CACHE_ALL, "");
    let (mut first, mut second) = (h.client(), h.client());
    first.send(&get("/hot"));
    let mut up = h.upstream();
    h.message(&mut up, "the first miss upstream");
    second.send(&get("/hot"));
    h.idle(Duration::from_millis(50));
    assert_eq!(h.dialled(), 0, "the second miss opened a connection");
    up.send(&response(200, "Cache-Control: max-age=60\r\n", "shared"));
    assert_eq!(
        &h.message(&mut first, "the first answer").body[..],
        b"shared"
    );
    assert_eq!(
        &h.message(&mut second, "the coalesced answer").body[..],
        b"shared"
    );
    up.pump();
    assert!(up.got.is_empty(), "the coalesced request went upstream");
    assert_eq!(h.dialled(), 0);
}

/// A stored response that is already stale (max-age=0) is revalidated upstream; the
/// upstream answers 500 and `cache_use_stale 5*` serves the stored one instead.
#[test]
fn a_stale_entry_answers_when_the_upstream_fails() {
    let mut h = Harness::new(&format!("{CACHE_ALL}\ncache_use_stale 5*;"), "");
    let mut client = h.client();
    client.send(&get("/old"));
    let mut up = h.upstream();
    h.message(&mut up, "the miss upstream");
    up.send(&response(200, "Cache-Control: max-age=0\r\n", "kept"));
    assert_eq!(&h.message(&mut client, "the miss").body[..], b"kept");
    client.send(&get("/old"));
    let req = h.message(&mut up, "the stale entry's request upstream");
    assert_eq!(req.line(), "GET /old HTTP/1.1");
    up.send(&response(500, "", "broken"));
    let resp = h.message(&mut client, "the stale answer");
    assert_eq!((resp.status(), &resp.body[..]), (200, &b"kept"[..]));
}

/// A request the configured limits accept is stored and answered as any other, even past
/// the parser's own defaults (here 120 fields, `http_header_cnt 150`): the fill keys the
/// entry by the exchange's request, not by a second parse of its head under the defaults
/// (which refused it, so that such a response was never stored).
#[test]
fn a_request_with_more_fields_than_the_defaults_is_stored() {
    let mut h = Harness::new(
        &format!("{CACHE_ALL}\nfrang_limits {{ http_header_cnt 150; }}"),
        "",
    );
    let fields: String = (0..120).map(|i| format!("X-F{i}: {i}\r\n")).collect();
    let request = format!("GET /many HTTP/1.1\r\nHost: site\r\n{fields}\r\n");
    let mut client = h.client();
    client.send(request.as_bytes());
    let mut up = h.upstream();
    h.message(&mut up, "the miss upstream");
    up.send(&response(200, "Cache-Control: max-age=60\r\n", "many"));
    h.message(&mut client, "the miss");
    let mut other = h.client();
    other.send(request.as_bytes());
    let hit = h.message(&mut other, "the hit");
    assert_eq!((hit.status(), &hit.body[..]), (200, &b"many"[..]));
    h.idle(Duration::from_millis(30));
    up.pump();
    assert!(
        up.got.is_empty(),
        "the second request went upstream: not stored"
    );
    assert_eq!(h.dialled(), 0);
}
