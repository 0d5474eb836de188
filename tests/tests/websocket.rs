//! WebSockets through the real proxy (RFC 6455 over HTTP/1.1): the handshake forwarded and
//! its `101` relayed, then a byte tunnel — echoes over plain TCP and TLS, a large frame
//! byte-exact, many messages, either side closing first, the idle timeout, a slow reader
//! bounded, a `101` without the WebSocket fields refused, malformed handshakes refused, and
//! ordinary requests unaffected.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use e2e::origin::pattern;
use e2e::proxy::{Proxy, Setup};
use e2e::websocket::{
    accept_for, connect, field, frame, open, read_frame, read_head, WsOrigin, KEY, OP_BINARY,
    OP_CLOSE, OP_TEXT,
};
use e2e::{curl, free_port, raw_exchange};

const MASK: Option<[u8; 4]> = Some([0x12, 0x34, 0x56, 0x78]);

struct Bench {
    proxy: Proxy,
    http: SocketAddr,
    https: SocketAddr,
    stats: SocketAddr,
    origin: WsOrigin,
}

fn start(tag: &str, extra: &str) -> Bench {
    let origin = WsOrigin::start("origin-a");
    let setup = Setup::new(tag);
    let (http, https) = (setup.http, setup.https);
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let text = setup.config(
        origin.addr(),
        "",
        &format!("stats_listen {stats};\naccess_log on;\n{extra}"),
    );
    let proxy = setup.start(&text);
    Bench {
        proxy,
        http,
        https,
        stats,
        origin,
    }
}

fn metrics(stats: SocketAddr) -> String {
    curl(&[&format!("http://{stats}/metrics")], 5).1
}

/// The value of a metric line (`name{labels}` as written).
fn metric(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits until `f` holds, up to `timeout`.
fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// Reads until EOF (or an error: a reset also ends the tunnel); false on a timeout or data.
fn sees_eof(stream: &mut dyn e2e::websocket::Stream, within: Duration) -> bool {
    stream.tcp().set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 1024];
    match stream.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

fn assert_switched(head: &str) {
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert_eq!(
        field(head, "sec-websocket-accept"),
        Some(accept_for(KEY).as_str())
    );
    assert_eq!(field(head, "upgrade"), Some("websocket"), "{head}");
    assert!(
        field(head, "connection").is_some_and(|v| v.eq_ignore_ascii_case("upgrade")),
        "{head}"
    );
}

#[test]
fn echo_over_plain_and_tls_with_many_messages_and_a_large_frame() {
    let mut b = start("ws-echo", "");
    for tls in [false, true] {
        let mut s = connect(if tls { b.https } else { b.http }, tls);
        assert_switched(&open(&mut *s, "/chat"));
        for i in 0..300 {
            let text = format!("message {i}");
            s.write_all(&frame(OP_TEXT, text.as_bytes(), MASK)).unwrap();
        }
        for i in 0..300 {
            let (op, payload) = read_frame(&mut s).expect("echo");
            assert_eq!(
                (op, payload),
                (OP_TEXT, format!("message {i}").into_bytes())
            );
        }
        let big = pattern(3 << 20);
        s.write_all(&frame(OP_BINARY, &big, MASK)).unwrap();
        let (op, echoed) = read_frame(&mut s).expect("large echo");
        assert_eq!(op, OP_BINARY);
        assert!(
            echoed == big,
            "the 3 MiB frame came back altered (tls: {tls})"
        );
        s.write_all(&frame(OP_CLOSE, &1000u16.to_be_bytes(), MASK))
            .unwrap();
        assert_eq!(read_frame(&mut s).expect("close echoed").0, OP_CLOSE);
        assert!(sees_eof(&mut *s, Duration::from_secs(5)), "tls: {tls}");
    }
    // The origin saw the handshake with the proxy's Upgrade and Connection fields.
    let heads = b.origin.heads();
    assert_eq!(heads.len(), 2, "{heads:?}");
    for head in &heads {
        assert_eq!(field(head, "upgrade"), Some("websocket"), "{head}");
        assert_eq!(field(head, "connection"), Some("upgrade"), "{head}");
        assert_eq!(field(head, "sec-websocket-key"), Some(KEY), "{head}");
        assert_eq!(field(head, "sec-websocket-version"), Some("13"), "{head}");
        assert!(field(head, "via").is_some(), "{head}");
    }
    // The exchange ended with the 101 (access log), the tunnels are counted.
    assert!(
        b.proxy
            .proc
            .wait_for_output("\"GET /chat HTTP/1.1\" 101", Duration::from_secs(5)),
        "{}",
        b.proxy.proc.logs()
    );
    let stats = b.stats;
    assert!(
        eventually(Duration::from_secs(5), || metric(
            &metrics(stats),
            "ktls_proxy_websocket_tunnels_open"
        ) == 0),
        "{}",
        metrics(stats)
    );
    let m = metrics(stats);
    assert_eq!(metric(&m, "ktls_proxy_websocket_tunnels_total"), 2, "{m}");
    let closed: u64 = ["client", "origin"]
        .iter()
        .map(|r| {
            metric(
                &m,
                &format!("ktls_proxy_websocket_tunnels_closed_total{{reason=\"{r}\"}}"),
            )
        })
        .sum();
    assert_eq!(closed, 2, "{m}");
    for dir in ["to_origin", "to_client"] {
        let bytes = metric(
            &m,
            &format!("ktls_proxy_websocket_bytes_total{{direction=\"{dir}\"}}"),
        );
        assert!(bytes > 2 * (3 << 20), "{dir}: {bytes}\n{m}");
    }
}

#[test]
fn the_origin_closing_first_delivers_its_last_frames_then_closes_the_client() {
    let b = start("ws-origin-close", "");
    for tls in [false, true] {
        let mut s = connect(if tls { b.https } else { b.http }, tls);
        assert_switched(&open(&mut *s, "/bye"));
        assert_eq!(read_frame(&mut s).unwrap(), (OP_TEXT, b"bye".to_vec()));
        assert_eq!(read_frame(&mut s).unwrap().0, OP_CLOSE);
        assert!(sees_eof(&mut *s, Duration::from_secs(5)), "tls: {tls}");
    }
    let m = metrics(b.stats);
    assert_eq!(
        metric(
            &m,
            "ktls_proxy_websocket_tunnels_closed_total{reason=\"origin\"}"
        ),
        2,
        "{m}"
    );
}

#[test]
fn the_client_closing_first_closes_the_origin_side() {
    let b = start("ws-client-close", "");
    let mut s = connect(b.http, false);
    assert_switched(&open(&mut *s, "/chat"));
    s.write_all(&frame(OP_TEXT, b"last words", MASK)).unwrap();
    assert_eq!(read_frame(&mut s).unwrap().1, b"last words");
    // The client goes away without a closing handshake.
    let _ = s.tcp().shutdown(std::net::Shutdown::Both);
    drop(s);
    let record = b.origin.record.clone();
    assert!(
        eventually(Duration::from_secs(5), || record
            .tunnel_eof
            .load(Ordering::SeqCst)),
        "the origin's side stayed open"
    );
    let stats = b.stats;
    assert!(eventually(Duration::from_secs(5), || metric(
        &metrics(stats),
        "ktls_proxy_websocket_tunnels_closed_total{reason=\"client\"}"
    ) == 1));
}

#[test]
fn the_idle_timeout_cuts_a_silent_tunnel_not_a_busy_one() {
    let b = start("ws-idle", "client_ws_timeout 3;");
    let mut silent = connect(b.http, false);
    assert_switched(&open(&mut *silent, "/chat"));
    let mut busy = connect(b.https, true);
    assert_switched(&open(&mut *busy, "/chat"));
    // The busy tunnel talks every 400 ms for 4 s: longer than the timeout, never idle.
    for i in 0..10 {
        std::thread::sleep(Duration::from_millis(400));
        if i == 3 {
            // 1.6 s in, well before the timeout, the silent one is still open.
            silent.tcp().set_nonblocking(true).unwrap();
            let mut probe = [0u8; 1];
            let open = matches!(
                silent.tcp().peek(&mut probe),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
            );
            silent.tcp().set_nonblocking(false).unwrap();
            assert!(open, "the silent tunnel was cut before its timeout");
        }
        let text = format!("ping {i}");
        busy.write_all(&frame(OP_TEXT, text.as_bytes(), MASK))
            .unwrap();
        assert_eq!(
            read_frame(&mut busy).expect("busy tunnel cut").1,
            text.as_bytes()
        );
    }
    // The silent one was cut at about 3 s (its EOF has been waiting since).
    assert!(sees_eof(&mut *silent, Duration::from_secs(3)));
    // Once quiet, the busy one is cut too, a timeout later.
    let quiet = Instant::now();
    assert!(sees_eof(&mut *busy, Duration::from_secs(6)));
    assert!(
        quiet.elapsed() >= Duration::from_millis(2500),
        "{:?}",
        quiet.elapsed()
    );
    let m = metrics(b.stats);
    assert_eq!(
        metric(
            &m,
            "ktls_proxy_websocket_tunnels_closed_total{reason=\"idle_timeout\"}"
        ),
        2,
        "{m}"
    );
}

/// Bytes the kernel can hold for one loopback TCP connection at most, both ends' buffers:
/// what a peer may have written without anyone reading, the proxy's buffers aside.
fn socket_buffer_bound() -> u64 {
    let max = |path: &str| -> u64 {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.split_whitespace().last()?.parse().ok())
            .unwrap_or(8 << 20)
    };
    max("/proc/sys/net/ipv4/tcp_wmem") + max("/proc/sys/net/ipv4/tcp_rmem")
}

#[test]
fn a_peer_that_does_not_read_bounds_what_the_proxy_holds() {
    let b = start("ws-slow", "");
    let pid = b.proxy.proc.pid();
    let before = e2e::rss_kib(pid).0;
    // Two connections each side of the proxy: at most twice the kernel's buffers, plus the
    // proxy's own bound per direction (a read buffer and an outbox: well under 1 MiB).
    let bound = 2 * socket_buffer_bound() + (1 << 20);
    // The origin floods a client that reads nothing.
    let mut reader = connect(b.http, false);
    assert_switched(&open(&mut *reader, "/flood"));
    let record = b.origin.record.clone();
    std::thread::sleep(Duration::from_secs(3));
    let flooded = record.written.load(Ordering::SeqCst);
    assert!(flooded > 0, "the origin could not write at all");
    assert!(
        flooded < bound,
        "the origin wrote {flooded} bytes to a client that reads nothing (bound {bound})"
    );
    // A client floods an origin that reads nothing.
    let mut writer = connect(b.http, false);
    assert_switched(&open(&mut *writer, "/silent"));
    writer.tcp().set_nonblocking(true).unwrap();
    let chunk = vec![0xa5u8; 64 * 1024];
    let mut sent = 0u64;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        match writer.write(&chunk) {
            Ok(n) => sent += n as u64,
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    assert!(
        sent < bound,
        "the client wrote {sent} bytes to an origin that reads nothing (bound {bound})"
    );
    let grown = e2e::rss_kib(pid).0.saturating_sub(before);
    eprintln!(
        "slow reader: origin wrote {flooded} B, client wrote {sent} B (bound {bound} B), \
         proxy RSS grew {grown} KiB"
    );
    assert!(
        grown < 8 * 1024,
        "the proxy grew by {grown} KiB holding what its peers could not take"
    );
    drop(reader);
    drop(writer);
}

#[test]
fn refused_handshakes_and_ordinary_requests() {
    let b = start("ws-refused", "");
    // A 101 without the WebSocket fields is a bad response.
    let mut s = connect(b.http, false);
    let head = open(&mut *s, "/bare");
    assert!(head.starts_with("HTTP/1.1 502 "), "{head}");
    // Malformed handshakes never reach the origin.
    let seen = b.origin.heads().len();
    for bad in [
        e2e::websocket::handshake_request("/chat", "site.test").replace(KEY, "short=="),
        e2e::websocket::handshake_request("/chat", "site.test")
            .replace("Version: 13", "Version: 7"),
        e2e::websocket::handshake_request("/chat", "site.test").replace("GET", "POST"),
    ] {
        let resp = raw_exchange(b.http, bad.as_bytes(), Duration::from_secs(5)).unwrap();
        let text = String::from_utf8_lossy(&resp);
        assert!(text.starts_with("HTTP/1.1 400 "), "{bad}\n{text}");
    }
    assert_eq!(b.origin.heads().len(), seen, "{:?}", b.origin.heads());
    // An ordinary request and an upgrade to another protocol are plain HTTP.
    for request in [
        "GET / HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n",
        "GET /h2c HTTP/1.1\r\nHost: site.test\r\nUpgrade: h2c\r\nConnection: Upgrade, close\r\n\r\n",
    ] {
        let resp = raw_exchange(b.http, request.as_bytes(), Duration::from_secs(5)).unwrap();
        let text = String::from_utf8_lossy(&resp);
        assert!(
            text.starts_with("HTTP/1.1 200 ") && text.ends_with("origin-a"),
            "{text}"
        );
    }
    let last = b.origin.heads().pop().unwrap_or_default();
    assert!(field(&last, "upgrade").is_none(), "{last}");
    // The keep-alive connection that asked for an upgrade and got an ordinary answer goes on.
    let mut s = connect(b.http, false);
    s.write_all(
        b"GET /h2c HTTP/1.1\r\nHost: site.test\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
    )
    .unwrap();
    let head = read_head(&mut s).unwrap();
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
}

#[test]
fn frang_counts_a_tunnel_as_a_connection() {
    let b = start("ws-frang", "frang_limits { concurrent_tcp_connections 1; }");
    // The start-up probe's connection may still be counted for a moment: retry the first.
    let mut s = None;
    let http = b.http;
    assert!(eventually(Duration::from_secs(5), || {
        let Ok(tcp) = std::net::TcpStream::connect_timeout(&http, Duration::from_secs(2)) else {
            return false;
        };
        let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
        let mut c: Box<dyn e2e::websocket::Stream> = Box::new(tcp);
        let ok = c
            .write_all(e2e::websocket::handshake_request("/chat", "site.test").as_bytes())
            .is_ok()
            && read_head(&mut c).is_ok_and(|h| h.starts_with("HTTP/1.1 101"));
        s = ok.then_some(c);
        ok
    }));
    let mut s = s.unwrap();
    let refused = raw_exchange(
        b.http,
        b"GET / HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n",
        Duration::from_secs(3),
    )
    .unwrap_or_default();
    assert!(
        refused.is_empty(),
        "a second connection was served while the tunnel held the only one: {}",
        String::from_utf8_lossy(&refused)
    );
    s.write_all(&frame(OP_TEXT, b"still here", MASK)).unwrap();
    assert_eq!(read_frame(&mut s).unwrap().1, b"still here");
    drop(s);
    assert!(eventually(Duration::from_secs(5), || {
        raw_exchange(
            http,
            b"GET / HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n",
            Duration::from_secs(3),
        )
        .is_ok_and(|r| r.starts_with(b"HTTP/1.1 200"))
    }));
}

/// `WS_BENCH=1`: origin-to-client throughput of a tunnel, side by side in one run: the
/// client reads 256 MiB of the origin's flood directly, through the proxy over plain TCP and
/// over TLS (the proxy's record layer on this host). Prints MB/s and the ratios; asserts
/// nothing about speed (the machine is shared).
#[test]
fn tunnel_throughput_side_by_side() {
    if std::env::var_os("WS_BENCH").is_none() {
        return;
    }
    let b = start("ws-bench", "");
    let total: usize = 256 << 20;
    let mut rates: Vec<(&str, Vec<f64>)> =
        vec![("direct", vec![]), ("plain", vec![]), ("tls", vec![])];
    for _round in 0..3 {
        for (name, samples) in rates.iter_mut() {
            let mut s = match *name {
                "direct" => connect(b.origin.addr(), false),
                "plain" => connect(b.http, false),
                _ => connect(b.https, true),
            };
            assert!(open(&mut *s, "/flood").starts_with("HTTP/1.1 101"));
            let mut buf = vec![0u8; 256 * 1024];
            let mut got = 0usize;
            let t = Instant::now();
            while got < total {
                match std::io::Read::read(&mut s, &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got += n,
                }
            }
            let secs = t.elapsed().as_secs_f64();
            assert!(got >= total, "{name}: {got} bytes");
            samples.push(got as f64 / secs / 1e6);
        }
    }
    let median = |v: &Vec<f64>| {
        let mut v = v.clone();
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let direct = median(&rates[0].1);
    for (name, samples) in &rates {
        eprintln!(
            "ws bench {name}: {samples:.0?} MB/s, median {:.0} MB/s, {:.2} of direct",
            median(samples),
            median(samples) / direct
        );
    }
}
