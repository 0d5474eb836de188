//! What to do with a request, given its sticky cookie's verdict: forward
//! it, have the response set a cookie, answer with a 302 to the same URI
//! (`cookie enforce`), answer with the JavaScript challenge, or block the
//! client after `max_misses` requests without a valid cookie.
//!
//! Pure functions over the configuration; a miss is counted by the caller's
//! `count_miss`, which the worker points at the connection's frang counters
//! (`frang::ConnLimits::on_sticky_miss`: per connection, over one second).

use config::{CookieMode, StickyCookie};

use super::challenge::{self, Timing};
use super::cookie::Verdict;

/// The action for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// A valid cookie: forward, without the sticky cookie.
    Forward,
    /// No valid cookie, not enforced: forward, and set a fresh cookie on
    /// the response.
    ForwardAndSet,
    /// Enforced: answer `302 Found` to the same URI with `Set-Cookie`.
    Redirect,
    /// Enforced with `js_challenge`: answer with the challenge page (its
    /// status is the configured `resp_code`).
    Challenge,
    /// Over `max_misses`: apply `block_action`.
    Block,
}

/// The decision for a request whose cookie got `verdict`, and the misses that
/// `count_miss` reported (0 when the request was no miss). `count_miss` is
/// called once for each miss and returns the misses counted so far, this one
/// included.
pub fn decide(
    cookie: &StickyCookie,
    verdict: Verdict,
    count_miss: impl FnOnce() -> u32,
) -> (Decision, u32) {
    let CookieMode::Issued {
        enforce,
        max_misses,
    } = cookie.mode
    else {
        // Learned cookies only name a session; they challenge nobody.
        return (Decision::Forward, 0);
    };
    let valid = match (verdict, &cookie.js_challenge) {
        (Verdict::Valid { age, .. }, Some(js)) => challenge::timing(js, age) == Timing::InWindow,
        (Verdict::Valid { .. }, None) => true,
        _ => false,
    };
    if valid {
        return (Decision::Forward, 0);
    }
    if !enforce {
        return (Decision::ForwardAndSet, 0);
    }
    let misses = count_miss();
    if max_misses.is_some_and(|k| k > 0 && misses > k) {
        return (Decision::Block, misses);
    }
    if cookie.js_challenge.is_some() {
        (Decision::Challenge, misses)
    } else {
        (Decision::Redirect, misses)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use config::JsChallenge;
    use std::time::{Duration, UNIX_EPOCH};

    fn issued(enforce: bool, max_misses: Option<u32>) -> StickyCookie {
        StickyCookie {
            name: "__tfw".into(),
            mode: CookieMode::Issued {
                enforce,
                max_misses,
            },
            options: vec!["Path=/".into()],
            js_challenge: None,
        }
    }

    fn valid(age_ms: u64) -> Verdict {
        Verdict::Valid {
            issued_at: UNIX_EPOCH,
            age: Duration::from_millis(age_ms),
        }
    }

    /// A counter that says this miss is the `n`th; panics if the request is no miss.
    fn nth(n: u32) -> impl FnOnce() -> u32 {
        move || n
    }

    fn no_miss() -> impl FnOnce() -> u32 {
        || panic!("counted as a miss")
    }

    #[test]
    fn a_valid_cookie_is_forwarded() {
        assert_eq!(
            decide(&issued(true, Some(1)), valid(10), no_miss()),
            (Decision::Forward, 0)
        );
        assert_eq!(
            decide(&issued(false, None), valid(10), no_miss()),
            (Decision::Forward, 0)
        );
    }

    #[test]
    fn without_enforce_a_missing_cookie_is_set_on_the_way() {
        for v in [Verdict::Malformed, Verdict::BadMac, Verdict::Expired] {
            assert_eq!(
                decide(&issued(false, None), v, no_miss()),
                (Decision::ForwardAndSet, 0)
            );
        }
    }

    #[test]
    fn enforce_redirects_then_blocks_after_max_misses() {
        let c = issued(true, Some(2));
        assert_eq!(
            decide(&c, Verdict::Malformed, nth(1)),
            (Decision::Redirect, 1)
        );
        assert_eq!(decide(&c, Verdict::BadMac, nth(2)), (Decision::Redirect, 2));
        assert_eq!(decide(&c, Verdict::Expired, nth(3)), (Decision::Block, 3));
        // max_misses=0: never blocked.
        assert_eq!(
            decide(&issued(true, None), Verdict::BadMac, nth(u32::MAX)),
            (Decision::Redirect, u32::MAX)
        );
    }

    #[test]
    fn learned_cookies_never_challenge() {
        let c = StickyCookie {
            mode: CookieMode::Learned,
            ..issued(true, Some(1))
        };
        assert_eq!(
            decide(&c, Verdict::Malformed, no_miss()),
            (Decision::Forward, 0)
        );
    }

    #[test]
    fn js_challenge_counts_early_and_late_cookies_as_misses() {
        let mut c = issued(true, Some(3));
        c.js_challenge = Some(JsChallenge {
            delay_min: Duration::from_millis(1000),
            delay_range: Duration::from_millis(2000),
            resp_code: 503,
            template: None,
        });
        assert_eq!(
            decide(&c, Verdict::Malformed, nth(1)),
            (Decision::Challenge, 1)
        );
        // A bot that replays the cookie at once.
        assert_eq!(decide(&c, valid(10), nth(2)), (Decision::Challenge, 2));
        // A browser that waited.
        assert_eq!(decide(&c, valid(1500), no_miss()), (Decision::Forward, 0));
        // Too late.
        assert_eq!(decide(&c, valid(3001), nth(3)), (Decision::Challenge, 3));
        assert_eq!(decide(&c, valid(3001), nth(4)), (Decision::Block, 4));
    }
}
