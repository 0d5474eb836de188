//! RFC 5861 §3 stale-while-revalidate: the lookup decision the proxy acts
//! on (serve now, revalidate once in the background, coalesced).

mod common;

use cache::{Cache, CacheLimits, Lookup, Policy, WaitOutcome};
use common::*;

fn no_wait(_: WaitOutcome) {}

fn swr_policy() -> Policy {
    Policy {
        background_revalidation: true,
        ..Policy::default()
    }
}

fn filled(policy: &Policy, resp_cc: &str, uri: &str) -> Cache {
    let cache = Cache::new(CacheLimits::default());
    let request = req("GET", uri, &[]);
    let headers = hdrs(&[
        ("Cache-Control", resp_cc),
        ("Date", &http_date(t(0))),
        ("ETag", "\"v\""),
    ]);
    let Lookup::Miss(guard) = cache.lookup(policy, &request, t(0), no_wait) else {
        panic!("empty cache")
    };
    guard
        .store(
            policy,
            &request,
            &resp(200, &headers, 1),
            body("x"),
            times_at(0),
        )
        .unwrap();
    cache
}

fn kind(l: &Lookup) -> &'static str {
    match l {
        Lookup::Hit(_) => "hit",
        Lookup::Revalidate { .. } => "revalidate",
        Lookup::StaleWhileRevalidate { .. } => "swr",
        Lookup::Miss(_) => "miss",
        Lookup::Wait(_) => "wait",
        Lookup::Pass => "pass",
        Lookup::OnlyIfCachedMiss => "only-if-cached",
    }
}

/// (response Cache-Control, request Cache-Control, seconds after storing,
/// expected lookup) with background revalidation on.
#[test]
fn rfc5861_3_decision_table() {
    let cases: [(&str, &str, u64, &str); 10] = [
        ("max-age=10, stale-while-revalidate=30", "", 5, "hit"),
        ("max-age=10, stale-while-revalidate=30", "", 11, "swr"),
        ("max-age=10, stale-while-revalidate=30", "", 40, "swr"),
        (
            "max-age=10, stale-while-revalidate=30",
            "",
            41,
            "revalidate",
        ),
        ("max-age=10", "", 11, "revalidate"),
        // RFC 9111 §4.2.4: never stale against these response directives.
        (
            "max-age=10, stale-while-revalidate=30, must-revalidate",
            "",
            11,
            "revalidate",
        ),
        (
            "s-maxage=10, stale-while-revalidate=30",
            "",
            11,
            "revalidate",
        ),
        (
            "max-age=10, stale-while-revalidate=30, no-cache",
            "",
            11,
            "revalidate",
        ),
        // §5.2.1: the client asked for a validated or fresher response.
        (
            "max-age=10, stale-while-revalidate=30",
            "no-cache",
            11,
            "revalidate",
        ),
        (
            "max-age=10, stale-while-revalidate=30",
            "max-age=5",
            11,
            "revalidate",
        ),
    ];
    let policy = swr_policy();
    for (i, (resp_cc, req_cc, at, want)) in cases.into_iter().enumerate() {
        let uri = format!("/swr{i}");
        let cache = filled(&policy, resp_cc, &uri);
        let h = if req_cc.is_empty() {
            hdrs(&[])
        } else {
            hdrs(&[("Cache-Control", req_cc)])
        };
        let got = cache.lookup(&policy, &req("GET", &uri, &h), t(at), no_wait);
        assert_eq!(
            kind(&got),
            want,
            "case {i}: `{resp_cc}` / `{req_cc}` at {at}s"
        );
    }
}

/// One background revalidation: later requests get the stale entry at once
/// (not a wait) while it runs; after a 304 the entry is fresh again.
#[test]
fn rfc5861_3_one_revalidation_coalesced() {
    let policy = swr_policy();
    let cache = filled(&policy, "max-age=10, stale-while-revalidate=30", "/c");
    let request = req("GET", "/c", &[]);
    let Lookup::StaleWhileRevalidate { entry, guard } =
        cache.lookup(&policy, &request, t(15), no_wait)
    else {
        panic!("expected stale-while-revalidate")
    };
    assert_eq!(entry.validators().count(), 1);
    for _ in 0..3 {
        let again = cache.lookup(&policy, &request, t(16), no_wait);
        assert_eq!(
            kind(&again),
            "hit",
            "served stale while the revalidation runs"
        );
    }
    let not_modified = hdrs(&[("Date", &http_date(t(16))), ("ETag", "\"v\"")]);
    let fresh = guard
        .not_modified(&policy, &request, &not_modified, times_at(16))
        .unwrap();
    assert!(!fresh.remaining_freshness(t(17)).is_zero());
    assert_eq!(
        kind(&cache.lookup(&policy, &request, t(17), no_wait)),
        "hit"
    );
    assert!(cache.metrics().stale_served >= 4);
}

/// With background revalidation off (the default, until the proxy runs
/// background exchanges), such entries revalidate in the foreground.
#[test]
fn rfc5861_3_off_by_default_revalidates_in_foreground() {
    let policy = Policy::default();
    assert!(!policy.background_revalidation);
    let cache = filled(&policy, "max-age=10, stale-while-revalidate=30", "/f");
    let got = cache.lookup(&policy, &req("GET", "/f", &[]), t(15), no_wait);
    assert_eq!(kind(&got), "revalidate");
}
