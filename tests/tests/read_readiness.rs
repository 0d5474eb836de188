//! Reads skipped while the socket is known to be empty (`ktls::readiness`, issue 22: one read
//! per readable burst instead of three) must never leave bytes or the end of the stream
//! unread. These attack the cases that rule has to get right, through the real binary, over
//! plain TCP and the proxy's TLS record layer: a request and the client's FIN in one burst
//! (the FIN is reported by the same event as the data: reading must go on past the short
//! read), a request split over many small writes (each is a new event after a short read),
//! and pipelined requests answered while the next burst arrives. A long keep-alive timeout
//! makes a missed FIN visible: the connection would stay open for a minute.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};

const WAIT: Duration = Duration::from_secs(10);

fn start() -> (Origin, Proxy, SocketAddr, SocketAddr) {
    let origin = Origin::start(|_| Response::ok(&b"0123456789"[..]));
    let setup = Setup::new("readiness");
    let (http, https) = (setup.http, setup.https);
    let conf = setup.config(
        origin.addr(),
        "",
        "keepalive_timeout 60;\nworker_threads 1;\n",
    );
    (origin, setup.start(&conf), http, https)
}

fn request(i: usize) -> String {
    format!("GET /r{i} HTTP/1.1\r\nHost: site.test\r\n\r\n")
}

/// Reads until the peer closes (or `WAIT` passes); returns the bytes and whether it closed.
fn read_to_close(stream: &mut impl Read) -> (Vec<u8>, bool) {
    let deadline = Instant::now() + WAIT;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return (got, true),
        }
    }
    (got, false)
}

fn count_ok(bytes: &[u8]) -> usize {
    String::from_utf8_lossy(bytes)
        .matches("HTTP/1.1 200 OK\r\n")
        .count()
}

fn plain(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s.set_nodelay(true).unwrap();
    s
}

fn tls(addr: SocketAddr) -> openssl::ssl::SslStream<TcpStream> {
    let mut b = SslConnector::builder(SslMethod::tls_client()).unwrap();
    b.set_verify(SslVerifyMode::NONE);
    b.build()
        .connect("site.test", plain(addr))
        .expect("TLS handshake")
}

#[test]
fn a_request_and_the_fin_in_one_burst_are_answered_then_closed() {
    let (_origin, proxy, http, https) = start();
    for round in 0..20 {
        // Plain: the request and the FIN leave back to back, before the proxy reads.
        let mut s = plain(http);
        s.write_all(request(round).as_bytes()).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let (got, closed) = read_to_close(&mut s);
        assert_eq!(
            count_ok(&got),
            1,
            "plain round {round}: {:?}",
            String::from_utf8_lossy(&got)
        );
        assert!(
            closed,
            "plain round {round}: the FIN was not noticed\n{}",
            proxy.proc.logs()
        );

        // TLS without close_notify: the last record and the FIN together.
        let mut t = tls(https);
        t.write_all(request(round).as_bytes()).unwrap();
        t.get_ref().shutdown(Shutdown::Write).unwrap();
        let (got, closed) = read_to_close(&mut t);
        assert_eq!(
            count_ok(&got),
            1,
            "tls round {round}: {:?}",
            String::from_utf8_lossy(&got)
        );
        assert!(
            closed,
            "tls round {round}: the FIN was not noticed\n{}",
            proxy.proc.logs()
        );
    }
}

#[test]
fn requests_written_byte_by_byte_and_in_pipelined_bursts_are_all_answered() {
    let (_origin, proxy, http, https) = start();
    // One request a few bytes at a time: every write is a short read and a new event.
    let mut s = plain(http);
    let mut t = tls(https);
    for chunk in request(0).as_bytes().chunks(3) {
        s.write_all(chunk).unwrap();
        t.write_all(chunk).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    // Then bursts of pipelined requests, each written while earlier answers are in flight.
    let mut sent = 1;
    for burst in 1..=10 {
        let text: String = (0..burst).map(|i| request(sent + i)).collect();
        s.write_all(text.as_bytes()).unwrap();
        t.write_all(text.as_bytes()).unwrap();
        sent += burst;
    }
    s.shutdown(Shutdown::Write).unwrap();
    t.get_ref().shutdown(Shutdown::Write).unwrap();
    let (got, closed) = read_to_close(&mut s);
    assert_eq!(count_ok(&got), sent, "plain answers\n{}", proxy.proc.logs());
    assert!(closed, "plain: not closed after the last answer");
    let (got, closed) = read_to_close(&mut t);
    assert_eq!(count_ok(&got), sent, "tls answers\n{}", proxy.proc.logs());
    assert!(closed, "tls: not closed after the last answer");
}
