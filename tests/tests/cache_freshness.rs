//! Freshness through the real proxy: request max-stale (RFC 9111 §5.2.1.2), responses that
//! forbid stale use (§4.2.4, §5.2.2.2), and exact parsing of max-age (§1.2.2, §4.2.1).

use std::net::SocketAddr;
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::raw_exchange;

// cache_use_stale keeps stale entries that have no validators stored.
const CONFIG: &str = "cache 1;\ncache_fulfill * *;\ncache_use_stale 5*;";

fn start(origin: &Origin) -> (Proxy, SocketAddr) {
    start_with(origin, CONFIG)
}

fn start_with(origin: &Origin, config: &str) -> (Proxy, SocketAddr) {
    let setup = Setup::new("cache-fresh");
    let http = setup.http;
    let conf = setup.config(origin.addr(), "", config);
    (setup.start(&conf), http)
}

/// The response Cache-Control is the path without its leading slash.
fn origin() -> Origin {
    Origin::start(|r| {
        let cc = r.path().trim_start_matches('/').replace('_', " ");
        Response::ok("body").header("Cache-Control", &cc)
    })
}

fn get(addr: SocketAddr, path: &str, req_cc: &str) -> String {
    let cc = if req_cc.is_empty() {
        String::new()
    } else {
        format!("Cache-Control: {req_cc}\r\n")
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: f.example\r\n{cc}Connection: close\r\n\r\n");
    let resp = raw_exchange(addr, req.as_bytes(), Duration::from_secs(10)).expect("exchange");
    let text = String::from_utf8_lossy(&resp).into_owned();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text
}

/// §5.2.1.2: a stale entry answers a request that accepts its staleness; must-revalidate,
/// proxy-revalidate and s-maxage forbid that (§4.2.4).
#[test]
fn max_stale_is_honoured_unless_the_response_forbids_it() {
    let origin = origin();
    let (_proxy, addr) = start(&origin);
    let paths = [
        "/max-age=1",
        "/max-age=1,must-revalidate",
        "/max-age=1,proxy-revalidate",
        "/s-maxage=1",
    ];
    for p in paths {
        get(addr, p, "");
    }
    std::thread::sleep(Duration::from_millis(2300));
    let head = get(addr, paths[0], "max-stale=60");
    assert!(head.contains("Age: "), "served stale from cache: {head}");
    assert_eq!(
        origin.hits(paths[0]),
        1,
        "max-stale=60 accepts 1-2 s of staleness"
    );
    get(addr, paths[0], "max-stale=0");
    assert_eq!(origin.hits(paths[0]), 2, "max-stale=0 does not");
    for p in &paths[1..] {
        get(addr, p, "max-stale");
        assert_eq!(origin.hits(p), 2, "{p} is never served stale");
    }
}

/// §4.2.1 and §1.2.2: max-age must be delta-seconds; anything else is stale, never fresh.
#[test]
fn invalid_max_age_is_stale() {
    let origin = origin();
    let (_proxy, addr) = start(&origin);
    for p in [
        "/max-age=60a",
        "/max-age=1.5",
        "/max-age_=60",
        "/max-age=60,max-age=61",
    ] {
        get(addr, p, "");
        get(addr, p, "");
        assert_eq!(origin.hits(p), 2, "{p} is not fresh");
    }
    let p = "/max-age=\"60\"";
    get(addr, p, "");
    get(addr, p, "");
    assert_eq!(origin.hits(p), 1, "a quoted value is accepted (§5.2)");
}

/// §4.2.2: a response with Last-Modified and no explicit freshness is fresh for 10 % of its
/// age by default; `cache_heuristic off` turns that off, `cache_ttl` takes precedence.
#[test]
fn heuristic_freshness_and_its_off_switch() {
    let lm_origin = || {
        Origin::start(|_| {
            // Modified a day ago: fresh for 2.4 h by the default heuristic.
            let lm = std::time::SystemTime::now() - Duration::from_secs(86_400);
            Response::ok("body").header("Last-Modified", &e2e::http_date(lm))
        })
    };
    let origin = lm_origin();
    let (_proxy, addr) = start_with(&origin, "cache 1;\ncache_fulfill * *;");
    get(addr, "/lm", "");
    get(addr, "/lm", "");
    assert_eq!(origin.hits("/lm"), 1, "heuristically fresh");
    let origin = lm_origin();
    let (_proxy, addr) = start_with(
        &origin,
        "cache 1;\ncache_fulfill * *;\ncache_heuristic off;",
    );
    get(addr, "/lm", "");
    get(addr, "/lm", "");
    assert_eq!(origin.hits("/lm"), 2, "off: stale at once, revalidated");
}

/// A bad `cache_heuristic` is a configuration error with its position.
#[test]
fn bad_cache_heuristic_is_a_config_error() {
    let dir = e2e::TempDir::new("cache-heur-conf");
    let path = dir.join("bad.conf");
    std::fs::write(&path, "listen 127.0.0.1:1;\ncache_heuristic 0 60;\n").expect("write");
    let out = std::process::Command::new(e2e::bin_path("proxy"))
        .args(["-t", "-c"])
        .arg(&path)
        .output()
        .expect("run ktls-proxy -t");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("bad.conf:2:17"), "{err}");
}

/// RFC 5861 §4: the stored response's own `stale-if-error` stands in for an origin 5xx
/// within its window, without `cache_use_stale`; a response without it gets the error.
#[test]
fn stale_if_error_without_cache_use_stale() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let served = std::sync::Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    let origin = Origin::start(move |r| {
        if count.fetch_add(1, Ordering::SeqCst) >= 2 {
            return Response::ok("down").status(503);
        }
        let cc = if r.path() == "/sie" {
            "max-age=1, stale-if-error=60"
        } else {
            "max-age=1"
        };
        Response::ok("good")
            .header("Cache-Control", cc)
            .header("ETag", "\"v\"")
    });
    let (_proxy, addr) = start_with(&origin, "cache 1;\ncache_fulfill * *;");
    get(addr, "/sie", "");
    get(addr, "/plain", "");
    std::thread::sleep(Duration::from_millis(2300));
    let text = get(addr, "/sie", "");
    assert!(
        text.ends_with("good"),
        "stale entry instead of the 503: {text}"
    );
    let req = "GET /plain HTTP/1.1\r\nHost: f.example\r\nConnection: close\r\n\r\n";
    let resp = raw_exchange(addr, req.as_bytes(), Duration::from_secs(10)).expect("exchange");
    assert!(
        resp.starts_with(b"HTTP/1.1 503"),
        "{}",
        String::from_utf8_lossy(&resp)
    );
}
