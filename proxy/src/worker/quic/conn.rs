//! One QUIC connection's turn: what arrived (endpoint events, stream data into the `h3`
//! crate, its events) returned as [`Work`] for the loop; then what is to go out (our
//! unidirectional streams, responses by stream credit, datagrams) and the next deadline on
//! the client entry's timer.

use std::time::Instant;

use quinn_proto::{Dir, Event, ReadError, StreamEvent, StreamId, VarInt};

use super::codec::{H3Codec, RESET_BUDGET, STREAM_IN_MAX, STREAM_OUT_MAX};
use super::{budget, gso, send_to, Endpoint, Quic};
use crate::metrics_quic::QuicMetrics;
use crate::timers::Timers;
use crate::worker::client::codec::Codec;
use crate::worker::client::{ClientId, Clients};
use crate::worker::exchange::ExchangeId;

/// Datagrams sent per flush at most (the connection's congestion window bounds them too).
const SEND_BATCH: usize = 256;

/// What a connection's turn leaves for the loop (the exchange pipeline) to do.
pub enum Work {
    /// The handshake completed, with the client's ClientHello if it was captured: the TLS
    /// fingerprints' turn (`fingerprint_hook::on_quic_handshake`), before any request.
    Connected {
        hello: Option<ktls::hello::ClientHello>,
        /// The handshake resumed a session with a ticket.
        resumed: bool,
    },
    /// A request stream's request: make its exchange.
    Request {
        stream: u32,
        request: h2::Request,
        end_stream: bool,
    },
    /// Request body bytes for `stream`'s exchange.
    Data {
        stream: u32,
        data: Vec<u8>,
        end_stream: bool,
    },
    /// A request stream's trailer section, which ends its body (frang's trailer-split check
    /// first: `h2_serve.rs` `h3_trailers`).
    Trailers { stream: u32, fields: Vec<h2::Field> },
    /// A request over the field section limits: answer `status` (431) on the stream.
    Refuse { stream: u32, status: u16 },
    /// An exchange whose stream was reset or broke a rule: drop it.
    Drop(ExchangeId),
    /// A request head broke frang's slow-head limits (`heads.rs`): the client is blocked
    /// and the connection closed, as on HTTP/2; nothing else of this turn is served.
    Block(crate::frang::Violation),
    /// The connection is over (closed, lost, drained): close the client entry.
    Gone,
}

fn codec(clients: &mut Clients, ci: ClientId) -> Option<&mut H3Codec> {
    match &mut clients.get_mut(ci)?.codec {
        Codec::H3(h3) => Some(h3),
        _ => None,
    }
}

/// Client entry `ci` is being closed (by the loop: its connection drained, a graceful
/// stop's last call, a block, a panic): an HTTP/3 connection not over yet is closed now
/// (CONNECTION_CLOSE with H3_NO_ERROR, sent once, no draining period kept) and its endpoint
/// forgets it. Nothing for the other codecs.
pub fn closing(quic: &mut Quic, clients: &mut Clients, ci: ClientId, now: Instant) {
    let Some(h3) = codec(clients, ci) else {
        return;
    };
    if !quic.conns.contains_key(&(h3.endpoint, h3.handle)) {
        return;
    }
    if !h3.quic.is_closed() {
        quic.metrics.quic.count_close("proxy", Some(0x100));
        h3.quic
            .close(now, VarInt::from_u32(0x100), bytes::Bytes::new());
    }
    if let Some(ep) = quic.endpoints.get_mut(h3.endpoint) {
        quic.send.clear();
        if let Some(t) = h3.quic.poll_transmit(now, 1, &mut quic.send) {
            send_to(&ep.socket, quic.send.get(..t.size).unwrap_or_default(), &t);
        }
        let drained = quinn_proto::EndpointEvent::drained();
        let _ = ep.endpoint.handle_event(h3.handle, drained);
    }
    quic.forget(h3.endpoint, h3.handle);
}

/// Closes client `ci`'s connection for a frang block of `limit` (a slow head, `client_mem`):
/// CONNECTION_CLOSE with H3_EXCESSIVE_LOAD and the limit as the reason, counted as
/// `closes_total{reason="frang"}`. The loop then closes the client entry (`closing` sends
/// the close). An HTTP/2 block ends its connection too (GOAWAY, or a reset under
/// `block_action drop`); QUIC's CONNECTION_CLOSE carries the code itself.
pub fn close_blocked(quic: &Quic, clients: &mut Clients, ci: ClientId, limit: &'static str) {
    let Some(h3) = codec(clients, ci) else {
        return;
    };
    if h3.quic.is_closed() {
        return;
    }
    h3.close_excessive(&quic.metrics.quic, ("frang", limit), Instant::now());
}

/// The connection's deadline came due: QUIC's timers, and the handshake's deadline
/// (`budget.rs`). A handshake cut now is closed (H3_NO_ERROR, counted as
/// `handshake_timeout`) and no longer counts as in progress; its client's address is
/// returned, for frang's `tls_incomplete_connection_rate` as a TCP one's.
pub fn timeout(
    quic: &mut Quic,
    clients: &mut Clients,
    ci: ClientId,
    now: Instant,
) -> Option<std::net::IpAddr> {
    let peer = clients.get(ci)?.peer.ip();
    let h3 = codec(clients, ci)?;
    h3.armed_at = None;
    h3.quic.handle_timeout(now);
    let handshaking = h3.quic.is_handshaking() && !h3.quic.is_closed();
    if !budget::handshake_overdue(h3.handshake_deadline, handshaking, now) {
        return None;
    }
    h3.handshake_deadline = None;
    quic.metrics.quic.count_close("handshake_timeout", None);
    let reason = bytes::Bytes::from_static(b"handshake not completed in time");
    h3.quic.close(now, VarInt::from_u32(0x100), reason);
    quic.handshake_over(h3.endpoint, h3.handle);
    Some(peer)
}

/// Takes in what the connection received: its endpoint's bookkeeping, its streams' bytes
/// (through the `h3` crate), and returns the requests, body data and ends for the loop;
/// frang's slow-head limits judged at `now` (`heads.rs`).
pub fn drive(quic: &mut Quic, clients: &mut Clients, ci: ClientId, now: Instant) -> Vec<Work> {
    let mut work = Vec::new();
    let (mut sni, mut stopped) = (None, 0u32);
    let Some(h3) = codec(clients, ci) else {
        return work;
    };
    endpoint_events(quic, h3, &mut work);
    while let Some(event) = h3.quic.poll() {
        match event {
            // The name the client asked for: strict host checking compares the vhost it
            // chose with the one each request's authority routes to, as on TCP. Its
            // ClientHello goes to the fingerprints, before any request of the connection.
            Event::Connected => {
                let done = crate::quic_hello::completed(h3.quic.crypto_session());
                sni = done.server_name;
                work.push(Work::Connected {
                    hello: done.hello,
                    resumed: done.resumed,
                });
                h3.handshake_deadline = None;
                quic.handshake_over(h3.endpoint, h3.handle);
                crate::metrics::bump(&quic.metrics.quic.handshakes_done);
            }
            Event::Stream(StreamEvent::Opened { dir }) => {
                while let Some(id) = h3.quic.streams().accept(dir) {
                    read_stream(h3, id);
                }
                h3.widen_streams();
            }
            Event::Stream(StreamEvent::Readable { id }) => read_stream(h3, id),
            Event::Stream(StreamEvent::Stopped { id, .. }) => {
                // The client wants no more of the response.
                if let Some(ex) = h3.cancel(VarInt::from(id).into_inner(), 0x10c) {
                    work.push(Work::Drop(ex));
                    stopped += 1;
                }
            }
            Event::ConnectionLost { reason } => {
                let (why, code) = lost(&reason);
                quic.metrics.quic.count_close(why, code);
                work.extend(h3.reset_all().into_iter().map(Work::Drop));
            }
            _ => {}
        }
    }
    // Streams whose reading paused for their body's sake, if it moved on since.
    let paused: Vec<u64> = (h3.streams.iter())
        .filter(|(_, s)| s.paused && s.body.data.len() < STREAM_IN_MAX)
        .map(|(&id, _)| id)
        .collect();
    for id in paused {
        if let Ok(v) = VarInt::from_u64(id) {
            read_stream(h3, StreamId::from(v));
        }
    }
    h3_events(h3, &mut work, &quic.metrics.quic);
    judge_heads(h3, &mut work, now);
    stopped += budget::reset_requests(h3, &mut work);
    budget::spend_resets(h3, stopped, (&mut work, &quic.metrics.quic));
    budget::spend_frames(h3, now, (&mut work, &quic.metrics.quic));
    count_floods(h3, &quic.metrics.quic);
    // A connection closed during its handshake (a flood's budget) no longer holds a place
    // among the handshakes in progress, though it lingers until drained.
    if h3.quic.is_closed() {
        quic.handshake_over(h3.endpoint, h3.handle);
    }
    if h3.quic.is_drained() {
        work.push(Work::Gone);
    }
    if let (Some(name), Some(cl)) = (sni, clients.get_mut(ci)) {
        cl.sni = Some(crate::server_name::ServerName::new(&name));
    }
    work
}

/// frang's slow-head limits after the turn's bytes: over one, nothing of the turn is served
/// and the loop blocks the client ([`Work::Block`]).
fn judge_heads(h3: &mut H3Codec, work: &mut Vec<Work>, now: Instant) {
    let conn = &h3.h3;
    let Err(v) = h3.heads.judge(|s| conn.awaiting_request(s), now) else {
        return;
    };
    work.retain(|w| {
        !matches!(
            w,
            Work::Request { .. } | Work::Data { .. } | Work::Trailers { .. } | Work::Refuse { .. }
        )
    });
    work.push(Work::Block(v));
}

/// The `reason` label (and error code) of a connection QUIC ended.
fn lost(reason: &quinn_proto::ConnectionError) -> (&'static str, Option<u64>) {
    use quinn_proto::ConnectionError as E;
    match reason {
        E::VersionMismatch => ("version_mismatch", None),
        // A protocol violation of the peer's that we detected.
        E::TransportError(e) => ("transport_error", Some(u64::from(e.code))),
        E::ConnectionClosed(c) => ("peer_transport", Some(u64::from(c.error_code))),
        E::ApplicationClosed(c) => ("peer_application", Some(c.error_code.into_inner())),
        E::Reset => ("stateless_reset_received", None),
        E::TimedOut => ("idle_timeout", None),
        E::LocallyClosed => ("proxy", None),
        E::CidsExhausted => ("cids_exhausted", None),
    }
}

/// Adds the `h3` connection's flood trips since the last turn to the metrics.
fn count_floods(h3: &mut H3Codec, m: &QuicMetrics) {
    let counters = h3.h3.counters();
    for (kind, counted) in h3::Flood::ALL.iter().zip(h3.floods_counted.iter_mut()) {
        let now = counters.flood(*kind);
        if now > *counted {
            m.add_floods(*kind, now - *counted);
            *counted = now;
        }
    }
}

/// The endpoint's share of the connection's events (connection IDs, the end).
fn endpoint_events(quic: &mut Quic, h3: &mut H3Codec, work: &mut Vec<Work>) {
    while let Some(event) = h3.quic.poll_endpoint_events() {
        let drained = event.is_drained();
        let Some(ep) = quic.endpoints.get_mut(h3.endpoint) else {
            continue;
        };
        if let Some(back) = ep.endpoint.handle_event(h3.handle, event) {
            h3.quic.handle_event(back);
        }
        if drained {
            quic.forget(h3.endpoint, h3.handle);
            work.push(Work::Gone);
        }
    }
}

/// Reads what stream `id` holds into the `h3` connection (a request stream: while its
/// body held here stays under `STREAM_IN_MAX`; QUIC's credit holds the rest back).
fn read_stream(h3: &mut H3Codec, id: StreamId) {
    let raw = VarInt::from(id).into_inner();
    let request = id.dir() == Dir::Bi;
    let held = match request {
        true => h3.streams.get(&raw).map_or(0, |s| s.body.data.len()),
        false => 0,
    };
    let H3Codec {
        quic,
        h3: conn,
        streams,
        heads,
        stream_bytes_read,
        ..
    } = h3;
    let mut recv = quic.recv_stream(id);
    let Ok(mut chunks) = recv.read(true) else {
        return;
    };
    let mut got = held;
    let mut paused = false;
    loop {
        if request && got >= STREAM_IN_MAX {
            paused = true;
            break;
        }
        match chunks.next(16 * 1024) {
            Ok(Some(chunk)) => {
                got += chunk.bytes.len();
                *stream_bytes_read += chunk.bytes.len() as u64;
                conn.recv(raw, &chunk.bytes, false);
                if request {
                    heads.read(raw);
                }
            }
            Ok(None) => {
                conn.recv(raw, &[], true);
                break;
            }
            Err(ReadError::Blocked) => break,
            Err(ReadError::Reset(_)) => {
                conn.stream_reset(raw);
                if request {
                    streams.entry(raw).or_default().reset = true;
                }
                break;
            }
        }
    }
    let _ = chunks.finalize();
    if let Some(s) = streams.get_mut(&raw) {
        s.paused = paused;
    } else if paused {
        streams.entry(raw).or_default().paused = true;
    }
}

/// The `h3` connection's events: bytes for our streams kept until they open, the rest
/// for the loop.
fn h3_events(h3: &mut H3Codec, work: &mut Vec<Work>, m: &QuicMetrics) {
    while let Some(event) = h3.h3.poll_event() {
        let stream_of = |id: u64| u32::try_from(id).ok();
        match event {
            h3::Event::Send { on, bytes } => {
                let at = match on {
                    h3::LocalStream::Control => 0,
                    h3::LocalStream::Encoder => 1,
                    h3::LocalStream::Decoder => 2,
                };
                h3.uni[at].1.extend_from_slice(&bytes);
            }
            h3::Event::Request {
                stream,
                request,
                end_stream,
            } => match stream_of(stream) {
                Some(stream) => work.push(Work::Request {
                    stream,
                    request,
                    end_stream,
                }),
                None => {
                    h3.cancel(stream, 0x10b);
                }
            },
            h3::Event::Data {
                stream,
                data,
                end_stream,
            } => {
                if let Some(stream) = stream_of(stream) {
                    work.push(Work::Data {
                        stream,
                        data,
                        end_stream,
                    });
                }
            }
            h3::Event::Trailers { stream, fields } => {
                if let Some(stream) = stream_of(stream) {
                    work.push(Work::Trailers { stream, fields });
                }
            }
            h3::Event::Refuse { stream, status } => {
                if let Some(stream) = stream_of(stream) {
                    work.push(Work::Refuse { stream, status });
                }
            }
            h3::Event::StreamError { stream, code, .. } => {
                if let Some(ex) = h3.cancel(stream, code.code()) {
                    work.push(Work::Drop(ex));
                }
            }
            h3::Event::GoAway { .. } => {}
            h3::Event::Closed { error } => {
                m.count_close("h3_error", Some(error.code.code()));
                let code = VarInt::from_u64(error.code.code()).unwrap_or(VarInt::from_u32(0x102));
                let reason = bytes::Bytes::from_static(error.reason.as_bytes());
                h3.quic.close(Instant::now(), code, reason);
                work.extend(h3.reset_all().into_iter().map(Work::Drop));
            }
        }
    }
}

/// Sends what the connection has: our streams' bytes, responses by stream credit, then
/// datagrams; arms the client timer at the connection's next deadline. Returns the
/// exchanges whose stream has room again (their upstreams may relay more), and whether the
/// round of datagrams was full (QUIC may have more to send now: drive the connection again,
/// rather than leave it to its next timer).
pub fn flush(
    quic: &mut Quic,
    (clients, timers): (&mut Clients, &mut Timers),
    ci: ClientId,
    now: Instant,
) -> (Vec<ExchangeId>, bool) {
    let Some(h3) = codec(clients, ci) else {
        return (Vec::new(), false);
    };
    let mut full = false;
    open_uni(h3);
    let woken = write_streams(h3);
    let mut work = Vec::new();
    endpoint_events(quic, h3, &mut work);
    if let Some(ep) = quic.endpoints.get_mut(h3.endpoint) {
        full = send_round(h3, (ep, &mut quic.send), now);
    }
    h3.release_idle();
    let deadlines = [h3.handshake_deadline, h3.heads.deadline()];
    let next = deadlines
        .into_iter()
        .flatten()
        .fold(h3.quic.poll_timeout(), |next, at| {
            Some(next.map_or(at, |n| n.min(at)))
        });
    if next.is_some() && next != h3.armed_at {
        h3.armed_at = next;
        if let Some(at) = next {
            clients.arm_timer(timers, ci, at);
        }
    }
    (woken, full)
}

/// Sends up to [`SEND_BATCH`] of the connection's datagrams, several in one system call
/// where the socket segments them (`gso.rs`). Returns whether the round was full.
fn send_round(h3: &mut H3Codec, (ep, buf): (&mut Endpoint, &mut Vec<u8>), now: Instant) -> bool {
    let mut sent = 0;
    while sent < SEND_BATCH {
        buf.clear();
        let most = if ep.gso { gso::SEGMENTS } else { 1 };
        let Some(t) = h3.quic.poll_transmit(now, most, buf) else {
            return false;
        };
        let bytes = buf.get(..t.size).unwrap_or_default();
        let segment = t.segment_size.unwrap_or(t.size).max(1);
        sent += t.size.div_ceil(segment);
        if segment >= t.size {
            send_to(&ep.socket, bytes, &t);
        } else if gso::send(&ep.socket, bytes, segment, &t) == gso::Sent::Refused {
            ep.gso = false;
        }
    }
    true
}

/// Our control, encoder and decoder streams: opened once QUIC lets us (after the
/// handshake), their bytes written as credit allows.
fn open_uni(h3: &mut H3Codec) {
    for (id, bytes) in h3.uni.iter_mut() {
        if bytes.is_empty() {
            continue;
        }
        if id.is_none() {
            *id = h3.quic.streams().open(Dir::Uni);
        }
        let Some(id) = *id else {
            continue;
        };
        if let Ok(n) = h3.quic.send_stream(id).write(bytes) {
            bytes.drain(..n);
        }
    }
}

/// Writes each request stream's response bytes as its credit allows; finishes a stream
/// whose response is complete and written.
fn write_streams(h3: &mut H3Codec) -> Vec<ExchangeId> {
    let mut woken = Vec::new();
    let mut done = Vec::new();
    for (&raw, s) in h3.streams.iter_mut() {
        let Ok(v) = VarInt::from_u64(raw) else {
            continue;
        };
        let id = StreamId::from(v);
        let full = s.pending() >= STREAM_OUT_MAX;
        if s.pending() > 0 {
            // The chunks move into quinn-proto's send buffer as they are (no copy).
            let chunks = s.out.chunks.make_contiguous();
            match h3.quic.send_stream(id).write_chunks(chunks) {
                Ok(w) => s.out.written(w.chunks, w.bytes),
                Err(quinn_proto::WriteError::Blocked) => {}
                // Stopped or closed by the peer: nothing more goes out on it.
                Err(_) => s.out.clear(),
            }
        }
        if full && s.pending() < STREAM_OUT_MAX {
            woken.extend(s.exchange);
        }
        if s.fin && s.pending() == 0 {
            let _ = h3.quic.send_stream(id).finish();
            done.push(raw);
            h3.resets_left = (h3.resets_left + 1).min(RESET_BUDGET);
        }
    }
    for raw in done {
        if h3.streams.get(&raw).is_some_and(|s| s.exchange.is_none()) {
            h3.streams.remove(&raw);
            h3.h3.stream_done(raw);
            // Whatever the client still sends on it is not read (`stream_done`): STOP_SENDING
            // with H3_NO_ERROR unless it had finished.
            if let Ok(v) = VarInt::from_u64(raw) {
                let _ = h3
                    .quic
                    .recv_stream(StreamId::from(v))
                    .stop(VarInt::from_u32(0x100));
            }
        }
    }
    woken
}
