//! The edges of RFC 9111 that the cache-tests suite (cache-tests.fyi) probes, through the
//! real proxy: malformed entity-tags, invalid Expires and duplicate directives, targeted
//! fields, qualified no-cache, unknown unsafe methods, stale on a closed connection,
//! heuristic deltas and Vary normalisation. docs/CACHE.md, "The edges", says which are
//! required and which are argued.
//!
//! The origin answers every request with the fields its `X-Set` asks for
//! (`Name: value|Name: value`), so one origin serves every case; each case has its own path.

use std::net::SocketAddr;
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::raw_exchange;

const CONFIG: &str = "cache 1;\ncache_fulfill * *;";

fn start(origin: &Origin) -> (Proxy, SocketAddr) {
    start_with(origin, CONFIG)
}

fn start_with(origin: &Origin, config: &str) -> (Proxy, SocketAddr) {
    let setup = Setup::new("cache-edges");
    let http = setup.http;
    let conf = setup.config(origin.addr(), "", config);
    (setup.start(&conf), http)
}

/// Answers with the fields of `X-Set`; `/drop...` paths close the connection unanswered
/// from their second request on; `/obs-text` sends an ETag with a byte above 0x7f.
fn origin() -> Origin {
    Origin::start(|r| {
        if r.path().starts_with("/drop") && r.header("if-none-match").is_some() {
            return Response::dropped();
        }
        let mut resp = Response::ok(format!("body of {}", r.path()));
        if r.path() == "/obs-text" {
            return resp
                .header("Cache-Control", "max-age=3600")
                .header("ETag", "\"abcdef\u{fc}\"");
        }
        for field in r.header("x-set").unwrap_or("").split('|') {
            if let Some((name, value)) = field.split_once(':') {
                resp = resp.header(name.trim(), value.trim());
            }
        }
        resp
    })
}

/// One request; returns the status and the whole response as text.
fn fetch(addr: SocketAddr, method: &str, path: &str, fields: &str) -> (u16, String) {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: e.example\r\n{fields}Content-Length: 0\r\n\
         Connection: close\r\n\r\n"
    );
    let resp = raw_exchange(addr, req.as_bytes(), Duration::from_secs(10)).expect("exchange");
    let text = String::from_utf8_lossy(&resp).into_owned();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

fn set(fields: &str) -> String {
    format!("X-Set: {fields}\r\n")
}

/// GETs `path` twice with the same `X-Set`; returns the origin's hits for it.
fn hits_after_two(origin: &Origin, addr: SocketAddr, path: &str, fields: &str) -> usize {
    for _ in 0..2 {
        let (status, text) = fetch(addr, "GET", path, &set(fields));
        assert_eq!(status, 200, "{path}: {text}");
    }
    origin.hits(path)
}

/// RFC 9110 §8.8.3: an entity-tag is `[ W/ ] DQUOTE *etagc DQUOTE`, etagc including
/// obs-text, `W/` case-sensitive. Valid tags compare (weak comparison for If-None-Match);
/// a malformed one (unquoted, `w/`, `W\`, `W"`) matches nothing, so the client gets the
/// full 200, which is always a correct answer to a conditional request.
#[test]
fn entity_tags_compare_by_the_grammar() {
    let origin = origin();
    let (_proxy, addr) = start(&origin);
    let cases: [(&str, &str, &str, u16); 9] = [
        ("/e1", "\"abcdef\"", "\"abcdef\"", 304),
        ("/e2", "W/\"abcdef\"", "\"abcdef\"", 304),
        ("/e3", "\"abcdef\"", "\"1\", \"abcdef\", \"2\"", 304),
        ("/e4", "\"abcdef\"", "abcdef", 200),
        ("/e5", "abcdef", "abcdef", 200),
        ("/e6", "abcdef", "\"abcdef\"", 200),
        ("/e7", "w/\"abcdef\"", "w/\"abcdef\"", 200),
        ("/e8", "W\\\"abcdef\"", "W\\\"abcdef\"", 200),
        ("/e9", "W\"abcdef\"", "W\"abcdef\"", 200),
    ];
    for (path, etag, inm, want) in cases {
        let fields = set(&format!("Cache-Control: max-age=3600|ETag: {etag}"));
        assert_eq!(fetch(addr, "GET", path, &fields).0, 200, "{path}");
        let cond = format!("{fields}If-None-Match: {inm}\r\n");
        let (status, text) = fetch(addr, "GET", path, &cond);
        assert_eq!(status, want, "ETag {etag}, If-None-Match {inm}: {text}");
        assert_eq!(origin.hits(path), 1, "{path} answered from the cache");
    }
    // obs-text is etagc: the stored tag with a byte above 0x7f matches itself.
    assert_eq!(fetch(addr, "GET", "/obs-text", "").0, 200);
    let inm = "If-None-Match: \"abcdef\u{fc}\"\r\n";
    let (status, text) = fetch(addr, "GET", "/obs-text", inm);
    assert_eq!(status, 304, "{text}");
    assert!(text.contains("ETag: \"abcdef\u{fc}\""), "{text}");
}

/// RFC 9111 §5.3 and RFC 9110 §5.6.7: an Expires that is not an HTTP-date is in the past.
/// IMF-fixdate is fixed-width with single spaces; the obsolete RFC 850 and asctime forms are
/// accepted, as is the wrong case of day, month and "GMT" (the suite's "optimal" cases).
#[test]
fn invalid_expires_forms_are_in_the_past() {
    let origin = origin();
    let (_proxy, addr) = start(&origin);
    let valid = [
        "Thu, 18 Aug 2050 02:01:18 GMT",
        "THU, 18 AUG 2050 02:01:18 gMT",
        "Thursday, 18-Aug-50 02:01:18 GMT",
        "Thu Aug  8 02:01:18 2050",
        "Sun, 21 Nov 2286 04:46:39 GMT",
    ];
    let invalid = [
        "Thu, 18 Aug 2050 02:01:18 UTC",
        "Thu, 18 Aug 2050 02:01:18 AEST",
        "Thu, 18 Aug 50 02:01:18 GMT",
        "Thu 18 Aug 2050 02:01:18 GMT",
        "Thu, 18  Aug  2050 02:01:18 GMT",
        "Thu, 18-Aug-2050 02:01:18 GMT",
        "Thu, 18 Aug 2050 02.01.18 GMT",
        "Thu, 18 Aug 2050 2:01:18 GMT",
        "Thu, 8 Aug 2050 02:01:18 GMT",
        "0",
    ];
    for (i, expires) in valid.iter().enumerate() {
        let path = format!("/valid{i}");
        let hits = hits_after_two(&origin, addr, &path, &format!("Expires: {expires}"));
        assert_eq!(hits, 1, "Expires: {expires} is a future date");
    }
    for (i, expires) in invalid.iter().enumerate() {
        let path = format!("/invalid{i}");
        let hits = hits_after_two(&origin, addr, &path, &format!("Expires: {expires}"));
        assert_eq!(hits, 2, "Expires: {expires} is invalid, so in the past");
    }
    // Expires is a singleton: two lines that disagree are no valid date.
    let two = "Expires: Thu, 18 Aug 2050 02:01:18 GMT|Expires: Thu, 18 Aug 2050 02:01:19 GMT";
    assert_eq!(hits_after_two(&origin, addr, "/two-expires", two), 2);
}

/// RFC 9111 §4.2.1, §5.2: a directive repeated with another value on separate lines is
/// conflicting, so stale; `max-age` inside a quoted argument of another directive is not a
/// directive (the real one, 0, decides).
#[test]
fn duplicate_and_quoted_directives() {
    let origin = origin();
    let (_proxy, addr) = start(&origin);
    let cases = [
        (
            "/dup-lines",
            "Cache-Control: max-age=3600|Cache-Control: max-age=0",
        ),
        (
            "/dup-lines-rev",
            "Cache-Control: max-age=0|Cache-Control: max-age=3600",
        ),
        (
            "/in-quotes",
            "Cache-Control: ext=\"max-age=3600\", max-age=0",
        ),
        (
            "/in-quotes-rev",
            "Cache-Control: max-age=0, ext=\"max-age=3600\"",
        ),
        ("/single-quoted", "Cache-Control: max-age='3600'"),
    ];
    for (path, fields) in cases {
        assert_eq!(hits_after_two(&origin, addr, path, fields), 2, "{fields}");
    }
    let same = "Cache-Control: max-age=3600|Cache-Control: max-age=3600";
    assert_eq!(hits_after_two(&origin, addr, "/dup-same", same), 1);
    let zeros = "Cache-Control: max-age=003600";
    assert_eq!(hits_after_two(&origin, addr, "/zeros", zeros), 1);
}

/// RFC 9213 §2.2 with RFC 9111: `CDN-Cache-Control` replaces Cache-Control for this cache,
/// so its no-cache and private forbid reuse whatever Cache-Control says, an Age beyond its
/// max-age makes the response stale on arrival, and its max-age stores a response that
/// Cache-Control says not to store. The field is for this cache only and is not forwarded.
#[test]
fn cdn_cache_control_directives() {
    let origin = origin();
    let (_proxy, addr) = start(&origin);
    let cases = [
        (
            "/cdn-no-cache",
            "CDN-Cache-Control: no-cache|Cache-Control: max-age=3600",
            2,
        ),
        (
            "/cdn-private",
            "CDN-Cache-Control: private|Cache-Control: max-age=3600",
            2,
        ),
        ("/cdn-age", "CDN-Cache-Control: max-age=100|Age: 200", 2),
        (
            "/cdn-zero",
            "CDN-Cache-Control: max-age=0|Expires: Thu, 18 Aug 2050 02:01:18 GMT",
            2,
        ),
        (
            "/cdn-store",
            "CDN-Cache-Control: max-age=3600|Cache-Control: no-store",
            1,
        ),
        (
            "/cdn-short",
            "CDN-Cache-Control: max-age=3600|Cache-Control: max-age=0",
            1,
        ),
        ("/cdn-case", "CDN-Cache-Control: MaX-aGe=3600, ext=1", 1),
    ];
    for (path, fields, want) in cases {
        assert_eq!(
            hits_after_two(&origin, addr, path, fields),
            want,
            "{fields}"
        );
    }
    let (_, text) = fetch(
        addr,
        "GET",
        "/cdn-store",
        &set("CDN-Cache-Control: max-age=3600"),
    );
    assert!(
        !text.to_ascii_lowercase().contains("cdn-cache-control"),
        "{text}"
    );
}

/// RFC 9111 §5.2.2.4: the fields a qualified `no-cache="a"` lists must not be sent without
/// revalidation. The cache treats the qualified form as unqualified (which the RFC allows):
/// the whole response is revalidated, so `a` is never served from storage.
#[test]
fn qualified_no_cache_is_revalidated_whole() {
    let origin = origin();
    let (_proxy, addr) = start(&origin);
    let fields = "Cache-Control: no-cache=\"a\", max-age=3600|a: 1|b: 2";
    assert_eq!(hits_after_two(&origin, addr, "/nc-a", fields), 2);
    let fields = "Cache-Control: no-cache=\"a, b\"|Cache-Control: max-age=3600|a: 1|c: 3";
    assert_eq!(hits_after_two(&origin, addr, "/nc-ab", fields), 2);
}

/// RFC 9111 §4.4 with RFC 9110 §9.2.1: a method the proxy does not know is unsafe, so its
/// 2xx invalidates the target. (frang's default `http_methods` refuses methods it does not
/// know, as Tempesta's does; `unknown` lets them through.)
#[test]
fn unknown_methods_invalidate_their_target() {
    let origin = origin();
    let config = format!("{CONFIG}\nfrang_limits {{ http_methods GET HEAD unknown; }}");
    let (_proxy, addr) = start_with(&origin, &config);
    let fresh = "Cache-Control: max-age=3600";
    for method in ["M-SEARCH", "FROBNICATE"] {
        let path = format!("/inv-{method}");
        assert_eq!(hits_after_two(&origin, addr, &path, fresh), 1);
        let (status, text) = fetch(addr, method, &path, "");
        assert_eq!(status, 200, "{method}: {text}");
        assert_eq!(fetch(addr, "GET", &path, &set(fresh)).0, 200);
        assert_eq!(origin.hits(&path), 3, "{method} invalidated {path}");
    }
}

/// RFC 5861 §4 with RFC 9111 §4.2.4: an origin that closes the connection instead of
/// answering a revalidation is an error; a stored response whose stale-if-error covers it
/// is served, one without gets the proxy's 502 (no stale use was allowed).
#[test]
fn stale_on_a_closed_connection_only_when_allowed() {
    let origin = origin();
    let (_proxy, addr) = start(&origin);
    let sie = set("Cache-Control: max-age=1, stale-if-error=60|ETag: \"v\"");
    let plain = set("Cache-Control: max-age=1|ETag: \"v\"");
    assert_eq!(fetch(addr, "GET", "/drop-sie", &sie).0, 200);
    assert_eq!(fetch(addr, "GET", "/drop-plain", &plain).0, 200);
    std::thread::sleep(Duration::from_millis(2300));
    let (status, text) = fetch(addr, "GET", "/drop-sie", &sie);
    assert_eq!(status, 200, "{text}");
    assert!(text.ends_with("body of /drop-sie"), "{text}");
    let (status, text) = fetch(addr, "GET", "/drop-plain", &plain);
    assert_eq!(status, 502, "{text}");
}

/// RFC 9111 §4.2.2: the heuristic lifetime is 10 % of Date − Last-Modified (whole seconds,
/// at most a day): modified 5 s ago is stale at once, 60 s ago fresh for 6 s.
#[test]
fn heuristic_lifetime_follows_the_last_modified_delta() {
    let origin = origin();
    let (_proxy, addr) = start(&origin);
    let now = std::time::SystemTime::now();
    for (delta, want) in [(5, 2), (60, 1), (86_400 * 30, 1)] {
        let lm = e2e::http_date(now - Duration::from_secs(delta));
        let path = format!("/heur{delta}");
        let hits = hits_after_two(&origin, addr, &path, &format!("Last-Modified: {lm}"));
        assert_eq!(hits, want, "modified {delta} s ago");
    }
}

/// RFC 9111 §4.1: selecting fields may be normalised. Whitespace around list elements and
/// the split over several lines never matter (RFC 9110 §5.3, §5.6.1); language tags and
/// content-codings compare case-insensitively (RFC 4647 §2, RFC 9110 §8.4.1). The order of
/// Accept-Language is kept: an origin may read it as a preference.
#[test]
fn vary_normalises_whitespace_lines_and_case() {
    let origin = origin();
    let (_proxy, addr) = start(&origin);
    let vary = set("Cache-Control: max-age=3600|Vary: Accept-Language, Accept-Encoding, Foo");
    let first = "Accept-Language: en, de\r\nAccept-Encoding: gzip, br\r\nFoo: 1,2\r\n";
    let cases: [(&str, bool); 6] = [
        ("Accept-Language:  en ,de \r\nAccept-Encoding: gzip,br\r\nFoo: 1 , 2\r\n", true),
        ("Accept-Language: en\r\nAccept-Language: de\r\nAccept-Encoding: gzip, br\r\nFoo: 1\r\nFoo: 2\r\n", true),
        ("Accept-Language: EN, De\r\nAccept-Encoding: GZIP, Br\r\nFoo: 1,2\r\n", true),
        ("Accept-Language: de, en\r\nAccept-Encoding: gzip, br\r\nFoo: 1,2\r\n", false),
        ("Accept-Language: en, de\r\nAccept-Encoding: gzip, br\r\nFoo: 2,1\r\n", false),
        ("Accept-Language: en, de\r\nAccept-Encoding: gzip, br\r\n", false),
    ];
    for (i, (fields, reused)) in cases.iter().enumerate() {
        let path = format!("/vary{i}");
        assert_eq!(fetch(addr, "GET", &path, &format!("{vary}{first}")).0, 200);
        assert_eq!(fetch(addr, "GET", &path, &format!("{vary}{fields}")).0, 200);
        let want = if *reused { 1 } else { 2 };
        assert_eq!(origin.hits(&path), want, "{fields:?}");
    }
}
