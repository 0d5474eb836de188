//! From a request to its serving: a request the client's codec yielded (drive.rs
//! `try_request`, or a stream's, `stream_request`) enters once for every protocol (frang
//! counts it, an exchange is made for it), `http_chain` routes it (chain.rs), the sticky
//! cookie's gate and the vhost's request limits judge it, and it is served from the cache
//! or sent to the vhost's server group (forward.rs). Functions over the pipeline's parts
//! (parts.rs).

use std::time::{Duration, Instant};

use super::caching::CacheStep;
use super::chain::Routed;
use super::client::ClientId;
use super::exchange::{Arrival, ExchangeId, TierFallback};
use super::finish::{self, Refusal, RefuseAt};
use super::forward;
use super::h1::Reply;
use super::h2::Unservable;
use super::h2_serve::{self, StreamRefused};
use super::limits;
use super::parts::Parts;
use super::request::Request;
use super::tier_hop::{from_peer, tier_owner};
use super::token::client_token;
use super::websocket::Upgrade;
use crate::fleet::tier::HOP_FIELD;
use crate::metrics::{bump, WorkerMetrics};
use crate::router::{CacheOverride, Route};

/// A stream opened with a request, on HTTP/2 or HTTP/3 (`drive_h3`), as its codec
/// converted it: it enters as every request does (`enter_request`), or is answered on
/// the stream when it cannot become a request the rules can see.
pub(super) fn stream_request(
    p: &mut Parts<'_>,
    ci: ClientId,
    stream: u32,
    converted: Result<Request, Unservable>,
    now: Instant,
) {
    let at = RefuseAt::Stream(stream);
    let refused = match converted {
        // The connection outlives its streams; closing is the codec's (GOAWAY). A
        // request frang refuses has no exchange: refused on its stream.
        Ok(request) => return enter_request(p, ci, (stream, true, at), request),
        Err(refused) => h2_serve::unservable(&mut p.h2(), ci, (stream, refused), now),
    };
    match refused {
        Some(StreamRefused::Frang(v)) => finish::frang_violation(p, ci, at, &v),
        Some(StreamRefused::Parse(e)) => finish::parse_refused(p, ci, at, &e),
        None => {}
    }
}

/// The one entry of a request on every protocol (`exchange::admit`): frang counts it,
/// then it becomes an exchange on `stream` of client `ci` (the codec begins it) and is
/// routed, or it is refused at `unadmitted`, where its protocol refuses a request that
/// has no exchange (HTTP/1.1: the connection; HTTP/2 and HTTP/3: the stream).
pub(super) fn enter_request(
    p: &mut Parts<'_>,
    ci: ClientId,
    (stream, keep_alive, unadmitted): (u32, bool, RefuseAt),
    request: Request,
) {
    WorkerMetrics::bump(&p.conns.metrics.workers[p.worker].requests);
    let Some(c) = p.clients.get(ci) else {
        return;
    };
    let arrival = Arrival {
        client: ci,
        client_id: c.id,
        peer: c.peer,
        tls: (c.tft, c.ja4),
        // Asked only with a tier and of a request carrying the hop field: a request's
        // fields are scanned for it, and the connection's address costs a getsockname.
        from_peer: p.rt.tier.is_some()
            && request.header(HOP_FIELD).is_some()
            && from_peer(p.rt.tier.as_ref(), (c.peer.ip(), &c.sock)),
        stream,
        keep_alive,
    };
    let parts = (p.rt, &mut *p.exchanges, &mut *p.conns.timers);
    let clients = &mut *p.clients;
    let begin = |id| {
        if let Some(c) = clients.get_mut(ci) {
            c.codec.begin(stream, id);
        }
    };
    match super::exchange::admit(parts, arrival, request, p.now, begin) {
        Ok(id) => route(p, id),
        Err(v) => finish::frang_violation(p, ci, unadmitted, &v),
    }
}

/// Applies `http_chain` to exchange `id` (chain.rs); a request routed to a vhost goes
/// on through the sticky cookie's gate to be served.
#[inline]
pub(super) fn route(p: &mut Parts<'_>, id: ExchangeId) {
    match super::chain::route(p, id) {
        Routed::Ended => {}
        Routed::Vhost(cache) => {
            if sticky_gate(p, id) {
                serve(p, id, cache);
            }
        }
    }
}

/// Serves exchange `id`, routed to a vhost: from the cache, or through its server group.
pub(super) fn serve(p: &mut Parts<'_>, id: ExchangeId, overrides: CacheOverride) {
    let rt = p.rt;
    match limits::judge_request((&*p.exchanges, &*p.clients), rt, id, p.now) {
        Some(Ok(())) => {}
        None => return,
        Some(Err((ci, v))) => return finish::frang_violation(p, ci, RefuseAt::Exchange(id), &v),
    }
    let Some(ex) = p.exchanges.get(id) else {
        return;
    };
    let Some(v) = ex.vhost.and_then(|v| rt.vhosts.get(v)) else {
        return;
    };
    let loc = ex.location.and_then(|l| v.locations.get(l));
    let close_on_error = !ex.keep_alive || ex.request.has_body();
    let Some(pass) = loc.map_or(v.proxy_pass, |l| l.proxy_pass) else {
        return finish::answer(p, id, Reply::Status(502), close_on_error);
    };
    // A WebSocket handshake goes to the origin as it is, never to the cache; a malformed
    // one goes nowhere.
    let websocket = match super::websocket::classify(&ex.request) {
        Upgrade::None => false,
        Upgrade::WebSocket => true,
        Upgrade::Malformed(why) => {
            bump(&p.conns.metrics.parse_errors);
            if rt.config.block_action.error.log {
                let peer = p.clients.get(ex.client).map(|c| c.peer);
                crate::warn!("refused WebSocket handshake from {peer:?}: {why}");
            }
            return finish::refuse_exchange(p, id, 400, Refusal::Error);
        }
    };
    let mut validators = None;
    let mut fill = None;
    let routed = (ex.vhost, ex.location);
    let cache = loc
        .map_or(&v.cache, |l| &l.cache)
        .as_ref()
        .filter(|_| !websocket);
    // While caching is on, Tempesta refuses a PURGE where `cache_purge` is not configured
    // (`tfw_cache_purge_method`) rather than pass it to the origin.
    if ex.request.method_bytes() == b"PURGE"
        && rt.config.cache.mode.enabled()
        && cache.is_none_or(|c| c.purge.is_none())
    {
        return finish::answer(p, id, Reply::Status(403), close_on_error);
    }
    if let Some(rc) = cache {
        match cache_step(p, id, rc, &v.name, overrides) {
            CacheStep::Served => return,
            CacheStep::ServedStale(revalidation) => {
                return super::response::revalidate_in_background(
                    p,
                    revalidation,
                    routed.0,
                    routed.1,
                    pass,
                )
            }
            CacheStep::Parked(ticket) => {
                let timeout = rt
                    .groups
                    .get(pass.0)
                    .map_or(Duration::from_secs(60), |g| g.forward_timeout);
                if let Some(ex) = p.exchanges.get_mut(id) {
                    ex.park(ticket);
                }
                p.exchanges.arm_timer(&mut *p.conns.timers, id, timeout);
                return;
            }
            CacheStep::Forward { fill: f, edits } => {
                fill = f;
                validators = edits;
            }
        }
    }
    forward_miss(p, id, pass, fill, validators);
}

/// Sends exchange `id` to the cache tier's owner of its object when another peer owns
/// it (falling back to `pass`), else to `pass`, as [`forward::forward`].
fn forward_miss(
    p: &mut Parts<'_>,
    id: ExchangeId,
    pass: (usize, Option<usize>),
    fill: Option<Box<super::caching::Fill>>,
    validators: Option<http1::HeaderEdits>,
) {
    let owner = p.rt.tier.as_ref().and_then(|tier| {
        let ex = p.exchanges.get(id)?;
        tier_owner(tier, ex, fill.is_some())
    });
    let Some(owner) = owner else {
        return forward::forward(p, id, pass, fill, validators);
    };
    let fallback = Box::new(TierFallback {
        pass,
        validators: validators.clone(),
    });
    forward::forward_via(p, id, (owner, None), fill, validators, Some(fallback));
}

/// A parked exchange's cache wait ended (the fetch it waited for finished, or the wait
/// timed out): serve it again; it does not wait a second time.
pub(super) fn resume_after_wait(p: &mut Parts<'_>, id: ExchangeId) {
    let Some(ex) = p.exchanges.get_mut(id) else {
        return;
    };
    if let super::exchange::Stage::CacheWait(ticket) = ex.take_stage() {
        p.cache.cancel_wait(ticket);
    }
    let Some(ex) = p.exchanges.get_mut(id) else {
        return;
    };
    ex.cache_after_wait = true;
    let ci = ex.client;
    // The route is taken again: a reload meanwhile may have changed the overrides.
    let overrides = match p.rt.router.route(&ex.request) {
        Route::Vhost { cache, .. } => cache,
        _ => CacheOverride::default(),
    };
    serve(p, id, overrides);
    p.dirty.push_back(client_token(ci));
}

/// Checks routed exchange `id`'s sticky cookie (sticky_hook.rs): true to serve it, false
/// when it was answered here (302, the challenge, a block).
pub(super) fn sticky_gate(p: &mut Parts<'_>, id: ExchangeId) -> bool {
    let parts = (p.rt, &p.conns.metrics.sticky);
    match super::sticky_hook::gate(&mut *p.exchanges, &mut *p.clients, parts, id) {
        super::sticky_hook::Gate::Serve => return true,
        super::sticky_hook::Gate::Gone => {}
        super::sticky_hook::Gate::Status(status, close) => {
            finish::answer(p, id, Reply::Status(status), close)
        }
        super::sticky_hook::Gate::Page(page) => {
            page.send(|reply, close| finish::answer(p, id, reply, close))
        }
        super::sticky_hook::Gate::Block(v) => match p.exchanges.client_of(id, &*p.clients) {
            Some(ci) => finish::frang_violation(p, ci, RefuseAt::Exchange(id), &v),
            None => finish::drop_exchange(p, id),
        },
    }
    false
}

/// What the cache does for exchange `id` (caching.rs): hits, PURGE and only-if-cached
/// misses are answered here.
#[inline]
pub(super) fn cache_step(
    p: &mut Parts<'_>,
    id: ExchangeId,
    rt_cache: &std::sync::Arc<crate::runtime::CacheRt>,
    vhost: &str,
    overrides: crate::router::CacheOverride,
) -> CacheStep {
    let parts = (p.rt, p.cache, p.cache_waits);
    let request = (id, rt_cache, vhost, overrides);
    let (step, answer) = super::caching::step(&mut *p.exchanges, &*p.clients, parts, request);
    if let Some(answer) = answer {
        answer.send(|reply, close| finish::answer(p, id, reply, close));
    }
    step
}
