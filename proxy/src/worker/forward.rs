//! Sending an exchange upstream: the upstream request head (the HTTP/1.1 writer, with the
//! proxy's fields and the vhost's edits), `100 Continue` for a client that waits for it,
//! and the choice of a connection: pooled, new, or a place in the group's queue; then what
//! happens to it (a connect settled, its timer, a failure answered), and the groups' wait
//! queues served as places free up (`serve_freed`). Functions over the pipeline's parts
//! (parts.rs).

use std::io::Write as _;
use std::time::{Duration, Instant};

use http1::{BodyDecoder, ConnectionOption, Forwarding, HeaderEdits};

use super::caching::Fill;
use super::exchange::{ExchangeId, Facts, Forward, Receiving, Sending, Stage, TierFallback};
use super::finish::{self, Refusal};
use super::h2_origin;
use super::parts::Parts;
use super::response::{self, Failure};
use super::token::{client_token, upstream_token};
use super::upstream::groups::{self, request_key, Pick};
use super::upstream::{self, Flushed, Settled, UpPhase, UpstreamEnd, UpstreamId};
use crate::metrics::bump;

/// An upstream request head written into the worker's scratch buffer.
struct Draft {
    written: Result<(), http1::OversizedHead>,
    /// The client's address (None for the proxy's own background requests).
    peer: Option<std::net::IpAddr>,
}

/// A connecting upstream `ui` (an exchange's, or a probe) became ready: connected or
/// failed (upstream/conn.rs `settle`); what that means for its server's health and its
/// exchange follows here (a failed connect is retried elsewhere or answered 502). True:
/// the connection carries its exchange's request now, and driving it goes on.
pub(super) fn settle_connect(p: &mut Parts<'_>, ui: UpstreamId) -> bool {
    let rt = p.rt;
    match upstream::settle(&mut p.conns, rt, ui) {
        Settled::Pending => false,
        Settled::Up {
            server,
            carrying,
            monitored,
            freed,
        } => {
            if let Some((group, server)) = server {
                p.checks().health().mark_up(group, server);
            }
            serve_freed(p, freed);
            if monitored && p.checks().start(ui) {
                p.dirty.push_back(upstream_token(ui));
            }
            carrying
        }
        Settled::Failed {
            server,
            exchange,
            freed,
        } => {
            // Marked down before the freed place is served: a queued exchange does not
            // go to a server whose connect just failed.
            if let Some((group, server)) = server {
                p.checks().health().mark_down(group, server);
            }
            serve_freed(p, freed);
            if let Some(id) = exchange {
                response::exchange_failed(p, id, Failure::Connect);
            }
            false
        }
    }
}

/// Upstream `ui`'s timer entry of generation `gen` came due (upstream/conn.rs says for
/// what): a failed connect or a quiet server fails its exchange (a retry, or 502/504).
pub(super) fn upstream_timer(p: &mut Parts<'_>, ui: UpstreamId, gen: u64, now: Instant) {
    let quiet =
        (p.conns.upstreams.get(ui)).map(|u| super::tier_hop::quiet_limit(p.rt, p.exchanges, u));
    let Some(due) = upstream::timer_due(&mut p.conns, ui, (gen, now), quiet) else {
        return;
    };
    match due {
        upstream::TimerDue::Connect {
            id,
            group,
            server,
            current,
        } => {
            bump(&p.conns.metrics.upstream_connect_errors);
            let freed = upstream::close(&mut p.conns, ui);
            if current {
                p.checks().health().mark_down(group, server);
            }
            serve_freed(p, freed);
            response::exchange_failed(p, id, Failure::Connect);
        }
        upstream::TimerDue::Quiet(id) => {
            bump(&p.conns.metrics.upstream_timeouts);
            close_upstream(p, ui);
            response::exchange_failed(p, id, Failure::Timeout);
        }
        upstream::TimerDue::Check => {
            let freed = p.checks().judge(ui, false);
            serve_freed(p, freed);
        }
        upstream::TimerDue::Probe => {
            let freed = p.checks().probe_timed_out(ui);
            serve_freed(p, freed);
        }
        // What the codec's deadline does (a connection failed, a stream reset) is delivered
        // by a turn of the connection, in this turn's drive.
        upstream::TimerDue::H2 => {
            super::upstream::h2_conn::on_deadline(p.conns.upstreams, ui, now);
            p.dirty.push_back(upstream_token(ui));
        }
        upstream::TimerDue::Close => close_upstream(p, ui),
    }
}

/// Sends exchange `id` to `pass` (a server group, and the backup group that takes over
/// while the first is down), filling or revalidating a cache entry from the response
/// when `fill` is set (`validators`: the stored validators to send).
pub(super) fn forward(
    p: &mut Parts<'_>,
    id: ExchangeId,
    pass: (usize, Option<usize>),
    fill: Option<Box<Fill>>,
    validators: Option<HeaderEdits>,
) {
    forward_via(p, id, pass, fill, validators, None);
}

/// [`forward`], to the cache tier's owner of the object when `tier` is set (the
/// owner's group as `pass`; `tier`: the origin's, for when the owner fails).
pub(super) fn forward_via(
    p: &mut Parts<'_>,
    id: ExchangeId,
    (group, backup): (usize, Option<usize>),
    fill: Option<Box<Fill>>,
    mut validators: Option<HeaderEdits>,
    tier: Option<Box<TierFallback>>,
) {
    let rt = p.rt;
    validators = super::sticky_hook::request_edits(p.exchanges.get(id), rt, validators);
    if rt.tier.is_some() {
        let scheme = p.exchanges.get(id).map(|ex| ex.request.scheme());
        validators = Some(hop_edits(validators, scheme.filter(|_| tier.is_some())));
    }
    let Some(draft) = upstream_head(p, id, validators.as_mut(), tier.is_some()) else {
        return;
    };
    // With the proxy's own fields the head would exceed what a peer parsing like this proxy
    // accepts (`Limits::for_forwarding`): refuse it here rather than send it.
    if let Err(oversized) = draft.written {
        bump(&p.conns.metrics.parse_errors);
        if rt.config.block_action.error.log {
            let peer = draft
                .peer
                .map_or_else(|| "the proxy".into(), |p| p.to_string());
            crate::warn!("refused request from {peer}: {oversized}");
        }
        return {
            finish::refuse_exchange(p, id, oversized.request_status(), Refusal::Error);
        };
    }
    let Some(ex) = p.exchanges.get(id) else {
        return;
    };
    let request = &ex.request;
    // `Expect: 100-continue`: tell the client to send its body now, as nginx does, rather
    // than let it wait for the origin's answer (or its own timer).
    let continue_sent = Facts::wants_continue(request)
        && p.clients
            .get_mut(ex.client)
            .is_some_and(|c| super::client::codec::continue_100(c, ex.stream));
    let body = request
        .has_body()
        .then(|| BodyDecoder::new(request.framing(), &rt.limits));
    let forward = Box::new(Forward {
        up: UpstreamId::NONE,
        group,
        backup,
        head: p.scratch.clone(),
        facts: Facts::of(request, ex.has_client(), continue_sent),
        sending: Sending::new(body),
        resp: Receiving::START,
        attempts: 0,
        hash_key: if std::iter::once(group)
            .chain(backup)
            .any(|g| rt.groups.get(g).is_some_and(|g| g.hash))
        {
            request_key(request.authority().unwrap_or(b""), request.path())
        } else {
            0
        },
        fill,
        upstream_time: None,
        tier_fallback: tier,
    });
    dispatch(p, id, forward);
}

/// Writes exchange `id`'s upstream request head into `scratch`. To a cache tier peer
/// (`to_peer`) without the vhost's request edits: the owner makes them, once.
fn upstream_head(
    p: &mut Parts<'_>,
    id: ExchangeId,
    validators: Option<&mut HeaderEdits>,
    to_peer: bool,
) -> Option<Draft> {
    let rt = p.rt;
    let ex = p.exchanges.get(id)?;
    let v = ex.vhost.and_then(|v| rt.vhosts.get(v))?;
    let none = HeaderEdits::new();
    let configured = match ex.location.and_then(|l| v.locations.get(l)) {
        _ if to_peer => &none,
        Some(l) => &l.request_edits,
        None => &v.request_edits,
    };
    let edits = match validators {
        Some(extra) => {
            extra.extend(configured);
            &*extra
        }
        None => configured,
    };
    let peer = match p.clients.get(ex.client) {
        Some(c) => Some(c.peer.ip()),
        None if !ex.has_client() => None,
        None => return None,
    };
    // The address as text without allocating (at most 45 bytes for IPv6).
    let mut ip_text = [0u8; 48];
    let ip_len = {
        let mut cursor = std::io::Cursor::new(&mut ip_text[..]);
        if let Some(peer) = peer {
            let _ = write!(cursor, "{peer}");
        }
        cursor.position() as usize
    };
    let request = &ex.request;
    // A WebSocket handshake goes on with the proxy's own Upgrade and Connection fields.
    let connection = if super::websocket::classify(request) == super::websocket::Upgrade::WebSocket
    {
        ConnectionOption::UpgradeWebSocket
    } else {
        ConnectionOption::Default
    };
    p.scratch.clear();
    let written = http1::write_request_head(
        &mut *p.scratch,
        request.head(),
        request.bytes(),
        &Forwarding {
            forwarded_for: peer.map(|_| ip_text.get(..ip_len).unwrap_or(&[])),
            forwarded_proto: Some(request.scheme().as_str().as_bytes()),
            via: Some(v.via.as_deref().unwrap_or(b"ktls-proxy")),
            edits,
            framing: request.framing(),
            connection,
            limits: &rt.forward_limits,
        },
    );
    Some(Draft { written, peer })
}

/// Sends `forward` on a connection of its group: pooled, new, or queued for one.
pub(super) fn dispatch(p: &mut Parts<'_>, id: ExchangeId, mut forward: Box<Forward>) {
    let mut avoid = None;
    loop {
        // `server_proto h2`: exchanges share connections, each on a stream; a WebSocket
        // handshake has no HTTP/2 form here and goes as HTTP/1.1.
        let group = forward.group;
        let h2 = h2_origin::is_h2(p.rt, group) && !forward.facts.websocket();
        match p.scheduling().pick(
            id,
            forward.group,
            forward.hash_key,
            avoid,
            forward.facts.websocket(),
        ) {
            Pick::Pooled(ui) if h2 && start_h2_origin(p, ui) => {
                return attach_h2(p, id, ui, forward)
            }
            Pick::Pooled(ui) => return attach(p, id, ui, forward),
            Pick::Connect(server) => {
                let shared = h2.then(|| shared_h2(p, group, Some(server)));
                if let Some(conn) = shared.flatten() {
                    return attach_h2(p, id, conn, forward);
                }
                let (open, mut conns) = (p.open, p.conns());
                let to = (forward.group, server, UpPhase::Connecting);
                match upstream::connect(&mut conns, open, to) {
                    Ok(ui) if h2 && start_h2_origin(p, ui) => return attach_h2(p, id, ui, forward),
                    Ok(ui) => return attach(p, id, ui, forward),
                    Err(_) => {
                        bump(&p.conns.metrics.upstream_connect_errors);
                        p.checks().health().mark_down(forward.group, server);
                        avoid = Some(server);
                        forward.attempts += 1;
                        let limit =
                            p.rt.groups
                                .get(forward.group)
                                .map_or(0, |g| g.connect_retries);
                        if forward.attempts > limit {
                            if forward.turn_to_backup() {
                                avoid = None;
                                continue;
                            }
                            return fail_exchange(p, id, forward, 502);
                        }
                    }
                }
            }
            Pick::Full => {
                let shared = h2.then(|| shared_h2(p, group, None));
                if let Some(conn) = shared.flatten() {
                    return attach_h2(p, id, conn, forward);
                }
                if let Err(forward) = enqueue(p, id, forward) {
                    fail_exchange(p, id, forward, 503);
                }
                return;
            }
            Pick::Down if forward.turn_to_backup() => avoid = None,
            Pick::Down => return fail_exchange(p, id, forward, 502),
        }
    }
}

fn attach(p: &mut Parts<'_>, id: ExchangeId, ui: UpstreamId, mut forward: Box<Forward>) {
    let ci = p.exchanges.client_of(id, &*p.clients);
    if ci.is_none() && p.exchanges.get(id).is_none_or(|ex| ex.has_client()) {
        // The client left meanwhile: the connection goes back unused.
        end_upstream(p, None, ui, upstream::UpstreamEnd::UNUSED);
        return {
            finish::drop_exchange(p, id);
        };
    }
    let Some(u) = p.conns.upstreams.get_mut(ui) else {
        return;
    };
    u.exchange = Some(id);
    u.out.push(&forward.head);
    let server = u.addr;
    if !forward.facts.replayable() {
        forward.head = Vec::new();
    }
    forward.up = ui;
    // Sent again (a retry): the time runs from this sending.
    forward.sending.resend();
    forward.upstream_time = None;
    let connecting = u.phase == UpPhase::Connecting;
    if !connecting {
        u.phase = UpPhase::Busy;
    }
    let timeout =
        p.rt.groups
            .get(forward.group)
            .map_or(Duration::from_secs(60), |g| g.forward_timeout);
    if let Some(ex) = p.exchanges.get_mut(id) {
        if let Some(log) = ex.log.as_mut() {
            log.upstream = Some(server);
        }
        ex.send(forward);
    }
    if !connecting {
        upstream::arm_timer(&mut *p.conns.upstreams, &mut *p.conns.timers, ui, timeout);
    }
    p.dirty.push_back(upstream_token(ui));
    if let Some(ci) = ci {
        p.dirty.push_back(client_token(ci));
    }
}

/// Writes upstream `ui`'s queued request bytes. Once all are out, the exchange's sending
/// is timed from now; room again lets its client pass more request body. True if bytes
/// moved (or the write failed: the connection is over).
pub(super) fn flush_upstream(p: &mut Parts<'_>, ui: UpstreamId) -> bool {
    let (flushed, id, emptied) = upstream::flush_at(&mut *p.conns.upstreams, ui);
    match flushed {
        Flushed::Nothing => false,
        Flushed::Failed => true,
        Flushed::Wrote => {
            let Some(id) = id else {
                return true;
            };
            if emptied {
                let forward = p.exchanges.get_mut(id).and_then(|ex| ex.forward_mut());
                if let Some(fwd) = forward {
                    fwd.sending.flushed(Instant::now());
                }
            }
            if let Some(ci) = p.exchanges.client_of(id, &*p.clients) {
                p.dirty.push_back(client_token(ci));
            }
            true
        }
    }
}

/// Answers `status` for an exchange that got no response from its group: a stale
/// entry if `cache_use_stale` allows one, else the error page. An exchange sent to its
/// cache tier owner, which gave no answer (refused, reset, timed out, its queue full),
/// goes to the origin instead, as if this node owned the object.
pub(super) fn fail_exchange(
    p: &mut Parts<'_>,
    id: ExchangeId,
    mut forward: Box<Forward>,
    status: u16,
) {
    if let Some(fallback) = forward.tier_fallback.take() {
        let peer = p.rt.groups.get(forward.group).map(|g| g.name.clone());
        crate::warn!(
            "{}: no answer ({status}); the request goes to the origin",
            peer.unwrap_or_default()
        );
        crate::fleet::tier::count_fallback();
        // No head within `peer_timeout`: out until its probe answers (`fleet/tier.rs`).
        if status == 504 {
            p.checks().health().mark_down(forward.group, 0);
        }
        let TierFallback { pass, validators } = *fallback;
        return forward_via(p, id, pass, forward.fill.take(), validators, None);
    }
    super::finish::answer_failure(p, (id, forward), status);
}

/// Gives freed capacity of `group` to its first waiting exchange (one still queued).
pub(super) fn serve_queue(p: &mut Parts<'_>, group: usize) {
    while let Some(id) = p.conns.groups.get_mut(group).and_then(|g| g.next_waiting()) {
        let Some(ex) = p.exchanges.get_mut(id) else {
            continue;
        };
        let Stage::Queued(forward) = ex.take_stage() else {
            continue;
        };
        dispatch(p, id, forward);
        return;
    }
}

/// A queued exchange waited `server_forward_timeout` without a connection: 504.
pub(super) fn queue_expired(p: &mut Parts<'_>, id: ExchangeId) {
    groups::unqueue(&mut *p.conns.groups, id);
    let Some(ex) = p.exchanges.get_mut(id) else {
        return;
    };
    if let Stage::Queued(forward) = ex.take_stage() {
        bump(&p.conns.metrics.upstream_timeouts);
        fail_exchange(p, id, forward, 504);
    }
}

/// Queues exchange `id` until a connection of its group frees up, for at most the
/// group's `server_forward_timeout`; Err if the queue is full.
fn enqueue(p: &mut Parts<'_>, id: ExchangeId, forward: Box<Forward>) -> Result<(), Box<Forward>> {
    let group = forward.group;
    let Some(g) = p.rt.groups.get(group) else {
        return Err(forward);
    };
    let (limit, timeout) = (g.queue_limit, g.forward_timeout);
    let queued = p.conns.groups.get_mut(group).map(|g| g.enqueue(id, limit));
    if queued != Some(Ok(())) {
        return Err(forward);
    }
    if let Some(ex) = p.exchanges.get_mut(id) {
        ex.queue(forward);
    }
    p.exchanges.arm_timer(&mut *p.conns.timers, id, timeout);
    Ok(())
}

/// A group's pool changed: its first waiting exchange may go now.
pub(super) fn serve_freed(p: &mut Parts<'_>, freed: upstream::Freed) {
    if !p.conns.upstreams.h2_woken.is_empty() {
        super::h2_origin::wake(&mut *p.conns.upstreams, &mut *p.dirty);
    }
    if let upstream::Freed(Some(group)) = freed {
        serve_queue(p, group);
    }
}

pub(super) fn close_upstream(p: &mut Parts<'_>, ui: UpstreamId) {
    let freed = upstream::close(&mut p.conns, ui);
    serve_freed(p, freed);
}

/// Exchange `id` (or none: `of` None) is done with upstream `ui`: pooled or closed.
pub(super) fn end_upstream(
    p: &mut Parts<'_>,
    of: Option<ExchangeId>,
    ui: UpstreamId,
    end: UpstreamEnd,
) {
    let conns = &mut p.conns;
    let freed = match of {
        Some(id) => upstream::end_of(conns, (id, ui), end),
        None => upstream::end(conns, ui, end),
    };
    serve_freed(p, freed);
}

/// `server_proto h2`: connection `ui` speaks HTTP/2 from now on (h2_origin.rs `start`).
fn start_h2_origin(p: &mut Parts<'_>, ui: UpstreamId) -> bool {
    super::h2_origin::start((&mut *p.conns.upstreams, &mut *p.conns.groups), p.rt, ui)
}

/// `server_proto h2`: a connection of `group` (to `server` if given) with a free stream
/// (h2_conn.rs `find_conn`).
fn shared_h2(p: &Parts<'_>, group: usize, server: Option<usize>) -> Option<UpstreamId> {
    let parts = (&*p.conns.upstreams, &p.conns.groups[..]);
    super::upstream::h2_conn::find_conn(parts, (group, server), p.conns.rt_gen)
}

/// `server_proto h2`: sends `forward` on a new stream of connection `conn`
/// (h2_origin.rs).
fn attach_h2(p: &mut Parts<'_>, id: ExchangeId, conn: UpstreamId, forward: Box<Forward>) {
    let parts = super::h2_origin::Parts {
        rt: p.rt,
        upstreams: &mut *p.conns.upstreams,
        exchanges: &mut *p.exchanges,
        clients: &*p.clients,
        timers: &mut *p.conns.timers,
        dirty: &mut *p.dirty,
    };
    match super::h2_origin::attach(parts, (id, conn), forward) {
        super::h2_origin::Placed::Sent => {}
        super::h2_origin::Placed::ClientGone => {
            finish::drop_exchange(p, id);
        }
        super::h2_origin::Placed::Failed(forward) => fail_exchange(p, id, forward, 502),
    }
}

/// `validators` with the cache tier's hop field: set to the client's scheme for a request to
/// the key's owner (`to_owner`, counted), removed from one to an origin (whoever sent it).
fn hop_edits(
    validators: Option<HeaderEdits>,
    to_owner: Option<super::request::Scheme>,
) -> HeaderEdits {
    let mut edits = validators.unwrap_or_default();
    let name = crate::fleet::tier::HOP_FIELD.as_bytes();
    // A constant token and a scheme: valid edits.
    let _ = match to_owner {
        Some(scheme) => {
            crate::fleet::tier::count_to_owner();
            edits.set(name, scheme.as_str().as_bytes())
        }
        None => edits.remove(name),
    };
    edits
}
