//! `grace_shutdown_time` through the real proxy: a reload that removes a server lets what is
//! on it finish within the grace time, sends every new request (also on connections opened
//! before the reload) to the remaining servers, and closes what still holds the removed
//! server when the grace time is over: a request without an answer gets 502, a WebSocket
//! tunnel is closed. With 0, tunnels to a removed server close at the reload.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use e2e::proxy::{Proxy, Setup};
use e2e::websocket::{connect, frame, open, read_frame, read_head, WsOrigin, OP_TEXT};
use e2e::{curl, free_port, raw_exchange, write_file};

const MASK: Option<[u8; 4]> = Some([1, 2, 3, 4]);

struct Bench {
    proxy: Proxy,
    http: SocketAddr,
    stats: SocketAddr,
    after: String,
    _a: WsOrigin,
    b: WsOrigin,
}

/// A proxy whose group has server `A`; `after` is the same configuration with `B` instead.
fn start(tag: &str, grace: u32) -> Bench {
    let a = WsOrigin::start("A");
    let b = WsOrigin::start("B");
    let setup = Setup::new(tag);
    let http = setup.http;
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let extra = format!("stats_listen {stats};\ngrace_shutdown_time {grace};\n");
    let before = setup.config(a.addr(), "", &extra);
    let after = setup.config(b.addr(), "", &extra);
    let proxy = setup.start(&before);
    Bench {
        proxy,
        http,
        stats,
        after,
        _a: a,
        b,
    }
}

impl Bench {
    /// Reloads with the server replaced; returns when the proxy says it reloaded.
    fn reload(&mut self) -> Instant {
        write_file(&self.proxy.config, &self.after);
        self.proxy.proc.signal(libc::SIGHUP);
        assert!(
            self.proxy
                .proc
                .wait_for_output("reloaded", Duration::from_secs(15)),
            "{}",
            self.proxy.proc.logs()
        );
        Instant::now()
    }
}

fn get(http: SocketAddr, path: &str, timeout: Duration) -> String {
    let request = format!("GET {path} HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n");
    let resp = raw_exchange(http, request.as_bytes(), timeout).unwrap_or_default();
    String::from_utf8_lossy(&resp).into_owned()
}

/// One request on an open keep-alive connection; returns the body (the origin's name).
fn keep_alive_get(s: &mut dyn e2e::websocket::Stream) -> String {
    s.write_all(b"GET / HTTP/1.1\r\nHost: site.test\r\n\r\n")
        .unwrap();
    let head = read_head(s).expect("response");
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    let mut body = [0u8; 1];
    s.read_exact(&mut body).unwrap();
    String::from_utf8_lossy(&body).into_owned()
}

/// The connection ends (EOF or a reset) before its read timeout.
fn closes(s: &mut dyn e2e::websocket::Stream) -> bool {
    let mut buf = [0u8; 16];
    match s.read(&mut buf) {
        Ok(n) => n == 0,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

fn echoes(s: &mut dyn e2e::websocket::Stream, text: &str) -> bool {
    s.write_all(&frame(OP_TEXT, text.as_bytes(), MASK)).is_ok()
        && read_frame(s).is_ok_and(|(_, p)| p == text.as_bytes())
}

#[test]
fn removed_server_finishes_within_the_grace_time_then_is_cut() {
    let mut b = start("grace-3", 3);
    let http = b.http;
    let mut kept = connect(http, false);
    assert_eq!(keep_alive_get(&mut *kept), "A");
    let mut tunnel = connect(http, false);
    assert!(open(&mut *tunnel, "/chat").starts_with("HTTP/1.1 101"));
    let short = std::thread::spawn(move || get(http, "/slow2", Duration::from_secs(10)));
    let long = std::thread::spawn(move || {
        let sent = Instant::now();
        (get(http, "/slow8", Duration::from_secs(15)), sent.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    let reloaded = b.reload();
    // New requests go to the remaining server, also on a connection opened before.
    assert_eq!(keep_alive_get(&mut *kept), "B");
    assert!(get(http, "/", Duration::from_secs(5)).ends_with("\r\n\r\nB"));
    // What was on the removed server goes on within the grace time.
    assert!(echoes(&mut *tunnel, "still there"));
    let short = short.join().unwrap();
    assert!(
        short.starts_with("HTTP/1.1 200 ") && short.ends_with("A"),
        "{short}"
    );
    // At the end of the grace time the rest is cut: the tunnel closes, the unanswered
    // request gets 502 (its origin would have answered after 8 s).
    tunnel
        .tcp()
        .set_read_timeout(Some(Duration::from_secs(6)))
        .unwrap();
    let closed = closes(&mut *tunnel);
    let at = reloaded.elapsed();
    assert!(closed, "the tunnel outlived the grace time");
    assert!(
        at >= Duration::from_millis(2500) && at < Duration::from_secs(6),
        "closed {at:?} after the reload"
    );
    let (long, took) = long.join().unwrap();
    assert!(long.starts_with("HTTP/1.1 502 "), "{long}");
    assert!(took < Duration::from_secs(7), "{took:?}");
    let (_, m, _) = curl(&[&format!("http://{}/metrics", b.stats)], 5);
    assert!(
        m.contains("ktls_proxy_websocket_tunnels_closed_total{reason=\"server_removed\"} 1"),
        "{m}"
    );
    assert!(m.contains("ktls_proxy_panics_total 0"), "{m}");
}

#[test]
fn without_grace_time_tunnels_to_a_removed_server_close_at_the_reload() {
    let mut b = start("grace-0", 0);
    let http = b.http;
    let mut tunnel = connect(http, false);
    assert!(open(&mut *tunnel, "/chat").starts_with("HTTP/1.1 101"));
    let mut other = connect(http, false);
    assert!(open(&mut *other, "/chat").starts_with("HTTP/1.1 101"));
    let in_flight = std::thread::spawn(move || get(http, "/slow2", Duration::from_secs(10)));
    std::thread::sleep(Duration::from_millis(300));
    let reloaded = b.reload();
    tunnel
        .tcp()
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    assert!(
        closes(&mut *tunnel),
        "the tunnel to the removed server stayed open"
    );
    assert!(reloaded.elapsed() < Duration::from_millis(2500));
    // A request in flight still finishes (the behaviour before the directive existed).
    let resp = in_flight.join().unwrap();
    assert!(
        resp.starts_with("HTTP/1.1 200 ") && resp.ends_with("A"),
        "{resp}"
    );
    // A new tunnel goes to the remaining server.
    drop(other);
    let mut fresh = connect(http, false);
    assert!(open(&mut *fresh, "/chat").starts_with("HTTP/1.1 101"));
    assert!(echoes(&mut *fresh, "hello B"));
    assert!(b.b.heads().iter().any(|h| h.starts_with("GET /chat ")));
}
