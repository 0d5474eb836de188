//! An upstream's HTTP/1.1 response head as an HTTP/2 stream's HEADERS: built from the head
//! the upstream reader parsed and the proxy's edits (issue 31), field for field what the
//! HTTP/1.1 client gets, without what is specific to an HTTP/1 connection.

use super::harness::{response, Harness};

fn pairs(fields: &[(String, String)]) -> Vec<(&str, &str)> {
    fields
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect()
}

/// The stream gets the origin's end-to-end fields in their order with lowercase names,
/// repeated ones kept apart; the hop-by-hop ones, those `Connection` names and the chunked
/// framing are left out; the vhost's `resp_hdr_set`/`add` come after, as on HTTP/1.1.
#[test]
fn a_relayed_head_keeps_its_order_and_loses_its_hop_by_hop_fields() {
    let top = "resp_hdr_set Server ktls-proxy;\nresp_hdr_add X-Added \"by proxy\";\n\
               resp_hdr_set X-Gone;";
    let mut h = Harness::new(top, "");
    let mut client = h.h2_client();
    client.get(1, "/page");
    let mut up = h.upstream();
    h.message(&mut up, "the request upstream");
    up.send(
        b"HTTP/1.1 200 Fine\r\nX-Upper-Case: Kept As Sent\r\nConnection: x-hop, Keep-Alive\r\n\
          Set-Cookie: a=1\r\nKeep-Alive: timeout=5\r\nX-Hop: 1\r\nServer: origin\r\n\
          X-Gone: 1\r\nTransfer-Encoding: chunked\r\nSet-Cookie: b=2\r\n\r\n\
          5\r\nhello\r\n0\r\n\r\n",
    );
    let resp = h.h2_response(&mut client, 1, "the answer on stream 1");
    assert_eq!(
        pairs(&resp.fields),
        [
            (":status", "200"),
            ("x-upper-case", "Kept As Sent"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
            ("server", "ktls-proxy"),
            ("x-added", "by proxy"),
        ]
    );
    assert_eq!(resp.body, b"hello");
}

/// A body the upstream ends by closing its connection reaches the stream whole, and the
/// `Connection: close` an HTTP/1.1 client would get for it is not a field of the stream (nor
/// is the field it names).
#[test]
fn a_close_delimited_body_reaches_the_stream_without_connection_fields() {
    let mut h = Harness::new("", "");
    let mut client = h.h2_client();
    client.get(1, "/stream");
    let mut up = h.upstream();
    h.message(&mut up, "the request upstream");
    up.send(b"HTTP/1.1 200 OK\r\nX-Kept: 1\r\nClose: named\r\n\r\nuntil the end");
    up.finish_sending();
    let resp = h.h2_response(&mut client, 1, "the answer on stream 1");
    assert_eq!(pairs(&resp.fields), [(":status", "200"), ("x-kept", "1")]);
    assert_eq!(resp.body, b"until the end");
}

/// A response to a stream's POST invalidates the entry stored for its target (RFC 9111
/// §4.4), from the fields the stream's head had: the next GET goes to the origin.
#[test]
fn a_posts_response_on_a_stream_invalidates_the_stored_entry() {
    let mut h = Harness::new("cache 1;\ncache_fulfill * *;", "");
    let mut client = h.h2_client();
    client.get(1, "/doc");
    let mut up = h.upstream();
    h.message(&mut up, "the miss upstream");
    up.send(&response(200, "Cache-Control: max-age=60\r\n", "v1"));
    assert_eq!(h.h2_response(&mut client, 1, "the miss").body, b"v1");
    client.get(3, "/doc");
    assert_eq!(h.h2_response(&mut client, 3, "the hit").body, b"v1");
    client.request(5, "POST", "/doc", &[("content-length", "1")], false);
    client.data(5, b"x", true);
    let post = h.message(&mut up, "the POST upstream");
    assert_eq!(post.line(), "POST /doc HTTP/1.1");
    up.send(&response(204, "", ""));
    assert_eq!(
        h.h2_response(&mut client, 5, "the POST's answer").status(),
        204
    );
    client.get(7, "/doc");
    let again = h.message(&mut up, "the GET after the POST goes upstream");
    assert_eq!(again.line(), "GET /doc HTTP/1.1");
    up.send(&response(200, "Cache-Control: max-age=60\r\n", "v2"));
    assert_eq!(h.h2_response(&mut client, 7, "the refetch").body, b"v2");
}
