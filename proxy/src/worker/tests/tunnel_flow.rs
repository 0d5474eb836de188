//! WebSocket tunnels (`tunnel.rs`) on socketpairs: the handshake's `101` opens a tunnel that
//! passes bytes both ways unchanged; whichever side ends it (the origin, the client, the
//! idle timeout, a reload that removed the server) closes both connections and counts the
//! end; the tunnel's upstream connection leaves its server's pool, so a waiting request
//! gets the place.

use std::time::{Duration, Instant};

use super::harness::{get, response, Harness, Peer};

const HANDSHAKE: &[u8] = b"GET /chat HTTP/1.1\r\nHost: site\r\nUpgrade: websocket\r\n\
    Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
    Sec-WebSocket-Version: 13\r\n\r\n";

const SWITCH: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
    Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";

/// A sample of the tunnel metrics, `series` with its labels (`..._total{reason="origin"}`).
fn tunnel_metric(h: &Harness, series: &str) -> u64 {
    let mut text = String::new();
    h.metrics().tunnels.render(&mut text);
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

fn closed_by(h: &Harness, reason: &str) -> u64 {
    let series = format!("ktls_proxy_websocket_tunnels_closed_total{{reason=\"{reason}\"}}");
    tunnel_metric(h, &series)
}

/// Opens a tunnel: the client's handshake reaches the origin, whose `101` reaches the client.
fn open(h: &mut Harness) -> (Peer, Peer) {
    let mut client = h.client();
    client.send(HANDSHAKE);
    let mut up = h.upstream();
    let req = h.message(&mut up, "the handshake upstream");
    assert_eq!(req.header("upgrade"), Some("websocket"), "{}", req.head);
    up.send(SWITCH);
    let head = h.until("the 101", |_| client.take_head());
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert_eq!(tunnel_metric(h, "ktls_proxy_websocket_tunnels_open"), 1);
    (client, up)
}

/// Steps until `peer` has received exactly `want` (after what it held).
fn receive(h: &mut Harness, peer: &mut Peer, want: &[u8], what: &str) {
    h.until(what, |_| {
        peer.pump();
        (peer.got.len() >= want.len()).then_some(())
    });
    assert_eq!(&peer.got[..], want, "{what}");
    peer.got.clear();
}

#[test]
fn bytes_pass_both_ways_and_the_origin_closing_closes_the_client() {
    let mut h = Harness::new("", "");
    let (mut client, mut up) = open(&mut h);
    // Not HTTP: passed as they are.
    let (ping, pong, last) = (b"\x81\x84ping not http", b"\x81\x04pong", b"last");
    client.send(ping);
    receive(&mut h, &mut up, ping, "the client's bytes");
    up.send(pong);
    receive(&mut h, &mut client, pong, "the origin's bytes");
    up.send(last);
    drop(up);
    receive(&mut h, &mut client, last, "the origin's last bytes");
    h.closed(&mut client, "the client closed after the origin");
    assert_eq!(closed_by(&h, "origin"), 1);
    assert_eq!(tunnel_metric(&h, "ktls_proxy_websocket_tunnels_open"), 0);
    let to_origin = "ktls_proxy_websocket_bytes_total{direction=\"to_origin\"}";
    assert_eq!(tunnel_metric(&h, to_origin), ping.len() as u64);
    let to_client = "ktls_proxy_websocket_bytes_total{direction=\"to_client\"}";
    assert_eq!(
        tunnel_metric(&h, to_client),
        (pong.len() + last.len()) as u64
    );
}

#[test]
fn the_client_closing_first_closes_the_origin_side() {
    let mut h = Harness::new("", "");
    let (mut client, mut up) = open(&mut h);
    client.send(b"last words");
    client.finish_sending();
    receive(&mut h, &mut up, b"last words", "the client's last bytes");
    h.closed(&mut up, "the origin side closed after the client");
    h.closed(&mut client, "the client's connection closed");
    assert_eq!(closed_by(&h, "client"), 1);
}

#[test]
fn a_silent_tunnel_is_cut_after_client_ws_timeout() {
    let mut h = Harness::new("client_ws_timeout 1;", "");
    let start = Instant::now();
    let (mut client, mut up) = open(&mut h);
    h.closed(&mut client, "the silent tunnel's client cut");
    h.closed(&mut up, "the silent tunnel's origin side cut");
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(closed_by(&h, "idle_timeout"), 1);
}

/// With `conns_n=1`, a request waiting for the handshake's connection is sent on a new one
/// as soon as the tunnel starts (the tunnel is outside the pool's count).
#[test]
fn a_tunnel_gives_its_place_in_the_pool_to_a_waiting_request() {
    let mut h = Harness::with_server("", "conns_n=1", "server_queue_size 1;");
    let mut client = h.client();
    client.send(HANDSHAKE);
    let mut up = h.upstream();
    h.message(&mut up, "the handshake upstream");
    let mut waiting = h.client();
    waiting.send(&get("/waiting"));
    h.idle(Duration::from_millis(30));
    assert_eq!(h.dialled(), 0, "a connection beyond conns_n was opened");
    up.send(SWITCH);
    let mut second = h.upstream();
    let req = h.message(&mut second, "the waiting request on a new connection");
    assert_eq!(req.line(), "GET /waiting HTTP/1.1");
    second.send(&response(200, "", "served"));
    assert_eq!(&h.message(&mut waiting, "its answer").body[..], b"served");
    client.send(b"still tunnelled");
    receive(&mut h, &mut up, b"still tunnelled", "the tunnel's bytes");
}

/// A reload that removes the tunnel's server (no `grace_shutdown_time`) closes the tunnel,
/// counted as `server_removed`, not as a shutdown.
#[test]
fn a_reload_removing_the_server_closes_its_tunnels() {
    let mut h = Harness::new("", "");
    let (mut client, mut up) = open(&mut h);
    h.reload(
        "listen 127.0.0.1:1;\n\
         srv_group default { server 127.0.0.3:9; }\n\
         vhost site { proxy_pass default; }\n\
         http_chain { -> site; }\n",
    );
    h.closed(&mut client, "the tunnel's client closed at the reload");
    h.closed(&mut up, "the tunnel's origin side closed at the reload");
    assert_eq!(closed_by(&h, "server_removed"), 1);
    assert_eq!(closed_by(&h, "shutdown"), 0);
}
