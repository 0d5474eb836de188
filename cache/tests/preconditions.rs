//! RFC 9110 §13 audit: preconditions evaluated by the cache against a
//! stored response, one table per MUST (RFC 9110 §13.1.1-13.1.5, §13.2.1,
//! §13.2.2; RFC 9111 §4.3.2).

mod common;

use std::time::Duration;

use cache::{decide, strong_match, weak_match, Answer, Entry, Policy, ReplyKind, Representation};
use common::*;

const NM: Answer = Answer::Stored(ReplyKind::NotModified);
const FULL: Answer = Answer::Stored(ReplyKind::Full);
const HEAD: Answer = Answer::Stored(ReplyKind::HeadOnly);
const FAIL: Answer = Answer::PreconditionFailed;

fn lm() -> String {
    http_date(t(0) - Duration::from_secs(3600))
}

fn stored(etag: &str) -> Entry {
    entry(
        &Policy::default(),
        &[],
        &[
            ("Cache-Control", "max-age=60"),
            ("ETag", etag),
            ("Last-Modified", &lm()),
        ],
        "content",
    )
}

type Row<'a> = (&'a str, Vec<(&'static str, &'a str)>, Answer);

fn check(e: &Entry, rows: Vec<Row<'_>>, rule: &str) {
    for (method, headers, want) in rows {
        let h = hdrs(&headers);
        assert_eq!(
            e.answer(&req(method, "/r", &h)),
            want,
            "{rule}: {method} {headers:?}"
        );
    }
}

/// §13.1.1: If-Match MUST use the strong comparison; `*` is true when a
/// representation exists; false → 412 (§13.2.2 step 1).
#[test]
fn rfc9110_13_1_1_if_match_strong_comparison() {
    let strong = stored("\"v1\"");
    check(
        &strong,
        vec![
            ("GET", vec![("If-Match", "\"v1\"")], FULL),
            ("GET", vec![("If-Match", "\"x\", \"v1\"")], FULL),
            ("GET", vec![("If-Match", "*")], FULL),
            ("GET", vec![("If-Match", "W/\"v1\"")], FAIL),
            ("GET", vec![("If-Match", "\"v2\"")], FAIL),
            ("GET", vec![("If-Match", "v1")], FAIL),
            ("GET", vec![("If-Match", "")], FAIL),
            ("HEAD", vec![("If-Match", "\"v2\"")], FAIL),
        ],
        "13.1.1",
    );
    let weak = stored("W/\"v1\"");
    check(
        &weak,
        vec![
            ("GET", vec![("If-Match", "\"v1\"")], FAIL),
            ("GET", vec![("If-Match", "W/\"v1\"")], FAIL),
            ("GET", vec![("If-Match", "*")], FULL),
        ],
        "13.1.1 weak stored",
    );
    assert!(strong_match(b"\"a\"", b" \"a\" "));
    assert!(!strong_match(b"W/\"a\"", b"W/\"a\""));
    assert!(!strong_match(b"\"a", b"\"a"));
}

/// §13.1.2: If-None-Match MUST use the weak comparison; `*` matches any
/// stored representation; false → 304 for GET/HEAD.
#[test]
fn rfc9110_13_1_2_if_none_match_weak_comparison() {
    for e in [stored("\"v1\""), stored("W/\"v1\"")] {
        check(
            &e,
            vec![
                ("GET", vec![("If-None-Match", "\"v1\"")], NM),
                ("GET", vec![("If-None-Match", "W/\"v1\"")], NM),
                ("HEAD", vec![("If-None-Match", "W/\"v1\"")], NM),
                ("GET", vec![("If-None-Match", "\"a\", W/\"v1\"")], NM),
                ("GET", vec![("If-None-Match", "*")], NM),
                ("GET", vec![("If-None-Match", "\"v2\"")], FULL),
                // Malformed tags are handled safely: no match, full response.
                ("GET", vec![("If-None-Match", "v1")], FULL),
                ("GET", vec![("If-None-Match", "\"v1")], FULL),
                ("GET", vec![("If-None-Match", "W/v1")], FULL),
                ("GET", vec![("If-None-Match", "\"v\"1\"")], FULL),
            ],
            "13.1.2",
        );
    }
    assert!(weak_match(b"W/\"x\"", b"\"x\""));
    assert!(!weak_match(b"\"x\"", b"\"y\""));
    assert!(!weak_match(b"x", b"x"), "unquoted tags never match");
}

/// §13.1.3: If-Modified-Since MUST be ignored with If-None-Match, when not
/// a valid HTTP-date or a list, and for methods other than GET/HEAD.
#[test]
fn rfc9110_13_1_3_if_modified_since_ignored_cases() {
    let e = stored("\"v1\"");
    let now = http_date(t(0));
    let before = http_date(t(0) - Duration::from_secs(7200));
    check(
        &e,
        vec![
            ("GET", vec![("If-Modified-Since", &now)], NM),
            ("GET", vec![("If-Modified-Since", &lm())], NM),
            ("HEAD", vec![("If-Modified-Since", &now)], NM),
            ("GET", vec![("If-Modified-Since", &before)], FULL),
            // With If-None-Match, If-Modified-Since is ignored.
            (
                "GET",
                vec![("If-None-Match", "\"v2\""), ("If-Modified-Since", &now)],
                FULL,
            ),
            // Invalid dates and lists are ignored.
            ("GET", vec![("If-Modified-Since", "yesterday")], FULL),
            ("GET", vec![("If-Modified-Since", "0")], FULL),
            (
                "GET",
                vec![("If-Modified-Since", &now), ("If-Modified-Since", &now)],
                FULL,
            ),
            // Other methods: ignored (answered as the stored response).
            ("POST", vec![("If-Modified-Since", &now)], FULL),
        ],
        "13.1.3",
    );
}

/// RFC 9111 §4.3.2: without Last-Modified, If-Modified-Since is compared
/// with the stored Date.
#[test]
fn rfc9111_4_3_2_if_modified_since_uses_date_without_last_modified() {
    let e = entry(
        &Policy::default(),
        &[],
        &[("Cache-Control", "max-age=60")],
        "x",
    );
    check(
        &e,
        vec![
            ("GET", vec![("If-Modified-Since", &http_date(t(0)))], NM),
            (
                "GET",
                vec![(
                    "If-Modified-Since",
                    &http_date(t(0) - Duration::from_secs(1)),
                )],
                FULL,
            ),
        ],
        "9111 4.3.2",
    );
}

/// §13.1.4: If-Unmodified-Since MUST be ignored with If-Match, when
/// invalid, and when there is no modification date; false → 412.
#[test]
fn rfc9110_13_1_4_if_unmodified_since() {
    let e = stored("\"v1\"");
    let before = http_date(t(0) - Duration::from_secs(7200));
    check(
        &e,
        vec![
            ("GET", vec![("If-Unmodified-Since", &lm())], FULL),
            ("GET", vec![("If-Unmodified-Since", &http_date(t(0)))], FULL),
            ("GET", vec![("If-Unmodified-Since", &before)], FAIL),
            (
                "GET",
                vec![("If-Match", "\"v1\""), ("If-Unmodified-Since", &before)],
                FULL,
            ),
            ("GET", vec![("If-Unmodified-Since", "not a date")], FULL),
            (
                "GET",
                vec![
                    ("If-Unmodified-Since", &before),
                    ("If-Unmodified-Since", &before),
                ],
                FULL,
            ),
        ],
        "13.1.4",
    );
    let no_lm = entry(
        &Policy::default(),
        &[],
        &[("Cache-Control", "max-age=60")],
        "x",
    );
    check(
        &no_lm,
        vec![("GET", vec![("If-Unmodified-Since", &before)], FULL)],
        "13.1.4 no Last-Modified",
    );
}

/// §13.1.5: If-Range MUST be ignored without Range; a validator that does
/// not match (strong comparison; a date only if strong) means the Range is
/// ignored. Covered row by row in tests/ranges.rs; the MUSTs again here.
#[test]
fn rfc9110_13_1_5_if_range() {
    let e = stored("\"v1\"");
    let part = Answer::Partial(vec![cache::ByteRange { first: 0, last: 1 }]);
    check(
        &e,
        vec![
            ("GET", vec![("If-Range", "\"v2\"")], FULL),
            (
                "GET",
                vec![("Range", "bytes=0-1"), ("If-Range", "\"v1\"")],
                part.clone(),
            ),
            (
                "GET",
                vec![("Range", "bytes=0-1"), ("If-Range", "W/\"v1\"")],
                FULL,
            ),
            (
                "GET",
                vec![("Range", "bytes=0-1"), ("If-Range", &lm())],
                part,
            ),
            (
                "GET",
                vec![("Range", "bytes=0-1"), ("If-Range", &http_date(t(0)))],
                FULL,
            ),
        ],
        "13.1.5",
    );
}

/// §13.2.1: preconditions MUST be ignored when the response would not be
/// 2xx (here a stored 404).
#[test]
fn rfc9110_13_2_1_ignored_for_non_2xx() {
    let policy = Policy {
        default_ttl: Duration::from_secs(60),
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
    check(
        &e,
        vec![
            ("GET", vec![("If-None-Match", "\"nf\"")], FULL),
            ("GET", vec![("If-Match", "\"other\"")], FULL),
            ("GET", vec![("Range", "bytes=0-0")], FULL),
        ],
        "13.2.1",
    );
}

/// §13.2.2: the order of evaluation (If-Match before If-None-Match, 412
/// before 304, conditions before Range).
#[test]
fn rfc9110_13_2_2_evaluation_order() {
    let e = stored("\"v1\"");
    check(
        &e,
        vec![
            (
                "GET",
                vec![("If-Match", "\"v2\""), ("If-None-Match", "\"v1\"")],
                FAIL,
            ),
            (
                "GET",
                vec![("If-Match", "\"v1\""), ("If-None-Match", "\"v1\"")],
                NM,
            ),
            (
                "GET",
                vec![("If-None-Match", "\"v1\""), ("Range", "bytes=0-1")],
                NM,
            ),
            (
                "GET",
                vec![("If-Match", "\"v9\""), ("Range", "bytes=0-1")],
                FAIL,
            ),
            ("HEAD", vec![], HEAD),
        ],
        "13.2.2",
    );
}

/// `decide` is a pure function over the request and a representation.
#[test]
fn decide_is_pure_over_a_representation() {
    let rep = Representation {
        status: 200,
        etag: Some(b"\"r\""),
        last_modified: None,
        date: t(0),
        len: 10,
    };
    let h = hdrs(&[("If-None-Match", "\"r\"")]);
    assert_eq!(decide("GET", &h, &rep), NM);
    let h = hdrs(&[("Range", "bytes=-3")]);
    assert_eq!(
        decide("GET", &h, &rep),
        Answer::Partial(vec![cache::ByteRange { first: 7, last: 9 }])
    );
}
