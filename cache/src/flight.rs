//! Single flight: concurrent misses for one key, on any worker thread,
//! cause one origin fetch. The first request gets a [`FetchGuard`]; the
//! others register a waiter callback that is called exactly once, when the
//! guard completes, fails or is dropped — so a waiter never hangs — unless
//! the proxy cancels it first (its own timeout) with [`crate::Cache::cancel_wait`].

use std::sync::Arc;
use std::time::SystemTime;

use crate::cache::Inner;
use crate::entry::Entry;
use crate::headers::HeaderPair;
use crate::key::{Key, OwnedKey};
use crate::message::{ExchangeTimes, Request, Response};
use crate::metrics::Counter;
use crate::policy::Policy;
use crate::storability::NotStoredReason;

/// What a waiting request learns when the fetch it waited for ends.
#[derive(Debug, Clone)]
pub enum WaitOutcome {
    /// The fetched (or freshened, or stale-but-allowed) response. Check
    /// [`Entry::vary_matches`] against the waiting request: the response
    /// may vary on a field the waiter sent differently; if it does not
    /// match, treat as `Failed`.
    Ready(Arc<Entry>),
    /// The fetch failed or its response could not be shared: go to the
    /// origin yourself (or answer an error).
    Failed,
}

/// The callback run for a waiter; typically it queues the outcome for the
/// worker that owns the request and wakes that worker's `mio::Waker`.
pub type WaiterFn = Box<dyn FnOnce(WaitOutcome) + Send>;

/// Identifies a registered waiter, to cancel it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WaitTicket {
    pub(crate) hash: u64,
    pub(crate) id: u64,
}

/// A fetch in flight and the requests waiting for it.
pub(crate) struct Pending {
    key: OwnedKey,
    fetch_id: u64,
    waiters: Vec<(u64, WaiterFn)>,
}

impl Pending {
    pub fn new(key: &Key<'_>, fetch_id: u64) -> Self {
        Pending {
            key: OwnedKey::from_key(key),
            fetch_id,
            waiters: Vec::new(),
        }
    }

    pub fn is_for(&self, key: &Key<'_>) -> bool {
        self.key.matches(key)
    }

    pub fn add_waiter(&mut self, id: u64, waiter: WaiterFn) {
        self.waiters.push((id, waiter));
    }

    /// Removes a waiter without calling it.
    pub fn cancel(&mut self, id: u64) -> bool {
        let before = self.waiters.len();
        self.waiters.retain(|(w, _)| *w != id);
        self.waiters.len() != before
    }
}

/// The right, and the duty, to fetch a key from the origin. Consume it
/// with one of its methods; dropping it counts as [`FetchGuard::fail`].
#[must_use = "dropping the guard fails every waiter"]
pub struct FetchGuard {
    inner: Arc<Inner>,
    hash: u64,
    fetch_id: u64,
    /// The stale entry being revalidated, if this fetch is a revalidation.
    stale: Option<Arc<Entry>>,
    finished: bool,
}

impl FetchGuard {
    pub(crate) fn new(
        inner: Arc<Inner>,
        hash: u64,
        fetch_id: u64,
        stale: Option<Arc<Entry>>,
    ) -> Self {
        FetchGuard {
            inner,
            hash,
            fetch_id,
            stale,
            finished: false,
        }
    }

    /// The stale entry this fetch revalidates: send its
    /// [`Entry::validators`] to the origin.
    pub fn stale_entry(&self) -> Option<&Arc<Entry>> {
        self.stale.as_ref()
    }

    /// Stores a full origin response (if storable) and hands it to every
    /// waiter. Returns the stored entry, or why it was not stored (waiters
    /// are then told `Failed` and go to the origin themselves).
    pub fn store<Q: HeaderPair, R: HeaderPair>(
        self,
        policy: &Policy,
        req: &Request<'_, Q>,
        resp: &Response<'_, R>,
        body: Arc<[u8]>,
        times: ExchangeTimes,
    ) -> Result<Arc<Entry>, NotStoredReason> {
        match Entry::build(policy, req, resp, body, times) {
            Ok(entry) => Ok(self.complete(Arc::new(entry), req)),
            Err(reason) => {
                self.not_storable(policy, req, reason, times.response_time);
                Err(reason)
            }
        }
    }

    /// Stores an entry built by the caller and hands it to every waiter.
    pub fn complete<H: HeaderPair>(
        mut self,
        entry: Arc<Entry>,
        req: &Request<'_, H>,
    ) -> Arc<Entry> {
        let key = req.key();
        // Stored under the request's own key even if the caller passed a
        // request other than the one that reserved the fetch.
        let hash = self.inner.hash(&key);
        self.inner.insert(hash, &key, Arc::clone(&entry));
        self.finish(WaitOutcome::Ready(Arc::clone(&entry)));
        entry
    }

    /// The origin answered 304 to the revalidation: freshen the stale entry
    /// (RFC 9111 §4.3.4), store and share it. `None` if this fetch had no
    /// stale entry (the 304 answers the client's own validators; forward
    /// it) — waiters are then failed.
    pub fn not_modified<Q: HeaderPair, R: HeaderPair>(
        self,
        policy: &Policy,
        req: &Request<'_, Q>,
        not_modified_headers: &[R],
        times: ExchangeTimes,
    ) -> Option<Arc<Entry>> {
        let stale = Arc::clone(self.stale.as_ref()?);
        match stale.freshened(policy, req, not_modified_headers, times) {
            Ok(fresh) => Some(self.complete(Arc::new(fresh), req)),
            Err(reason) => {
                // Valid for this exchange per the origin, but no longer
                // storable: serve it once, drop it from the cache.
                let key = req.key();
                self.inner.remove(self.inner.hash(&key), &key);
                self.not_storable(policy, req, reason, times.response_time);
                Some(stale)
            }
        }
    }

    /// The origin failed or answered `origin_status`: if `cache_use_stale`
    /// allows it and the entry permits it, the stale entry is shared with
    /// every waiter and returned for the caller to send. Otherwise `None`
    /// and waiters are failed.
    pub fn serve_stale(self, policy: &Policy, origin_status: u16) -> Option<Arc<Entry>> {
        self.serve_stale_at(policy, origin_status, SystemTime::now())
    }

    /// [`FetchGuard::serve_stale`] at `now`, also honouring the stored
    /// response's own `stale-if-error` (RFC 5861 §4) without
    /// `cache_use_stale`.
    pub fn serve_stale_at(
        mut self,
        policy: &Policy,
        origin_status: u16,
        now: SystemTime,
    ) -> Option<Arc<Entry>> {
        let usable = self.stale.clone().filter(|e| {
            (policy.stale_allowed_for(origin_status) && e.may_serve_stale())
                || e.stale_if_error_allows(origin_status, now)
        });
        match usable {
            Some(entry) => {
                let shared = self.finish(WaitOutcome::Ready(Arc::clone(&entry)));
                self.inner
                    .metrics
                    .add(Counter::StaleServed, shared.saturating_add(1));
                Some(entry)
            }
            None => {
                self.fail();
                None
            }
        }
    }

    /// The response cannot be stored (e.g. `TooLarge` when the proxy
    /// streams it without buffering): counts it, marks the key
    /// hit-for-pass if the reason is the response's own, fails waiters.
    pub fn not_storable<Q: HeaderPair>(
        self,
        policy: &Policy,
        req: &Request<'_, Q>,
        reason: NotStoredReason,
        now: std::time::SystemTime,
    ) {
        let key = req.key();
        self.inner.not_stored(policy, &key, reason, now);
        self.fail();
    }

    /// The fetch failed: every waiter is told to fall through.
    pub fn fail(mut self) {
        self.finish(WaitOutcome::Failed);
    }

    /// Removes the pending fetch and notifies its waiters outside the lock.
    /// Returns how many waiters were notified.
    fn finish(&mut self, outcome: WaitOutcome) -> u64 {
        self.finished = true;
        let waiters = self.inner.take_pending(self.hash, self.fetch_id);
        let n = waiters.len() as u64;
        for (_, waiter) in waiters {
            waiter(outcome.clone());
        }
        n
    }
}

impl Drop for FetchGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.finish(WaitOutcome::Failed);
        }
    }
}

impl std::fmt::Debug for FetchGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetchGuard")
            .field("hash", &self.hash)
            .field("fetch_id", &self.fetch_id)
            .field("revalidating", &self.stale.is_some())
            .finish()
    }
}

impl Pending {
    pub(crate) fn fetch_id(&self) -> u64 {
        self.fetch_id
    }

    pub(crate) fn into_waiters(self) -> Vec<(u64, WaiterFn)> {
        self.waiters
    }
}
