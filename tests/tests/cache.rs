//! The response cache through the real proxy, with an origin that counts its hits.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::raw_exchange;

const CACHE_ALL: &str = "cache 1;\ncache_fulfill * *;";

fn start(origin: &Origin, extra: &str) -> (Proxy, SocketAddr) {
    let setup = Setup::new("cache");
    let http = setup.http;
    let conf = setup.config(origin.addr(), "", extra);
    (setup.start(&conf), http)
}

/// One request (plain HTTP, new connection); returns (status, head, body).
fn request(addr: SocketAddr, method: &str, path: &str, headers: &str) -> (u16, String, Vec<u8>) {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: site.test\r\n{headers}Connection: close\r\n\r\n"
    );
    let resp = raw_exchange(addr, req.as_bytes(), Duration::from_secs(10)).expect("exchange");
    let split = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(resp.len(), |i| i + 4);
    let head = String::from_utf8_lossy(&resp[..split]).into_owned();
    let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head, resp[split..].to_vec())
}

#[test]
fn repeated_gets_reach_the_origin_once_from_any_worker() {
    let origin = Origin::start(|r| {
        Response::ok(format!("body of {}", r.path())).header("Cache-Control", "max-age=60")
    });
    let (proxy, http) = start(&origin, CACHE_ALL);
    // Many separate connections: the kernel spreads them over both worker threads.
    for i in 0..40 {
        let (status, head, body) = request(http, "GET", "/page", "");
        assert_eq!(status, 200, "request {i}: {head}\n{}", proxy.proc.logs());
        assert_eq!(body, b"body of /page");
        if i > 0 {
            assert!(head.contains("Age: "), "a hit carries Age: {head}");
        }
    }
    assert_eq!(
        origin.hits("/page"),
        1,
        "the cache is shared by all workers"
    );
}

#[test]
fn no_store_and_private_are_never_stored_and_max_age_expires() {
    let origin = Origin::start(|r| match r.path() {
        "/nostore" => Response::ok("n").header("Cache-Control", "no-store"),
        "/private" => Response::ok("p").header("Cache-Control", "private, max-age=60"),
        _ => Response::ok("short").header("Cache-Control", "max-age=1"),
    });
    let (_proxy, http) = start(&origin, CACHE_ALL);
    for _ in 0..3 {
        assert_eq!(request(http, "GET", "/nostore", "").0, 200);
        assert_eq!(request(http, "GET", "/private", "").0, 200);
        assert_eq!(request(http, "GET", "/short", "").0, 200);
    }
    assert_eq!(origin.hits("/nostore"), 3);
    assert_eq!(origin.hits("/private"), 3);
    assert_eq!(origin.hits("/short"), 1);
    std::thread::sleep(Duration::from_millis(2200));
    assert_eq!(request(http, "GET", "/short", "").0, 200);
    assert_eq!(
        origin.hits("/short"),
        2,
        "an expired entry is fetched again"
    );
}

#[test]
fn head_is_answered_from_the_get_entry_and_conditionals_get_304() {
    let origin = Origin::start(|_| {
        Response::ok("twelve bytes")
            .header("Cache-Control", "max-age=60")
            .header("ETag", "\"v1\"")
            .header("Last-Modified", "Mon, 30 Nov 2026 10:00:00 GMT")
    });
    let (_proxy, http) = start(&origin, CACHE_ALL);
    assert_eq!(request(http, "GET", "/doc", "").2, b"twelve bytes");
    let (status, head, body) = request(http, "HEAD", "/doc", "");
    assert_eq!(status, 200);
    assert!(head.contains("Content-Length: 12"), "{head}");
    assert!(body.is_empty());
    let (status, head, body) = request(http, "GET", "/doc", "If-None-Match: \"v0\", \"v1\"\r\n");
    assert_eq!(status, 304, "{head}");
    assert!(body.is_empty() && head.contains("ETag: \"v1\""), "{head}");
    let (status, _, _) = request(
        http,
        "GET",
        "/doc",
        "If-Modified-Since: Mon, 30 Nov 2026 11:00:00 GMT\r\n",
    );
    assert_eq!(status, 304);
    let (status, _, body) = request(http, "GET", "/doc", "If-None-Match: \"other\"\r\n");
    assert_eq!(status, 200);
    assert_eq!(body, b"twelve bytes");
    assert_eq!(origin.hits("/doc"), 1);
}

#[test]
fn vary_keeps_variants_apart() {
    let origin = Origin::start(|r| {
        let lang = r.header("accept-language").unwrap_or("none").to_string();
        Response::ok(format!("lang={lang}"))
            .header("Cache-Control", "max-age=60")
            .header("Vary", "Accept-Language")
    });
    let (_proxy, http) = start(&origin, CACHE_ALL);
    for _ in 0..3 {
        assert_eq!(
            request(http, "GET", "/v", "Accept-Language: en\r\n").2,
            b"lang=en"
        );
        assert_eq!(
            request(http, "GET", "/v", "Accept-Language: fr\r\n").2,
            b"lang=fr"
        );
    }
    assert_eq!(origin.hits("/v"), 2, "one fetch per variant");
}

#[test]
fn purge_is_allowed_only_from_the_acl() {
    let origin = Origin::start(|_| Response::ok("p").header("Cache-Control", "max-age=60"));
    // As in Tempesta, PURGE must also be an allowed method (frang's default is GET POST HEAD).
    let methods = "frang_limits { http_methods GET HEAD PURGE; }";
    let allowed = format!("{methods}\n{CACHE_ALL}\ncache_purge;\ncache_purge_acl 127.0.0.1;");
    let (_proxy, http) = start(&origin, &allowed);
    request(http, "GET", "/p", "");
    request(http, "GET", "/p", "");
    assert_eq!(origin.hits("/p"), 1);
    assert_eq!(request(http, "PURGE", "/p", "").0, 200);
    request(http, "GET", "/p", "");
    assert_eq!(origin.hits("/p"), 2, "a purged entry is fetched again");

    let origin2 = Origin::start(|_| Response::ok("q").header("Cache-Control", "max-age=60"));
    let denied = format!("{methods}\n{CACHE_ALL}\ncache_purge;\ncache_purge_acl 10.0.0.0/8;");
    let (_proxy2, http2) = start(&origin2, &denied);
    request(http2, "GET", "/q", "");
    assert_eq!(request(http2, "PURGE", "/q", "").0, 403);
    request(http2, "GET", "/q", "");
    assert_eq!(origin2.hits("/q"), 1, "a refused PURGE leaves the entry");
}

#[test]
fn concurrent_misses_cause_one_origin_fetch() {
    let fetches = Arc::new(AtomicUsize::new(0));
    let counter = fetches.clone();
    let origin = Origin::start(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
        Response::ok("slow and cacheable")
            .header("Cache-Control", "max-age=60")
            .delay(Duration::from_millis(700))
    });
    let (_proxy, http) = start(&origin, CACHE_ALL);
    let clients: Vec<_> = (0..20)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(http).expect("connect");
                s.set_read_timeout(Some(Duration::from_secs(10)))
                    .expect("timeout");
                s.write_all(b"GET /slow HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n")
                    .expect("write");
                let mut out = Vec::new();
                let _ = s.read_to_end(&mut out);
                out
            })
        })
        .collect();
    for c in clients {
        let out = c.join().expect("client thread");
        assert!(
            out.starts_with(b"HTTP/1.1 200") && out.ends_with(b"slow and cacheable"),
            "{}",
            String::from_utf8_lossy(&out)
        );
    }
    assert_eq!(
        fetches.load(Ordering::SeqCst),
        1,
        "waiters must be answered from the single fetch"
    );
}

#[test]
fn responses_larger_than_the_object_limit_are_proxied_not_cached() {
    let origin = Origin::start(|_| {
        Response::pattern(100 * 1024 * 1024).header("Cache-Control", "max-age=60")
    });
    let (proxy, http) = start(&origin, CACHE_ALL);
    for _ in 0..2 {
        let file = proxy.dir.join("big.bin");
        let url = format!("http://{http}/big");
        let (st, _, err) = e2e::curl(
            &[
                "-H",
                "Host: site.test",
                "-o",
                &file.display().to_string(),
                &url,
            ],
            60,
        );
        assert!(st.success(), "{err}");
        assert_eq!(
            std::fs::metadata(&file).expect("download").len(),
            100 * 1024 * 1024
        );
    }
    assert_eq!(
        origin.hits("/big"),
        2,
        "a 100 MB response must not be stored"
    );
}

/// A body under `cache_max_object_size` (8 MiB by default) is stored with the default
/// `cache_size`: 7 MiB, two GETs, one origin request. Before, the 256 MiB budget was split
/// into 64 shards of 4 MiB and an object had to fit one: a body of 4 to 8 MiB was never
/// stored.
#[test]
fn a_body_under_the_default_object_limit_is_stored() {
    const SIZE: usize = 7 << 20;
    let origin =
        Origin::start(|_| Response::ok(vec![b'b'; SIZE]).header("Cache-Control", "max-age=60"));
    let (_proxy, http) = start(&origin, CACHE_ALL);
    for what in ["the miss", "the hit"] {
        let (status, _, body) = request(http, "GET", "/seven", "");
        assert_eq!((status, body.len()), (200, SIZE), "{what}");
    }
    assert_eq!(origin.total_requests(), 1, "the second GET was not a hit");
}
