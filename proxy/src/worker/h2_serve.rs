//! HTTP/2 connections on the exchange core: the bytes a client sent go into its `h2`
//! connection; each event becomes exchange work (a request opens an exchange, DATA feeds
//! its body, a reset drops it); request bodies move to the upstream as it takes them, and
//! the window credit goes back to the client only then; response bytes waiting for windows
//! move as windows open; the connection's frames go out through the outbox.
//!
//! These are functions over the parts they touch ([`Parts`]), not steps of the worker: what
//! needs the exchange pipeline (a request to enter, a frang block, exchanges to drop, a
//! connection to refuse) is returned to the caller, drive.rs `process_h2` and `h2_timer`,
//! which acts on it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use h2::Event;
use mio::Token;

use super::client::codec::Codec;
use super::client::{ClientId, Clients};
use super::exchange::{ExchangeId, Exchanges};
use super::finish::RefuseAt;
use super::h1::Reply;
use super::h2::{H2Codec, Unservable};
use super::head_chunks::head_chunks;
use super::limits::vhost_frang;
use super::request::{Request, Scheme};
use super::request_body::{push_chunk, push_last_chunk_with};
use super::token::upstream_token;
use super::upstream::Upstreams;
use crate::frang::{check_trailers, Violation};
use crate::metrics::{bump, Metrics, WorkerMetrics};
use crate::runtime::Runtime;
use crate::timers::Timers;

/// Longest an HTTP/2 connection with streams in flight goes without its timer.
const H2_TIMER_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// What serving an HTTP/2 connection touches besides the connection: its exchanges (their
/// bodies and frang counts) and their upstream connections, the timers, the connections to
/// drive again, the configuration, the counters and the date of a status page.
pub(super) struct Parts<'a> {
    pub clients: &'a mut Clients,
    pub exchanges: &'a mut Exchanges,
    pub upstreams: &'a mut Upstreams,
    pub timers: &'a mut Timers,
    pub dirty: &'a mut VecDeque<Token>,
    pub rt: &'a Runtime,
    pub metrics: &'a Arc<Metrics>,
    /// The worker's index: its counters and its log lines.
    pub worker: usize,
    pub date: &'a mut crate::date::DateCache,
    /// The turn's clock (`Worker::now`): what body deadlines are armed from.
    pub now: Instant,
}

/// What an event of the connection needs of the exchange pipeline.
// Returned and matched at once, never stored: boxing the request would cost an allocation
// per request for nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Next {
    Nothing,
    /// A stream opened with a request, as the codec converted it (`route.rs` `stream_request`).
    Request(u32, Result<Request, Unservable>),
    /// frang refused a body or trailers.
    Refuse(RefuseAt, Violation),
    /// A stream ended by the client: its exchange goes.
    Drop(ExchangeId),
    /// The connection is over: every exchange of it goes.
    DropAll(Vec<ExchangeId>),
}

/// Why a stream's request cannot become an exchange, when the caller must act on it.
pub(super) enum StreamRefused {
    /// frang's request rate (or another limit on requests).
    Frang(Violation),
    /// Malformed or over a parser limit: judged as an HTTP/1.1 head is (`parse_refused`).
    Parse(http1::ParseError),
}

/// What the connection's timer came due for.
pub(super) enum Due {
    /// The client read nothing for `h2_stall_timeout`: reset it (`drive.rs` `reset_stalled`).
    Stalled,
    /// A head begun and not finished in time (a slowloris over HTTP/2), for this limit.
    Head(&'static str),
    /// The protocol's own deadlines were run: process the connection.
    Process,
}

/// A pass over the connection's input (`read`).
pub(super) struct Read {
    pub moved: bool,
    pub events: Vec<Event>,
    /// frang's count of head pieces (`http_header_chunk_cnt`): a slow head is a block.
    pub head_chunk: Result<(), Violation>,
}

/// The HTTP/2 limits of this configuration.
fn limits(config: &config::Config) -> h2::Limits {
    let defaults = h2::Limits::default();
    // Unlimited in the configuration still has a bound here: the decoded list is held
    // in memory.
    let max_header_list_size = config
        .http_max_header_list_size
        .unwrap_or(defaults.max_header_list_size);
    h2::Limits {
        max_concurrent_streams: config.max_concurrent_streams,
        max_header_list_size,
        // With `http_header_cnt` set, frang counts the fields (`H2Codec::request`) and
        // the crate's own cap must not answer first: the list size already bounds the
        // fields, each costing at least 32 bytes of it (RFC 9113 §6.5.2).
        max_header_fields: match config.frang.http_header_cnt {
            Some(_) => max_header_list_size / 32 + 1,
            None => defaults.max_header_fields,
        },
        ctrl_frame_rate_multiplier: config.ctrl_frame_rate_multiplier,
        window_update_frame_rate_multiplier: config.window_update_frame_rate_multiplier,
        send_window_timeout: config.h2_stall_timeout,
        output_stall_timeout: config.h2_stall_timeout,
        ..defaults
    }
}

/// Client `ci` speaks HTTP/2 from now on (ALPN `h2`, or an h2c listener).
pub(super) fn start(p: &mut Parts, ci: ClientId, scheme: Scheme) {
    let Some(c) = p.clients.get_mut(ci) else {
        return;
    };
    match H2Codec::new(limits(&p.rt.config), scheme, p.metrics.clone()) {
        Ok(mut h2) => {
            h2.flush_into(&mut c.out);
            c.codec = Codec::H2(Box::new(h2));
            bump(&p.metrics.h2.connections);
            arm_timer((p.clients, p.timers, p.rt), ci);
        }
        Err(e) => {
            crate::warn!("worker {}: cannot start HTTP/2: {e}", p.worker);
            c.end.close_after_flush();
        }
    }
}

/// Feeds what client `ci` sent into its connection, and takes the events it made. None
/// when `ci` is not an HTTP/2 client.
pub(super) fn read(
    clients: &mut Clients,
    ci: ClientId,
    (now, turn): (Instant, Instant),
) -> Option<Read> {
    let c = clients.get_mut(ci)?;
    let Codec::H2(h2) = &mut c.codec else {
        return None;
    };
    let mut read = Read {
        moved: false,
        events: Vec::new(),
        head_chunk: Ok(()),
    };
    // Input while the connection takes it and the answers queued are under the bound:
    // otherwise the read buffer fills and the socket is not read.
    if let Some(rbuf) = c.rbuf.as_mut() {
        if !rbuf.is_empty() && h2.conn.wants_read() && c.out.has_room() {
            let n = rbuf.len();
            let head_before = h2.conn.head_in_progress();
            h2.conn.recv(rbuf.bytes(), now);
            rbuf.consume(n);
            read.moved = true;
            read.events
                .extend(std::iter::from_fn(|| h2.conn.poll_event()));
            let head_after = h2.conn.head_in_progress();
            let completed = (read.events.iter())
                .any(|e| matches!(e, Event::Request { .. } | Event::Trailers { .. }));
            read.head_chunk = head_chunks(&mut c.limits, turn, head_before, completed, head_after);
        }
    }
    read.events
        .extend(std::iter::from_fn(|| h2.conn.poll_event()));
    Some(read)
}

/// One event of client `ci`'s connection: what it needs of the pipeline, if anything.
pub(super) fn on_event(p: &mut Parts, ci: ClientId, event: Event, now: Instant) -> Next {
    // Once the client is gone nothing more is served; once a request of it was blocked, no
    // request read in the same pass is routed (HTTP/1.1 stops parsing at the block as well).
    let serves = (p.clients.get(ci)).map(|c| (!c.end.is_gone(), !c.end.blocked()));
    match (serves, event) {
        (None | Some((false, _)), _) => Next::Nothing,
        // Refused unprocessed (RFC 9113 §8.7): the connection ends after GOAWAY.
        (Some((_, false)), Event::Request { stream, .. }) => {
            if let Some(h2) = codec(p.clients, ci) {
                h2.conn.reset(stream, h2::ErrorCode::REFUSED_STREAM);
            }
            Next::Nothing
        }
        (
            _,
            Event::Request {
                stream,
                request,
                end_stream,
            },
        ) => match codec(p.clients, ci) {
            Some(h2) => Next::Request(stream, h2.request(&request, end_stream, &p.rt.limits)),
            None => Next::Nothing,
        },
        (
            _,
            Event::Data {
                stream,
                data,
                end_stream,
            },
        ) => data_in(p, ci, (stream, data, end_stream), now),
        (_, Event::Trailers { stream, fields }) => trailers_in(p, ci, stream, fields),
        (_, Event::Reset { stream, .. }) => {
            match codec(p.clients, ci).and_then(|h2| h2.forget(stream)) {
                Some(id) => Next::Drop(id),
                None => Next::Nothing,
            }
        }
        // The stream's waiting bytes go out in `pump`, which also wakes its upstream.
        (_, Event::WindowOpened { .. } | Event::GoAway { .. }) => Next::Nothing,
        (_, Event::Closed { .. }) => match p.clients.get_mut(ci) {
            Some(c) => {
                c.end.close_after_flush();
                Next::DropAll(c.codec.reset())
            }
            None => Next::Nothing,
        },
    }
}

fn codec(clients: &mut Clients, ci: ClientId) -> Option<&mut H2Codec> {
    match &mut clients.get_mut(ci)?.codec {
        Codec::H2(h2) => Some(h2),
        Codec::H1(_) | Codec::H3(_) => None,
    }
}

/// A stream whose request cannot become an exchange (HTTP/2 or HTTP/3). It still counts
/// against frang's request rate first: a connection cannot send malformed requests without
/// limit (on HTTP/1.1 each costs a connection). Answered on the stream here when it is not
/// expressible as a request the rules can see; what else refuses it is returned.
pub(super) fn unservable(
    p: &mut Parts,
    ci: ClientId,
    (stream, refused): (u32, Unservable),
    now: Instant,
) -> Option<StreamRefused> {
    let worker = &p.metrics.workers[p.worker];
    WorkerMetrics::bump(&worker.requests);
    let ip = p.clients.get(ci)?.peer.ip();
    if let Err(v) = p.rt.frang.on_request(ip, now) {
        return Some(StreamRefused::Frang(v));
    }
    match refused {
        Unservable::NotProxied(status) => {
            bump(&p.metrics.parse_errors);
            let page = Reply::status_page(status, &p.rt.error_pages);
            let date = p.date.now();
            if let Some(c) = p.clients.get_mut(ci) {
                let to = super::h1::ReplyTo::default();
                super::client::codec::reply(c, stream, &page, to, date, false);
            }
            p.dirty.push_back(super::token::client_token(ci));
            worker.count_status(status);
            None
        }
        Unservable::Invalid(e) => Some(StreamRefused::Parse(e)),
    }
}

/// Request body bytes on `stream`: kept for its exchange (bounded by the stream's window,
/// as the credit returns only when the upstream has taken them), counted by frang; without
/// an exchange they are dropped and the credit returned at once.
fn data_in(
    p: &mut Parts,
    ci: ClientId,
    (stream, data, end_stream): (u32, Vec<u8>, bool),
    now: Instant,
) -> Next {
    let Some(h2) = codec(p.clients, ci) else {
        return Next::Nothing;
    };
    let Some(id) = h2.exchange_of(stream) else {
        h2.conn.consumed(stream, data.len());
        return Next::Nothing;
    };
    let Some(ex) = p.exchanges.get_mut(id) else {
        return Next::Nothing;
    };
    let body_limits = vhost_frang(&p.rt.config, ex.vhost.unwrap_or(0), ex.location);
    let chunk = ex.limits.on_body_chunk(now).and_then(|()| {
        body_limits.map_or(Ok(()), |l| ex.limits.on_body_bytes(data.len() as u64, l))
    });
    if let Err(v) = chunk {
        h2.conn.consumed(stream, data.len());
        return Next::Refuse(RefuseAt::Exchange(id), v);
    }
    let body = h2.body_mut(stream);
    body.data.extend_from_slice(&data);
    body.end |= end_stream;
    p.exchanges.arm_body_deadline(p.timers, id, p.now);
    Next::Nothing
}

/// A stream's request trailers: they end its body and go upstream as the chunked body's
/// trailer (with a Content-Length body there is no place for them: dropped), the fields
/// `request_body::trailer_forwardable` refuses left out. A field the head also has is a
/// frang block unless `http_trailer_split_allowed`, as on HTTP/1.1.
fn trailers_in(p: &mut Parts, ci: ClientId, stream: u32, fields: Vec<h2::Field>) -> Next {
    let Some(id) = codec(p.clients, ci).and_then(|h2| h2.exchange_of(stream)) else {
        return Next::Nothing;
    };
    if let Some(v) = trailer_split((p.exchanges, p.rt), id, &fields) {
        return Next::Refuse(RefuseAt::Exchange(id), v);
    }
    if let Some(h2) = codec(p.clients, ci) {
        let body = h2.body_mut(stream);
        body.trailers = fields;
        body.end = true;
    }
    Next::Nothing
}

/// An HTTP/3 request stream's trailers (`quic::Work::Trailers`): judged as an HTTP/2
/// stream's, then they end its body. The violation, if frang refuses them.
pub(super) fn h3_trailers(
    (clients, exchanges, rt): (&mut Clients, &Exchanges, &Runtime),
    ci: ClientId,
    stream: u32,
    fields: Vec<h2::Field>,
) -> Option<(RefuseAt, Violation)> {
    let Some(Codec::H3(h3)) = clients.get_mut(ci).map(|c| &mut c.codec) else {
        return None;
    };
    let id = h3.exchange_of(stream)?;
    if let Some(v) = trailer_split((exchanges, rt), id, &fields) {
        return Some((RefuseAt::Exchange(id), v));
    }
    let body = &mut h3.stream_mut(stream).body;
    body.trailers = fields;
    body.end = true;
    None
}

/// frang's trailer-split check (`http_trailer_split_allowed`) of exchange `id`'s request
/// head against its trailer `fields`: the violation, if any.
fn trailer_split(
    (exchanges, rt): (&Exchanges, &Runtime),
    id: ExchangeId,
    fields: &[h2::Field],
) -> Option<Violation> {
    let ex = exchanges.get(id)?;
    let limits = vhost_frang(&rt.config, ex.vhost.unwrap_or(0), ex.location)?;
    let head_names = ex.request.field_names();
    check_trailers(limits, head_names, fields.iter().map(|f| &f.name[..])).err()
}

/// Moves request bodies to their upstreams and waiting response bytes into windows;
/// wakes upstreams whose stream has room again. True if anything moved.
pub(super) fn pump(p: &mut Parts, ci: ClientId) -> bool {
    let Some(h2) = codec(p.clients, ci) else {
        return false;
    };
    let drained = h2.pump_all();
    let mut moved = !drained.is_empty();
    for (stream, id) in h2.bodies_pending() {
        moved |= pump_body(p, ci, stream, id);
    }
    // Streams whose waiting bytes went out may relay more: wake their upstreams.
    let Some(h2) = codec(p.clients, ci) else {
        return moved;
    };
    let woken: Vec<ExchangeId> = drained
        .into_iter()
        .filter(|&s| h2.has_room(s))
        .filter_map(|s| h2.exchange_of(s))
        .collect();
    wake_upstreams((p.exchanges, p.upstreams, p.dirty), woken);
    moved
}

/// Wakes the upstream connections of `exchanges` that have response bytes waiting.
pub(super) fn wake_upstreams(
    (table, upstreams, dirty): (&Exchanges, &Upstreams, &mut VecDeque<Token>),
    exchanges: Vec<ExchangeId>,
) {
    for id in exchanges {
        let Some(up) = table.get(id).and_then(|ex| ex.forward()).map(|f| f.up) else {
            continue;
        };
        let waiting = upstreams
            .get(up)
            .is_some_and(|u| u.rbuf.as_ref().is_some_and(|b| !b.is_empty()) || u.peer_closed);
        if waiting {
            dirty.push_back(upstream_token(up));
        }
    }
}

/// Passes what arrived of `stream`'s body to its exchange's upstream connection.
fn pump_body(p: &mut Parts, ci: ClientId, stream: u32, id: ExchangeId) -> bool {
    let Some(h2) = codec(p.clients, ci) else {
        return false;
    };
    let Some((request, _, fwd)) = p.exchanges.get_mut(id).and_then(|ex| ex.body_parts()) else {
        return false;
    };
    let Some(u) = p.upstreams.get_mut(fwd.up) else {
        return false;
    };
    if fwd.sending.all_queued() {
        // All passed on; the credit of the last bytes returns once the upstream has room.
        if u.out.has_room() {
            h2.release_credit(stream);
            h2.body_done(stream);
        }
        return false;
    }
    let chunked = matches!(request.framing(), http1::BodyFraming::Chunked);
    let body = h2.body_mut(stream);
    let mut moved = false;
    if !body.data.is_empty() && u.out.has_room() {
        let data = std::mem::take(&mut body.data);
        if chunked {
            push_chunk(&mut u.out, &data);
        } else {
            u.out.push(&data);
        }
        body.owed += data.len();
        moved = true;
    }
    if body.data.is_empty() && body.end {
        if chunked {
            push_last_chunk_with(&mut u.out, &body.trailers);
        }
        fwd.sending.body_done();
        moved = true;
    }
    if u.out.has_room() {
        h2.release_credit(stream);
    }
    if fwd.sending.all_queued() {
        h2.body_done(stream);
    }
    if moved {
        p.dirty.push_back(upstream_token(fwd.up));
    }
    moved
}

/// The end of a pass over client `ci`: its frames into the outbox, the connection closed
/// once done, its output timed while it waits, frang's flood counts judged. True when the
/// client floods (the caller drops it as an attacker).
pub(super) fn end_pass(p: &mut Parts, ci: ClientId, now: Instant) -> bool {
    if let Some(c) = p.clients.get_mut(ci) {
        if let Codec::H2(h2) = &mut c.codec {
            h2.flush_into(&mut c.out);
            if h2.conn.is_done() {
                c.end.close_after_flush();
            }
            if c.out.is_empty() {
                h2.out_stalled_since = None;
            } else {
                h2.out_stalled_since.get_or_insert(now);
            }
        }
    }
    super::h2_floods::judge(p.clients, ci, p.rt, p.metrics)
}

/// The client timer of an HTTP/2 connection: the protocol's own deadlines (SETTINGS ack,
/// stalled streams and output), and the keep-alive timeout once no stream is left.
pub(super) fn timer(p: &mut Parts, ci: ClientId, now: Instant, draining: bool) -> Due {
    let keepalive = super::client::idle_timeout(p.rt);
    if super::h2_floods::output_stalled(p.clients, ci, (p.rt, p.metrics), now) {
        return Due::Stalled;
    }
    let head_due = (p.clients.get(ci))
        .and_then(|c| c.limits.deadline())
        .filter(|&(at, _)| now >= at);
    if let Some((_, limit)) = head_due {
        return Due::Head(limit);
    }
    if let Some(c) = p.clients.get_mut(ci) {
        if let Codec::H2(h2) = &mut c.codec {
            h2.armed_at = None;
            h2.conn.on_timeout(now);
            if h2.idle_at().is_some_and(|at| now >= at + keepalive) || (draining && h2.is_idle()) {
                h2.conn.go_away();
                c.end.close_after_flush();
            }
        }
    }
    Due::Process
}

/// Arms the client timer at the connection's next deadline.
pub(super) fn arm_timer(
    (clients, timers, rt): (&mut Clients, &mut Timers, &Runtime),
    ci: ClientId,
) {
    let keepalive = super::client::idle_timeout(rt);
    let stall_timeout = rt.config.h2_stall_timeout;
    let head = (clients.get(ci))
        .and_then(|c| c.limits.deadline())
        .map(|(at, _)| at);
    let Some(h2) = codec(clients, ci) else {
        return;
    };
    // A timer is pending: it re-arms when it fires (deadlines only move later, except a
    // stream that stalls meanwhile, whose 30 s limit is then checked at most H2_TIMER_MAX
    // late, and a head's deadline, which may be the earliest and is armed for).
    if h2
        .armed_at
        .is_some_and(|armed| head.is_none_or(|head| armed <= head))
    {
        return;
    }
    let idle = h2.idle_at().map(|at| at + keepalive);
    let stall = h2.out_stalled_since.map(|at| at + stall_timeout);
    let busy = (!h2.is_idle()).then(|| Instant::now() + H2_TIMER_MAX);
    let Some(at) = [h2.conn.next_deadline(), idle, busy, stall, head]
        .into_iter()
        .flatten()
        .min()
    else {
        return;
    };
    h2.armed_at = Some(at);
    clients.arm_timer(timers, ci, at);
}
