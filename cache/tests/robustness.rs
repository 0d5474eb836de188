//! Peer-controlled bytes (origin and client headers) must never make the
//! cache panic: feed pseudo-random and hostile header values through every
//! parser and the whole store/lookup path.

mod common;

use cache::httpdate::parse_http_date;
use cache::{headers, Cache, CacheControl, CacheLimits, Entry, Lookup, Policy, Request, Response};
use common::*;

/// xorshift64*: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Bytes biased toward the characters the parsers care about.
    fn bytes(&mut self, max: usize) -> Vec<u8> {
        const INTERESTING: &[u8] = b"\",=W/* \t0123456789:-GMTmax-age;\r\n\\";
        let len = (self.next() % max as u64) as usize;
        (0..len)
            .map(|_| {
                let r = self.next();
                if r.is_multiple_of(3) {
                    (r >> 8) as u8
                } else {
                    INTERESTING[(r >> 8) as usize % INTERESTING.len()]
                }
            })
            .collect()
    }
}

const NAMES: &[&str] = &[
    "Cache-Control",
    "Expires",
    "Date",
    "Age",
    "ETag",
    "Last-Modified",
    "Vary",
    "If-None-Match",
    "If-Modified-Since",
    "Pragma",
    "Accept",
];

#[test]
fn random_header_values_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let cache = Cache::new(CacheLimits {
        total_bytes: 1 << 20,
        shards: 2,
    });
    let policy = Policy {
        use_stale: vec![cache::StatusPattern::Class(5)],
        ..Policy::default()
    };
    for round in 0..3000 {
        let headers: Vec<(&str, Vec<u8>)> = (0..(rng.next() % 6))
            .map(|_| {
                (
                    NAMES[(rng.next() % NAMES.len() as u64) as usize],
                    rng.bytes(48),
                )
            })
            .collect();
        let _ = parse_http_date(&headers.first().map(|h| h.1.clone()).unwrap_or_default());
        let _ = CacheControl::parse(&headers);
        let _ = headers::list_elements(&headers, "vary").count();
        let uri = rng.bytes(16);
        let req = Request {
            vhost: "v",
            scheme: "https",
            authority: b"example.com",
            method: "GET",
            uri: &uri,
            headers: &headers[..],
        };
        let status = [200, 203, 204, 206, 301, 302, 404, 500, 999][(rng.next() % 9) as usize];
        let resp = Response {
            status,
            reason: b"",
            headers: &headers[..],
            body_len: 3,
        };
        if let Ok(e) = Entry::build(&policy, &req, &resp, body("abc"), times_at(round)) {
            let _ = e.reply_kind(&req);
            let _ = e.freshness(t(round + rng.next() % 100));
            let _ = e.freshened(&policy, &req, &headers, times_at(round + 1));
            let mut age = Vec::new();
            e.write_age(t(0), &mut age);
        }
        match cache.lookup(&policy, &req, t(round), |_| {}) {
            Lookup::Miss(guard) => {
                let _ = guard.store(&policy, &req, &resp, body("abc"), times_at(round));
            }
            Lookup::Revalidate { guard, .. } => {
                let _ = guard.not_modified(&policy, &req, &headers, times_at(round));
            }
            _ => {}
        }
    }
    assert!(cache.bytes() <= 1 << 20);
}

#[test]
fn extreme_values_are_clamped() {
    let policy = Policy::default();
    let e = entry(
        &policy,
        &[],
        &[
            ("Cache-Control", "max-age=99999999999999999999999999"),
            ("Age", "99999999999999999999999"),
        ],
        "x",
    );
    let _ = e.freshness(t(0));
    let far = entry(
        &policy,
        &[],
        &[("Expires", "Fri, 31 Dec 9999 23:59:59 GMT")],
        "x",
    );
    assert!(far.remaining_freshness(t(0)).as_secs() > 0);
}
