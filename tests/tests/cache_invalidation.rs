//! Invalidation by unsafe methods through the real proxy (RFC 9111 §4.4): a non-error
//! response to POST, PUT, DELETE, PATCH or an unknown method removes what is stored for the
//! target and for same-origin `Location` / `Content-Location` URIs; error responses and other
//! origins' URIs do not.

use std::net::SocketAddr;
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::raw_exchange;

const CONFIG: &str = "cache 1;\ncache_fulfill * *;\n\
                      frang_limits { http_methods GET HEAD POST PUT DELETE PATCH MKCOL; }";

fn start(origin: &Origin) -> (Proxy, SocketAddr) {
    let setup = Setup::new("cache-inval");
    let http = setup.http;
    let conf = setup.config(origin.addr(), "", CONFIG);
    (setup.start(&conf), http)
}

/// GETs are cacheable for a minute; unsafe requests are answered as their `X-Answer` asks:
/// a status, then `;Location` and `;Content-Location` values.
fn origin() -> Origin {
    Origin::start(|r| {
        if r.method == "GET" {
            return Response::ok(format!("{} {}", r.header("host").unwrap_or(""), r.path()))
                .header("Cache-Control", "max-age=60");
        }
        let answer = r.header("x-answer").unwrap_or("200").to_string();
        let mut parts = answer.split(';');
        let status = parts.next().and_then(|s| s.parse().ok()).unwrap_or(200);
        let mut resp = Response::ok("").status(status);
        if let Some(loc) = parts.next().filter(|s| !s.is_empty()) {
            resp = resp.header("Location", loc);
        }
        if let Some(loc) = parts.next().filter(|s| !s.is_empty()) {
            resp = resp.header("Content-Location", loc);
        }
        resp
    })
}

fn send(addr: SocketAddr, method: &str, path: &str, host: &str, answer: &str) -> u16 {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nX-Answer: {answer}\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let resp = raw_exchange(addr, req.as_bytes(), Duration::from_secs(10)).expect("exchange");
    let head = String::from_utf8_lossy(&resp);
    head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn get(addr: SocketAddr, path: &str, host: &str) {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let resp = raw_exchange(addr, req.as_bytes(), Duration::from_secs(10)).expect("exchange");
    assert!(
        resp.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&resp)
    );
}

/// GETs of `path` that reached the origin.
fn origin_gets(origin: &Origin, path: &str) -> usize {
    origin
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path() == path)
        .count()
}

/// Stores `path` for `host` and checks that a second GET is a hit.
fn warm(addr: SocketAddr, origin: &Origin, path: &str, host: &str) -> usize {
    get(addr, path, host);
    let before = origin_gets(origin, path);
    get(addr, path, host);
    assert_eq!(origin_gets(origin, path), before, "{path} is stored");
    before
}

/// §4.4: the target URI of every unsafe method with a 2xx/3xx answer, including one the cache
/// knows nothing about (MKCOL; frang admits only methods it knows), and only for the request's own Host.
#[test]
fn unsafe_methods_invalidate_their_target() {
    let origin = origin();
    let (proxy, addr) = start(&origin);
    for method in ["POST", "PUT", "DELETE", "PATCH", "MKCOL"] {
        let path = format!("/t-{method}");
        let n = warm(addr, &origin, &path, "a.example");
        warm(addr, &origin, &path, "b.example");
        let status = send(addr, method, &path, "a.example", "204");
        assert_eq!(status, 204, "{method}\n{}", proxy.proc.logs());
        get(addr, &path, "a.example");
        assert_eq!(
            origin_gets(&origin, &path),
            n + 2,
            "{method} invalidated a.example"
        );
        get(addr, &path, "b.example");
        assert_eq!(
            origin_gets(&origin, &path),
            n + 2,
            "b.example's entry is another key"
        );
    }
}

/// §4.4 "non-error status code": 4xx and 5xx answers leave the stored response.
#[test]
fn error_answers_do_not_invalidate() {
    let origin = origin();
    let (_proxy, addr) = start(&origin);
    let n = warm(addr, &origin, "/e", "a.example");
    for answer in ["404", "500", "503"] {
        send(addr, "POST", "/e", "a.example", answer);
    }
    get(addr, "/e", "a.example");
    assert_eq!(origin_gets(&origin, "/e"), n, "still a hit");
    // A 3xx is not an error.
    send(addr, "POST", "/e", "a.example", "303");
    get(addr, "/e", "a.example");
    assert_eq!(origin_gets(&origin, "/e"), n + 1);
}

/// §4.4: Location and Content-Location of the same origin (relative, absolute with a
/// spelling of the same authority) are invalidated; another host's are not.
#[test]
fn location_and_content_location_of_the_same_origin() {
    let origin = origin();
    let (_proxy, addr) = start(&origin);
    let host = "a.example";
    let n_loc = warm(addr, &origin, "/dir/loc", host);
    let n_cl = warm(addr, &origin, "/cl", host);
    let n_abs = warm(addr, &origin, "/abs", host);
    let n_other = warm(addr, &origin, "/other", host);
    // Relative Location (resolved against /dir/form), absolute-path Content-Location.
    send(addr, "POST", "/dir/form", host, "303;loc;/cl");
    get(addr, "/dir/loc", host);
    get(addr, "/cl", host);
    assert_eq!(origin_gets(&origin, "/dir/loc"), n_loc + 1, "Location");
    assert_eq!(origin_gets(&origin, "/cl"), n_cl + 1, "Content-Location");
    // Absolute URIs: the same origin spelled differently, and a different host.
    send(
        addr,
        "POST",
        "/x",
        host,
        "201;http://A.EXAMPLE:80/abs;http://b.example/other",
    );
    get(addr, "/abs", host);
    get(addr, "/other", host);
    assert_eq!(origin_gets(&origin, "/abs"), n_abs + 1, "same origin");
    assert_eq!(
        origin_gets(&origin, "/other"),
        n_other,
        "another origin's URI stays"
    );
}
