//! RFC 9213 targeted cache control: CDN-Cache-Control (or a configured
//! field) decides freshness and storability for this cache instead of
//! Cache-Control and Expires.

mod common;

use std::time::Duration;

use cache::{Entry, NotStoredReason, Policy};
use common::*;

fn build(policy: &Policy, headers: &[(&'static str, &str)]) -> Result<Entry, NotStoredReason> {
    let mut h = hdrs(headers);
    h.push(("Date", http_date(t(0))));
    h.push(("ETag", "\"e\"".into()));
    Entry::build(
        policy,
        &req("GET", "/t", &[]),
        &resp(200, &h, 1),
        body("x"),
        times_at(0),
    )
}

/// (response fields, stored?, freshness lifetime in seconds when stored)
#[test]
fn rfc9213_2_2_targeted_field_precedence() {
    let expires = http_date(t(500));
    type Row<'a> = (Vec<(&'static str, &'a str)>, Result<u64, NotStoredReason>);
    let cases: Vec<Row<'_>> = vec![
        (
            vec![
                ("Cache-Control", "max-age=10"),
                ("CDN-Cache-Control", "max-age=100"),
            ],
            Ok(100),
        ),
        (
            vec![
                ("CDN-Cache-Control", "max-age=100"),
                ("Cache-Control", "no-store"),
            ],
            Ok(100),
        ),
        (
            vec![
                ("Cache-Control", "max-age=10"),
                ("CDN-Cache-Control", "no-store"),
            ],
            Err(NotStoredReason::ResponseNoStore),
        ),
        (
            vec![
                ("Cache-Control", "max-age=10"),
                ("CDN-Cache-Control", "private"),
            ],
            Err(NotStoredReason::Private),
        ),
        // Expires is ignored with a targeted field (lifetime 0: stale, revalidated).
        (
            vec![
                ("Expires", &expires),
                ("CDN-Cache-Control", "must-revalidate"),
            ],
            Ok(0),
        ),
        (vec![("Expires", &expires)], Ok(500)),
        // Invalid or empty targeted fields fall back to Cache-Control.
        (
            vec![
                ("Cache-Control", "max-age=10"),
                ("CDN-Cache-Control", "Max-Age=100"),
            ],
            Ok(10),
        ),
        (
            vec![("Cache-Control", "max-age=10"), ("CDN-Cache-Control", "")],
            Ok(10),
        ),
        (
            vec![
                ("Cache-Control", "max-age=10"),
                ("CDN-Cache-Control", "max-age=1.5"),
            ],
            Ok(0),
        ),
        // Field names are case-insensitive.
        (vec![("cdn-cache-control", "max-age=70")], Ok(70)),
    ];
    let policy = Policy::default();
    for (headers, want) in cases {
        let got = build(&policy, &headers).map(|e| e.remaining_freshness(t(0)).as_secs());
        assert_eq!(got, want, "{headers:?}");
    }
}

/// The target list is configurable; an empty list disables targeting, and
/// fields not on the list change nothing (RFC 9213 §2.2).
#[test]
fn rfc9213_2_2_configurable_target_list() {
    let headers = [
        ("Cache-Control", "max-age=10"),
        ("CDN-Cache-Control", "max-age=100"),
        ("Tempesta-Cache-Control", "max-age=1000"),
    ];
    let lifetime = |targets: &[&str]| {
        let policy = Policy {
            targeted_fields: targets.iter().map(|s| s.to_string()).collect(),
            ..Policy::default()
        };
        build(&policy, &headers).unwrap().remaining_freshness(t(0))
    };
    assert_eq!(
        lifetime(&["Tempesta-Cache-Control", "CDN-Cache-Control"]),
        Duration::from_secs(1000)
    );
    assert_eq!(lifetime(&["CDN-Cache-Control"]), Duration::from_secs(100));
    assert_eq!(lifetime(&[]), Duration::from_secs(10));
    let policy = Policy::default();
    assert!(policy.is_targeted_field(b"cdn-cache-control"));
    assert!(!policy.is_targeted_field(b"cache-control"));
}

/// RFC 5861 extensions work in the targeted field too.
#[test]
fn rfc9213_stale_directives_in_targeted_field() {
    let policy = Policy::default();
    let e = build(
        &policy,
        &[(
            "CDN-Cache-Control",
            "max-age=10, stale-while-revalidate=30, stale-if-error=60",
        )],
    )
    .unwrap();
    assert!(e.stale_while_revalidate_allows(t(20)));
    assert!(!e.stale_while_revalidate_allows(t(41)));
    assert!(e.stale_if_error_allows(503, t(70)));
}
