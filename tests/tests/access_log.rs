//! The access log tells the truth about every way an exchange ends: a relayed response, a
//! cache hit, a 304 from the cache, a stale answer instead of an origin error, PURGE, a
//! redirect, an `http_chain` block and a frang block each log the status and body size the
//! client actually received. Each line also says when it ended, how long it took, which
//! server answered and what the cache did (issue 36 item 6), in both layouts.

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
    // Tempesta's 403 has no body (tempesta_block_action.rs); the log says 0 bytes too.
    assert_eq!(check("http_chain block", "GET", "/blocked", ""), (403, 0));
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

/// The origin of the time, upstream and cache tests: `/slow` takes 300 ms and is not
/// storable, everything else is cacheable.
fn timed_origin() -> Origin {
    Origin::start(|r| match r.path() {
        "/slow" => Response::ok("slow")
            .header("Cache-Control", "no-store")
            .delay(Duration::from_millis(300)),
        _ => Response::ok("twelve bytes").header("Cache-Control", "max-age=600"),
    })
}

#[test]
fn the_tempesta_line_says_when_how_long_which_upstream_how_long_it_took_and_what_the_cache_did() {
    let origin = timed_origin();
    let site = start(&origin, "block_action attack reply;");
    let before = std::time::SystemTime::now();
    for (method, path) in [
        ("GET", "/page"),
        ("GET", "/page"),
        ("GET", "/slow"),
        ("POST", "/page"),
        ("GET", "/old"),
    ] {
        let extra = if method == "POST" {
            "Content-Length: 0\r\n"
        } else {
            ""
        };
        assert!(send(site.http, method, path, extra).0 > 0);
    }
    let logged = lines(&site.log, 5);
    assert_eq!(logged.len(), 5, "{logged:#?}");
    let origin_addr = origin.addr().to_string();
    let expected = [
        (origin_addr.as_str(), "miss"),
        ("-", "hit"),
        (origin_addr.as_str(), "miss"),
        (origin_addr.as_str(), "pass"),
        ("-", "-"),
    ];
    for (line, (upstream, cache)) in logged.iter().zip(expected) {
        // The time first: RFC 3339, UTC, not before the requests were sent.
        let time = line.split_whitespace().next().unwrap_or("");
        assert!(time.len() == 20 && time.ends_with('Z'), "{line}");
        let earliest = e2e_utc(before);
        assert!(
            time >= earliest.as_str(),
            "{time} before {earliest}: {line}"
        );
        let tail = line.rsplit('"').next().unwrap_or("");
        let fields: Vec<&str> = tail.split_whitespace().collect();
        assert_eq!(
            fields.get(1),
            Some(&&*format!("upstream={upstream}")),
            "{line}"
        );
        assert_eq!(fields.get(3), Some(&&*format!("cache={cache}")), "{line}");
        // urt=: from the request sent to the response head read; `-` with no server.
        let urt = fields
            .get(2)
            .and_then(|f| f.strip_prefix("urt="))
            .unwrap_or("");
        if upstream == "-" {
            assert_eq!(urt, "-", "{line}");
        } else {
            let urt: f64 = urt.parse().unwrap_or(-1.0);
            assert!(urt >= 0.0, "{line}");
            if line.contains("/slow") {
                assert!(urt >= 0.3, "the origin took 300 ms to answer: {line}");
            }
        }
        let rt: f64 = fields
            .first()
            .and_then(|f| f.strip_prefix("rt="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1.0);
        assert!(rt >= 0.0, "{line}");
        if line.contains("/slow") {
            assert!(rt >= 0.3, "the origin took 300 ms: {line}");
        }
    }
}

#[test]
fn the_json_line_carries_the_same_fields() {
    let origin = timed_origin();
    let site = start(
        &origin,
        "block_action attack reply;\naccess_log_format json;",
    );
    assert_eq!(send(site.http, "GET", "/slow", "").0, 200);
    assert_eq!(send(site.http, "GET", "/page", "").0, 200);
    assert_eq!(send(site.http, "GET", "/page", "").0, 200);
    let logged = lines(&site.log, 3);
    let parsed: Vec<serde_json::Value> = logged
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(parsed.len(), 3, "{logged:#?}");
    assert!(
        parsed[0]["request_time"].as_f64().unwrap_or(0.0) >= 0.3,
        "{}",
        logged[0]
    );
    assert_eq!(parsed[0]["upstream"], origin.addr().to_string());
    assert_eq!(parsed[0]["cache"], "miss");
    assert_eq!(parsed[2]["cache"], "hit", "{}", logged[2]);
    assert_eq!(parsed[2]["upstream"], serde_json::Value::Null);
    assert!(
        parsed[0]["upstream_time"].as_f64().unwrap_or(0.0) >= 0.3,
        "{}",
        logged[0]
    );
    assert_eq!(parsed[2]["upstream_time"], serde_json::Value::Null);
    assert!(parsed[2]["time"].as_str().is_some_and(|t| t.ends_with('Z')));
}

/// `SystemTime` as the log writes it (RFC 3339 UTC, seconds): compared as text.
fn e2e_utc(time: std::time::SystemTime) -> String {
    let secs = time
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let out = std::process::Command::new("date")
        .args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .expect("date");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
