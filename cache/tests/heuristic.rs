//! Heuristic freshness (RFC 9111 §4.2.2), table-driven: only without explicit
//! freshness, only for heuristically cacheable statuses (RFC 9110 §15.1) or
//! `public`, a fraction of Date − Last-Modified, capped, `cache_ttl` first.

mod common;

use std::sync::Arc;
use std::time::Duration;

use cache::{Entry, Heuristic, Policy};
use common::*;

const DAY: u64 = 86_400;

struct Case {
    status: u16,
    cache_control: &'static str,
    /// Seconds between Last-Modified and Date (None: no Last-Modified).
    modified_ago: Option<u64>,
    ttl: u64,
    heuristic: Option<Heuristic>,
    /// Freshness lifetime in seconds; None: not stored.
    lifetime: Option<u64>,
}

const TEN_PERCENT: Option<Heuristic> = Some(Heuristic {
    percent: 10,
    max: Duration::from_secs(DAY),
});

fn case(
    status: u16,
    cache_control: &'static str,
    modified_ago: Option<u64>,
    ttl: u64,
    heuristic: Option<Heuristic>,
    lifetime: Option<u64>,
) -> Case {
    Case {
        status,
        cache_control,
        modified_ago,
        ttl,
        heuristic,
        lifetime,
    }
}

#[test]
fn heuristic_lifetimes() {
    let cases = [
        // 10 % of 1000 s.
        case(200, "", Some(1000), 0, TEN_PERCENT, Some(100)),
        // Capped at one day (a month-old file).
        case(200, "", Some(30 * DAY), 0, TEN_PERCENT, Some(DAY)),
        // Explicit freshness wins.
        case(200, "max-age=5", Some(1000), 0, TEN_PERCENT, Some(5)),
        // cache_ttl keeps Tempesta's meaning and precedence.
        case(200, "", Some(1000), 7, TEN_PERCENT, Some(7)),
        // Off switch: stored (it has a validator) but stale at once.
        case(200, "", Some(1000), 0, None, Some(0)),
        // Heuristically cacheable statuses (RFC 9110 §15.1).
        case(404, "", Some(1000), 0, TEN_PERCENT, Some(100)),
        case(301, "", Some(1000), 0, TEN_PERCENT, Some(100)),
        // Others only with `public` (§4.2.2).
        case(302, "", Some(1000), 0, TEN_PERCENT, None),
        case(302, "public", Some(1000), 0, TEN_PERCENT, Some(100)),
        // Last-Modified after Date: zero.
        case(200, "", Some(0), 0, TEN_PERCENT, Some(0)),
        // no-cache: stored, always revalidated.
        case(200, "no-cache", Some(1000), 0, TEN_PERCENT, Some(0)),
        // Another fraction.
        case(
            200,
            "",
            Some(1000),
            0,
            Some(Heuristic {
                percent: 50,
                max: Duration::from_secs(300),
            }),
            Some(300),
        ),
    ];
    for (i, c) in cases.iter().enumerate() {
        let policy = Policy {
            default_ttl: Duration::from_secs(c.ttl),
            heuristic: c.heuristic,
            ..Policy::default()
        };
        let now = 10 * 365 * DAY;
        let mut headers = hdrs(&[("Date", &http_date(t(now)))]);
        if !c.cache_control.is_empty() {
            headers.push(("Cache-Control", c.cache_control.to_string()));
        }
        if let Some(ago) = c.modified_ago {
            headers.push(("Last-Modified", http_date(t(now - ago))));
        }
        let request = req("GET", "/h", &[]);
        let built = Entry::build(
            &policy,
            &request,
            &resp(c.status, &headers, 1),
            Arc::from(&b"x"[..]),
            times_at(now),
        );
        let got = built.ok().map(|e| e.remaining_freshness(t(now)).as_secs());
        assert_eq!(
            got, c.lifetime,
            "case {i}: {} `{}`",
            c.status, c.cache_control
        );
    }
}
