//! Counters of the sticky cookie, the JavaScript challenge and sticky sessions, served with
//! the proxy's other metrics.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub struct StickyMetrics {
    /// Cookies handed out: on a forwarded response, with a 302, or in a challenge page.
    pub cookies_issued: AtomicU64,
    /// `302` answers of `cookie enforce`.
    pub redirects: AtomicU64,
    /// Challenge pages served.
    pub challenges: AtomicU64,
    /// Requests of an enforced cookie without a valid one (or outside the challenge window).
    pub misses: AtomicU64,
    /// Clients blocked after `max_misses`.
    pub blocks: AtomicU64,
    /// Sessions pinned to a server on their first request (or by a learned cookie).
    pub sessions_pinned: AtomicU64,
    /// Sessions moved off a dead server (`allow_failover`).
    pub sessions_failed_over: AtomicU64,
    /// Requests answered 502 because their session's server is down.
    pub sessions_server_down: AtomicU64,
}

impl StickyMetrics {
    pub fn render(&self, out: &mut String) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut counter = |name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        };
        counter(
            "ktls_proxy_sticky_cookies_issued_total",
            "Sticky cookies issued (on a response, a 302 or a challenge page).",
            get(&self.cookies_issued),
        );
        counter(
            "ktls_proxy_sticky_redirects_total",
            "302 answers to requests without a valid sticky cookie (cookie enforce).",
            get(&self.redirects),
        );
        counter(
            "ktls_proxy_sticky_challenges_total",
            "JavaScript challenge pages served.",
            get(&self.challenges),
        );
        counter(
            "ktls_proxy_sticky_misses_total",
            "Requests without a valid sticky cookie where one is enforced.",
            get(&self.misses),
        );
        counter(
            "ktls_proxy_sticky_blocks_total",
            "Requests blocked after max_misses.",
            get(&self.blocks),
        );
        counter(
            "ktls_proxy_sticky_sessions_pinned_total",
            "Sticky sessions pinned to a server.",
            get(&self.sessions_pinned),
        );
        counter(
            "ktls_proxy_sticky_sessions_failed_over_total",
            "Sticky sessions moved off a dead server (allow_failover).",
            get(&self.sessions_failed_over),
        );
        counter(
            "ktls_proxy_sticky_sessions_server_down_total",
            "Requests answered 502 because their session's server is down.",
            get(&self.sessions_server_down),
        );
    }
}
