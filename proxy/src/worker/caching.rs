//! The cache on the request path: look a request up, answer hits through the client's codec
//! (head copied, body shared), reserve the single origin fetch on a miss (`fill.rs` fills the
//! entry from the streamed response), revalidate stale entries, park exchanges that wait for
//! another request's fetch, and evict on PURGE.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use cache::{Entry, FetchGuard, Lookup, WaitTicket};
use http1::HeaderEdits;

use mio::Waker;

use super::background::Revalidation;
use super::client::Clients;
use super::exchange::{Exchange, ExchangeId, Exchanges, Stage};
use super::h1::Reply;
use super::request::FieldPairs;
use crate::access_log::CacheStatus;
use crate::router::CacheOverride;
use crate::runtime::{CacheRt, Runtime};

pub use super::fill::Fill;

/// Exchanges whose cache wait ended; filled by the thread that completed the fetch, drained
/// by this worker when its waker fires.
pub type Inbox = Arc<Mutex<Vec<ExchangeId>>>;

/// What the cache decided for a request.
pub enum CacheStep {
    /// Answered from the cache (or refused): nothing to forward.
    Served,
    /// Forward; fill or revalidate the entry from the response when `fill` is set, sending
    /// `edits` (the stored validators) upstream.
    Forward {
        fill: Option<Box<Fill>>,
        edits: Option<HeaderEdits>,
    },
    /// Another request is fetching this key; wait for it.
    Parked(WaitTicket),
    /// Answered with a stale entry (RFC 5861 §3); revalidate it in the background.
    ServedStale(Box<Revalidation>),
}

/// What the lookup found, decided while the request is borrowed.
enum Found {
    Purge,
    Hit(Arc<Entry>, cache::Answer),
    /// A stale entry within its stale-while-revalidate window answers now; the
    /// revalidation goes on without the client.
    StaleWhileRevalidate(Arc<Entry>, cache::Answer, Box<Revalidation>),
    OnlyIfCachedMiss,
    Step(CacheStep),
}

impl Found {
    /// Forwarded as if there were no cache: nothing to fill, no validators to send.
    const FORWARD: Found = Found::Step(CacheStep::Forward {
        fill: None,
        edits: None,
    });

    /// What the access log says of it; `None` for PURGE and a wait (looked up again after).
    fn cache_status(&self) -> Option<CacheStatus> {
        match self {
            Found::Hit(..) => Some(CacheStatus::Hit),
            Found::StaleWhileRevalidate(..) => Some(CacheStatus::Stale),
            Found::OnlyIfCachedMiss => Some(CacheStatus::Miss),
            Found::Step(CacheStep::Forward { fill: None, .. }) => Some(CacheStatus::Pass),
            Found::Step(CacheStep::Forward { fill: Some(_), .. }) => Some(CacheStatus::Miss),
            Found::Purge | Found::Step(_) => None,
        }
    }
}

/// How a request the cache answers is answered.
pub(super) enum Answer {
    /// From a stored entry (a hit, a stale answer).
    Stored(Arc<Entry>, cache::Answer, bool),
    /// The proxy's page for this status (PURGE's 200 and 403, only-if-cached's 504).
    Status(u16, bool),
}

impl Answer {
    /// Runs `send` with the answer as a reply, and whether the connection closes after it.
    #[inline]
    pub fn send<R>(&self, send: impl FnOnce(Reply<'_>, bool) -> R) -> R {
        match self {
            Answer::Stored(entry, answer, close) => {
                let reply = Reply::Stored {
                    entry,
                    answer: answer.clone(),
                };
                send(reply, *close)
            }
            Answer::Status(status, close) => send(Reply::Status(*status), *close),
        }
    }
}

/// The parts the cache step reads beside the exchanges: the configuration, the store, and
/// the inbox and waker a parked exchange is woken through.
pub(super) type Parts<'a> = (&'a Runtime, &'a cache::Cache, (&'a Inbox, &'a Arc<Waker>));

/// What the cache does for exchange `id`, routed to a vhost with caching: the step, and the
/// answer to send for a hit, PURGE or an only-if-cached miss. PURGE is carried out here.
#[inline]
pub(super) fn step(
    exchanges: &mut Exchanges,
    clients: &Clients,
    parts: Parts<'_>,
    (id, rt_cache, vhost, overrides): (ExchangeId, &Arc<CacheRt>, &str, CacheOverride),
) -> (CacheStep, Option<Answer>) {
    let Some(ex) = exchanges.get(id) else {
        return (CacheStep::Served, None);
    };
    let keep_alive = ex.keep_alive;
    let has_body = ex.request.has_body();
    // An unsafe method is forwarded with a fill that only invalidates: a pass.
    let unsafe_method = cache::is_unsafe_method(ex.request.cache_method());
    let found = lookup(ex, id, parts, (rt_cache, vhost, overrides));
    let status = match found.cache_status() {
        Some(_) if unsafe_method => Some(CacheStatus::Pass),
        status => status,
    };
    if let Some(status) = status {
        if let Some(log) = exchanges.get_mut(id).and_then(|ex| ex.log.as_mut()) {
            log.cache = Some(status);
        }
    }
    let close = !keep_alive || has_body;
    match found {
        Found::Step(step) => (step, None),
        Found::Purge => {
            let answer = exchanges
                .get(id)
                .and_then(|ex| purge(ex, clients, parts.1, (rt_cache, vhost)));
            (CacheStep::Served, answer)
        }
        Found::Hit(entry, answer) => (
            CacheStep::Served,
            Some(Answer::Stored(entry, answer, close)),
        ),
        Found::StaleWhileRevalidate(entry, answer, revalidation) => (
            CacheStep::ServedStale(revalidation),
            Some(Answer::Stored(entry, answer, close)),
        ),
        Found::OnlyIfCachedMiss => (CacheStep::Served, Some(Answer::Status(504, !keep_alive))),
    }
}

#[inline]
fn lookup(
    ex: &Exchange,
    id: ExchangeId,
    parts: Parts<'_>,
    (rt_cache, vhost, overrides): (&Arc<CacheRt>, &str, CacheOverride),
) -> Found {
    let store = parts.1;
    let request = &ex.request;
    if request.method_bytes() == b"PURGE" && rt_cache.purge.is_some() {
        return Found::Purge;
    }
    let uri = request.path();
    if cache::is_unsafe_method(request.cache_method()) {
        // Even when the request itself is not cacheable (§4.4).
        let fill = Fill::new(None, rt_cache.clone(), store.clone(), vhost, request, None);
        return Found::Step(CacheStep::Forward {
            fill: Some(fill),
            edits: None,
        });
    }
    if overrides.disable == Some(true) || rt_cache.rules.decide(uri) == cache::CacheAction::Bypass {
        store.count_bypass();
        return Found::FORWARD;
    }
    lookup_store(ex, id, parts, (rt_cache, vhost, overrides))
}

/// The store's answer for exchange `id`'s (`ex`) cacheable request.
#[inline]
fn lookup_store(
    ex: &Exchange,
    id: ExchangeId,
    (rt, store, wake): Parts<'_>,
    (rt_cache, vhost, overrides): (&Arc<CacheRt>, &str, CacheOverride),
) -> Found {
    let request = &ex.request;
    let mut pairs = FieldPairs::default();
    let headers = pairs.fill(request);
    let req = cache::Request {
        vhost,
        scheme: request.scheme().as_str(),
        authority: request.authority().unwrap_or_default(),
        method: request.cache_method(),
        uri: request.path(),
        headers,
    };
    // An http_chain `cache_ttl` override: the vhost's policy with that lifetime. (Not a
    // `Cow`: its drop check costs a plain hit ~20 instructions.)
    let ttl_policy;
    let policy = match overrides.ttl {
        Some(ttl) => {
            ttl_policy = cache::Policy {
                default_ttl: ttl,
                ..rt_cache.policy.clone()
            };
            &ttl_policy
        }
        None => &rt_cache.policy,
    };
    let fill = |guard: FetchGuard, revalidating: Option<Arc<Entry>>| {
        let store = store.clone();
        Some(Fill::new(
            Some(guard),
            rt_cache.clone(),
            store,
            vhost,
            request,
            revalidating,
        ))
    };
    match store.lookup(policy, &req, SystemTime::now(), fill_waiter(wake, id)) {
        Lookup::Hit(entry) => {
            let answer = entry.answer(&req);
            Found::Hit(entry, answer)
        }
        Lookup::Miss(guard) => Found::Step(CacheStep::Forward {
            fill: fill(guard, None),
            edits: None,
        }),
        Lookup::Revalidate { entry, guard } => {
            let edits = validator_edits(&entry);
            Found::Step(CacheStep::Forward {
                fill: fill(guard, Some(entry)),
                edits: Some(edits),
            })
        }
        Lookup::StaleWhileRevalidate { entry, guard } => {
            let answer = entry.answer(&req);
            let stored = (rt_cache, vhost);
            stale_while_revalidating((rt, store), request, stored, (entry, answer), guard)
        }
        Lookup::Wait(ticket) if ex.cache_after_wait => {
            // Waited once already: do not queue behind another fetch again.
            store.cancel_wait(ticket);
            Found::FORWARD
        }
        Lookup::Wait(ticket) => Found::Step(CacheStep::Parked(ticket)),
        Lookup::Pass => Found::FORWARD,
        Lookup::OnlyIfCachedMiss => Found::OnlyIfCachedMiss,
    }
}

/// What the cache calls when the fetch exchange `id` waits for ends (whatever its outcome):
/// the parked exchange is simply served again through the worker's inbox; the lookup then
/// finds the stored entry, or goes to the origin itself.
fn fill_waiter(
    (inbox, waker): (&Inbox, &Arc<Waker>),
    id: ExchangeId,
) -> impl FnOnce(cache::WaitOutcome) + Send + 'static {
    let inbox = inbox.clone();
    let waker = waker.clone();
    move |_outcome: cache::WaitOutcome| {
        inbox.lock().unwrap_or_else(|e| e.into_inner()).push(id);
        let _ = waker.wake();
    }
}

/// A stale `entry` within its stale-while-revalidate window answers `request` now; the
/// revalidation (a request of its own, filling the vhost's cache `stored` through `guard`)
/// goes on in the background.
fn stale_while_revalidating(
    (rt, store): (&Runtime, &cache::Cache),
    request: &super::request::Request,
    (rt_cache, vhost): (&Arc<CacheRt>, &str),
    (entry, answer): (Arc<Entry>, cache::Answer),
    guard: FetchGuard,
) -> Found {
    let make_fill = |bg_request: &super::request::Request| {
        let revalidating = Some(entry.clone());
        let store = store.clone();
        Fill::new(
            Some(guard),
            rt_cache.clone(),
            store,
            vhost,
            bg_request,
            revalidating,
        )
    };
    let edits = validator_edits(&entry);
    match Revalidation::new(request, &rt.limits, make_fill, edits) {
        Some(background) => Found::StaleWhileRevalidate(entry, answer, background),
        // Not expressible as a revalidation request: the guard is dropped (the fetch
        // failed) and the client still gets the stale entry.
        None => Found::Hit(entry, answer),
    }
}

/// The exchanges whose cache wait ended since the last look (taken from `inbox`).
pub(super) fn take_inbox(inbox: &Inbox) -> Vec<ExchangeId> {
    std::mem::take(&mut *inbox.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Whether exchange `id` still waits for another request's fetch.
pub(super) fn waiting(exchanges: &Exchanges, id: ExchangeId) -> bool {
    exchanges
        .get(id)
        .is_some_and(|ex| matches!(ex.stage(), Stage::CacheWait(_)))
}

/// PURGE of the request's target on a vhost with `cache_purge`: 200 from an allowed address
/// (the entries for its Host, under either scheme, are evicted or marked stale), 403 from
/// others. None if the client is gone.
fn purge(
    ex: &Exchange,
    clients: &Clients,
    store: &cache::Cache,
    (rt_cache, vhost): (&CacheRt, &str),
) -> Option<Answer> {
    let close = !ex.keep_alive;
    let ip = clients.get(ex.client).map(|c| c.peer.ip())?;
    if !rt_cache.purge_acl.iter().any(|p| p.contains(ip)) {
        return Some(Answer::Status(403, close));
    }
    let mode = rt_cache.purge.unwrap_or(cache::PurgeMode::Invalidate);
    let request = &ex.request;
    let req = cache::Request {
        vhost,
        scheme: request.scheme().as_str(),
        authority: request.authority().unwrap_or_default(),
        method: "GET",
        uri: request.path(),
        headers: &[] as &[(&[u8], &[u8])],
    };
    store.purge(mode, &req);
    Some(Answer::Status(200, close))
}

/// The stored validators sent upstream to revalidate `entry` (they replace the client's).
fn validator_edits(entry: &Entry) -> HeaderEdits {
    let mut edits = HeaderEdits::new();
    for (name, value) in entry.validators() {
        let _ = edits.set(name.as_bytes(), value);
    }
    edits
}
