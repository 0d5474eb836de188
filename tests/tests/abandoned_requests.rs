//! A client that is gone must not keep the origin busy (issue 30, "a peer never decides how
//! much CPU we use"). An HTTP/2 connection whose client sent its FIN, or any connection its
//! client reset, can take no more answers: its queued requests are dropped with it, and only
//! a request already at the origin runs to its end there.
//!
//! Before, an HTTP/2 FIN was taken as an HTTP/1.1 half-close and every queued stream was
//! forwarded, one after another, to a client that had left: the FIN case here saw 4 of 8
//! requests served on the previous binary (and `frang_h2`'s client_mem case waited behind
//! such requests in CI). A reset was noticed only when the next answer's write failed; the
//! reset cases pin that the origin sees no more than the request it had (they pass on both
//! binaries: the first answer's write failed there).
//!
//! An HTTP/1.1 FIN stays a half-close: requests read before it are still answered
//! (read_readiness.rs).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::thread;
use std::time::Duration;

use e2e::h2frames::{frame, get_block, END_STREAM_AND_HEADERS, HEADERS, PREFACE, SETTINGS};
use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{free_port, wait_for_port};

/// How long the origin takes for each request.
const LATENCY: Duration = Duration::from_millis(700);
const REQUESTS: usize = 8;

struct Site {
    origin: Origin,
    _proxy: Proxy,
    http: SocketAddr,
    h2c: SocketAddr,
}

/// One worker and one connection to a slow origin, so that requests queue in the proxy.
fn start(tag: &str) -> Site {
    let origin = Origin::start(|_| Response::ok("slow").delay(LATENCY));
    let setup = Setup::new(tag);
    let http = setup.http;
    let h2c = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = setup
        .config(
            origin.addr(),
            "",
            &format!("listen {h2c} proto=h2c;\nworker_threads 1;\n"),
        )
        .replace(
            &format!("server {};", origin.addr()),
            &format!("server {} conns_n=1;", origin.addr()),
        );
    let proxy = setup.start(&conf);
    assert!(wait_for_port(h2c, Duration::from_secs(10)), "{h2c} listens");
    Site {
        origin,
        _proxy: proxy,
        http,
        h2c,
    }
}

/// Waits until the origin has seen the first request, then for four more of its latencies:
/// time for four more requests had the proxy kept forwarding. Returns what the origin saw.
fn requests_after_abandon(site: &Site) -> usize {
    for _ in 0..100 {
        if site.origin.total_requests() > 0 {
            break;
        }
        thread::sleep(Duration::from_millis(50));
    }
    thread::sleep(LATENCY * 4);
    site.origin.total_requests()
}

/// An h2c connection with `REQUESTS` GETs for /slow sent, and the proxy's SETTINGS read (so
/// that closing it sends a FIN, not a reset).
fn h2_requests(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect h2c");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    let mut out = PREFACE.to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    let head = get_block("/slow", "site.test");
    for n in 0..REQUESTS as u32 {
        out.extend(frame(HEADERS, END_STREAM_AND_HEADERS, 1 + 2 * n, &head));
    }
    s.write_all(&out).expect("send requests");
    let mut settings = [0u8; 9];
    s.read_exact(&mut settings).expect("the proxy's SETTINGS");
    assert_eq!(settings[3], 4, "the proxy opens with SETTINGS");
    let len = u32::from_be_bytes([0, settings[0], settings[1], settings[2]]) as usize;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).expect("SETTINGS payload");
    s
}

fn assert_stopped(site: &Site, what: &str) {
    let seen = requests_after_abandon(site);
    // The request at the origin when the client left, and at most one the proxy had begun
    // to forward in the same turn.
    assert!(
        seen <= 2,
        "{what}: the origin served {seen} of {REQUESTS} requests for a client that was gone"
    );
}

#[test]
fn an_h2_clients_fin_drops_its_queued_requests() {
    let site = start("abandon-h2-fin");
    let s = h2_requests(site.h2c);
    s.shutdown(Shutdown::Write).expect("FIN");
    assert_stopped(&site, "h2 FIN");
}

#[test]
fn an_h2_clients_reset_drops_its_queued_requests() {
    let site = start("abandon-h2-rst");
    let s = h2_requests(site.h2c);
    socket2::SockRef::from(&s)
        .set_linger(Some(Duration::ZERO))
        .expect("SO_LINGER 0");
    drop(s);
    assert_stopped(&site, "h2 reset");
}

#[test]
fn an_h1_clients_reset_drops_its_pipelined_requests() {
    let site = start("abandon-h1-rst");
    let mut s = TcpStream::connect(site.http).expect("connect");
    let one = b"GET /slow HTTP/1.1\r\nHost: site.test\r\n\r\n";
    s.write_all(&one.repeat(REQUESTS)).expect("pipeline");
    // The first request is at the origin before the reset.
    for _ in 0..100 {
        if site.origin.total_requests() > 0 {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    socket2::SockRef::from(&s)
        .set_linger(Some(Duration::ZERO))
        .expect("SO_LINGER 0");
    drop(s);
    assert_stopped(&site, "h1 reset");
}
