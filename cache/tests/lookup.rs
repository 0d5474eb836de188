//! The cache as the proxy uses it: lookup, store, Vary variants, HEAD from
//! GET, request directives, purge, stale-on-error, LRU byte bounds, metrics.

mod common;

use cache::{
    Cache, CacheLimits, Entry, Lookup, NotStoredReason, Policy, PurgeMode, ReplyKind,
    StatusPattern, WaitOutcome,
};
use common::*;
use std::sync::Arc;

fn no_wait(_: WaitOutcome) {}

fn small_cache() -> Cache {
    Cache::new(CacheLimits {
        total_bytes: 1 << 20,
        shards: 4,
    })
}

/// Fills `uri` through a Miss guard, as the proxy would.
fn fill(
    cache: &Cache,
    policy: &Policy,
    uri: &str,
    req_h: &[Hdr],
    resp_h: &[(&'static str, &str)],
    text: &str,
) -> Arc<Entry> {
    let request = req("GET", uri, req_h);
    let mut headers = hdrs(resp_h);
    headers.push(("Date", http_date(t(0))));
    match cache.lookup(policy, &request, t(0), no_wait) {
        Lookup::Miss(guard) => guard
            .store(
                policy,
                &request,
                &resp(200, &headers, text.len()),
                body(text),
                times_at(0),
            )
            .unwrap(),
        other => panic!("expected a miss for {uri}, got {other:?}"),
    }
}

fn lookup(cache: &Cache, policy: &Policy, method: &str, uri: &str, h: &[Hdr], at: u64) -> Lookup {
    cache.lookup(policy, &req(method, uri, h), t(at), no_wait)
}

#[test]
fn hit_after_store_and_head_from_get() {
    let (cache, policy) = (small_cache(), Policy::default());
    fill(
        &cache,
        &policy,
        "/a",
        &[],
        &[("Cache-Control", "max-age=60")],
        "AAAA",
    );
    let Lookup::Hit(e) = lookup(&cache, &policy, "GET", "/a", &[], 5) else {
        panic!("GET should hit")
    };
    assert_eq!(e.reply_kind(&req("GET", "/a", &[])), ReplyKind::Full);
    let Lookup::Hit(h) = lookup(&cache, &policy, "HEAD", "/a", &[], 5) else {
        panic!("HEAD should hit the GET entry")
    };
    assert_eq!(h.reply_kind(&req("HEAD", "/a", &[])), ReplyKind::HeadOnly);
    assert!(
        matches!(lookup(&cache, &policy, "HEAD", "/b", &[], 5), Lookup::Pass),
        "HEAD miss is not reserved"
    );
    assert!(matches!(
        lookup(&cache, &policy, "POST", "/a", &[], 5),
        Lookup::Pass
    ));
    let other_vhost = req("GET", "/a", &[]);
    let other_vhost = cache::Request {
        vhost: "other",
        ..other_vhost
    };
    assert!(matches!(
        cache.lookup(&policy, &other_vhost, t(5), no_wait),
        Lookup::Miss(_)
    ));
    let m = cache.metrics();
    assert_eq!((m.hits, m.stores, m.bypasses), (2, 1, 1));
}

#[test]
fn vary_variants_kept_apart_and_matched() {
    let (cache, policy) = (small_cache(), Policy::default());
    let gzip = hdrs(&[("accept-encoding", "gzip, br")]);
    let plain = hdrs(&[]);
    let vary = [("Cache-Control", "max-age=60"), ("Vary", "Accept-Encoding")];
    fill(&cache, &policy, "/v", &gzip, &vary, "compressed");
    // Different value: a miss for this variant, then stored alongside.
    fill(&cache, &policy, "/v", &plain, &vary, "identity");
    let body_of = |h: &[Hdr]| match lookup(&cache, &policy, "GET", "/v", h, 1) {
        Lookup::Hit(e) => String::from_utf8(e.body().to_vec()).unwrap(),
        other => panic!("expected hit, got {other:?}"),
    };
    // Names case-insensitive, list elements whitespace-trimmed, fields combined.
    assert_eq!(
        body_of(&hdrs(&[("Accept-Encoding", "gzip,br")])),
        "compressed"
    );
    assert_eq!(
        body_of(&hdrs(&[
            ("ACCEPT-ENCODING", " gzip "),
            ("Accept-Encoding", "br ")
        ])),
        "compressed"
    );
    assert_eq!(body_of(&plain), "identity");
    assert!(matches!(
        lookup(
            &cache,
            &policy,
            "GET",
            "/v",
            &hdrs(&[("Accept-Encoding", "br")]),
            1
        ),
        Lookup::Miss(_)
    ));
    assert_eq!(cache.metrics().entries, 2);
}

/// RFC 9111 §4.1 normalisation: language ranges and codings compare without
/// case; their order, and the case of other fields' values, still count.
#[test]
fn vary_values_of_accept_fields_compare_without_case() {
    let (cache, policy) = (small_cache(), Policy::default());
    let first = hdrs(&[("Accept-Language", "en-US, de"), ("Foo", "a")]);
    let vary = [
        ("Cache-Control", "max-age=60"),
        ("Vary", "Accept-Language, Foo"),
    ];
    fill(&cache, &policy, "/l", &first, &vary, "en");
    let hit = |h: &[Hdr]| matches!(lookup(&cache, &policy, "GET", "/l", h, 1), Lookup::Hit(_));
    assert!(hit(&hdrs(&[("accept-language", "EN-us,DE"), ("Foo", "a")])));
    assert!(!hit(&hdrs(&[
        ("Accept-Language", "de, en-US"),
        ("Foo", "a")
    ])));
    assert!(!hit(&hdrs(&[
        ("Accept-Language", "en-US, de"),
        ("Foo", "A")
    ])));
}

/// A value with an unclosed quote keeps its commas as data (RFC 9110 §5.6.4): two lines
/// `"x` and `y` are two elements, one line `"x,y` one; neither is served the other's.
#[test]
fn vary_elements_stay_apart_through_an_unclosed_quote() {
    let (cache, policy) = (small_cache(), Policy::default());
    let two_lines = hdrs(&[("Foo", "\"x"), ("Foo", "y")]);
    let vary = [("Cache-Control", "max-age=60"), ("Vary", "Foo")];
    fill(&cache, &policy, "/q", &two_lines, &vary, "two");
    let hit = |h: &[Hdr]| matches!(lookup(&cache, &policy, "GET", "/q", h, 1), Lookup::Hit(_));
    assert!(
        hit(&two_lines),
        "the same request is served its own variant"
    );
    assert!(!hit(&hdrs(&[("Foo", "\"x,y")])), "one element is not two");
}

#[test]
fn vary_star_never_stored_or_served() {
    let (cache, policy) = (small_cache(), Policy::default());
    let request = req("GET", "/star", &[]);
    let h = hdrs(&[("Cache-Control", "max-age=60"), ("Vary", "*")]);
    let Lookup::Miss(guard) = cache.lookup(&policy, &request, t(0), no_wait) else {
        panic!()
    };
    assert_eq!(
        guard
            .store(&policy, &request, &resp(200, &h, 1), body("x"), times_at(0))
            .err(),
        Some(NotStoredReason::VaryStar)
    );
    // Hit-for-pass: for a while, requests go to the origin uncoalesced.
    assert!(matches!(
        cache.lookup(&policy, &request, t(1), no_wait),
        Lookup::Pass
    ));
    assert_eq!(cache.metrics().not_stored_for(NotStoredReason::VaryStar), 1);
}

#[test]
fn request_directives() {
    let (cache, policy) = (small_cache(), Policy::default());
    fill(
        &cache,
        &policy,
        "/d",
        &[],
        &[("Cache-Control", "max-age=60"), ("ETag", "\"1\"")],
        "d",
    );
    let with = |v: &'static str| hdrs(&[("Cache-Control", v)]);
    assert!(matches!(
        lookup(&cache, &policy, "GET", "/d", &with("no-store"), 1),
        Lookup::Pass
    ));
    assert!(matches!(
        lookup(&cache, &policy, "GET", "/d", &with("max-age=30"), 10),
        Lookup::Hit(_)
    ));
    assert!(matches!(
        lookup(&cache, &policy, "GET", "/d", &with("min-fresh=30"), 10),
        Lookup::Hit(_)
    ));
    assert!(matches!(
        lookup(&cache, &policy, "GET", "/d", &with("min-fresh=55"), 10),
        Lookup::Revalidate { .. }
    ));
    match lookup(&cache, &policy, "GET", "/d", &with("max-age=0"), 10) {
        Lookup::Revalidate { entry, guard } => {
            assert_eq!(entry.validators().count(), 1);
            guard.fail();
        }
        other => panic!("max-age=0 must revalidate, got {other:?}"),
    }
    let pragma = hdrs(&[("Pragma", "no-cache")]);
    assert!(matches!(
        lookup(&cache, &policy, "GET", "/d", &pragma, 10),
        Lookup::Revalidate { .. }
    ));
    assert!(matches!(
        lookup(&cache, &policy, "GET", "/none", &with("only-if-cached"), 10),
        Lookup::OnlyIfCachedMiss
    ));
}

#[test]
fn revalidation_304_freshens_stored_entry() {
    let (cache, policy) = (small_cache(), Policy::default());
    fill(
        &cache,
        &policy,
        "/r",
        &[],
        &[("Cache-Control", "max-age=10"), ("ETag", "\"e\"")],
        "body",
    );
    let request = req("GET", "/r", &[]);
    let Lookup::Revalidate { entry, guard } = cache.lookup(&policy, &request, t(30), no_wait)
    else {
        panic!("stale")
    };
    assert_eq!(
        entry.validators().next(),
        Some(("If-None-Match", &b"\"e\""[..]))
    );
    let h304 = hdrs(&[
        ("Cache-Control", "max-age=100"),
        ("Date", &http_date(t(30))),
    ]);
    let fresh = guard
        .not_modified(&policy, &request, &h304, times_at(30))
        .unwrap();
    assert_eq!(fresh.freshness(t(31)), cache::Freshness::Fresh);
    let Lookup::Hit(hit) = cache.lookup(&policy, &request, t(60), no_wait) else {
        panic!("freshened entry should hit")
    };
    assert!(Arc::ptr_eq(&hit, &fresh));
    assert_eq!(cache.metrics().entries, 1);
}

#[test]
fn stale_served_on_origin_error_only_when_allowed() {
    let (cache, mut policy) = (small_cache(), Policy::default());
    policy.use_stale = vec![StatusPattern::parse("5*").unwrap()];
    fill(
        &cache,
        &policy,
        "/s",
        &[],
        &[("Cache-Control", "max-age=10")],
        "old",
    );
    fill(
        &cache,
        &policy,
        "/m",
        &[],
        &[("Cache-Control", "max-age=10, must-revalidate")],
        "old",
    );
    let stale = |uri: &str| match lookup(&cache, &policy, "GET", uri, &[], 30) {
        Lookup::Revalidate { guard, .. } => guard,
        other => panic!("expected revalidation, got {other:?}"),
    };
    assert!(
        stale("/s").serve_stale(&policy, 404).is_none(),
        "404 is not in cache_use_stale"
    );
    assert_eq!(
        &stale("/s").serve_stale(&policy, 502).unwrap().body()[..],
        b"old"
    );
    assert!(
        stale("/m").serve_stale(&policy, 502).is_none(),
        "must-revalidate forbids stale"
    );
    assert_eq!(cache.metrics().stale_served, 1);
}

#[test]
fn purge_invalidate_and_immediate() {
    let (cache, policy) = (small_cache(), Policy::default());
    fill(
        &cache,
        &policy,
        "/p",
        &[],
        &[("Cache-Control", "max-age=60"), ("ETag", "\"p\"")],
        "p",
    );
    assert!(cache.purge(PurgeMode::Invalidate, &req("PURGE", "/p", &[])));
    match lookup(&cache, &policy, "GET", "/p", &[], 1) {
        Lookup::Revalidate { entry, guard } => {
            assert!(entry.validators().count() == 1);
            drop(guard);
        }
        other => panic!("invalidated entry must revalidate, got {other:?}"),
    }
    assert!(cache.purge(PurgeMode::Immediate, &req("PURGE", "/p", &[])));
    assert!(matches!(
        lookup(&cache, &policy, "GET", "/p", &[], 1),
        Lookup::Miss(_)
    ));
    assert!(!cache.purge(PurgeMode::Immediate, &req("PURGE", "/p", &[])));
    let m = cache.metrics();
    assert_eq!((m.entries, m.bytes, m.purges), (0, 0, 2));
}

#[test]
fn lru_byte_bound_holds_under_pressure() {
    const BUDGET: usize = 256 * 1024;
    let cache = Cache::new(CacheLimits {
        total_bytes: BUDGET,
        shards: 4,
    });
    let policy = Policy::default();
    let payload = "x".repeat(1000);
    let mut inserted = 0usize;
    let mut i = 0;
    while inserted < 10 * BUDGET {
        let uri = format!("/obj/{i}");
        let e = fill(
            &cache,
            &policy,
            &uri,
            &[],
            &[("Cache-Control", "max-age=600")],
            &payload,
        );
        inserted += e.body().len() + e.head().len();
        // Keep one hot object recently used: it must survive.
        assert!(
            matches!(
                lookup(&cache, &policy, "GET", "/obj/0", &[], 1),
                Lookup::Hit(_)
            ),
            "hot object evicted at {i}"
        );
        assert!(
            cache.bytes() <= BUDGET,
            "over budget after {i}: {}",
            cache.bytes()
        );
        i += 1;
    }
    let m = cache.metrics();
    assert!(m.evictions > 0 && m.entries > 0);
    assert!(m.bytes as usize <= BUDGET);
    let newest = format!("/obj/{}", i - 1);
    assert!(matches!(
        lookup(&cache, &policy, "GET", &newest, &[], 1),
        Lookup::Hit(_)
    ));
    assert!(
        matches!(
            lookup(&cache, &policy, "GET", "/obj/1", &[], 1),
            Lookup::Miss(_)
        ),
        "cold object evicted"
    );
    // Nearly the whole budget is in use: eviction frees only what it must.
    assert!(m.bytes as usize > BUDGET * 3 / 4, "bytes {}", m.bytes);
}

#[test]
fn object_larger_than_a_shard_is_not_stored() {
    let cache = Cache::new(CacheLimits {
        total_bytes: 64 * 1024,
        shards: 4,
    });
    let policy = Policy::default();
    let big = "y".repeat(20 * 1024);
    fill(
        &cache,
        &policy,
        "/big",
        &[],
        &[("Cache-Control", "max-age=60")],
        &big,
    );
    assert!(matches!(
        lookup(&cache, &policy, "GET", "/big", &[], 1),
        Lookup::Miss(_)
    ));
    assert_eq!(cache.metrics().entries, 0);
}

#[test]
fn metrics_render_as_prometheus_text() {
    let (cache, policy) = (small_cache(), Policy::default());
    fill(
        &cache,
        &policy,
        "/m",
        &[],
        &[("Cache-Control", "max-age=60")],
        "m",
    );
    let _ = lookup(
        &cache,
        &policy,
        "GET",
        "/m",
        &hdrs(&[("If-None-Match", "*")]),
        1,
    );
    let mut text = String::new();
    cache.metrics().write_prometheus(&mut text);
    for line in [
        "ktls_cache_hits_total 1",
        "ktls_cache_stores_total 1",
        "ktls_cache_not_modified_total 1",
        "ktls_cache_entries 1",
        "ktls_cache_not_stored_total{reason=\"private\"} 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

#[test]
fn disabled_policy_passes_everything() {
    let cache = small_cache();
    let policy = Policy {
        enabled: false,
        ..Policy::default()
    };
    assert!(matches!(
        lookup(&cache, &policy, "GET", "/", &[], 0),
        Lookup::Pass
    ));
}

#[test]
fn restoring_a_variant_replaces_it_and_accounting_returns_to_zero() {
    let (cache, policy) = (small_cache(), Policy::default());
    let cc = [("Cache-Control", "max-age=60")];
    fill(&cache, &policy, "/same", &[], &cc, "first");
    let once = cache.metrics();
    let request = req("GET", "/same", &[]);
    let h = hdrs(&[("Cache-Control", "max-age=60"), ("Date", &http_date(t(0)))]);
    let second = cache
        .store(
            &policy,
            &request,
            &resp(200, &h, 6),
            body("second"),
            times_at(0),
        )
        .unwrap();
    let twice = cache.metrics();
    assert_eq!((once.entries, twice.entries), (1, 1));
    assert_eq!(
        twice.bytes,
        once.bytes + 1,
        "one more body byte, nothing leaked"
    );
    let Lookup::Hit(hit) = lookup(&cache, &policy, "GET", "/same", &[], 1) else {
        panic!()
    };
    assert!(Arc::ptr_eq(&hit, &second));
    assert!(cache.purge(PurgeMode::Immediate, &req("PURGE", "/same", &[])));
    assert_eq!(cache.bytes(), 0);
}
