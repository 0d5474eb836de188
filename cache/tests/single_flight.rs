//! Single flight across threads: concurrent misses for one key make one
//! origin fetch; every waiter is told the outcome exactly once, whether
//! the fetch completes, fails or its guard is simply dropped.

mod common;

use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use cache::{Cache, CacheLimits, FetchGuard, Lookup, Policy, WaitOutcome};
use common::*;

const THREADS: usize = 20;
const BOUND: Duration = Duration::from_secs(10);

enum Role {
    Fetcher(FetchGuard),
    Waiter,
    Hit,
}

/// Runs THREADS concurrent lookups of `/sf`; waiter outcomes go to the
/// returned receiver. Returns the roles.
fn race(
    cache: &Cache,
    policy: &Arc<Policy>,
) -> (Vec<Role>, std::sync::mpsc::Receiver<WaitOutcome>) {
    let (tx, rx) = channel();
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (cache, policy, barrier, tx) = (
                cache.clone(),
                Arc::clone(policy),
                Arc::clone(&barrier),
                tx.clone(),
            );
            thread::spawn(move || {
                barrier.wait();
                let request = req("GET", "/sf", &[]);
                let waiter = move |outcome| {
                    let _ = tx.send(outcome);
                };
                match cache.lookup(&policy, &request, t(0), waiter) {
                    Lookup::Miss(guard) => Role::Fetcher(guard),
                    Lookup::Wait(_) => Role::Waiter,
                    Lookup::Hit(_) => Role::Hit,
                    other => panic!("unexpected {other:?}"),
                }
            })
        })
        .collect();
    let roles = handles.into_iter().map(|h| h.join().unwrap()).collect();
    (roles, rx)
}

fn split(roles: Vec<Role>) -> (FetchGuard, usize) {
    let mut fetchers = Vec::new();
    let mut waiters = 0;
    for role in roles {
        match role {
            Role::Fetcher(g) => fetchers.push(g),
            Role::Waiter => waiters += 1,
            Role::Hit => panic!("nothing was stored yet"),
        }
    }
    assert_eq!(fetchers.len(), 1, "exactly one origin fetch");
    (fetchers.pop().unwrap(), waiters)
}

fn collect(rx: &std::sync::mpsc::Receiver<WaitOutcome>, n: usize) -> Vec<WaitOutcome> {
    let deadline = Instant::now() + BOUND;
    let mut out = Vec::new();
    while out.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(o) => out.push(o),
            Err(RecvTimeoutError::Timeout) => panic!("waiter hung: {} of {n} notified", out.len()),
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    out
}

#[test]
fn twenty_threads_one_fetch_all_get_the_entry() {
    let cache = Cache::new(CacheLimits::default());
    let policy = Arc::new(Policy::default());
    let (roles, rx) = race(&cache, &policy);
    let (guard, waiters) = split(roles);
    assert_eq!(waiters, THREADS - 1);
    assert_eq!(cache.metrics().coalesced_waits, (THREADS - 1) as u64);
    // Completion happens on another thread, as on a different worker.
    let completer = {
        let (cache, policy) = (cache.clone(), Arc::clone(&policy));
        thread::spawn(move || {
            let h = hdrs(&[("Cache-Control", "max-age=60"), ("Date", &http_date(t(0)))]);
            let request = req("GET", "/sf", &[]);
            let stored = guard
                .store(
                    &policy,
                    &request,
                    &resp(200, &h, 5),
                    body("hello"),
                    times_at(0),
                )
                .unwrap();
            drop(cache);
            stored
        })
    };
    let stored = completer.join().unwrap();
    let outcomes = collect(&rx, waiters);
    assert_eq!(outcomes.len(), waiters);
    for o in &outcomes {
        match o {
            WaitOutcome::Ready(e) => assert!(Arc::ptr_eq(e, &stored)),
            WaitOutcome::Failed => panic!("fetch succeeded"),
        }
    }
    // Exactly once: nothing more arrives.
    assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
    assert!(matches!(
        cache.lookup(&policy, &req("GET", "/sf", &[]), t(1), |_| {}),
        Lookup::Hit(_)
    ));
}

#[test]
fn dropped_guard_fails_every_waiter() {
    let cache = Cache::new(CacheLimits::default());
    let policy = Arc::new(Policy::default());
    let (roles, rx) = race(&cache, &policy);
    let (guard, waiters) = split(roles);
    thread::spawn(move || drop(guard)).join().unwrap();
    let outcomes = collect(&rx, waiters);
    assert_eq!(outcomes.len(), THREADS - 1);
    assert!(outcomes.iter().all(|o| matches!(o, WaitOutcome::Failed)));
    // The key is free again: the next miss becomes the fetcher.
    assert!(matches!(
        cache.lookup(&policy, &req("GET", "/sf", &[]), t(1), |_| {}),
        Lookup::Miss(_)
    ));
}

#[test]
fn unstorable_response_fails_waiters_so_they_fall_through() {
    let cache = Cache::new(CacheLimits::default());
    let policy = Arc::new(Policy::default());
    let (roles, rx) = race(&cache, &policy);
    let (guard, waiters) = split(roles);
    let h = hdrs(&[("Cache-Control", "private")]);
    let request = req("GET", "/sf", &[]);
    assert!(guard
        .store(&policy, &request, &resp(200, &h, 1), body("p"), times_at(0))
        .is_err());
    let outcomes = collect(&rx, waiters);
    assert!(outcomes.len() == waiters && outcomes.iter().all(|o| matches!(o, WaitOutcome::Failed)));
}

#[test]
fn cancelled_waiter_is_never_called() {
    let cache = Cache::new(CacheLimits::default());
    let policy = Policy::default();
    let request = req("GET", "/c", &[]);
    let Lookup::Miss(guard) = cache.lookup(&policy, &request, t(0), |_| {}) else {
        panic!()
    };
    let (tx, rx) = channel::<&'static str>();
    let (tx1, tx2) = (tx.clone(), tx);
    let Lookup::Wait(cancelled) = cache.lookup(&policy, &request, t(0), move |_| {
        let _ = tx1.send("cancelled waiter ran");
    }) else {
        panic!()
    };
    let Lookup::Wait(_kept) = cache.lookup(&policy, &request, t(0), move |_| {
        let _ = tx2.send("kept");
    }) else {
        panic!()
    };
    assert!(cache.cancel_wait(cancelled));
    assert!(!cache.cancel_wait(cancelled), "second cancel finds nothing");
    guard.fail();
    assert_eq!(rx.recv_timeout(BOUND), Ok("kept"));
    assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
}

#[test]
fn concurrent_mixed_load_stays_within_budget_and_resolves_every_waiter() {
    const BUDGET: usize = 128 * 1024;
    let cache = Cache::new(CacheLimits {
        total_bytes: BUDGET,
        shards: 8,
    });
    let policy = Arc::new(Policy::default());
    let (tx, rx) = channel::<WaitOutcome>();
    let started = Instant::now();
    let workers: Vec<_> = (0..4u64)
        .map(|w| {
            let (cache, policy, tx) = (cache.clone(), Arc::clone(&policy), tx.clone());
            thread::spawn(move || {
                let mut waits = 0usize;
                let h = hdrs(&[("Cache-Control", "max-age=60"), ("Date", &http_date(t(0)))]);
                let payload = "z".repeat(900);
                for i in 0..3000u64 {
                    let uri = format!("/k/{}", (i * 7 + w) % 400);
                    let request = req("GET", &uri, &[]);
                    let tx = tx.clone();
                    match cache.lookup(&policy, &request, t(1), move |o| {
                        let _ = tx.send(o);
                    }) {
                        Lookup::Miss(guard) if i % 5 == 0 => drop(guard),
                        Lookup::Miss(guard) => {
                            let r = resp(200, &h, payload.len());
                            let _ = guard.store(&policy, &request, &r, body(&payload), times_at(0));
                        }
                        Lookup::Wait(_) => waits += 1,
                        _ => {}
                    }
                }
                waits
            })
        })
        .collect();
    drop(tx);
    let waits: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    // Every guard was resolved before its thread moved on, so every waiter
    // has already been notified.
    let notified = collect(&rx, waits).len();
    assert_eq!(notified, waits);
    assert!(cache.bytes() <= BUDGET);
    assert!(started.elapsed() < BOUND);
}
