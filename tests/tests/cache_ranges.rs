//! Range and conditional requests answered from the cache, through the real proxy (RFC 9110
//! §13, §14; RFC 9111 §3.3, §4.3.2): 206 single part and multipart/byteranges, 416,
//! If-Range both ways, 304 and 412, HEAD with Range; a 206 from the origin relayed and never
//! stored; the same over HTTP/2 (curl, h2c).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{free_port, raw_exchange, wait_for_port};

const BODY: &str = "0123456789abcdefghij";
const LAST_MODIFIED: &str = "Tue, 01 Dec 2026 00:00:00 GMT";

/// An origin with one cacheable document (`/doc`, 20 bytes, strong ETag, Last-Modified long
/// before its Date) and `/partial`, which answers a Range request with its own 206.
fn origin() -> Origin {
    Origin::start(|r| match r.path() {
        "/cond" if r.header("if-none-match") == Some("\"c1\"") => {
            Response::ok("").status(304).header("ETag", "\"c1\"")
        }
        "/cond" => Response::ok("conditional")
            .header("Cache-Control", "max-age=600")
            .header("ETag", "\"c1\""),
        "/partial" if r.header("range").is_some() => Response::ok("2345")
            .status(206)
            .header("Content-Range", "bytes 2-5/20")
            .header("Cache-Control", "max-age=600"),
        _ => Response::ok(BODY)
            .header("Cache-Control", "max-age=600")
            .header("Content-Type", "text/plain")
            .header("ETag", "\"v1\"")
            .header("Last-Modified", LAST_MODIFIED),
    })
}

/// The proxy caching everything, with a plain listener and an h2c one.
fn start(origin: &Origin, tag: &str) -> (Proxy, SocketAddr, SocketAddr) {
    let setup = Setup::new(tag);
    let http = setup.http;
    let h2c = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let extra = format!("listen {h2c} proto=h2c;\ncache 1;\ncache_fulfill * *;");
    let conf = setup.config(origin.addr(), "", &extra);
    let proxy = setup.start(&conf);
    assert!(wait_for_port(h2c, Duration::from_secs(10)), "h2c listens");
    (proxy, http, h2c)
}

/// One request on a new connection; returns (status, head, body).
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

/// The value of field `name` in `head` (case-insensitive name).
fn field<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Stores `/doc` (one origin hit) and returns the proxy.
fn stored(origin: &Origin, tag: &str) -> (Proxy, SocketAddr, SocketAddr) {
    let site = start(origin, tag);
    let (status, _, body) = request(site.1, "GET", "/doc", "");
    assert_eq!((status, body.as_slice()), (200, BODY.as_bytes()));
    site
}

#[test]
fn single_ranges_and_416_from_a_stored_entry() {
    let origin = origin();
    let (proxy, http, _) = stored(&origin, "ranges-single");
    // RFC 9110 §14.1.2: first-last, suffix and open ranges; §15.3.7.1 Content-Range.
    for (range, part, content_range) in [
        ("bytes=2-5", "2345", "bytes 2-5/20"),
        ("bytes=-3", "hij", "bytes 17-19/20"),
        ("bytes=15-", "fghij", "bytes 15-19/20"),
        ("bytes=18-99", "ij", "bytes 18-19/20"),
    ] {
        let (status, head, body) = request(http, "GET", "/doc", &format!("Range: {range}\r\n"));
        assert_eq!(status, 206, "{range}: {head}\n{}", proxy.proc.logs());
        assert_eq!(body, part.as_bytes(), "{range}");
        assert_eq!(field(&head, "content-range"), Some(content_range), "{head}");
        assert_eq!(
            field(&head, "content-length"),
            Some(&*part.len().to_string())
        );
        assert_eq!(
            field(&head, "etag"),
            Some("\"v1\""),
            "a 206 repeats ETag: {head}"
        );
        assert!(field(&head, "age").is_some(), "served from storage: {head}");
    }
    // §15.5.17: nothing satisfiable.
    let (status, head, body) = request(http, "GET", "/doc", "Range: bytes=20-30\r\n");
    assert_eq!(status, 416, "{head}");
    assert_eq!(field(&head, "content-range"), Some("bytes */20"), "{head}");
    assert!(body.is_empty());
    // §14.2: a Range a recipient does not understand is ignored (the whole 200).
    let (status, _, body) = request(http, "GET", "/doc", "Range: lines=1-2\r\n");
    assert_eq!((status, body.as_slice()), (200, BODY.as_bytes()));
    // HEAD ignores Range (§14.2: GET only): the head of the 200.
    let (status, head, body) = request(http, "HEAD", "/doc", "Range: bytes=2-5\r\n");
    assert_eq!(status, 200, "{head}");
    assert_eq!(field(&head, "content-length"), Some("20"), "{head}");
    assert!(body.is_empty());
    assert_eq!(origin.hits("/doc"), 1, "every answer came from the cache");
}

#[test]
fn several_ranges_are_multipart_byteranges() {
    let origin = origin();
    let (_proxy, http, _) = stored(&origin, "ranges-multi");
    let (status, head, body) = request(http, "GET", "/doc", "Range: bytes=0-1,5-6,-2\r\n");
    assert_eq!(status, 206, "{head}");
    assert!(
        field(&head, "content-range").is_none(),
        "§14.6: not in the head"
    );
    let content_type = field(&head, "content-type").unwrap_or_default();
    let boundary = content_type
        .strip_prefix("multipart/byteranges; boundary=")
        .unwrap_or_else(|| panic!("multipart: {head}"));
    let mut expected = String::new();
    for (i, (range, bytes)) in [("0-1", "01"), ("5-6", "56"), ("18-19", "ij")]
        .iter()
        .enumerate()
    {
        if i > 0 {
            expected.push_str("\r\n");
        }
        expected.push_str(&format!(
            "--{boundary}\r\nContent-Type: text/plain\r\nContent-Range: bytes {range}/20\r\n\r\n{bytes}"
        ));
    }
    expected.push_str(&format!("\r\n--{boundary}--\r\n"));
    assert_eq!(String::from_utf8_lossy(&body), expected);
    assert_eq!(
        field(&head, "content-length"),
        Some(&*expected.len().to_string())
    );
    assert_eq!(origin.hits("/doc"), 1);
}

#[test]
fn if_range_selects_the_range_only_for_the_current_representation() {
    let origin = origin();
    let (_proxy, http, _) = stored(&origin, "ranges-if-range");
    // RFC 9110 §13.1.5: a strong ETag that matches, or the Last-Modified date (strong: at
    // least 60 s before Date), gives the range; anything else the whole representation.
    let cases = [
        ("\"v1\"", 206),
        ("\"v0\"", 200),
        ("W/\"v1\"", 200),
        (LAST_MODIFIED, 206),
        ("Wed, 02 Dec 2026 00:00:00 GMT", 200),
    ];
    for (validator, expected) in cases {
        let headers = format!("Range: bytes=2-5\r\nIf-Range: {validator}\r\n");
        let (status, head, body) = request(http, "GET", "/doc", &headers);
        assert_eq!(status, expected, "If-Range {validator}: {head}");
        let whole = if expected == 206 { "2345" } else { BODY };
        assert_eq!(body, whole.as_bytes(), "If-Range {validator}");
    }
    assert_eq!(origin.hits("/doc"), 1);
}

#[test]
fn preconditions_give_304_and_412_in_rfc_order() {
    let origin = origin();
    let (_proxy, http, _) = stored(&origin, "ranges-conditional");
    // RFC 9110 §13.2.2 order: If-Match, If-Unmodified-Since, If-None-Match,
    // If-Modified-Since, then Range.
    let cases: [(&str, u16); 9] = [
        ("If-None-Match: \"v1\"\r\n", 304),
        ("If-None-Match: W/\"v1\"\r\n", 304),
        ("If-None-Match: \"v2\"\r\n", 200),
        ("If-Modified-Since: Wed, 02 Dec 2026 00:00:00 GMT\r\n", 304),
        ("If-Modified-Since: Mon, 30 Nov 2026 00:00:00 GMT\r\n", 200),
        ("If-Match: \"v0\"\r\n", 412),
        ("If-Match: \"v1\"\r\nRange: bytes=0-0\r\n", 206),
        (
            "If-Unmodified-Since: Mon, 30 Nov 2026 00:00:00 GMT\r\n",
            412,
        ),
        // If-Match is evaluated first: it fails even though If-None-Match would give 304.
        ("If-Match: \"v0\"\r\nIf-None-Match: \"v1\"\r\n", 412),
    ];
    for (headers, expected) in cases {
        let (status, head, body) = request(http, "GET", "/doc", headers);
        assert_eq!(status, expected, "{headers}: {head}");
        if status == 304 || status == 412 {
            assert!(body.is_empty(), "{headers}");
        }
        if status == 304 {
            assert_eq!(field(&head, "etag"), Some("\"v1\""), "§15.4.5: {head}");
        }
    }
    // §13.1.3: If-Modified-Since is ignored when If-None-Match is present.
    let both = "If-None-Match: \"v2\"\r\nIf-Modified-Since: Wed, 02 Dec 2026 00:00:00 GMT\r\n";
    assert_eq!(request(http, "GET", "/doc", both).0, 200);
    assert_eq!(origin.hits("/doc"), 1);
}

#[test]
fn conditionals_that_miss_go_to_the_origin_and_its_304_is_not_stored() {
    let origin = origin();
    let (_proxy, http, _) = start(&origin, "ranges-conditional-miss");
    // RFC 9111 §4.3.2: with nothing stored the cache evaluates nothing; the origin answers.
    let inm = "If-None-Match: \"c1\"\r\n";
    let (status, head, _) = request(http, "GET", "/cond", inm);
    assert_eq!(status, 304, "{head}");
    assert!(
        field(&head, "age").is_none(),
        "the origin's own 304: {head}"
    );
    assert_eq!(request(http, "GET", "/cond", "").2, b"conditional");
    assert_eq!(origin.hits("/cond"), 2, "the 304 was not stored");
    let (status, head, _) = request(http, "GET", "/cond", inm);
    assert_eq!(status, 304, "{head}");
    assert!(field(&head, "age").is_some(), "now from the cache: {head}");
    assert_eq!(origin.hits("/cond"), 2);
}

#[test]
fn a_206_keeps_the_connection_in_step() {
    let origin = origin();
    let (_proxy, http, _) = stored(&origin, "ranges-keepalive");
    let mut conn = TcpStream::connect(http).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn.write_all(
        b"GET /doc HTTP/1.1\r\nHost: site.test\r\nRange: bytes=0-1,4-4\r\n\r\n\
          GET /doc HTTP/1.1\r\nHost: site.test\r\nRange: bytes=3-4\r\n\r\n\
          GET /doc HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut all = Vec::new();
    conn.read_to_end(&mut all).unwrap();
    let text = String::from_utf8_lossy(&all);
    let responses: Vec<&str> = text.split("HTTP/1.1 ").skip(1).collect();
    assert_eq!(responses.len(), 3, "{text}");
    assert!(responses[0].starts_with("206"), "{text}");
    assert!(responses[1].starts_with("206") && responses[1].ends_with("\r\n\r\n34"));
    assert!(
        responses[2].starts_with("200") && responses[2].ends_with(BODY),
        "{text}"
    );
}

#[test]
fn a_206_from_the_origin_is_relayed_and_never_stored() {
    let origin = origin();
    let (_proxy, http, _) = start(&origin, "ranges-origin-206");
    // RFC 9111 §3.3-3.4: this cache does not store or combine partial responses.
    for i in 1..=2 {
        let (status, head, body) = request(http, "GET", "/partial", "Range: bytes=2-5\r\n");
        assert_eq!((status, body.as_slice()), (206, &b"2345"[..]), "{head}");
        assert_eq!(field(&head, "content-range"), Some("bytes 2-5/20"));
        assert_eq!(origin.hits("/partial"), i, "nothing stored from a 206");
    }
    // The whole response is stored; ranges are then answered from it.
    assert_eq!(request(http, "GET", "/partial", "").2, BODY.as_bytes());
    let (status, _, body) = request(http, "GET", "/partial", "Range: bytes=10-11\r\n");
    assert_eq!((status, body.as_slice()), (206, &b"ab"[..]));
    assert_eq!(origin.hits("/partial"), 3);
}

/// curl over h2c: (status, headers, body).
fn curl_h2(addr: SocketAddr, path: &str, flags: &[&str]) -> (u16, String, Vec<u8>) {
    let resolve = format!("site.test:{}:127.0.0.1", addr.port());
    let url = format!("http://site.test:{}{path}", addr.port());
    let out = Command::new("timeout")
        .args([
            "30",
            "curl",
            "-s",
            "-i",
            "--http2-prior-knowledge",
            "--resolve",
        ])
        .arg(&resolve)
        // The authority the HTTP/1.1 requests used: the same cache key.
        .args(["-H", "Host: site.test"])
        .args(flags)
        .arg(&url)
        .output()
        .expect("curl");
    let resp = out.stdout;
    let split = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(resp.len(), |i| i + 4);
    let head = String::from_utf8_lossy(&resp[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head, resp[split..].to_vec())
}

#[test]
fn ranges_and_304_over_http2() {
    let origin = origin();
    let (proxy, _http, h2c) = stored(&origin, "ranges-h2");
    let (status, head, body) = curl_h2(h2c, "/doc", &["-r", "2-5"]);
    assert_eq!(status, 206, "{head}\n{}", proxy.proc.logs());
    assert!(head.starts_with("HTTP/2 "), "{head}");
    assert_eq!(body, b"2345");
    assert_eq!(field(&head, "content-range"), Some("bytes 2-5/20"));
    let (status, head, body) = curl_h2(h2c, "/doc", &["-r", "0-1,18-19"]);
    assert_eq!(status, 206, "{head}");
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.contains("Content-Range: bytes 0-1/20\r\n\r\n01\r\n--")
            && text.contains("Content-Range: bytes 18-19/20\r\n\r\nij\r\n--"),
        "{text}"
    );
    let (status, head, _) = curl_h2(h2c, "/doc", &["-r", "40-50"]);
    assert_eq!(status, 416, "{head}");
    let (status, head, body) = curl_h2(h2c, "/doc", &["-H", "If-None-Match: \"v1\""]);
    assert_eq!(status, 304, "{head}");
    assert!(body.is_empty());
    let (status, _, _) = curl_h2(h2c, "/doc", &["-H", "If-Match: \"nope\""]);
    assert_eq!(status, 412);
    let (status, _, body) = curl_h2(h2c, "/doc", &[]);
    assert_eq!((status, body.as_slice()), (200, BODY.as_bytes()));
    assert_eq!(
        origin.hits("/doc"),
        1,
        "all from the entry stored over HTTP/1.1"
    );
}
