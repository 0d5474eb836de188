//! The bundled `origin` server: sizes, keep-alive, pipelining, HEAD, request bodies, 400 on
//! garbage, TLS, and its counters endpoint.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use e2e::{bin_path, free_port, gen_cert, raw_exchange, KeyKind, Proc, TempDir};

const T: Duration = Duration::from_secs(5);

/// Starts `origin` on a free port with `extra` arguments; waits for its ready line.
fn start_origin(dir: &TempDir, extra: &[&str]) -> (Proc, SocketAddr) {
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut cmd = Command::new(bin_path("origin"));
    cmd.arg("--listen").arg(addr.to_string()).args(extra);
    let mut p = Proc::spawn("origin", cmd, dir.path());
    assert!(
        p.wait_for_output(
            &format!("origin listening on {addr}"),
            Duration::from_secs(20)
        ),
        "origin did not start\n{}",
        p.logs()
    );
    (p, addr)
}

/// Splits a byte stream of Content-Length-framed responses: (head, body) pairs. `heads` says
/// which responses answer HEAD (no body whatever Content-Length says).
fn split_responses(mut bytes: &[u8], heads: &[bool]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for head_only in heads {
        let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
            break;
        };
        let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let body_len = if *head_only { 0 } else { len };
        let body = bytes[end + 4..end + 4 + body_len].to_vec();
        bytes = &bytes[end + 4 + body_len..];
        out.push((head, body));
    }
    assert!(
        bytes.is_empty(),
        "unexpected trailing bytes: {:?}",
        String::from_utf8_lossy(bytes)
    );
    out
}

fn stats(addr: SocketAddr) -> serde_json::Value {
    let resp = raw_exchange(
        addr,
        b"GET /__origin/stats HTTP/1.1\r\nHost: o\r\nConnection: close\r\n\r\n",
        T,
    )
    .unwrap();
    let r = split_responses(&resp, &[false]);
    serde_json::from_slice(&r[0].1).unwrap()
}

#[test]
fn serves_configured_sizes_and_cache_control() {
    let dir = TempDir::new("origin-sizes");
    let (_o, addr) = start_origin(&dir, &["--size", "26", "--cache-control", "max-age=3600"]);
    let resp = raw_exchange(
        addr,
        b"GET /any/path HTTP/1.1\r\nHost: o\r\nConnection: close\r\n\r\n",
        T,
    )
    .unwrap();
    let r = split_responses(&resp, &[false]);
    assert!(r[0].0.starts_with("HTTP/1.1 200 OK"), "{}", r[0].0);
    assert!(r[0].0.contains("Content-Length: 26"));
    assert!(r[0].0.contains("Cache-Control: max-age=3600"));
    assert!(r[0].0.contains("Connection: close"));
    assert_eq!(r[0].1.len(), 26);
    let resp = raw_exchange(
        addr,
        b"GET /bytes/100000 HTTP/1.1\r\nHost: o\r\nConnection: close\r\n\r\n",
        T,
    )
    .unwrap();
    let r = split_responses(&resp, &[false]);
    assert!(r[0].0.contains("Content-Length: 100000"));
    assert_eq!(r[0].1.len(), 100000);
}

#[test]
fn keep_alive_pipelining_head_and_discarded_bodies() {
    let dir = TempDir::new("origin-pipe");
    let (_o, addr) = start_origin(&dir, &[]);
    // One write carrying five requests: plain GET, HEAD, a POST with a Content-Length body,
    // a POST with a chunked body (with an extension and a trailer), and a closing GET.
    let pipelined = b"GET / HTTP/1.1\r\nHost: o\r\n\r\n\
HEAD /bytes/50 HTTP/1.1\r\nHost: o\r\n\r\n\
POST /bytes/3 HTTP/1.1\r\nHost: o\r\nContent-Length: 11\r\n\r\nhello world\
POST /bytes/4 HTTP/1.1\r\nHost: o\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: v\r\n\r\n\
GET /bytes/7 HTTP/1.1\r\nHost: o\r\nConnection: close\r\n\r\n";
    let resp = raw_exchange(addr, pipelined, T).unwrap();
    let r = split_responses(&resp, &[false, true, false, false, false]);
    assert_eq!(r.len(), 5, "{}", String::from_utf8_lossy(&resp));
    let lens: Vec<usize> = r.iter().map(|(_, b)| b.len()).collect();
    assert_eq!(lens, vec![10, 0, 3, 4, 7]);
    assert!(r[1].0.contains("Content-Length: 50"));
    assert!(r.iter().all(|(h, _)| h.starts_with("HTTP/1.1 200 OK")));
    // Keep-alive: the same connection answered a second request written later.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let mut buf = [0u8; 4096];
    for _ in 0..2 {
        s.write_all(b"GET / HTTP/1.1\r\nHost: o\r\n\r\n").unwrap();
        let n = s.read(&mut buf).unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200 OK"));
        assert!(buf[..n].ends_with(b"xxxxxxxxxx"));
    }
    drop(s);
    let st = stats(addr);
    // The pipelined connection, the keep-alive one and the stats request.
    assert_eq!(st["connections"], 3, "{st}");
    assert_eq!(st["requests"], 8, "{st}");
}

#[test]
fn garbage_gets_400_and_close() {
    let dir = TempDir::new("origin-400");
    let (_o, addr) = start_origin(&dir, &[]);
    for bad in [
        &b"\x01\x02 garbage\r\n\r\n"[..],
        b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"GET /bytes/notanumber HTTP/1.1\r\n\r\n",
    ] {
        let resp = raw_exchange(addr, bad, T).unwrap();
        let text = String::from_utf8_lossy(&resp);
        // (A bad chunked body is found after the head was answered: the 400 comes second.)
        assert!(text.contains("HTTP/1.1 400 Bad Request"), "{text}");
        assert!(text.ends_with("Connection: close\r\n\r\n"), "{text}");
        assert!(text.contains("Connection: close"));
    }
    // A head larger than the 64 KiB bound is refused rather than buffered.
    let mut huge = b"GET / HTTP/1.1\r\nX: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 70 * 1024));
    let resp = raw_exchange(addr, &huge, T).unwrap_or_default();
    assert!(
        resp.starts_with(b"HTTP/1.1 400"),
        "{}",
        String::from_utf8_lossy(&resp)
    );
    // Still serving; the chunked POST above was answered before its bad body was seen.
    assert_eq!(stats(addr)["requests"], 2);
}

#[test]
fn serves_https_with_cert() {
    let dir = TempDir::new("origin-tls");
    let (crt, key) = gen_cert(dir.path(), "o", KeyKind::EcdsaP256, &["localhost"]);
    let (_o, addr) = start_origin(
        &dir,
        &[
            "--cert",
            crt.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
            "--size",
            "12",
        ],
    );
    let url = format!("https://localhost:{}/", addr.port());
    let resolve = format!("localhost:{}:127.0.0.1", addr.port());
    let (status, body, err) = e2e::curl(&["-k", "--resolve", &resolve, &url, &url], 5);
    assert!(status.success(), "{err}");
    assert_eq!(body, "x".repeat(24));
}

#[test]
fn bad_certificate_is_a_clear_error() {
    let dir = TempDir::new("origin-badcert");
    let missing = dir.join("missing.pem");
    let out = Command::new(bin_path("origin"))
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .arg("--cert")
        .arg(&missing)
        .arg("--key")
        .arg(&missing)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot load certificate"), "{err}");
}

#[test]
fn requests_split_across_reads_are_reassembled() {
    let dir = TempDir::new("origin-split");
    let (_o, addr) = start_origin(&dir, &[]);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s.set_nodelay(true).unwrap();
    for piece in [
        &b"GET / HT"[..],
        b"TP/1.1\r\nHost: o\r\n\r\nPOST /bytes/2 HTTP/1.1\r\nContent-Length: 6\r\n\r\nab",
        b"cdef",
        b"GET /bytes/3 HTTP/1.1\r\nConnection: close\r\n\r\n",
    ] {
        s.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let r = split_responses(&resp, &[false, false, false]);
    let lens: Vec<usize> = r.iter().map(|(_, b)| b.len()).collect();
    assert_eq!(lens, vec![10, 2, 3]);
}

#[test]
fn large_default_size_is_streamed_whole() {
    let dir = TempDir::new("origin-large");
    let (_o, addr) = start_origin(&dir, &["--size", "300000"]);
    let req =
        b"GET / HTTP/1.1\r\nHost: o\r\n\r\nGET / HTTP/1.1\r\nHost: o\r\nConnection: close\r\n\r\n";
    let resp = raw_exchange(addr, req, T).unwrap();
    let r = split_responses(&resp, &[false, false]);
    assert_eq!(r.len(), 2);
    assert!(r
        .iter()
        .all(|(_, b)| b.len() == 300000 && b.iter().all(|c| *c == b'x')));
}
