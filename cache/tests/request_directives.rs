//! Request Cache-Control against stored responses, table-driven (RFC 9111
//! §5.2.1 request directives, §4.2.4 serving stale, §5.2.2.2 must-revalidate,
//! §5.2.2.8 proxy-revalidate, §5.2.2.10 s-maxage).

mod common;

use cache::{Cache, CacheLimits, Lookup, Policy, WaitOutcome};
use common::*;

fn no_wait(_: WaitOutcome) {}

/// (response Cache-Control, request Cache-Control, seconds after storing,
/// served from cache without revalidation?)
const CASES: [(&str, &str, u64, bool); 22] = [
    // Fresh for 60 s.
    ("max-age=60", "", 10, true),
    ("max-age=60", "", 61, false),
    // §5.2.1.1 max-age: age 10 is over 5.
    ("max-age=60", "max-age=5", 10, false),
    ("max-age=60", "max-age=10", 10, true),
    // §5.2.1.3 min-fresh: 50 s left at age 10.
    ("max-age=60", "min-fresh=50", 10, true),
    ("max-age=60", "min-fresh=51", 10, false),
    // §5.2.1.4 no-cache.
    ("max-age=60", "no-cache", 10, false),
    // §5.2.1.2 max-stale: 10 s stale at age 70.
    ("max-age=60", "max-stale=10", 70, true),
    ("max-age=60", "max-stale=9", 70, false),
    ("max-age=60", "max-stale", 10_000, true),
    ("max-age=60", "max-stale=x", 61, false),
    // max-age still bounds a max-stale request.
    ("max-age=60", "max-stale, max-age=65", 70, false),
    // §4.2.4: never stale when the response forbids it.
    ("max-age=60, must-revalidate", "max-stale", 61, false),
    ("max-age=60, proxy-revalidate", "max-stale", 61, false),
    ("s-maxage=60", "max-stale", 61, false),
    ("max-age=60, no-cache", "max-stale", 1, false),
    // Exact parsing on the response side (§4.2.1): invalid = stale.
    ("max-age=60a", "", 1, false),
    ("max-age =60", "", 1, false),
    ("max-age=60, max-age=61", "", 1, false),
    ("max-age=\"60\"", "", 1, true),
    // The invalid request directive asks for nothing.
    ("max-age=60", "min-fresh=1.5", 10, true),
    ("max-age=60", "max-age=1.5", 10, false),
];

#[test]
fn request_directives_table() {
    let policy = Policy {
        // Keep stale entries stored for the max-stale rows.
        use_stale: vec![cache::StatusPattern::Exact(502)],
        ..Policy::default()
    };
    for (i, (resp_cc, req_cc, at, served)) in CASES.into_iter().enumerate() {
        let cache = Cache::new(CacheLimits::default());
        let uri = format!("/case{i}");
        let request = req("GET", &uri, &[]);
        let headers = hdrs(&[
            ("Cache-Control", resp_cc),
            ("Date", &http_date(t(0))),
            ("ETag", "\"v\""),
        ]);
        let Lookup::Miss(guard) = cache.lookup(&policy, &request, t(0), no_wait) else {
            panic!("case {i}: empty cache")
        };
        guard
            .store(
                &policy,
                &request,
                &resp(200, &headers, 1),
                body("x"),
                times_at(0),
            )
            .unwrap_or_else(|e| panic!("case {i}: not stored: {e:?}"));
        let req_h = if req_cc.is_empty() {
            hdrs(&[])
        } else {
            hdrs(&[("Cache-Control", req_cc)])
        };
        let got = cache.lookup(&policy, &req("GET", &uri, &req_h), t(at), no_wait);
        assert_eq!(
            matches!(got, Lookup::Hit(_)),
            served,
            "case {i}: response `{resp_cc}`, request `{req_cc}`, at {at}s: {got:?}"
        );
    }
}

/// RFC 5861 §4 stale-if-error, without `cache_use_stale`: within its window
/// for 500/502/503/504 only, never past it, never with must-revalidate.
#[test]
fn stale_if_error_table() {
    // (response Cache-Control, origin status, seconds after storing, served stale?)
    let cases: [(&str, u16, u64, bool); 8] = [
        ("max-age=1, stale-if-error=60", 500, 30, true),
        ("max-age=1, stale-if-error=60", 502, 30, true),
        ("max-age=1, stale-if-error=60", 503, 30, true),
        ("max-age=1, stale-if-error=60", 504, 61, true),
        ("max-age=1, stale-if-error=60", 504, 62, false),
        ("max-age=1, stale-if-error=60", 404, 30, false),
        (
            "max-age=1, stale-if-error=60, must-revalidate",
            503,
            30,
            false,
        ),
        ("max-age=1", 503, 30, false),
    ];
    let policy = Policy::default();
    for (i, (resp_cc, status, at, served)) in cases.into_iter().enumerate() {
        let cache = Cache::new(CacheLimits::default());
        let uri = format!("/sie{i}");
        let request = req("GET", &uri, &[]);
        let headers = hdrs(&[
            ("Cache-Control", resp_cc),
            ("Date", &http_date(t(0))),
            ("ETag", "\"v\""),
        ]);
        let Lookup::Miss(guard) = cache.lookup(&policy, &request, t(0), no_wait) else {
            panic!("case {i}: empty cache")
        };
        guard
            .store(
                &policy,
                &request,
                &resp(200, &headers, 1),
                body("x"),
                times_at(0),
            )
            .unwrap_or_else(|e| panic!("case {i}: not stored: {e:?}"));
        let Lookup::Revalidate { guard, .. } = cache.lookup(&policy, &request, t(at), no_wait)
        else {
            panic!("case {i}: stale entry is revalidated")
        };
        let got = guard.serve_stale_at(&policy, status, t(at)).is_some();
        assert_eq!(
            got, served,
            "case {i}: `{resp_cc}`, origin {status} at {at}s"
        );
    }
}
