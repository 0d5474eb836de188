//! RFC 9111 §3 storability and §4.2 freshness, as a table of header
//! combinations with the answers the RFC (and this cache's documented
//! choices) expect.

mod common;

use std::time::Duration;

use cache::{
    check_storable, Entry, Freshness, IgnoredDirectives, NotStoredReason, Policy, StatusPattern,
    Storability,
};
use common::*;

struct Case {
    name: &'static str,
    method: &'static str,
    req: &'static [(&'static str, &'static str)],
    status: u16,
    resp: &'static [(&'static str, &'static str)],
    policy: fn(&mut Policy),
    /// `Ok(lifetime seconds)` if storable, else the reason.
    expect: Result<u64, NotStoredReason>,
}

fn none(_: &mut Policy) {}
fn ttl_60(p: &mut Policy) {
    p.default_ttl = Duration::from_secs(60);
}
/// What the proxy sets: Tempesta's `cache_ttl` default for responses with nothing else.
fn tempesta_unset(p: &mut Policy) {
    p.unset_ttl = cache::TEMPESTA_DEFAULT_TTL;
}
fn tempesta_unset_no_heuristic(p: &mut Policy) {
    p.unset_ttl = cache::TEMPESTA_DEFAULT_TTL;
    p.heuristic = None;
}
fn ignore_no_store_private(p: &mut Policy) {
    p.ignore = IgnoredDirectives::parse(["no-store", "private"]).unwrap();
}
fn ignore_max_age(p: &mut Policy) {
    p.ignore = IgnoredDirectives::parse(["max-age"]).unwrap();
    p.default_ttl = Duration::from_secs(5);
}
fn ignore_s_maxage(p: &mut Policy) {
    p.ignore = IgnoredDirectives::parse(["s-maxage"]).unwrap();
}
fn ignore_no_cache(p: &mut Policy) {
    p.ignore = IgnoredDirectives::parse(["no-cache"]).unwrap();
}
fn strip_set_cookie(p: &mut Policy) {
    p.resp_hdr_del = vec!["Set-Cookie".into()];
}
fn use_stale(p: &mut Policy) {
    p.use_stale = vec![StatusPattern::parse("5*").unwrap()];
}
fn small_objects(p: &mut Policy) {
    p.max_object_size = 3;
}
fn disabled(p: &mut Policy) {
    p.enabled = false;
}

const EXPIRES_IN_100: &str = "Tue, 14 Nov 2023 22:15:00 GMT"; // t(0) + 100 s
const DATE_T0: &str = "Tue, 14 Nov 2023 22:13:20 GMT"; // t(0)

#[rustfmt::skip]
const CASES: &[Case] = &[
    Case { name: "max-age", method: "GET", req: &[], status: 200, resp: &[("Cache-Control", "max-age=60")], policy: none, expect: Ok(60) },
    Case { name: "s-maxage beats max-age", method: "GET", req: &[], status: 200, resp: &[("Cache-Control", "max-age=60, s-maxage=10")], policy: none, expect: Ok(10) },
    Case { name: "max-age beats Expires", method: "GET", req: &[], status: 200, resp: &[("Cache-Control", "max-age=7"), ("Date", DATE_T0), ("Expires", EXPIRES_IN_100)], policy: none, expect: Ok(7) },
    Case { name: "Expires - Date", method: "GET", req: &[], status: 200, resp: &[("Date", DATE_T0), ("Expires", EXPIRES_IN_100)], policy: none, expect: Ok(100) },
    Case { name: "invalid Expires is stale, with validator stored", method: "GET", req: &[], status: 200, resp: &[("Expires", "0"), ("ETag", "\"a\"")], policy: none, expect: Ok(0) },
    Case { name: "invalid Expires, no validator", method: "GET", req: &[], status: 200, resp: &[("Expires", "0")], policy: none, expect: Err(NotStoredReason::NoFreshness) },
    Case { name: "Age reduces remaining freshness", method: "GET", req: &[], status: 200, resp: &[("Cache-Control", "max-age=60"), ("Age", "15")], policy: none, expect: Ok(45) },
    Case { name: "no-store", method: "GET", req: &[], status: 200, resp: &[("Cache-Control", "max-age=60, no-store")], policy: none, expect: Err(NotStoredReason::ResponseNoStore) },
    Case { name: "request no-store", method: "GET", req: &[("Cache-Control", "no-store")], status: 200, resp: &[("Cache-Control", "max-age=60")], policy: none, expect: Err(NotStoredReason::RequestNoStore) },
    Case { name: "private", method: "GET", req: &[], status: 200, resp: &[("Cache-Control", "private, max-age=60")], policy: none, expect: Err(NotStoredReason::Private) },
    Case { name: "qualified private", method: "GET", req: &[], status: 200, resp: &[("Cache-Control", "private=\"X-User\", max-age=60")], policy: none, expect: Err(NotStoredReason::Private) },
    Case { name: "no-cache with validator stored, always stale", method: "GET", req: &[], status: 200, resp: &[("Cache-Control", "no-cache, max-age=60"), ("ETag", "\"v1\"")], policy: none, expect: Ok(0) },
    Case { name: "no-cache without validator", method: "GET", req: &[], status: 200, resp: &[("Cache-Control", "no-cache")], policy: none, expect: Err(NotStoredReason::NoFreshness) },
    Case { name: "no-cache kept for cache_use_stale", method: "GET", req: &[], status: 200, resp: &[("Cache-Control", "no-cache")], policy: use_stale, expect: Ok(0) },
    Case { name: "Authorization alone", method: "GET", req: &[("Authorization", "Basic eA==")], status: 200, resp: &[("Cache-Control", "max-age=60")], policy: none, expect: Err(NotStoredReason::Authorization) },
    Case { name: "Authorization + public", method: "GET", req: &[("Authorization", "Basic eA==")], status: 200, resp: &[("Cache-Control", "public, max-age=60")], policy: none, expect: Ok(60) },
    Case { name: "Authorization + s-maxage", method: "GET", req: &[("Authorization", "Basic eA==")], status: 200, resp: &[("Cache-Control", "s-maxage=30")], policy: none, expect: Ok(30) },
    Case { name: "Authorization + must-revalidate", method: "GET", req: &[("Authorization", "Basic eA==")], status: 200, resp: &[("Cache-Control", "must-revalidate, max-age=20")], policy: none, expect: Ok(20) },
    Case { name: "default-cacheable 200 without freshness or ttl", method: "GET", req: &[], status: 200, resp: &[], policy: none, expect: Err(NotStoredReason::NoFreshness) },
    Case { name: "default-cacheable 200 with Last-Modified, no ttl", method: "GET", req: &[], status: 200, resp: &[("Last-Modified", DATE_T0)], policy: none, expect: Ok(0) },
    Case { name: "default-cacheable 200 without freshness, Tempesta's default", method: "GET", req: &[], status: 200, resp: &[], policy: tempesta_unset, expect: Ok(2_147_483_647) },
    Case { name: "default-cacheable 404 without freshness, Tempesta's default", method: "GET", req: &[], status: 404, resp: &[], policy: tempesta_unset, expect: Ok(2_147_483_647) },
    Case { name: "302 without freshness, Tempesta's default does not apply", method: "GET", req: &[], status: 302, resp: &[], policy: tempesta_unset, expect: Err(NotStoredReason::StatusNotCacheable) },
    Case { name: "Last-Modified: the heuristic, not Tempesta's default", method: "GET", req: &[], status: 200, resp: &[("Date", DATE_T0), ("Last-Modified", "Tue, 14 Nov 2023 22:10:00 GMT")], policy: tempesta_unset, expect: Ok(20) },
    Case { name: "Last-Modified, heuristic off: not fresh", method: "GET", req: &[], status: 200, resp: &[("Date", DATE_T0), ("Last-Modified", "Tue, 14 Nov 2023 22:10:00 GMT")], policy: tempesta_unset_no_heuristic, expect: Ok(0) },
    Case { name: "cache_ttl before Tempesta's default", method: "GET", req: &[], status: 200, resp: &[], policy: |p| { tempesta_unset(p); p.default_ttl = Duration::from_secs(7); }, expect: Ok(7) },
    Case { name: "default-cacheable 200 with cache_ttl", method: "GET", req: &[], status: 200, resp: &[], policy: ttl_60, expect: Ok(60) },
    Case { name: "default-cacheable 404 with cache_ttl", method: "GET", req: &[], status: 404, resp: &[], policy: ttl_60, expect: Ok(60) },
    Case { name: "302 without freshness even with cache_ttl", method: "GET", req: &[], status: 302, resp: &[], policy: ttl_60, expect: Err(NotStoredReason::StatusNotCacheable) },
    Case { name: "302 with max-age", method: "GET", req: &[], status: 302, resp: &[("Cache-Control", "max-age=30")], policy: none, expect: Ok(30) },
    Case { name: "503 with public uses cache_ttl", method: "GET", req: &[], status: 503, resp: &[("Cache-Control", "public")], policy: ttl_60, expect: Ok(60) },
    Case { name: "206 never stored", method: "GET", req: &[], status: 206, resp: &[("Cache-Control", "max-age=60")], policy: none, expect: Err(NotStoredReason::PartialContent) },
    Case { name: "POST not cacheable", method: "POST", req: &[], status: 200, resp: &[("Cache-Control", "max-age=60")], policy: none, expect: Err(NotStoredReason::MethodNotCacheable) },
    Case { name: "HEAD response not stored", method: "HEAD", req: &[], status: 200, resp: &[("Cache-Control", "max-age=60")], policy: none, expect: Err(NotStoredReason::MethodNotCacheable) },
    Case { name: "Vary: *", method: "GET", req: &[], status: 200, resp: &[("Cache-Control", "max-age=60"), ("Vary", "Accept, *")], policy: none, expect: Err(NotStoredReason::VaryStar) },
    Case { name: "Set-Cookie", method: "GET", req: &[], status: 200, resp: &[("Cache-Control", "max-age=60"), ("Set-Cookie", "s=1")], policy: none, expect: Err(NotStoredReason::SetCookie) },
    Case { name: "Set-Cookie stripped by cache_resp_hdr_del", method: "GET", req: &[], status: 200, resp: &[("Cache-Control", "max-age=60"), ("Set-Cookie", "s=1")], policy: strip_set_cookie, expect: Ok(60) },
    Case { name: "too large", method: "GET", req: &[], status: 200, resp: &[("Cache-Control", "max-age=60")], policy: small_objects, expect: Err(NotStoredReason::TooLarge) },
    Case { name: "cache off", method: "GET", req: &[], status: 200, resp: &[("Cache-Control", "max-age=60")], policy: disabled, expect: Err(NotStoredReason::Disabled) },
    Case { name: "ignore no-store, private", method: "GET", req: &[], status: 200, resp: &[("Cache-Control", "no-store, private, max-age=9")], policy: ignore_no_store_private, expect: Ok(9) },
    Case { name: "ignore max-age falls to cache_ttl", method: "GET", req: &[], status: 200, resp: &[("Cache-Control", "max-age=900")], policy: ignore_max_age, expect: Ok(5) },
    Case { name: "ignore s-maxage falls to max-age", method: "GET", req: &[], status: 200, resp: &[("Cache-Control", "max-age=50, s-maxage=5")], policy: ignore_s_maxage, expect: Ok(50) },
    Case { name: "ignore no-cache makes it fresh", method: "GET", req: &[], status: 200, resp: &[("Cache-Control", "no-cache, max-age=40")], policy: ignore_no_cache, expect: Ok(40) },
];

#[test]
fn storability_and_freshness_table() {
    for case in CASES {
        let mut policy = Policy::default();
        (case.policy)(&mut policy);
        let req_headers = hdrs(case.req);
        let resp_headers = hdrs(case.resp);
        let request = req(case.method, "/x", &req_headers);
        let response = resp(case.status, &resp_headers, 10);
        let verdict = check_storable(&policy, &request, &response, times_at(0));
        let built = Entry::build(
            &policy,
            &request,
            &response,
            body("0123456789"),
            times_at(0),
        );
        match case.expect {
            Ok(lifetime) => {
                assert_eq!(verdict, Storability::Storable, "{}", case.name);
                let entry = built.unwrap_or_else(|r| panic!("{}: {r}", case.name));
                assert_eq!(
                    entry.remaining_freshness(t(0)),
                    Duration::from_secs(lifetime),
                    "{}",
                    case.name
                );
                let expected = if lifetime > 0 {
                    Freshness::Fresh
                } else {
                    Freshness::Stale {
                        has_validators: entry.has_validators(),
                    }
                };
                assert_eq!(entry.freshness(t(0)), expected, "{}", case.name);
            }
            Err(reason) => {
                assert_eq!(verdict, Storability::NotStored(reason), "{}", case.name);
                assert_eq!(built.err(), Some(reason), "{}", case.name);
            }
        }
    }
}

#[test]
fn entry_goes_stale_after_lifetime() {
    let e = entry(
        &Policy::default(),
        &[],
        &[("Cache-Control", "max-age=10"), ("ETag", "\"x\"")],
        "body",
    );
    assert_eq!(e.freshness(t(9)), Freshness::Fresh);
    assert_eq!(
        e.freshness(t(10)),
        Freshness::Stale {
            has_validators: true
        }
    );
    assert_eq!(e.current_age(t(25)), Duration::from_secs(25));
}

#[test]
fn stale_use_forbidden_by_must_revalidate_and_s_maxage() {
    let p = Policy::default();
    assert!(entry(&p, &[], &[("Cache-Control", "max-age=1")], "b").may_serve_stale());
    assert!(!entry(
        &p,
        &[],
        &[("Cache-Control", "max-age=1, must-revalidate")],
        "b"
    )
    .may_serve_stale());
    assert!(!entry(
        &p,
        &[],
        &[("Cache-Control", "max-age=1, proxy-revalidate")],
        "b"
    )
    .may_serve_stale());
    assert!(!entry(&p, &[], &[("Cache-Control", "s-maxage=1")], "b").may_serve_stale());
}

#[test]
fn stored_head_is_ready_to_write() {
    let policy = Policy {
        resp_hdr_del: vec!["x-internal".into()],
        ..Policy::default()
    };
    let e = entry(
        &policy,
        &[],
        &[
            ("Cache-Control", "max-age=60"),
            ("X-Internal", "secret"),
            ("Content-Length", "999"),
            ("Transfer-Encoding", "chunked"),
            ("Age", "3"),
            ("Bad", "a\r\nInjected: yes"),
            ("Content-Type", "text/plain"),
        ],
        "hello",
    );
    let head = String::from_utf8(e.head().to_vec()).unwrap();
    assert_eq!(
        head,
        format!(
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Type: text/plain\r\nDate: {}\r\nContent-Length: 5\r\n",
            http_date(t(0))
        )
    );
    let mut age = Vec::new();
    e.write_age(t(12), &mut age);
    assert_eq!(age, b"Age: 15\r\n\r\n");
    assert_eq!(&e.body()[..], b"hello");
}
