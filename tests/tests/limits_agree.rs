//! Issue 12 item 11 through the real binary: the proxy never forwards a head that a peer
//! enforcing the same limits would refuse (here `http_header_cnt 100`, the HTTP/1 parser's
//! default field count). A request at the limit would leave with X-Forwarded-For,
//! X-Forwarded-Proto and Via on top (102 fields): refused with 431 and never sent upstream. A response at the limit would
//! reach the client with the proxy's Connection field on top (101 fields): answered with 502
//! instead. A smaller frang limit only restricts what the client sends (frang.rs tests that). One field less on each
//! side goes through (two on the request side), and what arrives parses with the same parser and limits.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::Setup;
use e2e::raw_exchange;

/// The configured `http_header_cnt`, which the proxy parses both roles with and, being the
/// parser's default, also holds its forwarded heads to.
const LIMIT: usize = 100;
const CONFIG: &str = "frang_limits { http_header_cnt 100; }";

fn peer_limits() -> http1::Limits {
    http1::Limits {
        max_headers: LIMIT,
        ..http1::Limits::default()
    }
}

/// A GET with Host, `extra` more fields and `Connection: close` last.
fn request_with_fields(extra: usize) -> Vec<u8> {
    let mut req = b"GET /limits HTTP/1.1\r\nHost: site.test\r\n".to_vec();
    for n in 0..extra {
        req.extend_from_slice(format!("X-Client-{n}: {n}\r\n").as_bytes());
    }
    req.extend_from_slice(b"Connection: close\r\n\r\n");
    req
}

/// Sends `request` on a new connection and returns the response as the client read it.
fn exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    raw_exchange(addr, request, Duration::from_secs(5)).expect("exchange with the proxy")
}

/// The status and field count of a response, parsed by the proxy's own parser at the proxy's
/// limits: what a peer of the same kind accepts.
fn parse_as_peer(response: &[u8]) -> Result<(u16, usize), String> {
    match http1::parse_response(response, &peer_limits(), false) {
        Ok(Some((head, _))) => Ok((head.status(), head.headers().iter().count())),
        Ok(None) => Err(format!(
            "incomplete response: {:?}",
            String::from_utf8_lossy(response)
        )),
        Err(e) => Err(format!("{e}: {} bytes", response.len())),
    }
}

#[test]
fn request_at_the_limit_is_refused_rather_than_forwarded_over_it() {
    let origin = Origin::start(|_| Response::ok("fine"));
    let setup = Setup::new("limits-req");
    let addr = setup.http;
    let conf = setup.config(origin.addr(), "", CONFIG);
    let proxy = setup.start(&conf);

    // Host + 98 + Connection = 100 fields: the proxy's own parser accepts it, but forwarded it
    // would have 102 (Connection is dropped, X-Forwarded-For, X-Forwarded-Proto and Via added).
    let at_limit = request_with_fields(LIMIT - 2);
    assert!(http1::parse_request(&at_limit, &peer_limits()).is_ok_and(|r| r.is_some()));
    let response = exchange(addr, &at_limit);
    let received = origin.requests();
    for r in &received {
        assert!(
            r.headers.len() <= LIMIT,
            "the origin received {} fields, over the limit of {LIMIT}",
            r.headers.len()
        );
    }
    assert_eq!(
        parse_as_peer(&response).map(|(status, _)| status),
        Ok(431),
        "{}",
        proxy.proc.logs()
    );
    assert!(received.is_empty(), "a refused request reached the origin");
    assert!(
        proxy.proc.stderr().contains("http_header_cnt"),
        "{}",
        proxy.proc.logs()
    );

    // Two fields less: forwarded with exactly the limit (Host, 96, X-Forwarded-For,
    // X-Forwarded-Proto, Via).
    let fits = request_with_fields(LIMIT - 4);
    let response = exchange(addr, &fits);
    assert_eq!(parse_as_peer(&response).map(|(s, _)| s), Ok(200));
    let received = origin.requests();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].headers.len(), LIMIT);
    assert!(received[0].header("via").is_some() && received[0].header("x-forwarded-for").is_some());
    assert_eq!(received[0].header("x-forwarded-proto"), Some("http"));
}

#[test]
fn response_at_the_limit_is_a_bad_response_rather_than_relayed_over_it() {
    // The origin's own Content-Length makes the field count `fields + 1`.
    let origin = Origin::start(|r| {
        let fields: usize = r.path().trim_start_matches("/fields/").parse().unwrap_or(0);
        (0..fields).fold(Response::ok("body"), |resp, n| {
            resp.header(&format!("X-Origin-{n}"), &n.to_string())
        })
    });
    let setup = Setup::new("limits-resp");
    let addr = setup.http;
    let conf = setup.config(origin.addr(), "", CONFIG);
    let proxy = setup.start(&conf);
    let get = |fields: usize| {
        format!("GET /fields/{fields} HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n")
    };

    // 100 fields from the origin; the proxy adds `Connection: close` for this client.
    let response = exchange(addr, get(LIMIT - 1).as_bytes());
    assert_eq!(
        parse_as_peer(&response).map(|(status, _)| status),
        Ok(502),
        "{}",
        proxy.proc.logs()
    );

    // One less fits exactly, and the client's parser accepts it.
    let response = exchange(addr, get(LIMIT - 2).as_bytes());
    assert_eq!(parse_as_peer(&response), Ok((200, LIMIT)));
    assert!(response.ends_with(b"body"));

    // The refused response did not leave the proxy in a bad state: the next one is served.
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    stream
        .write_all(b"GET /fields/0 HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n")
        .expect("send");
    let mut plain = Vec::new();
    let _ = std::io::Read::read_to_end(&mut stream, &mut plain);
    assert_eq!(parse_as_peer(&plain).map(|(s, _)| s), Ok(200));
}
