//! The process-wide cache: N shards, each a mutex over an LRU of keys with
//! byte accounting, plus the single-flight table. Every call returns
//! immediately; a hit holds a shard lock only to clone an `Arc<Entry>`.

use std::collections::hash_map::RandomState;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use crate::entry::Entry;
use crate::flight::{FetchGuard, Pending, WaitOutcome, WaitTicket, WaiterFn};
use crate::headers::{CacheControl, HeaderPair};
use crate::key::{normalise_authority, Key};
use crate::message::{ExchangeTimes, Request, Response};
use crate::metrics::{Counter, Metrics, MetricsSnapshot};
use crate::policy::{Policy, PurgeMode, DEFAULT_TOTAL_BYTES};
use crate::shard::Shard;
use crate::storability::NotStoredReason;

/// Sizes fixed for the life of the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    /// Total byte budget (`cache_size`), split evenly between shards;
    /// one object can be at most a shard's share.
    pub total_bytes: usize,
    /// Number of shards (locks); more shards, less contention.
    pub shards: usize,
}

impl Default for CacheLimits {
    fn default() -> Self {
        CacheLimits {
            total_bytes: DEFAULT_TOTAL_BYTES,
            shards: 64,
        }
    }
}

/// The answer to a lookup.
#[derive(Debug)]
pub enum Lookup {
    /// Fresh entry: send it. [`Entry::reply_kind`] says full, head-only or
    /// 304; [`Entry::reply_parts`] and [`Entry::write_age`] give the bytes.
    Hit(Arc<Entry>),
    /// A stored entry must be revalidated (stale, no-cache, purged, or the
    /// client asked): send the request to the origin with
    /// [`Entry::validators`], then resolve the guard.
    Revalidate {
        entry: Arc<Entry>,
        guard: FetchGuard,
    },
    /// RFC 5861 §3 (only with `Policy::background_revalidation`): the
    /// entry is stale but within its `stale-while-revalidate` window and no
    /// revalidation is running. Answer the client with `entry` now, and
    /// revalidate in the background with [`Entry::validators`], resolving
    /// the guard as for `Revalidate`. Requests arriving meanwhile get
    /// `Hit(entry)` while the window lasts, so the revalidation is one.
    StaleWhileRevalidate {
        entry: Arc<Entry>,
        guard: FetchGuard,
    },
    /// Nothing stored: fetch from the origin (without the client's
    /// conditional fields, so the answer is storable), then resolve the guard.
    Miss(FetchGuard),
    /// Another request is fetching this key; the waiter callback will be
    /// called once. Keep the ticket to cancel on timeout.
    Wait(WaitTicket),
    /// Go to the origin and do not store (cache off, method not cached,
    /// request no-store, HEAD with nothing stored).
    Pass,
    /// `Cache-Control: only-if-cached` and nothing usable stored: answer 504.
    OnlyIfCachedMiss,
}

pub(crate) struct Inner {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    next_id: AtomicU64,
    pub metrics: Metrics,
}

impl Inner {
    pub(crate) fn hash(&self, key: &Key<'_>) -> u64 {
        key.hash_with(&self.hasher)
    }

    fn shard(&self, hash: u64) -> MutexGuard<'_, Shard> {
        let n = self.shards.len().max(1) as u64;
        let index = ((hash >> 32) % n) as usize;
        // The shard list is never empty (see `Cache::new`); a poisoned lock
        // only means a panic elsewhere, the shard's data stays consistent
        // because no user code runs under the lock.
        match self.shards.get(index).or_else(|| self.shards.first()) {
            Some(m) => m.lock().unwrap_or_else(PoisonError::into_inner),
            None => unreachable!("cache has at least one shard"),
        }
    }

    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn insert(&self, hash: u64, key: &Key<'_>, entry: Arc<Entry>) {
        let outcome = self.shard(hash).insert(hash, key, entry);
        if outcome.stored {
            self.metrics.add(Counter::Store, 1);
        } else {
            self.metrics.not_stored(NotStoredReason::TooLarge);
        }
        self.metrics.add(Counter::Eviction, outcome.evicted);
    }

    /// Counts a response not stored and, when the reason is the
    /// response's own, marks the key hit-for-pass.
    pub(crate) fn not_stored(
        &self,
        policy: &Policy,
        key: &Key<'_>,
        reason: NotStoredReason,
        now: SystemTime,
    ) {
        self.metrics.not_stored(reason);
        if policy.hit_for_pass.is_zero() || !reason.is_about_response() {
            return;
        }
        let Some(until) = now.checked_add(policy.hit_for_pass) else {
            return;
        };
        let hash = self.hash(key);
        self.shard(hash).mark_pass(hash, until);
    }

    pub(crate) fn remove(&self, hash: u64, key: &Key<'_>) {
        self.shard(hash).purge(hash, key, true);
    }

    /// Ends the pending fetch `fetch_id`, returning its waiters.
    pub(crate) fn take_pending(&self, hash: u64, fetch_id: u64) -> Vec<(u64, WaiterFn)> {
        let mut shard = self.shard(hash);
        match shard.pending.get(&hash) {
            Some(p) if p.fetch_id() == fetch_id => {}
            _ => return Vec::new(),
        }
        shard
            .pending
            .remove(&hash)
            .map(Pending::into_waiters)
            .unwrap_or_default()
    }
}

/// A handle on the shared cache; clone it into every worker.
#[derive(Clone)]
pub struct Cache {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("shards", &self.inner.shards.len())
            .finish()
    }
}

impl Cache {
    pub fn new(limits: CacheLimits) -> Self {
        let shards = limits.shards.max(1);
        let budget = limits.total_bytes / shards;
        let markers = (crate::shard::PASS_MARKERS / shards).max(1);
        Cache {
            inner: Arc::new(Inner {
                shards: (0..shards)
                    .map(|_| Mutex::new(Shard::new(budget, markers)))
                    .collect(),
                hasher: RandomState::new(),
                next_id: AtomicU64::new(1),
                metrics: Metrics::default(),
            }),
        }
    }

    /// Looks the request up; on a miss or a needed revalidation either
    /// reserves the single origin fetch (a [`FetchGuard`]) or, when another
    /// request already holds it, registers `waiter` (called exactly once
    /// later, from the thread that resolves the fetch). `waiter` is dropped
    /// unused for any other answer.
    pub fn lookup<H, W>(
        &self,
        policy: &Policy,
        req: &Request<'_, H>,
        now: SystemTime,
        waiter: W,
    ) -> Lookup
    where
        H: HeaderPair,
        W: FnOnce(WaitOutcome) + Send + 'static,
    {
        let metrics = &self.inner.metrics;
        let cc = CacheControl::parse(req.headers);
        if !policy.enabled || !looked_up(policy, req.method) || cc.no_store {
            metrics.add(Counter::Bypass, 1);
            return Lookup::Pass;
        }
        let key = req.key();
        let hash = self.inner.hash(&key);
        let mut shard = self.inner.shard(hash);
        let stored = shard.find(hash, &key, |e| e.vary_matches(req.headers));
        if let Some(entry) = &stored {
            if acceptable(entry, &cc, now) {
                drop(shard);
                metrics.add(Counter::Hit, 1);
                if entry.not_modified_for(req.headers) {
                    metrics.add(Counter::NotModified, 1);
                }
                return Lookup::Hit(Arc::clone(entry));
            }
        }
        let serve_while_revalidating = stored
            .as_ref()
            .filter(|entry| policy.background_revalidation && request_accepts_swr(entry, &cc, now));
        if let Some(entry) = serve_while_revalidating {
            if shard.pending.get(&hash).is_some_and(|p| p.is_for(&key)) {
                // The background revalidation is already running.
                drop(shard);
                metrics.add(Counter::Hit, 1);
                metrics.add(Counter::StaleServed, 1);
                return Lookup::Hit(Arc::clone(entry));
            }
        }
        if cc.only_if_cached {
            metrics.add(Counter::Miss, 1);
            return Lookup::OnlyIfCachedMiss;
        }
        if shard.pass_active(hash, now) {
            metrics.add(Counter::Miss, 1);
            return Lookup::Pass;
        }
        if let Some(pending) = shard.pending.get_mut(&hash) {
            if !pending.is_for(&key) {
                // Hash collision with a different key in flight.
                metrics.add(Counter::Miss, 1);
                return Lookup::Pass;
            }
            let id = self.inner.next_id();
            pending.add_waiter(id, Box::new(waiter));
            metrics.add(Counter::CoalescedWait, 1);
            return Lookup::Wait(WaitTicket { hash, id });
        }
        if stored.is_none() && req.is_head() {
            // A HEAD response has no body to fill the GET entry with.
            metrics.add(Counter::Miss, 1);
            return Lookup::Pass;
        }
        let serve_while_revalidating = serve_while_revalidating.is_some();
        let fetch_id = self.inner.next_id();
        shard.pending.insert(hash, Pending::new(&key, fetch_id));
        drop(shard);
        let guard = FetchGuard::new(Arc::clone(&self.inner), hash, fetch_id, stored.clone());
        self.fetch_answer(stored, guard, serve_while_revalidating)
    }

    /// The answer to the request that reserved the fetch, counted.
    fn fetch_answer(
        &self,
        stored: Option<Arc<Entry>>,
        guard: FetchGuard,
        serve_while_revalidating: bool,
    ) -> Lookup {
        let metrics = &self.inner.metrics;
        match stored {
            Some(entry) if serve_while_revalidating => {
                metrics.add(Counter::StaleServed, 1);
                metrics.add(Counter::Revalidation, 1);
                Lookup::StaleWhileRevalidate { entry, guard }
            }
            Some(entry) => {
                metrics.add(Counter::Revalidation, 1);
                Lookup::Revalidate { entry, guard }
            }
            None => {
                metrics.add(Counter::Miss, 1);
                Lookup::Miss(guard)
            }
        }
    }

    /// Removes a waiter (the proxy's timeout fired). `true` if it was still
    /// registered: its callback will never run. `false`: it ran or is running.
    pub fn cancel_wait(&self, ticket: WaitTicket) -> bool {
        let mut shard = self.inner.shard(ticket.hash);
        shard
            .pending
            .get_mut(&ticket.hash)
            .is_some_and(|p| p.cancel(ticket.id))
    }

    /// Stores a response outside the single-flight protocol (no guard was
    /// taken, e.g. a response to a request that waited and then fell
    /// through). Replaces the same variant.
    pub fn store<Q: HeaderPair, R: HeaderPair>(
        &self,
        policy: &Policy,
        req: &Request<'_, Q>,
        resp: &Response<'_, R>,
        body: Arc<[u8]>,
        times: ExchangeTimes,
    ) -> Result<Arc<Entry>, NotStoredReason> {
        let entry = Entry::build(policy, req, resp, body, times).map(Arc::new);
        match entry {
            Ok(entry) => {
                let key = req.key();
                let hash = self.inner.hash(&key);
                self.inner.insert(hash, &key, Arc::clone(&entry));
                Ok(entry)
            }
            Err(reason) => {
                let key = req.key();
                self.inner
                    .not_stored(policy, &key, reason, times.response_time);
                Err(reason)
            }
        }
    }

    /// PURGE of the request's target: the GET/HEAD entry and all its
    /// variants for its vhost and normalised authority, under both schemes
    /// (an administrator purges a resource, whichever scheme filled it; the
    /// caller has checked `cache_purge_acl`). Returns whether anything was
    /// stored under either key.
    pub fn purge<H: HeaderPair>(&self, mode: PurgeMode, req: &Request<'_, H>) -> bool {
        let mut found = false;
        // The port is read as the PURGE's own connection has it (`:80` over http names
        // the same host as no port), then keyed under each scheme.
        let authority = normalise_authority(req.scheme, req.authority);
        for scheme in ["http", "https"] {
            let key = Key::new(req.vhost, scheme, authority, "GET", req.uri);
            let hash = self.inner.hash(&key);
            found |= self
                .inner
                .shard(hash)
                .purge(hash, &key, mode == PurgeMode::Immediate);
        }
        if found {
            self.inner.metrics.add(Counter::Purge, 1);
        }
        found
    }

    /// The stored variant of `key` that `matches` accepts, fresh or not.
    pub(crate) fn find_variant(
        &self,
        key: &Key<'_>,
        matches: impl Fn(&Entry) -> bool,
    ) -> Option<Arc<Entry>> {
        let hash = self.inner.hash(key);
        self.inner.shard(hash).find(hash, key, matches)
    }

    /// Stores `entry` for `req`'s key, replacing the same variant.
    pub(crate) fn replace<H: HeaderPair>(&self, req: &Request<'_, H>, entry: Entry) {
        self.replace_arc(req, Arc::new(entry));
    }

    pub(crate) fn replace_arc<H: HeaderPair>(&self, req: &Request<'_, H>, entry: Arc<Entry>) {
        let key = req.key();
        let hash = self.inner.hash(&key);
        self.inner.insert(hash, &key, entry);
    }

    /// Counts a response not stored, without hit-for-pass.
    pub(crate) fn count_not_stored(&self, reason: NotStoredReason) {
        self.inner.metrics.not_stored(reason);
    }

    /// Removes a key with all its variants; whether anything was stored.
    pub(crate) fn remove_key(&self, key: &Key<'_>) -> bool {
        let hash = self.inner.hash(key);
        let found = self.inner.shard(hash).purge(hash, key, true);
        if found {
            self.inner.metrics.add(Counter::Invalidation, 1);
        }
        found
    }

    /// Records that the response for `req` was not offered for storage
    /// (e.g. its body was over the size limit and was streamed): counts it
    /// and marks the key hit-for-pass when the reason is the response's.
    pub fn not_stored<H: HeaderPair>(
        &self,
        policy: &Policy,
        req: &Request<'_, H>,
        reason: NotStoredReason,
        now: SystemTime,
    ) {
        let key = req.key();
        self.inner.not_stored(policy, &key, reason, now);
    }

    /// Counts a request the proxy decided not to look up (`cache_bypass`).
    pub fn count_bypass(&self) {
        self.inner.metrics.add(Counter::Bypass, 1);
    }

    /// Bytes accounted across shards (payload plus per-entry overhead).
    pub fn bytes(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).bytes())
            .sum()
    }

    /// Hit-for-pass markers held across shards (at most `PASS_MARKERS`).
    pub fn pass_markers(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .pass_markers()
            })
            .sum()
    }

    pub fn metrics(&self) -> MetricsSnapshot {
        let (mut bytes, mut entries) = (0u64, 0u64);
        for shard in self.inner.shards.iter() {
            let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            bytes = bytes.saturating_add(shard.bytes() as u64);
            entries = entries.saturating_add(shard.entries() as u64);
        }
        self.inner.metrics.snapshot(bytes, entries)
    }
}

/// Whether a stored entry may answer this request without revalidation:
/// fresh, and within the request's own max-age / min-fresh / no-cache; or
/// stale within the request's max-stale where the response allows it.
fn acceptable(entry: &Entry, cc: &CacheControl, now: SystemTime) -> bool {
    if cc.no_cache {
        return false;
    }
    let age = entry.current_age(now);
    if cc.max_age.is_some_and(|max| age > Duration::from_secs(max)) {
        return false;
    }
    // Fresh while some freshness is left (`Entry::freshness`), from the age just computed.
    match entry.freshness_left_at(age) {
        Duration::ZERO => cc
            .max_stale
            .is_some_and(|max| entry.within_max_stale(now, Duration::from_secs(max))),
        left => cc
            .min_fresh
            .is_none_or(|min| left >= Duration::from_secs(min)),
    }
}

/// Whether requests with `method` are answered from the cache. HEAD is
/// answered from the GET entry whenever GET is cached. RFC 9111 §4:
/// requests with unsafe methods are written through whatever
/// `cache_methods` says (a POST response is reused for GET only through
/// `Cache::store_post_response`).
fn looked_up(policy: &Policy, method: &str) -> bool {
    !crate::invalidation::is_unsafe_method(method)
        && (policy.method_cacheable(method)
            || (method.eq_ignore_ascii_case("HEAD") && policy.method_cacheable("GET")))
}

/// RFC 5861 §3 for this request: the stale entry's own window allows it
/// (and nothing forbids stale use, RFC 9111 §4.2.4), and the client did not
/// ask for a validated or fresher response (no-cache, max-age exceeded,
/// min-fresh: §5.2.1).
fn request_accepts_swr(entry: &Entry, cc: &CacheControl, now: SystemTime) -> bool {
    !cc.no_cache
        && cc.min_fresh.is_none()
        && cc
            .max_age
            .is_none_or(|max| entry.current_age(now) <= Duration::from_secs(max))
        && entry.stale_while_revalidate_allows(now)
}
