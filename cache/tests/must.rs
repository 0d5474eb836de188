//! RFC 9111 MUSTs not covered by a topic file of their own, table-driven:
//! §4 write-through of unsafe methods, §5.1 Age overflow, §5.2.2.3
//! must-understand.

mod common;

use cache::{Cache, CacheLimits, Entry, Lookup, NotStoredReason, Policy, WaitOutcome};
use common::*;

fn no_wait(_: WaitOutcome) {}

/// §4: a cache MUST write through requests with unsafe methods, even when
/// `cache_methods` lists one (POST); their responses are not stored under
/// their own method.
#[test]
fn rfc9111_4_unsafe_methods_written_through() {
    let policy = Policy {
        methods: vec!["GET".into(), "POST".into(), "PUT".into()],
        ..Policy::default()
    };
    let cache = Cache::new(CacheLimits::default());
    for method in ["POST", "PUT", "DELETE", "PATCH", "FOO"] {
        let r = req(method, "/u", &[]);
        assert!(
            matches!(cache.lookup(&policy, &r, t(0), no_wait), Lookup::Pass),
            "{method}"
        );
        let h = hdrs(&[("Cache-Control", "max-age=60"), ("Date", &http_date(t(0)))]);
        let built = Entry::build(&policy, &r, &resp(200, &h, 1), body("x"), times_at(0));
        assert_eq!(
            built.err(),
            Some(NotStoredReason::MethodNotCacheable),
            "{method}"
        );
    }
}

/// §5.1: an Age past 2^31 is transmitted as 2147483648.
#[test]
fn rfc9111_5_1_age_overflow() {
    let cases: [(&str, u64, &str); 3] = [
        ("2147483648", 0, "Age: 2147483648\r\n\r\n"),
        ("99999999999999999999", 100, "Age: 2147483648\r\n\r\n"),
        ("2147483000", 600, "Age: 2147483600\r\n\r\n"),
    ];
    for (age, later, want) in cases {
        let e = entry(
            &Policy::default(),
            &[],
            &[("Cache-Control", "max-age=60"), ("Age", age)],
            "x",
        );
        let mut out = Vec::new();
        e.write_age(t(later), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            want,
            "Age {age} + {later}s"
        );
    }
}

/// §3 and §5.2.2.3: with must-understand, a response is stored only for a
/// status code whose caching rules the cache implements, and then no-store
/// is ignored. (status, Cache-Control, stored?)
#[test]
fn rfc9111_5_2_2_3_must_understand() {
    let cases: [(u16, &str, Result<(), NotStoredReason>); 6] = [
        (200, "must-understand, no-store, max-age=60", Ok(())),
        (404, "must-understand, no-store, max-age=60", Ok(())),
        (
            299,
            "must-understand, no-store, max-age=60",
            Err(NotStoredReason::StatusNotCacheable),
        ),
        (
            299,
            "must-understand, max-age=60",
            Err(NotStoredReason::StatusNotCacheable),
        ),
        (299, "max-age=60", Ok(())),
        (
            200,
            "no-store, max-age=60",
            Err(NotStoredReason::ResponseNoStore),
        ),
    ];
    for (status, cc, want) in cases {
        let h = hdrs(&[("Cache-Control", cc), ("Date", &http_date(t(0)))]);
        let got = Entry::build(
            &Policy::default(),
            &req("GET", "/", &[]),
            &resp(status, &h, 1),
            body("x"),
            times_at(0),
        )
        .map(|_| ());
        assert_eq!(got, want, "{status} {cc}");
    }
}
