//! Conditional requests answered from cache (RFC 9110 §13, RFC 9111
//! §4.3.2) and revalidation toward the origin (§4.3.1, §4.3.4).

mod common;

use cache::{weak_match, Entry, Freshness, Policy, ReplyKind};
use common::*;

fn tagged(etag: &str) -> Entry {
    entry(
        &Policy::default(),
        &[],
        &[
            ("Cache-Control", "max-age=60"),
            ("ETag", etag),
            ("Last-Modified", "Tue, 14 Nov 2023 20:00:00 GMT"),
            ("Vary", "Accept-Encoding"),
            ("Content-Type", "text/html"),
        ],
        "<html>",
    )
}

fn kind(e: &Entry, method: &str, headers: &[(&'static str, &str)]) -> ReplyKind {
    let h = hdrs(headers);
    e.reply_kind(&req(method, "/r", &h))
}

#[test]
fn if_none_match_strong_weak_lists_and_star() {
    let strong = tagged("\"v1\"");
    let weak = tagged("W/\"v1\"");
    for e in [&strong, &weak] {
        assert_eq!(
            kind(e, "GET", &[("If-None-Match", "\"v1\"")]),
            ReplyKind::NotModified
        );
        assert_eq!(
            kind(e, "GET", &[("If-None-Match", "W/\"v1\"")]),
            ReplyKind::NotModified
        );
        assert_eq!(
            kind(e, "GET", &[("If-None-Match", "\"a\", \"v1\"")]),
            ReplyKind::NotModified
        );
        assert_eq!(
            kind(
                e,
                "GET",
                &[("If-None-Match", "\"a\""), ("If-None-Match", "W/\"v1\"")]
            ),
            ReplyKind::NotModified
        );
        assert_eq!(
            kind(e, "GET", &[("If-None-Match", "*")]),
            ReplyKind::NotModified
        );
        assert_eq!(
            kind(e, "GET", &[("If-None-Match", "\"v2\"")]),
            ReplyKind::Full
        );
        assert_eq!(
            kind(e, "GET", &[("If-None-Match", "v1")]),
            ReplyKind::Full,
            "unquoted tag is not a match"
        );
        assert_eq!(
            kind(e, "HEAD", &[("If-None-Match", "\"v1\"")]),
            ReplyKind::NotModified
        );
    }
    assert!(weak_match(b"W/\"x\"", b"\"x\""));
    assert!(!weak_match(b"\"x\"", b"\"y\""));
}

#[test]
fn if_modified_since() {
    let e = tagged("\"v1\"");
    assert_eq!(
        kind(
            &e,
            "GET",
            &[("If-Modified-Since", "Tue, 14 Nov 2023 20:00:00 GMT")]
        ),
        ReplyKind::NotModified
    );
    assert_eq!(
        kind(
            &e,
            "GET",
            &[("If-Modified-Since", "Tue, 14 Nov 2023 21:00:00 GMT")]
        ),
        ReplyKind::NotModified
    );
    assert_eq!(
        kind(
            &e,
            "GET",
            &[("If-Modified-Since", "Tue, 14 Nov 2023 19:59:59 GMT")]
        ),
        ReplyKind::Full
    );
    assert_eq!(
        kind(&e, "GET", &[("If-Modified-Since", "yesterday")]),
        ReplyKind::Full
    );
}

#[test]
fn if_none_match_takes_precedence_over_if_modified_since() {
    let e = tagged("\"v1\"");
    let later = ("If-Modified-Since", "Tue, 14 Nov 2023 21:00:00 GMT");
    assert_eq!(
        kind(&e, "GET", &[("If-None-Match", "\"v2\""), later]),
        ReplyKind::Full
    );
}

#[test]
fn preconditions_ignored_for_non_2xx() {
    let policy = Policy {
        default_ttl: std::time::Duration::from_secs(60),
        ..Policy::default()
    };
    let h = hdrs(&[("ETag", "\"nf\""), ("Date", &http_date(t(0)))]);
    let e = Entry::build(
        &policy,
        &req("GET", "/", &[]),
        &resp(404, &h, 0),
        body(""),
        times_at(0),
    )
    .unwrap();
    assert_eq!(
        kind(&e, "GET", &[("If-None-Match", "\"nf\"")]),
        ReplyKind::Full
    );
}

#[test]
fn head_gets_head_only_and_304_carries_validators() {
    let e = tagged("\"v1\"");
    assert_eq!(kind(&e, "HEAD", &[]), ReplyKind::HeadOnly);
    let (head, body) = e.reply_parts(ReplyKind::HeadOnly);
    assert!(head.ends_with(b"Content-Length: 6\r\n") && body.is_empty());
    let (nm, nm_body) = e.reply_parts(ReplyKind::NotModified);
    let nm = String::from_utf8(nm.to_vec()).unwrap();
    assert!(nm_body.is_empty());
    assert_eq!(
        nm,
        format!(
            "HTTP/1.1 304 Not Modified\r\nCache-Control: max-age=60\r\nETag: \"v1\"\r\n\
             Last-Modified: Tue, 14 Nov 2023 20:00:00 GMT\r\nVary: Accept-Encoding\r\nDate: {}\r\n",
            http_date(t(0))
        )
    );
}

#[test]
fn validators_for_the_origin() {
    let e = tagged("W/\"v1\"");
    let v: Vec<(&str, &[u8])> = e.validators().collect();
    assert_eq!(
        v,
        [
            ("If-None-Match", &b"W/\"v1\""[..]),
            ("If-Modified-Since", &b"Tue, 14 Nov 2023 20:00:00 GMT"[..])
        ]
    );
    let plain = entry(
        &Policy::default(),
        &[],
        &[("Cache-Control", "max-age=1")],
        "x",
    );
    assert_eq!(plain.validators().count(), 0);
}

#[test]
fn freshening_with_a_304_updates_headers_and_keeps_body() {
    let policy = Policy::default();
    let accept = hdrs(&[("Accept-Encoding", "gzip")]);
    let old = entry(
        &policy,
        &accept,
        &[
            ("Cache-Control", "max-age=10"),
            ("ETag", "\"v1\""),
            ("X-Old", "1"),
            ("Vary", "Accept-Encoding"),
        ],
        "payload",
    );
    assert!(matches!(
        old.freshness(t(20)),
        Freshness::Stale {
            has_validators: true
        }
    ));
    let not_modified = hdrs(&[
        ("Cache-Control", "max-age=100"),
        ("Date", &http_date(t(20))),
        ("ETag", "\"v1\""),
        ("X-New", "2"),
        ("Content-Length", "0"),
    ]);
    let fresh = old
        .freshened(
            &policy,
            &req("GET", "/r", &accept),
            &not_modified,
            times_at(20),
        )
        .unwrap();
    assert_eq!(fresh.freshness(t(21)), Freshness::Fresh);
    assert_eq!(
        fresh.remaining_freshness(t(20)),
        std::time::Duration::from_secs(100)
    );
    assert_eq!(&fresh.body()[..], b"payload");
    assert!(
        std::sync::Arc::ptr_eq(fresh.body(), old.body()),
        "body is shared, not copied"
    );
    let fields: Vec<(String, String)> = fresh
        .stored_fields()
        .map(|(n, v)| {
            (
                String::from_utf8_lossy(n).into(),
                String::from_utf8_lossy(v).into(),
            )
        })
        .collect();
    let get = |name: &str| {
        fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
    };
    assert_eq!(get("cache-control"), ["max-age=100"]);
    assert_eq!(get("x-old"), ["1"]);
    assert_eq!(get("x-new"), ["2"]);
    assert_eq!(get("content-length"), ["7"]);
    assert!(fresh.vary_matches(&accept));
    assert!(!fresh.vary_matches(&hdrs(&[("Accept-Encoding", "br")])));
}
