//! CPU time per cache hit, measured from the thread's own CPU clock so the
//! number holds on a machine shared with other work (criterion's wall
//! time does not).
//!
//!     cargo run --release -p cache --example hit_cpu [KEYS]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use cache::{Cache, CacheLimits, ExchangeTimes, Lookup, Policy, Request, Response};

const DEFAULT_KEYS: usize = 10_000;
const HITS: usize = 3_000_000;

/// utime + stime of this thread, in clock ticks (1/100 s on Linux).
fn thread_cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let after = stat.rsplit(')').next().unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Index 0 is field 3 (state): utime is index 11, stime index 12.
    field(11) + field(12)
}

fn main() {
    let keys: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(DEFAULT_KEYS)
        .max(1);
    let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let times = ExchangeTimes {
        request_time: t,
        response_time: t,
    };
    let cache = Cache::new(CacheLimits::default());
    let policy = Policy::default();
    let req_headers: [(&str, &[u8]); 3] = [
        ("Host", b"example.com"),
        ("Accept", b"*/*"),
        ("Accept-Encoding", b"gzip"),
    ];
    let resp_headers: [(&str, &[u8]); 3] = [
        ("Cache-Control", b"max-age=3600"),
        ("ETag", b"\"abc\""),
        ("Date", b"Tue, 14 Nov 2023 22:13:20 GMT"),
    ];
    let body: Arc<[u8]> = vec![b'x'; 4096].into();
    let uris: Vec<String> = (0..keys).map(|i| format!("/static/{i}.css")).collect();
    for uri in &uris {
        let req = Request {
            vhost: "default",
            scheme: "https",
            authority: b"example.com",
            method: "GET",
            uri: uri.as_bytes(),
            headers: &req_headers[..],
        };
        let resp = Response {
            status: 200,
            reason: b"",
            headers: &resp_headers[..],
            body_len: body.len(),
        };
        let _ = cache.store(&policy, &req, &resp, Arc::clone(&body), times);
    }
    let mut age = Vec::with_capacity(64);
    let start = thread_cpu_ticks();
    for i in 0..HITS {
        let uri = uris.get(i % keys).map(String::as_bytes).unwrap_or_default();
        let req = Request {
            vhost: "default",
            scheme: "https",
            authority: b"example.com",
            method: "GET",
            uri,
            headers: &req_headers[..],
        };
        if let Lookup::Hit(e) = cache.lookup(&policy, &req, t, |_| {}) {
            age.clear();
            let kind = e.reply_kind(&req);
            e.write_age(t, &mut age);
            black_box((e.reply_parts(kind), &age));
        }
    }
    let ticks = thread_cpu_ticks().saturating_sub(start);
    let ns = ticks as f64 * 10_000_000.0 / HITS as f64;
    let m = cache.metrics();
    println!(
        "{keys} keys, {} hits of {HITS}; CPU time per hit: {ns:.0} ns",
        m.hits
    );
}
