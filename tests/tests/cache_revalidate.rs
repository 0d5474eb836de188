//! Revalidation and updates of stored responses through the real proxy: stale-while-
//! revalidate served at once and revalidated once in the background (RFC 5861 §3), also
//! against an origin that drops the revalidation; CDN-Cache-Control honoured over
//! Cache-Control and not forwarded (RFC 9213); header fields updated by a 304 (RFC 9111
//! §4.3.4) and by a HEAD response (§4.3.5); the Age of a forwarded response (§4.2.3); a POST
//! response reused for GET (RFC 9110 §9.3.3).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::raw_exchange;

/// Long enough for an entry with `max-age=1` to be stale (Date has whole seconds).
const PAST_MAX_AGE_1: Duration = Duration::from_millis(2100);

fn start(origin: &Origin, tag: &str, extra: &str) -> (Proxy, SocketAddr) {
    let setup = Setup::new(tag);
    let http = setup.http;
    let extra = format!("cache 1;\ncache_fulfill * *;\n{extra}");
    let conf = setup.config(origin.addr(), "", &extra);
    (setup.start(&conf), http)
}

/// One request on a new connection; returns (status, head, body).
fn request(addr: SocketAddr, method: &str, path: &str, headers: &str) -> (u16, String, String) {
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
    (
        status,
        head,
        String::from_utf8_lossy(&resp[split..]).into_owned(),
    )
}

fn field<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Polls `done` every 50 ms for at most `limit`.
fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

/// A gate the origin's handler waits at (at most 10 s) until the test opens it.
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    fn wait(&self) {
        let (open, cv) = &*self.0;
        let guard = open.lock().unwrap();
        let _ = cv
            .wait_timeout_while(guard, Duration::from_secs(10), |open| !*open)
            .unwrap();
    }
    fn open(&self) {
        let (open, cv) = &*self.0;
        *open.lock().unwrap() = true;
        cv.notify_all();
    }
}

#[test]
fn stale_while_revalidate_serves_at_once_and_revalidates_once_in_the_background() {
    let gate = Gate::default();
    let versions = Arc::new(AtomicUsize::new(0));
    let origin = {
        let (gate, versions) = (gate.clone(), versions.clone());
        Origin::start(move |_| {
            let n = versions.fetch_add(1, Ordering::SeqCst) + 1;
            if n > 1 {
                // The revalidation is held until the test has seen the stale answers.
                gate.wait();
            }
            Response::ok(format!("version {n}"))
                .header("Cache-Control", "max-age=1, stale-while-revalidate=60")
                .header("ETag", &format!("\"v{n}\""))
        })
    };
    let (proxy, http) = start(&origin, "swr", "");
    assert_eq!(request(http, "GET", "/swr", "").2, "version 1");
    std::thread::sleep(PAST_MAX_AGE_1);
    // Stale within its window: answered from the entry while the origin holds the
    // revalidation (it cannot answer before the gate opens).
    for i in 0..5 {
        let (status, head, body) = request(http, "GET", "/swr", "");
        assert_eq!((status, body.as_str()), (200, "version 1"), "{i}: {head}");
    }
    assert!(
        eventually(Duration::from_secs(5), || origin.hits("/swr") == 2),
        "one background revalidation: {}\n{}",
        origin.hits("/swr"),
        proxy.proc.logs()
    );
    let revalidation = &origin.requests()[1];
    assert_eq!(revalidation.method, "GET");
    assert_eq!(revalidation.header("if-none-match"), Some("\"v1\""));
    gate.open();
    assert!(
        eventually(Duration::from_secs(5), || request(http, "GET", "/swr", "")
            .2
            == "version 2"),
        "the background response replaced the entry"
    );
    let (_, head, body) = request(http, "GET", "/swr", "");
    assert_eq!(body, "version 2");
    assert!(field(&head, "age").is_some(), "a hit: {head}");
    assert_eq!(
        origin.hits("/swr"),
        2,
        "coalesced: the origin saw one revalidation"
    );
}

#[test]
fn a_background_revalidation_survives_an_origin_that_drops_it_or_answers_304() {
    let calls = Arc::new(AtomicUsize::new(0));
    let origin = {
        let calls = calls.clone();
        Origin::start(move |r| {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            match (r.path(), n) {
                ("/drop", 1) => Response::ok("kept")
                    .header("Cache-Control", "max-age=1, stale-while-revalidate=60")
                    .header("ETag", "\"d\""),
                ("/drop", _) => Response::dropped(),
                (_, _) if r.header("if-none-match").is_some() => Response::ok("")
                    .status(304)
                    .header("Cache-Control", "max-age=600")
                    .header("ETag", "\"n\""),
                _ => Response::ok("not modified")
                    .header("Cache-Control", "max-age=1, stale-while-revalidate=60")
                    .header("ETag", "\"n\""),
            }
        })
    };
    let (proxy, http) = start(&origin, "swr-misbehaving", "");
    assert_eq!(request(http, "GET", "/drop", "").2, "kept");
    std::thread::sleep(PAST_MAX_AGE_1);
    assert_eq!(request(http, "GET", "/drop", "").2, "kept");
    assert!(eventually(Duration::from_secs(5), || origin.hits("/drop") >= 2));
    // The failed revalidation left the stale entry; the next request still gets it and
    // starts another revalidation.
    std::thread::sleep(Duration::from_millis(200));
    let (status, head, body) = request(http, "GET", "/drop", "");
    assert_eq!(
        (status, body.as_str()),
        (200, "kept"),
        "{head}\n{}",
        proxy.proc.logs()
    );
    assert!(eventually(Duration::from_secs(5), || origin.hits("/drop") >= 3));
    // A 304 to the background revalidation freshens the entry: hits from then on.
    calls.store(0, Ordering::SeqCst);
    assert_eq!(request(http, "GET", "/nm", "").2, "not modified");
    std::thread::sleep(PAST_MAX_AGE_1);
    assert_eq!(request(http, "GET", "/nm", "").2, "not modified");
    assert!(eventually(Duration::from_secs(5), || origin.hits("/nm") == 2));
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..3 {
        let (_, head, body) = request(http, "GET", "/nm", "");
        assert_eq!(body, "not modified");
        assert_eq!(field(&head, "cache-control"), Some("max-age=600"), "{head}");
    }
    assert_eq!(origin.hits("/nm"), 2, "fresh after the 304");
}

#[test]
fn cdn_cache_control_is_honoured_over_cache_control_and_not_forwarded() {
    let origin = Origin::start(|_| {
        Response::ok("for the cdn")
            .header("Cache-Control", "no-store")
            .header("CDN-Cache-Control", "max-age=600")
    });
    let (_proxy, http) = start(&origin, "cdn-cc", "");
    for i in 0..3 {
        let (status, head, body) = request(http, "GET", "/cdn", "");
        assert_eq!((status, body.as_str()), (200, "for the cdn"));
        assert!(field(&head, "cdn-cache-control").is_none(), "{i}: {head}");
        assert_eq!(field(&head, "cache-control"), Some("no-store"), "{head}");
        assert_eq!(field(&head, "age").is_some(), i > 0, "{i}: {head}");
    }
    assert_eq!(
        origin.hits("/cdn"),
        1,
        "RFC 9213 §2.2: the targeted field wins"
    );
    // `cache_targeted_fields off`: the field is an ordinary one, Cache-Control governs.
    let (_proxy, http) = start(&origin, "cdn-cc-off", "cache_targeted_fields off;");
    for _ in 0..2 {
        let (_, head, _) = request(http, "GET", "/cdn", "");
        assert_eq!(
            field(&head, "cdn-cache-control"),
            Some("max-age=600"),
            "{head}"
        );
    }
    assert_eq!(origin.hits("/cdn"), 3, "no-store honoured");
    // Another target list: its field is consumed, CDN-Cache-Control is passed on.
    let (_proxy, http) = start(
        &origin,
        "cdn-cc-list",
        "cache_targeted_fields Edge-Control;",
    );
    let (_, head, _) = request(http, "GET", "/cdn", "");
    assert!(field(&head, "cdn-cache-control").is_some(), "{head}");
    assert_eq!(origin.hits("/cdn"), 4);
}

#[test]
fn a_304_and_a_head_response_update_the_stored_fields() {
    let origin = Origin::start(|r| {
        let revalidating = r.header("if-none-match").is_some();
        match (r.path(), r.method.as_str(), revalidating) {
            ("/upd", _, true) => Response::ok("")
                .status(304)
                .header("Cache-Control", "max-age=600")
                .header("ETag", "\"u1\"")
                .header("X-Version", "2"),
            ("/head", "HEAD", _) => Response::ok("head body")
                .header("Cache-Control", "max-age=600")
                .header("ETag", "\"h1\"")
                .header("X-Version", "2"),
            (path, _, _) => Response::ok(if path == "/head" { "head body" } else { "upd" })
                .header("Cache-Control", "max-age=1")
                .header("ETag", if path == "/head" { "\"h1\"" } else { "\"u1\"" })
                .header("X-Version", "1"),
        }
    });
    let (proxy, http) = start(&origin, "updates", "");
    for path in ["/upd", "/head"] {
        let (_, head, _) = request(http, "GET", path, "");
        assert_eq!(field(&head, "x-version"), Some("1"), "{head}");
    }
    std::thread::sleep(PAST_MAX_AGE_1);
    // RFC 9111 §4.3.4, §3.2: the 304's fields replace the stored ones; the body stays. The
    // client's own If-None-Match names another tag: the proxy revalidates with the entry's
    // validators, and the freshened entry answers the client's condition (§4.3.2: a 200).
    let (status, head, body) = request(http, "GET", "/upd", "If-None-Match: \"old\"\r\n");
    assert_eq!((status, body.as_str()), (200, "upd"), "{head}");
    assert_eq!(
        origin.requests()[2].header("if-none-match"),
        Some("\"u1\""),
        "revalidated with the entry's validator"
    );
    assert_eq!(
        field(&head, "x-version"),
        Some("2"),
        "{head}\n{}",
        proxy.proc.logs()
    );
    let (_, head, body) = request(http, "GET", "/upd", "");
    assert_eq!(
        (body.as_str(), field(&head, "x-version")),
        ("upd", Some("2"))
    );
    assert_eq!(origin.hits("/upd"), 2);
    // §4.3.5: a 200 to the HEAD that revalidated the entry updates it the same way.
    let (status, head, body) = request(http, "HEAD", "/head", "");
    assert_eq!((status, body.as_str()), (200, ""), "{head}");
    let (_, head, body) = request(http, "GET", "/head", "");
    assert_eq!(body, "head body");
    assert_eq!(field(&head, "x-version"), Some("2"), "{head}");
    assert!(field(&head, "age").is_some(), "a hit: {head}");
    assert_eq!(
        origin.hits("/head"),
        2,
        "GET, then the HEAD that updated it"
    );
}

#[test]
fn a_forwarded_age_counts_the_time_in_transit() {
    let origin = Origin::start(|_| {
        Response::ok("aged")
            .header("Cache-Control", "max-age=600")
            .header("Age", "100")
            .delay(Duration::from_millis(1100))
    });
    let (_proxy, http) = start(&origin, "age", "");
    // RFC 9111 §4.2.3: the origin's Age plus the response delay (over 1 s here).
    for _ in 0..2 {
        let (_, head, _) = request(http, "GET", "/aged", "");
        let age: u64 = field(&head, "age")
            .and_then(|a| a.parse().ok())
            .unwrap_or(0);
        assert!(age >= 101, "{head}");
    }
    assert_eq!(origin.hits("/aged"), 1);
}

#[test]
fn a_post_response_naming_its_target_is_reused_for_get() {
    let origin = Origin::start(|r| match r.method.as_str() {
        "POST" => Response::ok("created")
            .header("Cache-Control", "max-age=600")
            .header("Content-Location", "/post"),
        _ => Response::ok("from the origin"),
    });
    let (_proxy, http) = start(&origin, "post", "cache_methods GET POST;");
    let post = "Content-Length: 4\r\n\r\nbody";
    let req = format!("POST /post HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n{post}");
    let resp = raw_exchange(http, req.as_bytes(), Duration::from_secs(10)).expect("post");
    assert!(resp.starts_with(b"HTTP/1.1 200"));
    // RFC 9110 §9.3.3: explicit freshness and Content-Location = the target.
    let (status, head, body) = request(http, "GET", "/post", "");
    assert_eq!((status, body.as_str()), (200, "created"), "{head}");
    assert!(field(&head, "age").is_some(), "{head}");
    assert_eq!(
        origin.hits("/post"),
        1,
        "the GET was answered from the POST response"
    );
}
