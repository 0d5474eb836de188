//! Updating stored responses: §3.1 fields never stored, §3.2 with §4.3.4
//! (304) and §4.3.5 (HEAD), §4.2.3 Age of a forwarded response, and RFC
//! 9110 §9.3.3 POST responses reused for GET (RFC 9111 unless noted).

mod common;

use std::time::Duration;

use cache::{
    forwarded_age, Cache, CacheLimits, ExchangeTimes, HeadUpdate, Lookup, NotStoredReason, Policy,
    WaitOutcome,
};
use common::*;

fn no_wait(_: WaitOutcome) {}

/// Response fields of a table row.
type Fields<'a> = Vec<(&'static str, &'a str)>;
/// (Age, Date, request time, response time, now, expected Age), in seconds.
type AgeRow<'a> = (Option<&'a str>, u64, u64, u64, u64, Option<u64>);

fn values(e: &cache::Entry, name: &str) -> Vec<String> {
    e.fields()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        .collect()
}

/// §3.1: Connection, the fields it names, and proxy-specific fields
/// (Proxy-Authenticate, Proxy-Authentication-Info, Proxy-Authorization)
/// are not stored.
#[test]
fn rfc9111_3_1_fields_not_stored() {
    let e = entry(
        &Policy::default(),
        &[],
        &[
            ("Cache-Control", "max-age=60"),
            ("Connection", "close, X-Hop"),
            ("X-Hop", "1"),
            ("Keep-Alive", "timeout=5"),
            ("Proxy-Authenticate", "Basic"),
            ("Proxy-Authentication-Info", "x"),
            ("Proxy-Authorization", "x"),
            ("X-End-To-End", "kept"),
        ],
        "b",
    );
    for gone in [
        "connection",
        "x-hop",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authentication-info",
        "proxy-authorization",
    ] {
        assert!(values(&e, gone).is_empty(), "{gone} stored");
    }
    assert_eq!(values(&e, "x-end-to-end"), ["kept"]);
}

/// §4.3.4 + §3.2: which 304s update the stored response, and with which
/// fields. (304 ETag, updates?)
#[test]
fn rfc9111_4_3_4_validator_selection() {
    let cases: [(&str, Option<&str>, bool); 7] = [
        ("\"v1\"", Some("\"v1\""), true),
        ("\"v1\"", Some("\"v2\""), false),
        ("\"v1\"", Some("W/\"v1\""), true),
        ("W/\"v1\"", Some("W/\"v1\""), true),
        ("W/\"v1\"", Some("\"v1\""), false),
        ("\"v1\"", None, true),
        ("\"v1\"", Some("garbage"), false),
    ];
    let policy = Policy::default();
    for (stored_tag, new_tag, updates) in cases {
        let old = entry(
            &policy,
            &[],
            &[("Cache-Control", "max-age=10"), ("ETag", stored_tag)],
            "p",
        );
        let mut nm = vec![
            ("Cache-Control", "max-age=100".to_string()),
            ("Date", http_date(t(20))),
        ];
        if let Some(tag) = new_tag {
            nm.push(("ETag", tag.to_string()));
        }
        let got = old.freshened(&policy, &req("GET", "/r", &[]), &nm, times_at(20));
        match (updates, got) {
            (true, Ok(fresh)) => {
                assert_eq!(fresh.remaining_freshness(t(20)), Duration::from_secs(100))
            }
            (false, Err(reason)) => assert_eq!(reason, NotStoredReason::ValidatorMismatch),
            (want, got) => panic!("{stored_tag} / {new_tag:?}: want update {want}, got {got:?}"),
        }
    }
}

/// §3.2: a 304's fields replace stored ones, except Content-Length, fields
/// never stored and fields its Connection names.
#[test]
fn rfc9111_3_2_update_exclusions() {
    let policy = Policy::default();
    let old = entry(
        &policy,
        &[],
        &[
            ("Cache-Control", "max-age=10"),
            ("ETag", "\"v\""),
            ("X-Keep", "old"),
            ("X-Hop", "old"),
        ],
        "payload",
    );
    let nm = hdrs(&[
        ("ETag", "\"v\""),
        ("Content-Length", "0"),
        ("Connection", "X-Hop"),
        ("X-Hop", "new"),
        ("Proxy-Authenticate", "Basic"),
        ("Keep-Alive", "timeout=1"),
        ("X-New", "1"),
    ]);
    let fresh = old
        .freshened(&policy, &req("GET", "/r", &[]), &nm, times_at(20))
        .unwrap();
    assert_eq!(values(&fresh, "content-length"), ["7"]);
    assert_eq!(values(&fresh, "x-hop"), ["old"]);
    assert_eq!(values(&fresh, "x-keep"), ["old"]);
    assert_eq!(values(&fresh, "x-new"), ["1"]);
    assert!(values(&fresh, "proxy-authenticate").is_empty());
    assert!(values(&fresh, "keep-alive").is_empty());
    assert!(values(&fresh, "connection").is_empty());
}

/// A 304 with another ETag to a revalidation: the stored response is not
/// updated with it and is dropped from the cache (single-flight path).
#[test]
fn rfc9111_4_3_4_mismatched_304_drops_the_entry() {
    let policy = Policy::default();
    let cache = Cache::new(CacheLimits::default());
    let request = req("GET", "/m", &[]);
    let h = hdrs(&[
        ("Cache-Control", "max-age=1"),
        ("ETag", "\"a\""),
        ("Date", &http_date(t(0))),
    ]);
    let Lookup::Miss(guard) = cache.lookup(&policy, &request, t(0), no_wait) else {
        panic!()
    };
    guard
        .store(&policy, &request, &resp(200, &h, 1), body("x"), times_at(0))
        .unwrap();
    let Lookup::Revalidate { guard, .. } = cache.lookup(&policy, &request, t(5), no_wait) else {
        panic!("stale")
    };
    let nm = hdrs(&[("ETag", "\"b\""), ("Cache-Control", "max-age=60")]);
    assert!(guard
        .not_modified(&policy, &request, &nm, times_at(5))
        .is_some());
    assert!(matches!(
        cache.lookup(&policy, &request, t(6), no_wait),
        Lookup::Miss(_)
    ));
}

/// §4.3.5: a 200 to HEAD updates the stored GET response when validators
/// and length agree, else marks it stale. (HEAD fields, outcome)
#[test]
fn rfc9111_4_3_5_head_updates() {
    let lm = http_date(t(0) - Duration::from_secs(100));
    let cases: Vec<(Fields<'_>, u16, HeadUpdate)> = vec![
        (
            vec![
                ("ETag", "\"v\""),
                ("Cache-Control", "max-age=300"),
                ("X-New", "1"),
            ],
            200,
            HeadUpdate::Updated,
        ),
        (
            vec![
                ("ETag", "\"v\""),
                ("Content-Length", "4"),
                ("Cache-Control", "max-age=300"),
            ],
            200,
            HeadUpdate::Updated,
        ),
        (
            vec![("Last-Modified", &lm), ("Cache-Control", "max-age=300")],
            200,
            HeadUpdate::Updated,
        ),
        (vec![("ETag", "\"w\"")], 200, HeadUpdate::MarkedStale),
        (
            vec![("ETag", "\"v\""), ("Content-Length", "5")],
            200,
            HeadUpdate::MarkedStale,
        ),
        (
            vec![
                ("ETag", "\"v\""),
                ("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT"),
            ],
            200,
            HeadUpdate::MarkedStale,
        ),
        (
            vec![("Cache-Control", "max-age=300")],
            200,
            HeadUpdate::MarkedStale,
        ),
        (vec![("ETag", "\"v\"")], 404, HeadUpdate::NothingStored),
    ];
    for (i, (head_fields, status, want)) in cases.into_iter().enumerate() {
        assert_head_update(i, &lm, &head_fields, status, want);
    }
}

/// One row of the §4.3.5 table: a GET response stored with ETag "v" and
/// Last-Modified `lm`, then a HEAD answered `status` with `head_fields`.
fn assert_head_update(
    i: usize,
    lm: &str,
    head_fields: &[(&'static str, &str)],
    status: u16,
    want: HeadUpdate,
) {
    let policy = Policy::default();
    let cache = Cache::new(CacheLimits::default());
    let uri = format!("/h{i}");
    let get = req("GET", &uri, &[]);
    let stored = hdrs(&[
        ("Cache-Control", "max-age=60"),
        ("ETag", "\"v\""),
        ("Last-Modified", lm),
        ("Date", &http_date(t(0))),
    ]);
    cache
        .store(
            &policy,
            &get,
            &resp(200, &stored, 4),
            body("body"),
            times_at(0),
        )
        .unwrap();
    let h = hdrs(head_fields);
    let head = req("HEAD", &uri, &[]);
    let got = cache.update_from_head(&policy, &head, status, &h, times_at(10));
    assert_eq!(got, want, "case {i}: {head_fields:?}");
    let after = cache.lookup(&policy, &get, t(100), no_wait);
    match want {
        HeadUpdate::Updated => {
            let Lookup::Hit(e) = after else {
                panic!("case {i}: fresh after update: {after:?}")
            };
            assert_eq!(&e.body()[..], b"body");
            assert_eq!(values(&e, "content-length"), ["4"]);
        }
        HeadUpdate::MarkedStale => {
            assert!(matches!(after, Lookup::Revalidate { .. }), "case {i}")
        }
        _ => assert!(
            matches!(after, Lookup::Revalidate { .. }),
            "case {i}: unchanged, stale at 100 s"
        ),
    }
}

/// §4.3.5: a 200 to HEAD with no stored GET response updates nothing.
#[test]
fn rfc9111_4_3_5_head_with_nothing_stored() {
    let policy = Policy::default();
    let cache = Cache::new(CacheLimits::default());
    let h = hdrs(&[("ETag", "\"v\"")]);
    assert_eq!(
        cache.update_from_head(&policy, &req("HEAD", "/none", &[]), 200, &h, times_at(0)),
        HeadUpdate::NothingStored
    );
}

/// §4.2.3 / §5.1: the Age sent on with a forwarded response that carried
/// one. (Age, Date offset, request/response times, now, expected)
#[test]
fn rfc9111_4_2_3_forwarded_age() {
    let cases: [AgeRow<'_>; 6] = [
        // Origin's Age 30, 2 s in transit, 3 s here.
        (Some("30"), 8, 8, 10, 13, Some(35)),
        // Date far behind: apparent age wins.
        (Some("1"), 0, 99, 100, 100, Some(100)),
        // Invalid Age: ignored, corrected age from transit and Date.
        (Some("abc"), 10, 8, 10, 10, Some(2)),
        // No Age: the origin generated it for this request.
        (None, 0, 8, 10, 12, None),
        (Some("0"), 10, 10, 10, 10, Some(0)),
        // §5.1: capped at 2^31.
        (Some("2147483648"), 10, 10, 10, 20, Some(2_147_483_648)),
    ];
    for (age, date, request, response, now, want) in cases {
        let mut h = hdrs(&[("Date", &http_date(t(date)))]);
        if let Some(a) = age {
            h.push(("Age", a.to_string()));
        }
        let times = ExchangeTimes {
            request_time: t(request),
            response_time: t(response),
        };
        let got = forwarded_age(&h, times, t(now)).map(|d| d.as_secs());
        assert_eq!(got, want, "{age:?}");
    }
}

/// RFC 9110 §9.3.3: a POST response with explicit freshness and a
/// Content-Location equal to its target is reused for GET, where
/// cache_methods lists POST. (methods, response fields, stored?)
#[test]
fn rfc9110_9_3_3_post_reused_for_get() {
    let both = vec!["GET".to_string(), "POST".to_string()];
    let get_only = vec!["GET".to_string()];
    let cases: Vec<(Vec<String>, Fields<'_>, Result<(), NotStoredReason>)> = vec![
        (
            both.clone(),
            vec![
                ("Cache-Control", "max-age=60"),
                ("Content-Location", "/p?q=1"),
            ],
            Ok(()),
        ),
        (
            both.clone(),
            vec![
                ("Cache-Control", "max-age=60"),
                ("Content-Location", "https://example.com/p?q=1"),
            ],
            Ok(()),
        ),
        (
            both.clone(),
            vec![
                ("CDN-Cache-Control", "max-age=60"),
                ("Content-Location", "/p?q=1"),
            ],
            Ok(()),
        ),
        (
            both.clone(),
            vec![("Content-Location", "/p?q=1")],
            Err(NotStoredReason::PostNotReusable),
        ),
        (
            both.clone(),
            vec![("Cache-Control", "max-age=60")],
            Err(NotStoredReason::PostNotReusable),
        ),
        (
            both.clone(),
            vec![
                ("Cache-Control", "max-age=60"),
                ("Content-Location", "/other"),
            ],
            Err(NotStoredReason::PostNotReusable),
        ),
        (
            both.clone(),
            vec![
                ("Cache-Control", "max-age=60"),
                ("Content-Location", "https://evil.example/p?q=1"),
            ],
            Err(NotStoredReason::PostNotReusable),
        ),
        (
            both.clone(),
            vec![
                ("Cache-Control", "max-age=60, private"),
                ("Content-Location", "/p?q=1"),
            ],
            Err(NotStoredReason::Private),
        ),
        (
            get_only,
            vec![
                ("Cache-Control", "max-age=60"),
                ("Content-Location", "/p?q=1"),
            ],
            Err(NotStoredReason::MethodNotCacheable),
        ),
    ];
    for (i, (methods, fields, want)) in cases.into_iter().enumerate() {
        assert_post_reuse(i, methods, &fields, want);
    }
}

/// One row of the §9.3.3 table: a POST to /p?q=1 answered 200 with `fields`
/// (and a Date), stored under `methods`, then a GET of the same target.
fn assert_post_reuse(
    i: usize,
    methods: Vec<String>,
    fields: &[(&'static str, &str)],
    want: Result<(), NotStoredReason>,
) {
    let policy = Policy {
        methods,
        ..Policy::default()
    };
    let cache = Cache::new(CacheLimits::default());
    let mut h = hdrs(fields);
    h.push(("Date", http_date(t(0))));
    let post = req("POST", "/p?q=1", &[]);
    let got = cache
        .store_post_response(&policy, &post, &resp(200, &h, 4), body("made"), times_at(0))
        .map(|_| ());
    assert_eq!(got, want, "case {i}: {fields:?}");
    let after = cache.lookup(&policy, &req("GET", "/p?q=1", &[]), t(1), no_wait);
    assert_eq!(matches!(after, Lookup::Hit(_)), want.is_ok(), "case {i}");
}
