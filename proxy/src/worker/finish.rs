//! The end of an exchange, written once. Whatever way an exchange ends (a relayed response,
//! a cache hit, a 304, a stale answer, PURGE, a redirect, a block, an error page), it goes
//! through [`finish`]: the access-log line with the status and body bytes the client got,
//! the status counters, frang's response accounting, the upstream connection's reuse
//! decision (`lifecycle.rs`), the client connection's continuation (the codec) and its idle
//! timer. An exchange whose client went away goes through [`drop_exchange`] instead:
//! nothing reaches anyone, so nothing is logged. A client connection's close ends its
//! exchanges here too ([`end_client`]).
//!
//! These are functions over the pipeline's parts (parts.rs). An exchange that ends frees
//! its upstream connection (pooled, or closed): the group's wait queue is served at once
//! (forward.rs `serve_freed`), so a queued exchange gets the place before any later one.

use std::sync::Arc;

use http1::BodyDecoder;

use super::client::codec::{self, Codec};
use super::client::refuse;
use super::client::ClientId;
use super::exchange::{ExchangeId, Exchanges, Forward, Stage};
use super::forward;
use super::h1::{self, Reply, ReplyTo};
use super::limits;
use super::parts::Parts;
use super::token::client_token;
use super::upstream::{self, UpstreamEnd, UpstreamId};
use crate::access_log::{CacheStatus, RequestRecord as AccessRecord};
use crate::close_reason::CloseReason;
use crate::frang::Violation;
use crate::runtime::Runtime;

pub use super::client::refuse::Refusal;

/// How an exchange ended.
pub struct Outcome {
    /// The status the client received; 0 when nothing was sent (a dropped request).
    pub status: u16,
    /// Body bytes sent to the client.
    pub bytes: u64,
    /// The client connection closes after this response.
    pub close: bool,
    /// The upstream side, when the caller holds it (else it is taken from the exchange).
    pub forward: Option<Box<Forward>>,
    /// What is known of the upstream connection's state (abandoned when not given).
    pub upstream_end: Option<UpstreamEnd>,
    /// A status from the origin that frang's `http_resp_code_block` still has to count (a
    /// `101` that became a tunnel; other responses are judged when their head arrives,
    /// `response/head.rs`).
    pub from_origin: bool,
}

impl Outcome {
    /// A response the proxy made itself.
    pub fn local(status: u16, bytes: u64, close: bool) -> Outcome {
        Outcome {
            status,
            bytes,
            close,
            forward: None,
            upstream_end: None,
            from_origin: false,
        }
    }
}

/// Where a refusal is answered.
#[derive(Clone, Copy, Debug)]
pub enum RefuseAt {
    /// The connection: nothing of the request became an exchange (a bad HTTP/1.1 head, a
    /// slow head, a connection limit).
    Connection,
    /// The request's exchange.
    Exchange(ExchangeId),
    /// An HTTP/2 stream whose request did not become an exchange.
    Stream(u32),
}

impl From<Option<ExchangeId>> for RefuseAt {
    fn from(id: Option<ExchangeId>) -> RefuseAt {
        id.map_or(RefuseAt::Connection, RefuseAt::Exchange)
    }
}

/// Records and answers a violation by client `ci`, refused at `at` (limits.rs decides and
/// records; the refusal is this file's).
pub(super) fn frang_violation(p: &mut Parts<'_>, ci: ClientId, at: RefuseAt, v: &Violation) {
    let parts = (&mut *p.clients, &*p.exchanges);
    if limits::record_violation(parts, (p.rt, p.conns.metrics), (ci, at), v) {
        refuse_at(p, ci, at, v.status, Refusal::Attack)
    }
}

/// `http_resp_code_block` refused the origin's response to exchange `id` before any of
/// it was sent: as Tempesta does, the client gets 403 instead (per `block_action attack`)
/// and the connection closes; the upstream connection, its response unread, is closed.
pub(super) fn block_response(p: &mut Parts<'_>, id: ExchangeId, v: &Violation) {
    let parts = (&*p.exchanges, &*p.clients);
    limits::record_response_block(parts, (p.rt, p.conns.metrics), id, v);
    refuse_exchange(p, id, 403, Refusal::Attack)
}

/// Ends exchange `id` with `outcome`.
pub(super) fn finish(p: &mut Parts<'_>, id: ExchangeId, mut outcome: Outcome) {
    let Some(mut ex) = p.exchanges.remove(id) else {
        return;
    };
    let stage_forward = match ex.take_stage() {
        Stage::Upstream(f) => Some(f),
        Stage::Queued(f) => {
            upstream::groups::unqueue(p.conns.groups, id);
            Some(f)
        }
        Stage::CacheWait(ticket) => {
            p.cache.cancel_wait(ticket);
            None
        }
        Stage::New => None,
    };
    let forward = outcome.forward.take().or(stage_forward);
    let upstream_time = record_upstream_time(p, forward.as_deref());
    // The request body: what its forward did not read, or all of it (never forwarded).
    let unread = match forward {
        Some(f) => {
            let end = outcome.upstream_end.unwrap_or(UpstreamEnd::ABANDONED);
            end_upstream(p, id, f.up, end);
            f.unread_body()
        }
        None => ex
            .request
            .has_body()
            .then(|| BodyDecoder::new(ex.request.framing(), &p.rt.limits)),
    };
    let counts = &p.conns.metrics.workers[p.worker];
    // A background revalidation answers no one: no status to count.
    if outcome.status != 0 && ex.has_client() {
        counts.count_status(outcome.status);
        counts.request_duration.record_owned(ex.started.elapsed());
    }
    if ex.log.is_some() {
        let vhost_name = limits::vhost_name(p.rt, ex.vhost);
        let answer = (outcome.status, outcome.bytes);
        access_log(p.rt, ex.log.as_deref(), vhost_name, answer, upstream_time);
    }
    if let Some(ci) = p.clients.current(ex.client, ex.client_id) {
        if outcome.from_origin {
            let upgrade = (ci, outcome.status, ex.vhost.unwrap_or(0));
            limits::judge_upgrade(p.clients, (p.rt, p.conns.metrics), upgrade);
        }
        client_goes_on(p, (ci, id, ex.stream), outcome.close, unread);
    }
}

/// Exchange `id` on `stream` of client `ci` ended (`close`: the connection closes after
/// it; `unread`: what is left of its request body): the codec's continuation, and the
/// connection's idle timer (HTTP/2's own timer).
fn client_goes_on(
    p: &mut Parts<'_>,
    (ci, id, stream): (ClientId, ExchangeId, u32),
    close: bool,
    unread: Option<BodyDecoder>,
) {
    let idle = super::client::idle_timeout(p.rt);
    let Some(c) = p.clients.get_mut(ci) else {
        return;
    };
    match &mut c.codec {
        Codec::H1(h1) if h1.current() == Some(id) => {
            let closing = close || c.end.closing();
            c.end
                .close_after_flush_if(h1.exchange_done(unread, closing));
        }
        Codec::H1(_) => c.end.close_after_flush_if(close),
        Codec::H2(h2) => {
            h2.end(stream);
            h2.exchange_done(stream);
            if close {
                // A refused request ends the connection, after the streams in flight.
                h2.conn.go_away();
            }
            h2.flush_into(&mut c.out);
            super::h2_serve::arm_timer((p.clients, p.conns.timers, p.rt), ci);
            p.dirty.push_back(client_token(ci));
            return;
        }
        Codec::H3(h3) => return h3.exchange_done(stream, (p.dirty, ci)),
    }
    p.clients.extend_timer(p.conns.timers, ci, p.now + idle);
    p.dirty.push_back(client_token(ci));
}

/// Exchange `id` is done with upstream connection `ui`: pooled or closed.
fn end_upstream(p: &mut Parts<'_>, id: ExchangeId, ui: UpstreamId, end: UpstreamEnd) {
    let freed = upstream::end_of(&mut p.conns, (id, ui), end);
    forward::serve_freed(p, freed);
}

/// Forgets exchange `id` whose client is gone: its upstream connection (if any) is
/// closed mid-message, its queue place and cache wait released.
pub(super) fn drop_exchange(p: &mut Parts<'_>, id: ExchangeId) {
    let Some(mut ex) = p.exchanges.remove(id) else {
        return;
    };
    match ex.take_stage() {
        Stage::Upstream(f) => end_upstream(p, id, f.up, UpstreamEnd::ABANDONED),
        Stage::Queued(_) => upstream::groups::unqueue(p.conns.groups, id),
        Stage::CacheWait(ticket) => {
            p.cache.cancel_wait(ticket);
        }
        Stage::New => {}
    }
}

/// Closes client connection `ci` (client/conn.rs `close`; with close_notify over TLS unless
/// the client closed first when `orderly`, else with a reset), then its tunnel's upstream
/// and the exchanges it carried. An HTTP/3 client's QUIC connection is not here: the worker
/// tells it first (drive.rs `close_client`); only a TCP client is closed from the pipeline
/// directly (response/mod.rs `abort_response`).
pub(super) fn end_client(p: &mut Parts<'_>, ci: ClientId, why: CloseReason, orderly: bool) {
    let Some(closed) = super::client::close(&mut p.client_conns(), ci, why, orderly) else {
        return;
    };
    if let Some((tunnel, unique)) = closed.tunnel {
        let tunnels = &p.conns.metrics.tunnels;
        let gone = super::tunnel::gone(p.conns.upstreams, tunnels, tunnel, (ci, unique), why);
        if let Some(ui) = gone {
            forward::close_upstream(p, ui);
        }
    }
    for id in closed.exchanges {
        drop_exchange(p, id);
    }
}

/// Answers exchange `id` with a response of the proxy's own and finishes it.
#[inline]
pub(super) fn answer(p: &mut Parts<'_>, id: ExchangeId, reply: Reply<'_>, close: bool) {
    let (status, bytes) = write_reply(p, id, &reply, close);
    finish(p, id, Outcome::local(status, bytes, close))
}

/// Answers exchange `id`, whose upstream side is `forward`, with a stored entry (a stale
/// one instead of an error, or the one a 304 refreshed) and finishes it; `upstream_end`
/// is what is known of the upstream connection (None: abandoned, or closed already).
pub(super) fn answer_stored(
    p: &mut Parts<'_>,
    (id, forward): (ExchangeId, Box<Forward>),
    entry: &Arc<cache::Entry>,
    upstream_end: Option<UpstreamEnd>,
) {
    let close = p.exchanges.get(id).is_none_or(|ex| !ex.keep_alive);
    let answer = forward
        .fill
        .as_ref()
        .map_or(cache::Answer::Stored(cache::ReplyKind::Full), |f| {
            f.answer(entry)
        });
    let (status, bytes) = write_reply(p, id, &Reply::Stored { entry, answer }, close);
    let outcome = Outcome {
        upstream_end,
        forward: Some(forward),
        ..Outcome::local(status, bytes, close)
    };
    finish(p, id, outcome)
}

/// Answers exchange `id` from `entry` (a 304 to a revalidation, or a stale entry instead of
/// an error) and finishes it; its upstream connection is pooled if the response was complete
/// (`upstream_done`), else closed. False: the exchange is gone or has no upstream side.
pub(super) fn answer_from_cache(
    p: &mut Parts<'_>,
    id: ExchangeId,
    entry: &Arc<cache::Entry>,
    upstream_done: bool,
) -> bool {
    let Some(forward) = p.exchanges.get_mut(id).and_then(|ex| ex.take_forward()) else {
        return false;
    };
    let end = forward.upstream_end(upstream_done);
    answer_stored(p, (id, forward), entry, Some(end));
    true
}

/// Writes `reply` to exchange `id`'s client; returns the status and body bytes sent.
pub(super) fn write_reply(
    p: &mut Parts<'_>,
    id: ExchangeId,
    reply: &Reply<'_>,
    close: bool,
) -> (u16, u64) {
    let status = reply.status();
    let page;
    let reply = match reply {
        Reply::Status(status) => {
            page = Reply::status_page(*status, &p.rt.error_pages);
            &page
        }
        other => other,
    };
    let Some(ex) = p.exchanges.get(id) else {
        return (status, 0);
    };
    let to = ReplyTo {
        http10: h1::is_http10(&ex.request),
        close,
    };
    let (stream, head_only) = (ex.stream, ex.request.method() == http1::Method::Head);
    let Some(ci) = p.exchanges.client_of(id, p.clients) else {
        return (status, 0);
    };
    let date = match reply {
        Reply::Redirect { .. } | Reply::Local(_) => p.date.now(),
        _ => "",
    };
    let Some(c) = p.clients.get_mut(ci) else {
        return (status, 0);
    };
    let bytes = codec::reply(c, stream, reply, to, date, head_only);
    (status, bytes)
}

/// Refuses exchange `id` per `block_action` (reply, or drop; an attack drop resets the
/// connection) and closes the connection after it.
pub(super) fn refuse_exchange(p: &mut Parts<'_>, id: ExchangeId, status: u16, kind: Refusal) {
    if refuse::block_action(p.rt, kind).reply {
        let (status, bytes) = write_reply(p, id, &Reply::Status(status), true);
        return finish(p, id, Outcome::local(status, bytes, true));
    }
    if let Some(ci) = p.exchanges.client_of(id, p.clients) {
        refuse::drop_response(p.clients, ci, kind);
    }
    finish(p, id, Outcome::local(0, 0, true))
}

/// Refuses at `at` (see [`RefuseAt`]) with `status`, per `block_action`.
pub(super) fn refuse_at(p: &mut Parts<'_>, ci: ClientId, at: RefuseAt, status: u16, kind: Refusal) {
    match at {
        RefuseAt::Connection => {
            let (clients, answering) = p.refusing();
            refuse::refuse(clients, answering, (ci, status, kind));
        }
        RefuseAt::Exchange(id) => refuse_exchange(p, id, status, kind),
        RefuseAt::Stream(stream) => {
            let (clients, answering) = p.refusing();
            refuse::refuse_stream(clients, answering, (ci, stream), (status, kind));
        }
    }
}

/// Answers `status` for exchange `id`, whose group gave `forward` no response: a stale
/// entry if `cache_use_stale` allows one, else the error page.
pub(super) fn answer_failure(
    p: &mut Parts<'_>,
    (id, mut forward): (ExchangeId, Box<Forward>),
    status: u16,
) {
    let Some(ex) = p.exchanges.get(id) else {
        return;
    };
    let close = !ex.keep_alive;
    if let Some(entry) = forward.fill.as_mut().and_then(|f| f.stale_instead(status)) {
        // The connection that failed is closed already.
        log_cache_status(p.exchanges, id, CacheStatus::Stale);
        return answer_stored(p, (id, forward), &entry, None);
    }
    let (status, bytes) = write_reply(p, id, &Reply::Status(status), close);
    let outcome = Outcome {
        forward: Some(forward),
        ..Outcome::local(status, bytes, close)
    };
    finish(p, id, outcome)
}

/// A request of client `ci` was malformed or over a limit; it is refused at `at`.
pub(super) fn parse_refused(p: &mut Parts<'_>, ci: ClientId, at: RefuseAt, e: &http1::ParseError) {
    // A size limit set by frang_limits is a frang block (403, `block_action attack`,
    // ip_block), as in Tempesta; the parser's own defaults are plain errors.
    if let Some(limit) = limits::frang_limit_of(&p.rt.config, e)
        .filter(|_| !super::tier_hop::peer_client(p.clients, p.rt, ci))
    {
        let v = Violation {
            limit,
            detail: e.to_string(),
            status: crate::frang::FRANG_BLOCK_STATUS,
        };
        return frang_violation(p, ci, at, &v);
    }
    crate::metrics::bump(&p.conns.metrics.parse_errors);
    if p.rt.config.block_action.error.log {
        let peer = p.clients.get(ci).map(|c| c.peer);
        crate::warn!("refused request from {:?}: {} ({})", peer, e, e.status());
    }
    refuse_at(p, ci, at, e.status(), Refusal::Error)
}

/// Counts the time `forward`'s server took to answer in its group's histogram; returns
/// it for the access log.
fn record_upstream_time(p: &Parts<'_>, forward: Option<&Forward>) -> Option<std::time::Duration> {
    let f = forward?;
    let d = f.upstream_time?;
    if let Some(group) = p.rt.groups.get(f.group) {
        (p.conns.metrics.upstream).record_response(p.worker, &group.name, d);
    }
    Some(d)
}

/// Notes in exchange `id`'s access log record (when the log is on) what the cache did.
pub(super) fn log_cache_status(exchanges: &mut Exchanges, id: ExchangeId, status: CacheStatus) {
    if let Some(log) = exchanges.get_mut(id).and_then(|ex| ex.log.as_mut()) {
        log.cache = Some(status);
    }
}

fn access_log(
    rt: &Runtime,
    request: Option<&AccessRecord>,
    vhost: &str,
    (status, bytes): (u16, u64),
    upstream_time: Option<std::time::Duration>,
) {
    let Some(request) = request else { return };
    let entry = crate::access_log::Entry {
        request,
        vhost,
        status,
        bytes,
        time: std::time::SystemTime::now(),
        duration: request.started.elapsed(),
        upstream_time,
    };
    crate::access_log::write(&rt.config.access_log, &entry);
}
