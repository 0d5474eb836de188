//! HTTP/2 to a group's servers (`server_proto h2`): one connection carries many exchanges.
//! The connection is an entry of the table like any other (its socket, its TLS, its
//! outbox), driving an [`h2::ClientConnection`]. Each exchange on it gets an entry of its
//! own, a stream entry: it is what the exchange's `Forward::up` names, so the rest of the
//! pipeline works on it unchanged. Its `out` receives the request body as the client's
//! side queues it (HTTP/1 framed: raw, or chunked), which the connection turns into DATA
//! within the origin's windows; its response is queued on it as decoded pieces (head, data,
//! end with trailers: `h2_pieces.rs`), which the one response relay takes instead of reading
//! the entry's `rbuf` (a health monitor's stream gets its answer rendered as HTTP/1.1 in its
//! `rbuf` instead, `h2_render.rs`, for `worker/health.rs`). A stream entry has no socket (the connection's entry has it). Its own timer is the
//! exchange's `server_forward_timeout`. Closing it resets its stream (CANCEL) if the stream
//! is still open; it never goes to a pool and never counts against `conns_n`.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use http1::{BodyDecoder, BodyFraming};

use super::groups::GroupState;
use super::h2_pieces::Piece;
use super::h2_render::RenderTo;
use super::{flush, read, Flushed, UpPhase, Upstream, UpstreamId, Upstreams};
use crate::buf::BufPool;
use crate::metrics_upstream::H2ClientSeen;
use crate::outbox::Outbox;

/// What an entry is to HTTP/2.
pub enum H2Link {
    Conn(Box<H2Conn>),
    Stream(Box<H2Stream>),
}

/// A connection speaking HTTP/2 to its server.
pub struct H2Conn {
    pub client: h2::ClientConnection,
    /// Its stream entries, opened or waiting for a stream.
    pub streams: Vec<UpstreamId>,
    /// The stream entries by their stream's id, once opened: an event finds its entry here.
    by_id: HashMap<u32, UpstreamId>,
    /// The stream entries whose request is not out whole yet (waiting for a stream, or
    /// their body for the origin's windows), in the order they came: a turn sends theirs.
    pub(super) sending: Vec<UpstreamId>,
    /// Stream entries still holding their request (no stream opened for it yet): what the
    /// origin's stream limit must leave room for.
    pub(super) waiting: usize,
    /// The codec's deadline the connection's timer is armed for.
    armed: Option<Instant>,
    /// A health monitor's connection (`worker/health.rs`): it carries the monitor's stream
    /// only, and closes when that stream is over.
    pub probe: bool,
}

/// One exchange on an HTTP/2 connection.
pub struct H2Stream {
    pub conn: UpstreamId,
    /// The stream, once opened.
    pub id: Option<u32>,
    /// The request until its stream opens.
    pub request: Option<h2::Request>,
    /// Decodes the request body queued in the entry's `out` (None: no body).
    pub body: Option<BodyDecoder>,
    /// Body data decoded but not yet taken by the origin's windows.
    pub(super) pending: Vec<u8>,
    /// The body's end was decoded (END_STREAM goes with the last of `pending`).
    pub(super) body_end: bool,
    /// The request went out whole (head, body and END_STREAM).
    pub sent: bool,
    /// The response's pieces not yet taken by the relay (an exchange's stream).
    pub(super) pieces: VecDeque<Piece>,
    /// A health monitor's stream: the response as HTTP/1.1 that did not fit in `rbuf` yet.
    overflow: Vec<u8>,
    /// Response body bytes passed on (taken by the relay, or to `rbuf`) whose window is not
    /// yet returned.
    pub(super) owed: usize,
    /// The request was HEAD: the response has no body whatever it says.
    head_request: bool,
    /// The response body is rendered chunked (no Content-Length).
    chunked: bool,
}

impl H2Conn {
    /// Stream `id` was opened for stream entry `si`: its events go there.
    pub(super) fn learn(&mut self, id: u32, si: UpstreamId) {
        self.by_id.insert(id, si);
    }
}

/// The HTTP/2 connection state of `u`, if it is a connection entry.
pub fn conn_mut(u: &mut Upstream) -> Option<&mut H2Conn> {
    match u.h2.as_mut() {
        Some(H2Link::Conn(c)) => Some(c),
        _ => None,
    }
}

fn stream_mut(u: &mut Upstream) -> Option<&mut H2Stream> {
    match u.h2.as_mut() {
        Some(H2Link::Stream(s)) => Some(s),
        _ => None,
    }
}

pub fn is_conn(u: &Upstream) -> bool {
    matches!(u.h2, Some(H2Link::Conn(_)))
}

pub fn is_stream(u: &Upstream) -> bool {
    matches!(u.h2, Some(H2Link::Stream(_)))
}

/// Makes a just-opened connection `u` speak HTTP/2 (its preface and SETTINGS queued).
pub fn start_conn(u: &mut Upstream, limits: h2::Limits, now: Instant) -> Result<(), &'static str> {
    let client = h2::ClientConnection::new(limits, now)?;
    u.h2 = Some(H2Link::Conn(Box::new(H2Conn {
        client,
        streams: Vec::new(),
        by_id: HashMap::new(),
        sending: Vec::new(),
        waiting: 0,
        armed: None,
        probe: false,
    })));
    Ok(())
}

/// Streams connection `c` can still take: what the origin allows less those waiting.
fn room(c: &H2Conn) -> usize {
    c.client.available_streams().saturating_sub(c.waiting)
}

/// A connection of `group` (to `server` if given) of configuration `rt_gen` that can take
/// another stream now: the oldest with room, from the servers' lists of their HTTP/2
/// connections (`groups.rs` `ServerState::h2_conns`), never the whole upstream table.
pub fn find_conn(
    (upstreams, groups): (&Upstreams, &[GroupState]),
    (group, server): (usize, Option<usize>),
    rt_gen: u64,
) -> Option<UpstreamId> {
    let servers = &groups.get(group)?.servers;
    let servers = match server {
        Some(s) => servers.get(s..=s)?,
        None => &servers[..],
    };
    let usable = |u: &Upstream| u.rt_gen == rt_gen && !u.removed && !u.peer_closed;
    servers
        .iter()
        .flat_map(|st| st.h2_conns().iter().copied())
        .find(|&ui| {
            upstreams.get(ui).is_some_and(|u| {
                usable(u)
                    && matches!(u.h2.as_ref(), Some(H2Link::Conn(c)) if !c.probe && room(c) > 0)
            })
        })
}

/// What a new stream carries: its request, the request body's decoder, whether it is HEAD.
pub struct NewStream {
    pub request: h2::Request,
    pub body: Option<BodyDecoder>,
    pub head_request: bool,
    /// The exchange's quiet limit when shorter than the group's `server_forward_timeout`
    /// (a gRPC call's `grpc-timeout`).
    pub quiet: Option<std::time::Duration>,
}

/// A stream entry on connection `conn` for exchange `id` (None: a health monitor's request,
/// judged by `worker/health.rs`); its stream opens on the connection's next turn.
pub fn open_stream(
    upstreams: &mut Upstreams,
    conn: UpstreamId,
    id: Option<super::super::exchange::ExchangeId>,
    new: NewStream,
) -> std::io::Result<UpstreamId> {
    let c = upstreams.get(conn).ok_or(std::io::ErrorKind::NotFound)?;
    let forward_timeout = new
        .quiet
        .map_or(c.forward_timeout, |q| q.min(c.forward_timeout));
    let stream = H2Stream {
        conn,
        id: None,
        request: Some(new.request),
        body: new.body,
        pending: Vec::new(),
        body_end: false,
        sent: false,
        pieces: VecDeque::new(),
        overflow: Vec::new(),
        owed: 0,
        head_request: new.head_request,
        chunked: false,
    };
    let entry = Upstream {
        sock: None,
        group: c.group,
        server: c.server,
        addr: c.addr,
        phase: if id.is_some() {
            UpPhase::Busy
        } else {
            UpPhase::Checking
        },
        exchange: id,
        rbuf: None,
        out: Outbox::default(),
        reused: false,
        peer_closed: false,
        peer_failed: false,
        keep_alive: false,
        timer_gen: 0,
        last_progress: Instant::now(),
        rt_gen: c.rt_gen,
        removed: c.removed,
        forward_timeout,
        retire_at: None,
        health_body: None,
        tls: None,
        readiness: Default::default(),
        h2: Some(H2Link::Stream(Box::new(stream))),
    };
    let si = upstreams.insert(entry);
    if let Some(c) = upstreams.get_mut(conn).and_then(conn_mut) {
        c.streams.push(si);
        c.sending.push(si);
        c.waiting += 1;
    }
    Ok(si)
}

/// Stream entry `si` closes: its stream is reset if still open, and it leaves its
/// connection's list.
pub fn forget_stream(upstreams: &mut Upstreams, si: UpstreamId, stream: &H2Stream) {
    let Some(c) = upstreams.get_mut(stream.conn).and_then(conn_mut) else {
        return;
    };
    c.streams.retain(|&s| s != si);
    c.sending.retain(|&s| s != si);
    if stream.request.is_some() {
        c.waiting = c.waiting.saturating_sub(1);
    }
    if let Some(id) = stream.id {
        c.by_id.remove(&id);
        c.client.reset(id, h2::ErrorCode::CANCEL);
    }
    // A reset to write: the connection's next turn writes it.
    if !c.client.output().is_empty() {
        upstreams.h2_woken.push(stream.conn);
    }
}

/// Of stream entry `u`: its connection, and whether its request went out whole.
pub fn stream_state(u: &Upstream) -> Option<(UpstreamId, bool)> {
    match u.h2.as_ref() {
        Some(H2Link::Stream(s)) => Some((s.conn, s.sent)),
        _ => None,
    }
}

/// Connection `ui` closes: its stream entries lose it (as a reset; `retryable` when no
/// response can have begun: the connection never got up). Returns them, to be driven.
pub fn orphan_streams(upstreams: &mut Upstreams, streams: &[UpstreamId]) -> Vec<UpstreamId> {
    let mut woken = Vec::new();
    for &si in streams {
        let Some(u) = upstreams.get_mut(si) else {
            continue;
        };
        // One reset already (its event came first) keeps that verdict.
        if u.peer_closed {
            woken.push(si);
            continue;
        }
        let Some(s) = stream_mut(u) else {
            continue;
        };
        let unsent = s.id.is_none();
        // Its stream and request went with the connection: nothing of it is left for a
        // connection that takes the slot next to reset or count.
        s.id = None;
        s.request = None;
        u.peer_closed = true;
        u.peer_failed = true;
        // A stream never opened was not processed by the origin: a retry is safe.
        u.reused |= unsent;
        woken.push(si);
    }
    woken
}

/// What a turn of a connection did.
pub struct Turn {
    /// Stream entries with something new (response bytes, an end, window for the body).
    pub woken: Vec<UpstreamId>,
    /// The connection is over: close it.
    pub done: bool,
    /// Still moving after a full round: drive it again after the others (with edge-triggered
    /// readiness no event would come for bytes already waiting).
    pub again: bool,
    /// Floods, refusals, GOAWAYs and resets met, for the metrics.
    pub seen: H2ClientSeen,
}

/// One turn of HTTP/2 connection `ui`: waiting streams opened, request bodies passed on
/// within the windows, output written, input read and its events delivered to the stream
/// entries.
pub fn turn(upstreams: &mut Upstreams, bufs: &mut BufPool, ui: UpstreamId, now: Instant) -> Turn {
    let mut woken = Vec::new();
    let mut again = true;
    let mut seen = H2ClientSeen::default();
    let over = |woken, seen| Turn {
        woken,
        done: true,
        again: false,
        seen,
    };
    for _ in 0..64 {
        let mut progressed = super::h2_send::send_streams(upstreams, ui, &mut woken);
        let Some(u) = upstreams.get_mut(ui) else {
            return over(woken, seen);
        };
        if u.phase == UpPhase::Connecting {
            return Turn {
                woken,
                done: false,
                again: false,
                seen,
            };
        }
        let Some(c) = conn_mut(u) else {
            return over(woken, seen);
        };
        if !c.client.output().is_empty() {
            let bytes = c.client.take_output();
            u.out.push_vec(bytes);
        }
        progressed |= matches!(flush(u), Flushed::Wrote | Flushed::Failed);
        if conn_mut(u).is_some_and(|c| c.client.wants_read()) {
            progressed |= read(u, bufs);
        }
        let events = take_events(u, bufs, now);
        progressed |= !events.is_empty();
        for ev in events {
            deliver(upstreams, ui, ev, (&mut woken, &mut seen));
        }
        if !progressed {
            again = false;
            break;
        }
    }
    let done = upstreams.get_mut(ui).is_none_or(|u| {
        let finished =
            conn_mut(u).is_none_or(|c| c.client.is_done() && c.client.output().is_empty());
        // A monitor's connection whose stream is over has nothing more to do.
        let probe_over = conn_mut(u).is_some_and(|c| c.probe && c.streams.is_empty());
        u.peer_closed || (finished && u.out.is_empty()) || probe_over
    });
    Turn {
        woken,
        done,
        again,
        seen,
    }
}

/// Arms connection `ui`'s timer for its codec's next deadline (our SETTINGS unacknowledged,
/// output the origin does not read, a request body stalled by a window that never opens),
/// unless it is armed for it already.
pub fn arm_deadline(upstreams: &mut Upstreams, timers: &mut crate::timers::Timers, ui: UpstreamId) {
    let Some(u) = upstreams.get_mut(ui) else {
        return;
    };
    let Upstream { h2, timer_gen, .. } = u;
    let Some(H2Link::Conn(c)) = h2.as_mut() else {
        return;
    };
    let deadline = c.client.next_deadline();
    if deadline == c.armed {
        return;
    }
    c.armed = deadline;
    *timer_gen = 0;
    if let Some(at) = deadline {
        *timer_gen = timers.next_gen();
        timers.schedule(at, super::super::token::upstream_token(ui).0, *timer_gen);
    }
}

/// Connection `ui`'s codec deadline came: it acts on it (a connection failed, a stream
/// reset), which its next turn delivers.
pub fn on_deadline(upstreams: &mut Upstreams, ui: UpstreamId, now: Instant) {
    if let Some(c) = upstreams.get_mut(ui).and_then(conn_mut) {
        c.armed = None;
        c.client.on_timeout(now);
    }
}

/// Feeds what `u` read to its HTTP/2 connection and takes the events that follow.
fn take_events(u: &mut Upstream, bufs: &mut BufPool, now: Instant) -> Vec<h2::ClientEvent> {
    let peer_closed = u.peer_closed;
    let Upstream { rbuf, h2, .. } = u;
    let Some(H2Link::Conn(c)) = h2.as_mut() else {
        return Vec::new();
    };
    if let Some(b) = rbuf.as_mut() {
        let n = b.len();
        if n > 0 {
            c.client.recv(b.bytes(), now);
            b.consume(n);
        }
    }
    bufs.release_if_empty(rbuf);
    if peer_closed {
        c.client.peer_closed();
    }
    std::iter::from_fn(|| c.client.poll_event()).collect()
}

/// Hands one event of connection `ui` to the stream entry it concerns.
fn deliver(
    upstreams: &mut Upstreams,
    ui: UpstreamId,
    ev: h2::ClientEvent,
    (woken, seen): (&mut Vec<UpstreamId>, &mut H2ClientSeen),
) {
    use h2::ClientEvent as E;
    count(&ev, seen);
    let stream = match &ev {
        E::Interim { stream, .. }
        | E::Response { stream, .. }
        | E::Data { stream, .. }
        | E::Trailers { stream, .. }
        | E::Reset { stream, .. }
        | E::WindowOpened { stream } => *stream,
        // NO_ERROR is an origin closing in order (nginx after `keepalive_requests`, a
        // reload): routine, counted (`ktls_proxy_upstream_h2_goaways_received_total`), not a
        // warning. New exchanges go to another connection.
        E::GoAway { code, debug, .. } => {
            if *code != h2::ErrorCode::NO_ERROR {
                crate::warn!(
                    "upstream HTTP/2 GOAWAY {code:?}: {}",
                    String::from_utf8_lossy(debug)
                );
            }
            return;
        }
        E::Closed { error } => {
            crate::warn!("upstream HTTP/2 connection failed: {}", error.reason);
            return;
        }
    };
    let Some(c) = upstreams.get_mut(ui).and_then(conn_mut) else {
        return;
    };
    // A reset ends the stream: its entry learns it once, and its id names nothing after.
    let found = if matches!(ev, E::Reset { .. }) {
        c.by_id.remove(&stream)
    } else {
        c.by_id.get(&stream).copied()
    };
    let Some(si) = found else {
        // A stream the exchange already gave up: its credit goes back at once.
        if let (E::Data { data, .. }, Some(c)) = (&ev, upstreams.get_mut(ui).and_then(conn_mut)) {
            c.client.consumed(stream, data.len());
        }
        return;
    };
    let Some(u) = upstreams.get_mut(si) else {
        return;
    };
    if let E::Reset { retryable, .. } = ev {
        u.peer_closed = true;
        u.peer_failed = true;
        u.reused |= retryable;
        if let Some(s) = stream_mut(u) {
            s.id = None;
            s.sent = true;
        }
    } else {
        // An exchange's response goes to the relay as pieces; a monitor's as HTTP/1.1.
        let exchange = u.exchange.is_some();
        if let Some(s) = stream_mut(u) {
            if exchange {
                super::h2_pieces::queue(&mut s.pieces, ev, s.head_request);
            } else {
                super::h2_render::render(s.render_to(), ev);
            }
        }
    }
    u.last_progress = Instant::now();
    woken.push(si);
}

/// What event `ev` adds to the client role's counters.
fn count(ev: &h2::ClientEvent, seen: &mut H2ClientSeen) {
    use h2::ClientEvent as E;
    match ev {
        E::Reset { code, .. } if *code == h2::ErrorCode::REFUSED_STREAM => seen.refused += 1,
        E::Reset { .. } => seen.resets += 1,
        E::GoAway { .. } => seen.goaways += 1,
        E::Closed { error } if error.code == h2::ErrorCode::ENHANCE_YOUR_CALM => seen.floods += 1,
        _ => {}
    }
}

/// Moves what a health monitor's stream entry `si` has of its answer into its read buffer,
/// and gives the window back for the body bytes passed on ([`give_back`]). True if anything
/// moved.
pub fn refill(upstreams: &mut Upstreams, bufs: &mut BufPool, si: UpstreamId) -> bool {
    let Some(u) = upstreams.get_mut(si) else {
        return false;
    };
    let Upstream { rbuf, h2, .. } = u;
    let Some(H2Link::Stream(s)) = h2.as_mut() else {
        return false;
    };
    let mut moved = false;
    if !s.overflow.is_empty() {
        let b = rbuf.get_or_insert_with(|| bufs.take());
        let n = b.push(&s.overflow);
        s.overflow.drain(..n);
        moved = n > 0;
    }
    give_back(upstreams, si);
    moved
}

/// Returns to the origin the window of stream entry `si`'s body bytes passed on (the origin
/// may send that much more): what the relay took of its pieces, or what went into a
/// monitor's read buffer.
pub fn give_back(upstreams: &mut Upstreams, si: UpstreamId) {
    let Some(H2Link::Stream(s)) = upstreams.get_mut(si).and_then(|u| u.h2.as_mut()) else {
        return;
    };
    if s.owed == 0 || !s.overflow.is_empty() {
        return;
    }
    let owed = std::mem::take(&mut s.owed);
    let (conn, id) = (s.conn, s.id);
    if let (Some(id), Some(c)) = (id, upstreams.get_mut(conn).and_then(conn_mut)) {
        c.client.consumed(id, owed);
        // A WINDOW_UPDATE to write: the connection's next turn writes it.
        if !c.client.output().is_empty() {
            upstreams.h2_woken.push(conn);
        }
    }
}

impl H2Stream {
    pub(super) fn render_to(&mut self) -> RenderTo<'_> {
        RenderTo {
            overflow: &mut self.overflow,
            owed: &mut self.owed,
            head_request: self.head_request,
            chunked: &mut self.chunked,
        }
    }
}

/// Whether a body framing means a request body follows its head.
pub fn has_body(framing: BodyFraming) -> bool {
    !matches!(framing, BodyFraming::None | BodyFraming::Length(0))
}
