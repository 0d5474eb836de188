//! Issue 19: the TLS handshake deadline times the client's turns (10 s each, 30 s at most
//! from accept), not the time since accept. Through the real binary and real OpenSSL
//! clients: a slow but legitimate client whose handshake spans more than 10 s from accept
//! completes and is served (under the old fixed 10 s deadline it was cut; this is what
//! a handshake storm does to a client whose own backlog delays its Finished), while a silent
//! client, a client that never sends its Finished and a client trickling its ClientHello
//! are all cut and counted as `handshake_timeout`. A burst of real handshakes (http-perf's
//! hold ramp, far more in flight than one worker finishes at once) completes with no
//! handshake timeout.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{bin_path, curl, free_port, wait_for_port};
use openssl::ssl::{HandshakeError, Ssl, SslContext, SslMethod, SslVerifyMode, SslVersion};

/// The client's turn in the proxy (`handshake_deadline::CLIENT_TURN`).
const TURN: Duration = Duration::from_secs(10);
/// How long each turn of the slow legitimate client lasts: within a turn, but two of them
/// add up to more than one turn from accept.
const SLOW: Duration = Duration::from_secs(6);

fn start(tag: &str, extra: &str) -> (Origin, Proxy, SocketAddr, SocketAddr) {
    let origin = Origin::start(|_| Response::ok(b"hello".to_vec()));
    let setup = Setup::new(tag);
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = setup.config(
        origin.addr(),
        "",
        &format!("worker_threads 1;\nstats_listen {stats};\n{extra}"),
    );
    let https = setup.https;
    let proxy = setup.start(&conf);
    assert!(wait_for_port(stats, Duration::from_secs(5)));
    (origin, proxy, https, stats)
}

/// The proxy's count of connections closed for `reason`.
fn closed(stats: SocketAddr, reason: &str) -> u64 {
    let (st, metrics, err) = curl(&[&format!("http://{stats}/metrics")], 5);
    assert!(st.success(), "{err}");
    let prefix = format!("ktls_proxy_connections_closed_total{{reason=\"{reason}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in\n{metrics}"))
}

fn client_ssl() -> Ssl {
    let mut b = SslContext::builder(SslMethod::tls_client()).expect("context");
    b.set_verify(SslVerifyMode::NONE);
    b.set_min_proto_version(Some(SslVersion::TLS1_3))
        .expect("TLS 1.3");
    let mut ssl = Ssl::new(&b.build()).expect("ssl");
    ssl.set_connect_state();
    ssl.set_hostname("site.test").expect("sni");
    ssl
}

/// A client socket whose first write after the server's flight is delayed (`Slow`) or
/// never made (`Stuck`): the client's second turn.
#[derive(Debug)]
struct Turns {
    tcp: TcpStream,
    answered: bool,
    heard: bool,
    second_turn: SecondTurn,
}

#[derive(Debug, Clone, Copy)]
enum SecondTurn {
    Slow(Duration),
    Stuck,
}

impl Read for Turns {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.tcp.read(buf)?;
        self.heard |= n > 0;
        Ok(n)
    }
}

impl Write for Turns {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.heard && !self.answered {
            match self.second_turn {
                SecondTurn::Slow(d) => thread::sleep(d),
                SecondTurn::Stuck => return Err(io::ErrorKind::WouldBlock.into()),
            }
            self.answered = true;
        }
        self.tcp.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tcp.flush()
    }
}

/// Waits (at most `limit`) for the server to close `tcp`; the time it took, or `None`.
fn closed_within(tcp: &mut TcpStream, since: Instant, limit: Duration) -> Option<Duration> {
    let mut buf = [0u8; 4096];
    while since.elapsed() < limit {
        tcp.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        match tcp.read(&mut buf) {
            Ok(0) => return Some(since.elapsed()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return Some(since.elapsed()),
        }
    }
    None
}

/// Each turn within the deadline, the whole handshake longer than one turn: served.
fn slow_legitimate(addr: SocketAddr) -> String {
    let tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(40)))
        .expect("timeout");
    // First turn: the ClientHello comes late (a client behind its own backlog).
    thread::sleep(SLOW);
    let turns = Turns {
        tcp,
        answered: false,
        heard: false,
        second_turn: SecondTurn::Slow(SLOW),
    };
    let mut tls = match client_ssl().connect(turns) {
        Ok(s) => s,
        Err(e) => return format!("handshake failed: {e}"),
    };
    let req = b"GET / HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n";
    if let Err(e) = tls.write_all(req) {
        return format!("write failed: {e}");
    }
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Connects and sends nothing.
fn silent(addr: SocketAddr) -> Option<Duration> {
    let since = Instant::now();
    let mut tcp = TcpStream::connect(addr).expect("connect");
    closed_within(&mut tcp, since, Duration::from_secs(40))
}

/// Sends its ClientHello, reads the server's flight, never sends its Finished.
fn never_finishes(addr: SocketAddr) -> Option<Duration> {
    let since = Instant::now();
    let tcp = TcpStream::connect(addr).expect("connect");
    let mut watch = tcp.try_clone().expect("clone");
    let turns = Turns {
        tcp,
        answered: false,
        heard: false,
        second_turn: SecondTurn::Stuck,
    };
    let _pending = match client_ssl().connect(turns) {
        Err(HandshakeError::WouldBlock(mid)) => mid,
        other => panic!("expected the client stuck before its Finished: {other:?}"),
    };
    closed_within(&mut watch, since, Duration::from_secs(40))
}

/// A real ClientHello, captured from OpenSSL without a server.
fn client_hello() -> Vec<u8> {
    #[derive(Debug)]
    struct Capture(Vec<u8>);
    impl Read for Capture {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::ErrorKind::WouldBlock.into())
        }
    }
    impl Write for Capture {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    match client_ssl().connect(Capture(Vec::new())) {
        Err(HandshakeError::WouldBlock(mid)) => mid.get_ref().0.clone(),
        other => panic!("expected a ClientHello and a wait: {other:?}"),
    }
}

/// Trickles a ClientHello, two bytes a second: when the server closed, and how much it had
/// been sent by then (out of `hello.len()`).
fn trickles(addr: SocketAddr, hello: &[u8]) -> (Option<Duration>, usize) {
    let since = Instant::now();
    let mut tcp = TcpStream::connect(addr).expect("connect");
    for (i, pair) in hello.chunks(2).enumerate() {
        if tcp.write_all(pair).is_err() {
            return (Some(since.elapsed()), i * 2);
        }
        if let Some(at) = closed_within(&mut tcp, Instant::now(), Duration::from_millis(500)) {
            let _ = at;
            return (Some(since.elapsed()), i * 2 + pair.len());
        }
        if since.elapsed() > Duration::from_secs(40) {
            break;
        }
    }
    (None, hello.len())
}

#[test]
fn slow_turns_complete_and_slow_handshake_attackers_are_cut() {
    let (_origin, _proxy, https, stats) = start("hs-deadline", "");
    let hello = client_hello();
    assert!(hello.len() > 100, "a ClientHello of {} bytes", hello.len());
    let legit = thread::spawn(move || slow_legitimate(https));
    let silent = thread::spawn(move || silent(https));
    let stuck = thread::spawn(move || never_finishes(https));
    let trickle = thread::spawn(move || trickles(https, &hello));

    let answer = legit.join().expect("legit thread");
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("hello"),
        "a client taking {SLOW:?} per turn (over {TURN:?} in all) was not served: {answer}"
    );
    let silent = silent
        .join()
        .expect("silent thread")
        .expect("silent client never cut");
    // TLS listeners use TCP_DEFER_ACCEPT (10 s): the kernel hands a connection that sends
    // nothing to the proxy only once the deferral's SYN-ACK retransmissions are over (about
    // 15 s), and its handshake deadline runs from there. Until then it costs the proxy
    // nothing.
    assert!(
        silent >= TURN - Duration::from_secs(1) && silent < TURN + Duration::from_secs(24),
        "a silent client was cut after {silent:?}, expected {TURN:?} after the kernel's deferral"
    );
    let stuck = stuck
        .join()
        .expect("stuck thread")
        .expect("client without Finished never cut");
    assert!(
        stuck >= TURN - Duration::from_secs(1) && stuck < TURN + Duration::from_secs(6),
        "a client that never sent its Finished was cut after {stuck:?}, expected about {TURN:?}"
    );
    let (trickle_at, sent) = trickle.join().expect("trickle thread");
    let trickle_at = trickle_at.expect("a trickling ClientHello was never cut");
    // At most one extra turn (the handshake header moved OpenSSL's state), never the whole
    // ClientHello, and within the 30 s limit.
    assert!(
        trickle_at < 2 * TURN + Duration::from_secs(6),
        "a trickling ClientHello was cut after {trickle_at:?}"
    );
    assert!(sent < 2 * 2 * 30, "{sent} bytes trickled before the cut");
    assert_eq!(closed(stats, "handshake_timeout"), 3, "three attackers");
    // By OpenSSL state at the cut: the silent and the trickling client never completed a
    // ClientHello, the third one its Finished: two different states.
    let by_state = timeouts_by_state(stats);
    let total: u64 = by_state.iter().map(|(_, n)| n).sum();
    assert!(
        total == 3 && by_state.len() == 2,
        "handshake timeouts by state: {by_state:?}"
    );
}

/// `ktls_proxy_handshake_timeouts_total` samples: (state, count).
fn timeouts_by_state(stats: SocketAddr) -> Vec<(String, u64)> {
    let (st, metrics, err) = curl(&[&format!("http://{stats}/metrics")], 5);
    assert!(st.success(), "{err}");
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("ktls_proxy_handshake_timeouts_total{state=\""))
        .filter_map(|l| {
            let (state, rest) = l.split_once("\"} ")?;
            Some((state.to_string(), rest.parse().ok()?))
        })
        .collect()
}

#[test]
fn a_burst_of_handshakes_is_not_cut() {
    let (_origin, proxy, https, stats) =
        start("hs-burst", "frang_limits { concurrent_tcp_connections 0; }");
    // 1500 full TLS 1.3 handshakes, 1500 in flight against one worker thread.
    let out = Command::new(bin_path("http-perf"))
        .args([
            "--hold",
            "1500",
            "--handshakes",
            "1500",
            "-t",
            "1",
            "--hold-secs",
            "1",
            "--rounds",
            "1",
            "--ramp-limit",
            "60s",
            "--connect",
            &https.to_string(),
            "--sni",
            "site.test",
            &format!("https://site.test:{}/", https.port()),
        ])
        .output()
        .expect("run http-perf");
    let text = String::from_utf8_lossy(&out.stdout);
    if !(out.status.success() && text.contains("PASS")) {
        let (_, metrics, _) = curl(&[&format!("http://{stats}/metrics")], 5);
        panic!(
            "{text}\n{}\n{}\n{metrics}",
            String::from_utf8_lossy(&out.stderr),
            proxy.proc.logs()
        );
    }
    assert_eq!(closed(stats, "handshake_timeout"), 0);
}
