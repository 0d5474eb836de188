//! Cache micro-benchmarks: a hit (lookup + reply kind + Age chunk), a
//! store, and stores under eviction pressure.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cache::{Cache, CacheLimits, ExchangeTimes, Lookup, Policy, Request, Response};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

type Hdr = (&'static str, &'static [u8]);

const RESP_HEADERS: &[Hdr] = &[
    ("Cache-Control", b"public, max-age=3600"),
    ("Content-Type", b"text/html; charset=utf-8"),
    ("ETag", b"\"5f3a-1b2c\""),
    ("Last-Modified", b"Tue, 14 Nov 2023 20:00:00 GMT"),
    ("Date", b"Tue, 14 Nov 2023 22:13:20 GMT"),
];
const REQ_HEADERS: &[Hdr] = &[
    ("Host", b"example.com"),
    ("User-Agent", b"bench/1.0"),
    ("Accept", b"*/*"),
    ("Accept-Encoding", b"gzip"),
];

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn times() -> ExchangeTimes {
    ExchangeTimes {
        request_time: now(),
        response_time: now(),
    }
}

fn uris(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("/static/img/{i}.png")).collect()
}

fn store(cache: &Cache, policy: &Policy, uri: &str, body: &Arc<[u8]>) {
    let req = Request {
        vhost: "default",
        scheme: "https",
        authority: b"example.com",
        method: "GET",
        uri: uri.as_bytes(),
        headers: REQ_HEADERS,
    };
    let resp = Response {
        status: 200,
        reason: b"OK",
        headers: RESP_HEADERS,
        body_len: body.len(),
    };
    let _ = cache.store(policy, &req, &resp, Arc::clone(body), times());
}

fn hit(c: &mut Criterion) {
    let cache = Cache::new(CacheLimits::default());
    let policy = Policy::default();
    let body: Arc<[u8]> = vec![b'x'; 4096].into();
    let keys = uris(10_000);
    for uri in &keys {
        store(&cache, &policy, uri, &body);
    }
    let mut age = Vec::with_capacity(64);
    let mut i = 0usize;
    c.bench_function("lookup_hit_10k_keys", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            let req = Request {
                vhost: "default",
                scheme: "https",
                authority: b"example.com",
                method: "GET",
                uri: keys[i].as_bytes(),
                headers: REQ_HEADERS,
            };
            match cache.lookup(&policy, &req, now(), |_| {}) {
                Lookup::Hit(e) => {
                    age.clear();
                    let kind = e.reply_kind(&req);
                    e.write_age(now(), &mut age);
                    black_box((e.reply_parts(kind), &age));
                }
                _ => unreachable!("all keys stored"),
            }
        })
    });
}

fn insert(c: &mut Criterion) {
    let policy = Policy::default();
    let body: Arc<[u8]> = vec![b'x'; 4096].into();
    let keys = uris(100_000);
    let cache = Cache::new(CacheLimits::default());
    let mut i = 0usize;
    let mut group = c.benchmark_group("store");
    group.throughput(Throughput::Elements(1));
    group.bench_function("store_4k_body_fits", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            store(&cache, &policy, &keys[i], &body);
        })
    });
    // 4 MiB budget, 4 KiB objects: nearly every store evicts.
    let small = Cache::new(CacheLimits {
        total_bytes: 4 << 20,
        shards: 16,
    });
    group.bench_function("store_4k_body_evicting", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            store(&small, &policy, &keys[i], &body);
        })
    });
    group.finish();
    let m = small.metrics();
    eprintln!(
        "evicting cache: {} entries, {} bytes, {} evictions",
        m.entries, m.bytes, m.evictions
    );
}

criterion_group!(benches, hit, insert);
criterion_main!(benches);
