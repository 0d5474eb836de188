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
    let setup = Setup::new("cache-fresh");
    let http = setup.http;
    let conf = setup.config(origin.addr(), "", CONFIG);
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
