//! Hit-for-pass: a key the origin answered unstorably goes straight to the origin for a
//! while, instead of queueing behind one fetch; the markers are bounded and evict nothing
//! stored.

mod common;

use cache::{Cache, CacheLimits, Lookup, NotStoredReason, Policy, PurgeMode, WaitOutcome};
use common::*;

fn no_wait(_: WaitOutcome) {}

fn small_cache() -> Cache {
    Cache::new(CacheLimits {
        total_bytes: 1 << 20,
        shards: 4,
    })
}

fn lookup(cache: &Cache, policy: &Policy, method: &str, uri: &str, h: &[Hdr], at: u64) -> Lookup {
    cache.lookup(policy, &req(method, uri, h), t(at), no_wait)
}

/// Fills `uri` through a Miss guard with a response stored for an hour.
fn fill_for_an_hour(cache: &Cache, policy: &Policy, uri: &str) {
    let request = req("GET", uri, &[]);
    let headers = hdrs(&[
        ("Cache-Control", "max-age=3600"),
        ("Date", &http_date(t(0))),
    ]);
    let Lookup::Miss(guard) = cache.lookup(policy, &request, t(0), no_wait) else {
        panic!("expected a miss for {uri}")
    };
    guard
        .store(
            policy,
            &request,
            &resp(200, &headers, 4),
            body("kept"),
            times_at(0),
        )
        .unwrap();
}

/// Answers `uri`'s miss with a response the cache refuses (`no-store`), which
/// marks the key hit-for-pass.
fn refuse(cache: &Cache, policy: &Policy, uri: &str, at: u64) {
    let request = req("GET", uri, &[]);
    let no_store = hdrs(&[("Cache-Control", "no-store")]);
    let Lookup::Miss(guard) = cache.lookup(policy, &request, t(at), no_wait) else {
        panic!("expected a miss for {uri}")
    };
    let refused = guard.store(
        policy,
        &request,
        &resp(200, &no_store, 1),
        body("n"),
        times_at(at),
    );
    assert!(refused.is_err());
}

#[test]
fn unique_urls_answered_no_store_neither_evict_stored_entries_nor_hold_memory_without_bound() {
    let (cache, policy) = (small_cache(), Policy::default());
    fill_for_an_hour(&cache, &policy, "/kept");
    let stored = cache.bytes();
    // Far more unique keys than the markers kept, each with a key of 1 KiB: as
    // cache slots they would have filled the 1 MiB budget many times over.
    let long = "x".repeat(1024);
    let n = cache::PASS_MARKERS + 10_000;
    for i in 0..n {
        refuse(&cache, &policy, &format!("/miss/{i}/{long}"), 0);
    }
    assert_eq!(
        cache.bytes(),
        stored,
        "markers are not charged to the byte budget"
    );
    assert!(matches!(
        lookup(&cache, &policy, "GET", "/kept", &[], 1),
        Lookup::Hit(_)
    ));
    let markers = cache.pass_markers();
    assert!(markers <= cache::PASS_MARKERS, "{markers} markers");
    // The most recent keys still pass; the oldest were forgotten (they queue
    // behind one fetch again).
    assert!(matches!(
        lookup(
            &cache,
            &policy,
            "GET",
            &format!("/miss/{}/{long}", n - 1),
            &[],
            1
        ),
        Lookup::Pass
    ));
    assert!(matches!(
        lookup(&cache, &policy, "GET", &format!("/miss/0/{long}"), &[], 1),
        Lookup::Miss(_)
    ));
    // PURGE forgets a marker too.
    assert!(!cache.purge(
        PurgeMode::Immediate,
        &req("PURGE", &format!("/miss/{}/{long}", n - 2), &[])
    ));
    assert!(matches!(
        lookup(
            &cache,
            &policy,
            "GET",
            &format!("/miss/{}/{long}", n - 2),
            &[],
            1
        ),
        Lookup::Miss(_)
    ));
}

#[test]
fn hit_for_pass_expires_and_is_cleared_by_a_storable_response() {
    let (cache, policy) = (small_cache(), Policy::default());
    let request = req("GET", "/hfp", &[]);
    let private = hdrs(&[("Cache-Control", "private")]);
    let Lookup::Miss(guard) = cache.lookup(&policy, &request, t(0), no_wait) else {
        panic!()
    };
    let refused = guard.store(
        &policy,
        &request,
        &resp(200, &private, 1),
        body("p"),
        times_at(0),
    );
    assert_eq!(refused.err(), Some(NotStoredReason::Private));
    assert!(matches!(
        lookup(&cache, &policy, "GET", "/hfp", &[], 9),
        Lookup::Pass
    ));
    // After `hit_for_pass` (10 s) the key is fetched through a guard again.
    let Lookup::Miss(guard) = cache.lookup(&policy, &request, t(10), no_wait) else {
        panic!("marker expired")
    };
    let public = hdrs(&[("Cache-Control", "max-age=60"), ("Date", &http_date(t(10)))]);
    guard
        .store(
            &policy,
            &request,
            &resp(200, &public, 1),
            body("p"),
            times_at(10),
        )
        .unwrap();
    assert!(matches!(
        lookup(&cache, &policy, "GET", "/hfp", &[], 11),
        Lookup::Hit(_)
    ));
    // Request-specific reasons (Authorization) do not mark the key.
    let auth = hdrs(&[("Authorization", "Bearer x")]);
    let auth_req = req("GET", "/auth", &auth);
    let Lookup::Miss(guard) = cache.lookup(&policy, &auth_req, t(0), no_wait) else {
        panic!()
    };
    let plain = hdrs(&[("Cache-Control", "max-age=60")]);
    assert!(guard
        .store(
            &policy,
            &auth_req,
            &resp(200, &plain, 1),
            body("a"),
            times_at(0)
        )
        .is_err());
    assert!(matches!(
        lookup(&cache, &policy, "GET", "/auth", &[], 1),
        Lookup::Miss(_)
    ));
    // Disabled: always coalesce.
    let no_hfp = Policy {
        hit_for_pass: std::time::Duration::ZERO,
        ..Policy::default()
    };
    let r2 = req("GET", "/nohfp", &[]);
    let Lookup::Miss(guard) = cache.lookup(&no_hfp, &r2, t(0), no_wait) else {
        panic!()
    };
    assert!(guard
        .store(
            &no_hfp,
            &r2,
            &resp(200, &private, 1),
            body("p"),
            times_at(0)
        )
        .is_err());
    assert!(matches!(
        lookup(&cache, &no_hfp, "GET", "/nohfp", &[], 1),
        Lookup::Miss(_)
    ));
}
