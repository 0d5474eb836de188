//! Measures the real memory cost of cache entries against what the cache
//! accounts for: stores many small entries and compares the growth of the
//! process's resident set with the accounted bytes.
//!
//!     cargo run --release -p cache --example overhead

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use cache::{
    Cache, CacheLimits, ExchangeTimes, Policy, Request, Response, ENTRY_OVERHEAD, SLOT_OVERHEAD,
};

const ENTRIES: usize = 200_000;

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    let cache = Cache::new(CacheLimits {
        total_bytes: 4 << 30,
        shards: 64,
    });
    let policy = Policy::default();
    let headers: [(&str, &[u8]); 2] = [
        ("Cache-Control", b"max-age=600"),
        ("Date", b"Tue, 14 Nov 2023 22:13:20 GMT"),
    ];
    let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let times = ExchangeTimes {
        request_time: t,
        response_time: t,
    };
    let uris: Vec<String> = (0..ENTRIES).map(|i| format!("/o/{i:08}")).collect();
    let before = rss_bytes();
    for uri in &uris {
        let req = Request {
            vhost: "default",
            scheme: "https",
            authority: b"example.com",
            method: "GET",
            uri: uri.as_bytes(),
            headers: &[] as &[(&str, &[u8])],
        };
        let resp = Response {
            status: 200,
            reason: b"",
            headers: &headers[..],
            body_len: 16,
        };
        let body: Arc<[u8]> = Arc::from(&b"0123456789abcdef"[..]);
        if cache.store(&policy, &req, &resp, body, times).is_err() {
            eprintln!("store failed");
            return;
        }
    }
    let grown = rss_bytes().saturating_sub(before);
    let m = cache.metrics();
    let payload_per_entry = m.bytes as usize / ENTRIES - ENTRY_OVERHEAD - SLOT_OVERHEAD;
    println!("entries                 {}", m.entries);
    println!(
        "accounted bytes/entry   {} (estimated overhead {} entry + {} key)",
        m.bytes as usize / ENTRIES,
        ENTRY_OVERHEAD,
        SLOT_OVERHEAD
    );
    println!("measured RSS/entry      {}", grown / ENTRIES);
    println!(
        "payload bytes/entry     ~{} (head + 304 head + body + key text)",
        payload_per_entry
    );
    println!(
        "measured overhead/entry ~{}",
        (grown / ENTRIES).saturating_sub(payload_per_entry)
    );
}
