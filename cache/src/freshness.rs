//! Freshness lifetime and age (RFC 9111 §4.2), computed once per stored
//! response; checking an entry on a hit is then two additions.

use std::time::{Duration, SystemTime};

use crate::headers::{self, CacheControl, HeaderPair};
use crate::httpdate::parse_http_date;

/// Where an entry stands at a given moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    Fresh,
    /// Must not be served without revalidation; `has_validators` tells
    /// whether a conditional request (ETag / Last-Modified) is possible.
    Stale {
        has_validators: bool,
    },
}

/// Freshness lifetime, in the order of precedence of §4.2.1 for a shared
/// cache: s-maxage, max-age, Expires − Date, then the configured default
/// (`cache_ttl`; heuristic freshness is otherwise off). `cc` has already had
/// `cache_control_ignore` applied. Returns `(lifetime, explicit)`.
pub fn freshness_lifetime<H: HeaderPair>(
    cc: &CacheControl,
    headers: &[H],
    date: SystemTime,
    default_ttl: Duration,
) -> (Duration, bool) {
    if let Some(secs) = cc.s_maxage.or(cc.max_age) {
        return (Duration::from_secs(secs), true);
    }
    if let Some(raw) = headers::first(headers, "expires") {
        // An invalid Expires (such as "0") means already expired (§5.3);
        // so do two lines that disagree (Expires is one HTTP-date).
        let agree = headers::values(headers, "expires").all(|v| v.trim_ascii() == raw);
        let lifetime = parse_http_date(raw)
            .filter(|_| agree)
            .and_then(|expires| expires.duration_since(date).ok())
            .unwrap_or(Duration::ZERO);
        return (lifetime, true);
    }
    (default_ttl, false)
}

/// `corrected_initial_age` of §4.2.3: the age the response already had
/// when it arrived, from the Age header, the Date header and the time the
/// exchange took.
pub fn corrected_initial_age<H: HeaderPair>(
    headers: &[H],
    date: SystemTime,
    request_time: SystemTime,
    response_time: SystemTime,
) -> Duration {
    // §5.1: a list-valued Age uses its first member; an invalid value is
    // ignored.
    let age_value = headers::list_elements(headers, "age")
        .next()
        .and_then(headers::delta_seconds)
        .map_or(Duration::ZERO, Duration::from_secs);
    let apparent_age = response_time.duration_since(date).unwrap_or(Duration::ZERO);
    let response_delay = response_time
        .duration_since(request_time)
        .unwrap_or(Duration::ZERO);
    apparent_age.max(age_value.saturating_add(response_delay))
}

/// `current_age` of §4.2.3.
pub fn current_age(
    corrected_initial_age: Duration,
    response_time: SystemTime,
    now: SystemTime,
) -> Duration {
    let resident_time = now.duration_since(response_time).unwrap_or(Duration::ZERO);
    corrected_initial_age.saturating_add(resident_time)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::httpdate::write_http_date;
    use std::time::UNIX_EPOCH;

    fn t(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn date(at: SystemTime) -> Vec<u8> {
        let mut v = Vec::new();
        write_http_date(at, &mut v);
        v
    }

    #[test]
    fn lifetime_precedence() {
        let expires = date(t(100));
        let headers: Vec<(&str, &[u8])> = vec![("Expires", &expires)];
        let none = CacheControl::default();
        assert_eq!(
            freshness_lifetime(&none, &headers, t(0), Duration::from_secs(7)),
            (Duration::from_secs(100), true)
        );
        let max_age = CacheControl {
            max_age: Some(50),
            ..none
        };
        assert_eq!(
            freshness_lifetime(&max_age, &headers, t(0), Duration::ZERO).0,
            Duration::from_secs(50)
        );
        let both = CacheControl {
            s_maxage: Some(20),
            ..max_age
        };
        assert_eq!(
            freshness_lifetime(&both, &headers, t(0), Duration::ZERO).0,
            Duration::from_secs(20)
        );
        let empty: [(&str, &[u8]); 0] = [];
        assert_eq!(
            freshness_lifetime(&none, &empty, t(0), Duration::from_secs(7)),
            (Duration::from_secs(7), false)
        );
        let invalid: [(&str, &[u8]); 1] = [("Expires", b"0")];
        assert_eq!(
            freshness_lifetime(&none, &invalid, t(0), Duration::from_secs(7)),
            (Duration::ZERO, true)
        );
        let (a, b) = (date(t(100)), date(t(101)));
        let disagree: Vec<(&str, &[u8])> = vec![("Expires", &a), ("Expires", &b)];
        assert_eq!(
            freshness_lifetime(&none, &disagree, t(0), Duration::ZERO).0,
            Duration::ZERO
        );
        let agree: Vec<(&str, &[u8])> = vec![("Expires", &a), ("expires", &a)];
        assert_eq!(
            freshness_lifetime(&none, &agree, t(0), Duration::ZERO).0,
            Duration::from_secs(100)
        );
        let past = date(t(0));
        let expired: Vec<(&str, &[u8])> = vec![("Expires", &past)];
        assert_eq!(
            freshness_lifetime(&none, &expired, t(10), Duration::ZERO).0,
            Duration::ZERO
        );
    }

    #[test]
    fn age_calculation() {
        // Date 10 s before arrival, Age 30, exchange took 2 s: 32 wins.
        let headers: [(&str, &[u8]); 1] = [("Age", b"30")];
        let initial = corrected_initial_age(&headers, t(0), t(8), t(10));
        assert_eq!(initial, Duration::from_secs(32));
        assert_eq!(current_age(initial, t(10), t(15)), Duration::from_secs(37));
        // Apparent age wins when the origin clock is far behind.
        let none: [(&str, &[u8]); 0] = [];
        assert_eq!(
            corrected_initial_age(&none, t(0), t(99), t(100)),
            Duration::from_secs(100)
        );
        // §5.1: first member of a list; invalid forms ignored.
        for (age, want) in [
            ("30, 60", 32),
            ("-5", 2),
            ("1e3", 2),
            ("", 2),
            ("2147483649", 2_147_483_650),
        ] {
            let headers: [(&str, &[u8]); 1] = [("Age", age.as_bytes())];
            let got = corrected_initial_age(&headers, t(10), t(8), t(10));
            assert_eq!(got, Duration::from_secs(want), "Age: {age}");
        }
        // Clock going backwards never panics.
        assert_eq!(current_age(Duration::ZERO, t(10), t(5)), Duration::ZERO);
    }
}
