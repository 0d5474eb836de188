//! The access log tells the truth about every way an exchange ends: a relayed response, a
//! cache hit, a 304 from the cache, a stale answer instead of an origin error, PURGE, a
//! redirect, an `http_chain` block and a frang block each log the status and body size the
//! client actually received.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::raw_exchange;

const T: Duration = Duration::from_secs(10);

struct Site {
    _proxy: Proxy,
    http: SocketAddr,
    log: std::path::PathBuf,
}

fn start(origin: &Origin, block_action: &str) -> Site {
    let setup = Setup::new("alog-truth");
    let log = setup.dir.join("access.log");
    let conf = format!(
        "listen {http};\n\
         srv_group default {{ server {origin}; }}\n\
         cache 1;\ncache_fulfill * *;\ncache_use_stale 5*;\n\
         cache_purge;\ncache_purge_acl 127.0.0.1;\n\
         access_log_file {log};\n\
         {block_action}\n\
         frang_limits {{ http_methods get head post purge; }}\n\
         vhost site {{ proxy_pass default; }}\n\
         http_chain {{\n\
             uri == \"/old\" -> 301 = http://$host/new;\n\
             uri == \"/blocked\" -> block;\n\
             -> site;\n\
         }}\n",
        http = setup.http,
        origin = origin.addr(),
        log = log.display(),
    );
    let http = setup.http;
    let proxy = setup.start(&conf);
    Site {
        _proxy: proxy,
        http,
        log,
    }
}

/// Sends one request on a new connection; returns the status and the body length.
fn send(addr: SocketAddr, method: &str, path: &str, extra: &str) -> (u16, usize) {
    let req =
        format!("{method} {path} HTTP/1.1\r\nHost: site.test\r\n{extra}Connection: close\r\n\r\n");
    let resp = raw_exchange(addr, req.as_bytes(), T).unwrap_or_default();
    let split = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(resp.len(), |i| i + 4);
    let status = std::str::from_utf8(resp.get(9..12).unwrap_or(b"0"))
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, resp.len() - split)
}

/// The log's lines, once it has at least `n` (bounded wait: lines are written as exchanges
/// end, the client may see the response first).
fn lines(log: &std::path::Path, n: usize) -> Vec<String> {
    let deadline = Instant::now() + T;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `"METHOD URI HTTP/1.1" STATUS BYTES` of a log line.
fn status_and_bytes(line: &str) -> (String, u16, usize) {
    let request = line.split('"').nth(3).unwrap_or("").to_string();
    let rest: Vec<&str> = line
        .split('"')
        .nth(4)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let status = rest.first().and_then(|s| s.parse().ok()).unwrap_or(0);
    let bytes = rest
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(usize::MAX);
    (request, status, bytes)
}

#[test]
fn every_way_an_exchange_ends_is_logged_with_what_the_client_got() {
    let failing = Arc::new(AtomicBool::new(false));
    let fail = failing.clone();
    let origin = Origin::start(move |r| {
        if fail.load(Ordering::Relaxed) {
            return Response::ok("down").status(500);
        }
        match r.path() {
            "/stale" => Response::ok("stale body!").header("Cache-Control", "max-age=1"),
            _ => Response::ok("twelve bytes")
                .header("Cache-Control", "max-age=600")
                .header("ETag", "\"v1\""),
        }
    });
    let site = start(&origin, "block_action attack reply;");
    let http = site.http;
    // What the client received, in order; the log must say the same.
    let mut expected = Vec::new();
    let mut check = |what: &str, method: &str, path: &str, extra: &str| {
        let (status, len) = send(http, method, path, extra);
        expected.push((
            format!("{method} {path} HTTP/1.1"),
            status,
            len,
            what.to_string(),
        ));
        (status, len)
    };
    assert_eq!(check("miss", "GET", "/page", ""), (200, 12));
    assert_eq!(check("hit", "GET", "/page", ""), (200, 12));
    assert_eq!(
        check(
            "304 from the cache",
            "GET",
            "/page",
            "If-None-Match: \"v1\"\r\n"
        )
        .0,
        304
    );
    assert_eq!(check("hit for HEAD", "HEAD", "/page", ""), (200, 0));
    assert_eq!(check("redirect", "GET", "/old", ""), (301, 0));
    let (status, len) = check("http_chain block", "GET", "/blocked", "");
    assert_eq!(status, 403);
    assert!(len > 0, "the 403 page has a body");
    assert_eq!(check("frang block", "DELETE", "/page", "").0, 403);
    assert_eq!(check("PURGE", "PURGE", "/page", ""), (200, 0));
    assert_eq!(check("fill", "GET", "/stale", ""), (200, 11));
    std::thread::sleep(Duration::from_millis(2200));
    failing.store(true, Ordering::Relaxed);
    assert_eq!(
        check("stale instead of a 500", "GET", "/stale", ""),
        (200, 11)
    );
    let logged = lines(&site.log, expected.len());
    assert_eq!(
        logged.len(),
        expected.len(),
        "one line per exchange: {logged:#?}"
    );
    for (line, (request, status, len, what)) in logged.iter().zip(&expected) {
        let (logged_request, logged_status, logged_bytes) = status_and_bytes(line);
        assert_eq!(
            (&logged_request, logged_status, logged_bytes),
            (request, *status, *len),
            "{what}: {line}"
        );
    }
}

#[test]
fn a_dropped_request_is_logged_with_no_status() {
    let origin = Origin::fixed(b"never");
    let site = start(&origin, "block_action attack drop;");
    let (status, _) = send(site.http, "GET", "/blocked", "");
    assert_eq!(status, 0, "dropped, no response");
    let logged = lines(&site.log, 1);
    assert_eq!(logged.len(), 1, "{logged:?}");
    let (request, status, bytes) = status_and_bytes(&logged[0]);
    assert_eq!(
        (request.as_str(), status, bytes),
        ("GET /blocked HTTP/1.1", 0, 0)
    );
    assert_eq!(origin.total_requests(), 0);
}
