//! What to do with a request, given its sticky cookie's verdict: forward
//! it, have the response set a cookie, answer with a 302 to the same URI
//! (`cookie enforce`), answer with the JavaScript challenge, or block the
//! client after `max_misses` requests without a valid cookie.
//!
//! Pure functions over the configuration and a per-client miss count; the
//! worker owns the connection and the count's storage ([`MissTable`]).

use std::hash::Hash;

use config::{CookieMode, StickyCookie};

use super::challenge::{self, Timing};
use super::cookie::Verdict;
use crate::lru::Lru;

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

/// The decision for a request whose cookie got `verdict`, from a client
/// that had `misses` misses before. Returns the decision and the client's
/// miss count after this request.
pub fn decide(cookie: &StickyCookie, verdict: Verdict, misses: u32) -> (Decision, u32) {
    let CookieMode::Issued {
        enforce,
        max_misses,
    } = cookie.mode
    else {
        // Learned cookies only name a session; they challenge nobody.
        return (Decision::Forward, misses);
    };
    let valid = match (verdict, &cookie.js_challenge) {
        (Verdict::Valid { age, .. }, Some(js)) => challenge::timing(js, age) == Timing::InWindow,
        (Verdict::Valid { .. }, None) => true,
        _ => false,
    };
    if valid {
        return (Decision::Forward, misses);
    }
    if !enforce {
        return (Decision::ForwardAndSet, misses);
    }
    let misses = misses.saturating_add(1);
    if max_misses.is_some_and(|k| misses > k) {
        return (Decision::Block, misses);
    }
    if cookie.js_challenge.is_some() {
        (Decision::Challenge, misses)
    } else {
        (Decision::Redirect, misses)
    }
}

/// Per-client miss counts, bounded: the least recently seen clients are
/// forgotten beyond `capacity` (a forgotten client starts from zero, which
/// only delays its block).
#[derive(Debug)]
pub struct MissTable<K: Hash + Eq + Clone> {
    counts: Lru<K, u32>,
}

impl<K: Hash + Eq + Clone> MissTable<K> {
    pub fn new(capacity: usize) -> Self {
        MissTable {
            counts: Lru::new(capacity),
        }
    }

    /// Decides for `client` and records its new miss count. A valid cookie
    /// does not reset the count: a client that alternates valid and missing
    /// cookies is still blocked eventually, as in Tempesta.
    pub fn decide(&mut self, client: K, cookie: &StickyCookie, verdict: Verdict) -> Decision {
        let before = self.counts.get(&client).copied().unwrap_or(0);
        let (decision, after) = decide(cookie, verdict, before);
        if after != before {
            self.counts.insert(client, after);
        }
        decision
    }

    /// The misses counted for `client` so far.
    pub fn count(&mut self, client: &K) -> u32 {
        self.counts.get(client).copied().unwrap_or(0)
    }

    pub fn len(&self) -> usize {
        self.counts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.counts.len() == 0
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

    #[test]
    fn a_valid_cookie_is_forwarded() {
        assert_eq!(
            decide(&issued(true, Some(1)), valid(10), 0),
            (Decision::Forward, 0)
        );
        assert_eq!(
            decide(&issued(false, None), valid(10), 0),
            (Decision::Forward, 0)
        );
    }

    #[test]
    fn without_enforce_a_missing_cookie_is_set_on_the_way() {
        for v in [Verdict::Malformed, Verdict::BadMac, Verdict::Expired] {
            assert_eq!(
                decide(&issued(false, None), v, 7),
                (Decision::ForwardAndSet, 7)
            );
        }
    }

    #[test]
    fn enforce_redirects_then_blocks_after_max_misses() {
        let c = issued(true, Some(2));
        assert_eq!(decide(&c, Verdict::Malformed, 0), (Decision::Redirect, 1));
        assert_eq!(decide(&c, Verdict::BadMac, 1), (Decision::Redirect, 2));
        assert_eq!(decide(&c, Verdict::Expired, 2), (Decision::Block, 3));
        // max_misses=0: never blocked.
        assert_eq!(
            decide(&issued(true, None), Verdict::BadMac, u32::MAX),
            (Decision::Redirect, u32::MAX)
        );
    }

    #[test]
    fn learned_cookies_never_challenge() {
        let c = StickyCookie {
            mode: CookieMode::Learned,
            ..issued(true, Some(1))
        };
        assert_eq!(decide(&c, Verdict::Malformed, 5), (Decision::Forward, 5));
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
        assert_eq!(decide(&c, Verdict::Malformed, 0), (Decision::Challenge, 1));
        // A bot that replays the cookie at once.
        assert_eq!(decide(&c, valid(10), 1), (Decision::Challenge, 2));
        // A browser that waited.
        assert_eq!(decide(&c, valid(1500), 2), (Decision::Forward, 2));
        // Too late.
        assert_eq!(decide(&c, valid(3001), 2), (Decision::Challenge, 3));
        assert_eq!(decide(&c, valid(3001), 3), (Decision::Block, 4));
    }

    #[test]
    fn attack_a_client_without_cookies_is_blocked_by_the_table() {
        let mut t = MissTable::new(4);
        let c = issued(true, Some(1));
        let bot: std::net::IpAddr = "203.0.113.9".parse().unwrap();
        assert_eq!(t.decide(bot, &c, Verdict::Malformed), Decision::Redirect);
        assert_eq!(t.decide(bot, &c, Verdict::Malformed), Decision::Block);
        // Someone else is unaffected.
        let other: std::net::IpAddr = "203.0.113.10".parse().unwrap();
        assert_eq!(t.decide(other, &c, Verdict::Malformed), Decision::Redirect);
    }

    #[test]
    fn attack_many_addresses_do_not_grow_the_table() {
        let mut t = MissTable::new(100);
        let c = issued(true, Some(1));
        for i in 0..10_000u32 {
            let ip = std::net::IpAddr::from(i.to_be_bytes());
            t.decide(ip, &c, Verdict::Malformed);
        }
        assert_eq!(t.len(), 100);
    }
}
