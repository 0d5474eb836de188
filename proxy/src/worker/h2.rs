//! The HTTP/2 codec of a client connection, on the sans-IO `h2` crate: it maps streams to
//! exchanges, builds each stream's request as the neutral [`Request`] from its decoded fields
//! (checked piece by piece as the HTTP/1.1 parser checks a head, no HTTP/1 text), keeps each
//! stream's request body until the exchange can take it, and is the response sink of its
//! exchanges: HEADERS from a reply or a relayed head, DATA limited by the stream's window
//! (what the window does not take waits here, per stream and bounded), END_STREAM.
//!
//! The connection's frames go out through the client's outbox: after every step the
//! caller moves [`Connection::output`](h2::Connection::output) into it.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use h2::{Connection, ErrorCode, Field};
use http1::ParseError;

use super::exchange::ExchangeId;
use super::h2_floods::{FloodWatch, Trip};
use super::h2_heads::{borrowed, FieldList};
use super::request::{Request, Scheme};
use crate::outbox::Outbox;
use crate::outbox::Segment;

mod reply;
#[cfg(test)]
mod request_tests;

/// Why a stream's request cannot become an exchange.
#[derive(Debug)]
pub enum Unservable {
    /// A request the proxy does not forward (CONNECT, no authority): the status to answer.
    NotProxied(u16),
    /// Malformed, or over a limit, as the HTTP/1.1 parser judges it.
    Invalid(ParseError),
}

/// Response bytes a stream may hold here, waiting for its window, before the exchange stops
/// relaying (its upstream is not read meanwhile): the stream's backpressure.
pub const STREAM_TAIL_MAX: usize = 64 * 1024;

/// A request body as it arrives on a stream, until its exchange takes it.
#[derive(Default)]
pub struct InBody {
    /// Received, not yet passed to the exchange.
    pub data: Vec<u8>,
    /// The body ended (END_STREAM or trailers).
    pub end: bool,
    pub trailers: Vec<Field>,
    /// Bytes passed on whose window credit is not yet returned to the peer (returned once
    /// the upstream has room: a slow upstream slows the client through its window).
    pub owed: usize,
}

/// Response bytes waiting for a stream's window.
#[derive(Default)]
struct Tail {
    chunks: VecDeque<(Segment, usize)>,
    bytes: usize,
    end: bool,
    /// The relayed trailer fields: the final HEADERS, after the last DATA.
    trailers: FieldList,
}

/// What the codec has queued for the client's outbox besides the connection's own output,
/// in wire order: DATA frames whose payload is a shared stored body are queued as their
/// header and a range of that body, so the body is never copied into frames.
enum Staged {
    /// Connection output taken before a shared frame (everything written until then).
    Output(Vec<u8>),
    Header([u8; h2::frame::HEADER_LEN]),
    Shared(Arc<[u8]>, Range<usize>),
}

/// Bytes staged at most before pumping stops until the outbox takes them: the same bound
/// the connection's own output has, so a full stage fills the outbox and wakes the streams
/// when it drains.
const STAGE_MAX: usize = 256 * 1024;

/// Stream ids are small odd integers chosen by the client in increasing order: a
/// multiplicative hash spreads them, SipHash's protection against chosen keys is not needed
/// (the maps are bounded by `max_concurrent_streams`).
#[derive(Default)]
pub struct StreamIdHasher(u64);

impl Hasher for StreamIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type StreamMap<V> = HashMap<u32, V, BuildHasherDefault<StreamIdHasher>>;

pub struct H2Codec {
    pub conn: Connection,
    /// For the open-streams gauge and, at the end, the connection's counters.
    metrics: Arc<crate::metrics::Metrics>,
    scheme: Scheme,
    /// Streams with an exchange in progress.
    streams: StreamMap<ExchangeId>,
    /// Streams whose request body is still arriving or not yet all passed on.
    bodies: StreamMap<InBody>,
    tails: StreamMap<Tail>,
    /// Since when no exchange is in progress (the keep-alive timeout runs from there).
    idle_since: Option<Instant>,
    /// When the client timer was last armed for this connection.
    pub armed_at: Option<Instant>,
    /// The flood trips already counted and logged.
    floods: FloodWatch,
    /// Since when the client's outbox has held bytes without any being written: the
    /// outbox, not the `h2` connection, is where a client that reads nothing stalls us
    /// (the connection's output moves there at once; streams stop when it is full).
    pub out_stalled_since: Option<Instant>,
    /// Frames for the outbox that are not in the connection's output (see [`Staged`]).
    staged: VecDeque<Staged>,
    staged_bytes: usize,
}

impl H2Codec {
    pub fn new(
        limits: h2::Limits,
        scheme: Scheme,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Result<H2Codec, &'static str> {
        Ok(H2Codec {
            metrics,
            conn: Connection::new(limits, Instant::now())?,
            scheme,
            streams: StreamMap::default(),
            bodies: StreamMap::default(),
            tails: StreamMap::default(),
            idle_since: Some(Instant::now()),
            armed_at: None,
            floods: FloodWatch::default(),
            out_stalled_since: None,
            staged: VecDeque::new(),
            staged_bytes: 0,
        })
    }

    /// The flood defences tripped since the last call (counted in the metrics by the caller).
    pub fn new_trips(&mut self) -> Vec<Trip> {
        self.floods.new_trips(self.conn.counters())
    }

    /// When the connection became idle, if it is.
    pub fn idle_at(&self) -> Option<Instant> {
        self.idle_since.filter(|_| self.is_idle())
    }

    /// No exchange in progress and nothing waiting to be sent.
    pub fn is_idle(&self) -> bool {
        self.streams.is_empty() && self.tails.is_empty()
    }

    pub fn exchange_of(&self, stream: u32) -> Option<ExchangeId> {
        self.streams.get(&stream).copied()
    }

    pub fn exchanges(&self) -> impl Iterator<Item = (u32, ExchangeId)> + '_ {
        self.streams.iter().map(|(&s, &id)| (s, id))
    }

    pub fn begin(&mut self, stream: u32, id: ExchangeId) {
        self.idle_since = None;
        if self.streams.insert(stream, id).is_none() {
            self.gauge(1);
        }
    }

    /// Moves the open-streams gauge.
    fn gauge(&self, delta: i64) {
        use std::sync::atomic::Ordering::Relaxed;
        let _ = self
            .metrics
            .h2
            .streams_open
            .fetch_update(Relaxed, Relaxed, |v| Some(v.saturating_add_signed(delta)));
    }

    /// The exchange on `stream` ended: what it did not read of its body is dropped (and its
    /// window credit returned, so other streams are not starved). A client still sending
    /// it may finish: its DATA is discarded with the credit returned at once, as nginx
    /// does (RST_STREAM NO_ERROR, which RFC 9113 §8.1 allows, makes some clients, curl 7.88
    /// among them, fail the response).
    pub fn exchange_done(&mut self, stream: u32) {
        if self.streams.remove(&stream).is_some() {
            self.gauge(-1);
        }
        if self.streams.is_empty() {
            self.idle_since.get_or_insert_with(Instant::now);
        }
        if let Some(body) = self.bodies.remove(&stream) {
            let credit = body.owed + body.data.len();
            if credit > 0 {
                self.conn.consumed(stream, credit);
            }
        }
    }

    /// The stream is gone (reset by either side): forget everything about it.
    pub fn forget(&mut self, stream: u32) -> Option<ExchangeId> {
        self.bodies.remove(&stream);
        self.tails.remove(&stream);
        let id = self.streams.remove(&stream);
        if id.is_some() {
            self.gauge(-1);
        }
        if self.streams.is_empty() {
            self.idle_since.get_or_insert_with(Instant::now);
        }
        id
    }

    /// Every exchange in progress (the client is gone).
    pub fn reset_all(&mut self) -> Vec<ExchangeId> {
        self.bodies.clear();
        self.tails.clear();
        let ids: Vec<ExchangeId> = self.streams.drain().map(|(_, id)| id).collect();
        self.gauge(-(ids.len() as i64));
        ids
    }

    pub fn body_mut(&mut self, stream: u32) -> &mut InBody {
        self.bodies.entry(stream).or_default()
    }

    /// The exchange passed `n` body bytes on and the upstream has room: return the credit.
    pub fn release_credit(&mut self, stream: u32) {
        if let Some(body) = self.bodies.get_mut(&stream) {
            if body.owed > 0 {
                let owed = std::mem::take(&mut body.owed);
                self.conn.consumed(stream, owed);
            }
        }
    }

    /// Builds a stream's request in the neutral form straight from its decoded fields, each
    /// checked as the HTTP/1.1 parser checks the same piece of a head and the whole judged
    /// by the same limits, so that one request gets one verdict whatever the protocol.
    pub fn request(
        &self,
        req: &h2::Request,
        end_stream: bool,
        limits: &http1::Limits,
    ) -> Result<Request, Unservable> {
        let (head, bytes) = neutral_head(req, end_stream, limits)?;
        Ok(Request::from_h2(head, bytes, self.scheme))
    }

    /// Bytes this connection holds: request bodies not yet passed on, relayed response
    /// bytes waiting for windows (a stored body's shared bytes are the cache's), and frames
    /// not yet moved to the outbox.
    pub fn held_bytes(&self) -> usize {
        let bodies: usize = self.bodies.values().map(|b| b.data.len()).sum();
        let tails: usize = self
            .tails
            .values()
            .flat_map(|t| t.chunks.iter())
            .map(|(chunk, at)| match chunk {
                Segment::Owned(v) => v.len().saturating_sub(*at),
                Segment::Shared(..) => 0,
            })
            .sum();
        bodies + tails + self.conn.output().len()
    }

    /// Relayed body bytes for `stream`: framed at once as far as the windows allow; only
    /// what they hold back is copied to wait here.
    pub fn data(&mut self, stream: u32, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let sent = if self.tails.contains_key(&stream) {
            0
        } else {
            match self.conn.send_data(stream, data, false) {
                Ok(n) => n,
                Err(_) => return,
            }
        };
        let rest = data.get(sent..).unwrap_or(&[]);
        if rest.is_empty() {
            return;
        }
        let tail = self.tails.entry(stream).or_default();
        tail.bytes += rest.len();
        tail.chunks.push_back((Segment::Owned(rest.to_vec()), 0));
        self.pump(stream);
    }

    /// Bytes `range` of a stored body, shared without copying until they are framed.
    pub fn shared(&mut self, stream: u32, data: Arc<[u8]>, range: Range<usize>) {
        let end = range.end.min(data.len());
        let range = range.start.min(end)..end;
        if range.is_empty() {
            return;
        }
        let tail = self.tails.entry(stream).or_default();
        tail.bytes += range.len();
        tail.chunks.push_back((Segment::Shared(data, range), 0));
        self.pump(stream);
    }

    /// The response on `stream` ends with `trailers` (sent when it ends, after its body).
    pub fn set_trailers(&mut self, stream: u32, trailers: FieldList) {
        self.tails.entry(stream).or_default().trailers = trailers;
    }

    /// The response on `stream` is complete.
    pub fn end(&mut self, stream: u32) {
        self.tails.entry(stream).or_default().end = true;
        self.pump(stream);
    }

    /// Whether the exchange on `stream` may relay more body now.
    pub fn has_room(&self, stream: u32) -> bool {
        self.tails
            .get(&stream)
            .is_none_or(|t| t.bytes < STREAM_TAIL_MAX)
    }

    /// Sends what the windows take of `stream`'s waiting bytes. True if any went out.
    pub fn pump(&mut self, stream: u32) -> bool {
        let Some(tail) = self.tails.get_mut(&stream) else {
            return false;
        };
        let mut moved = false;
        loop {
            // END_STREAM goes on the last DATA frame, or on the trailers' HEADERS.
            let last = tail.chunks.len() == 1 && tail.end && tail.trailers.is_empty();
            let Some((chunk, offset)) = tail.chunks.front_mut() else {
                break;
            };
            let sent = match chunk {
                Segment::Owned(v) => self.conn.send_data(stream, &v[*offset..], last),
                Segment::Shared(body, range) => {
                    let part = (Arc::clone(body), range.start + *offset..range.end);
                    stage_shared(
                        &mut self.conn,
                        (&mut self.staged, &mut self.staged_bytes),
                        stream,
                        part,
                        last,
                    )
                }
            };
            let rest_len = chunk.bytes().len() - *offset;
            match sent {
                Ok(n) => {
                    // A last chunk the window holds back is not progress: only bytes are.
                    moved |= n > 0;
                    *offset += n;
                    tail.bytes -= n;
                    if n < rest_len {
                        return moved;
                    }
                    tail.chunks.pop_front();
                    if last {
                        self.tails.remove(&stream);
                        return true;
                    }
                }
                Err(_) => {
                    self.tails.remove(&stream);
                    return moved;
                }
            }
        }
        if tail.end {
            // Nothing left but the end (which a reply may have sent already), or the
            // trailers, which end the stream (if HTTP/2 cannot carry them, an empty DATA does).
            let trailers = borrowed(&tail.trailers);
            if trailers.is_empty() || self.conn.send_trailers(stream, &trailers).is_err() {
                let _ = self.conn.send_data(stream, &[], true);
            }
            self.tails.remove(&stream);
            return true;
        }
        moved
    }

    /// Sends what every waiting stream's window takes (after a WINDOW_UPDATE); returns the
    /// streams that moved.
    pub fn pump_all(&mut self) -> Vec<u32> {
        if self.tails.is_empty() {
            return Vec::new();
        }
        let streams: Vec<u32> = self.tails.keys().copied().collect();
        streams.into_iter().filter(|&s| self.pump(s)).collect()
    }

    /// Streams with request body work: bytes to pass on, an end to pass, credit owed.
    pub fn bodies_pending(&self) -> Vec<(u32, ExchangeId)> {
        self.bodies
            .iter()
            .filter(|(_, b)| !b.data.is_empty() || b.end || b.owed > 0)
            .filter_map(|(&s, _)| Some((s, *self.streams.get(&s)?)))
            .collect()
    }

    /// The body of `stream` was passed on to its end: nothing more to track.
    pub fn body_done(&mut self, stream: u32) {
        if self.bodies.get(&stream).is_some_and(|b| b.owed == 0) {
            self.bodies.remove(&stream);
        }
    }

    /// Gives up on `stream`'s response (its upstream failed mid-body).
    pub fn cancel(&mut self, stream: u32) {
        self.tails.remove(&stream);
        self.conn.reset(stream, ErrorCode::INTERNAL_ERROR);
    }

    /// Moves the connection's frames into the client's outbox.
    /// Small output is copied (the connection keeps its buffer); a large one (DATA) moves
    /// into the outbox without a copy.
    pub fn flush_into(&mut self, out: &mut Outbox) {
        for staged in self.staged.drain(..) {
            match staged {
                Staged::Output(bytes) if bytes.len() >= 4096 => out.push_vec(bytes),
                Staged::Output(bytes) => out.push(&bytes),
                Staged::Header(header) => out.push(&header),
                Staged::Shared(body, range) => out.push_shared_range(body, range),
            }
        }
        self.staged_bytes = 0;
        let n = self.conn.output().len();
        if n >= 4096 {
            out.push_vec(self.conn.take_output());
        } else if n > 0 {
            out.push(self.conn.output());
            self.conn.advance_output(n);
        }
    }
}

impl Drop for H2Codec {
    /// The connection's counters join the process's when it ends (flood trips as they
    /// happen; any left uncounted, now).
    fn drop(&mut self) {
        self.gauge(-(self.streams.len() as i64));
        for t in self.new_trips() {
            self.metrics.h2.add_floods(t.kind, t.times);
        }
        self.metrics.h2.add(self.conn.counters());
    }
}

/// Frames `part` (a range of a shared stored body) on `stream` without copying it: the
/// connection's pending output is staged first (wire order), then each DATA frame's header
/// and its slice of the body. Sends at most what the stage has room for; returns what the
/// connection accepted, as `send_data` does.
fn stage_shared(
    conn: &mut Connection,
    (staged, staged_bytes): (&mut VecDeque<Staged>, &mut usize),
    stream: u32,
    (body, range): (Arc<[u8]>, Range<usize>),
    last: bool,
) -> Result<usize, h2::SendError> {
    if !conn.output().is_empty() {
        let output = conn.take_output();
        *staged_bytes += output.len();
        staged.push_back(Staged::Output(output));
    }
    let len = range.len().min(STAGE_MAX.saturating_sub(*staged_bytes));
    let end = last && len == range.len();
    conn.send_data_frames(stream, len, end, |header, part| {
        staged.push_back(Staged::Header(header));
        *staged_bytes += header.len() + part.len();
        if !part.is_empty() {
            let at = range.start;
            staged.push_back(Staged::Shared(
                Arc::clone(&body),
                at + part.start..at + part.end,
            ));
        }
    })
}

/// The neutral head of an HTTP/2 request and the one buffer its spans refer to: the
/// authority becomes the first field, `host` (a `host` field, equal to it when present, and
/// TE, hop-by-hop, are left out); a body without content-length is chunked upstream.
pub fn neutral_head(
    req: &h2::Request,
    end_stream: bool,
    limits: &http1::Limits,
) -> Result<(http1::RequestHead, Vec<u8>), Unservable> {
    let (Some(path), Some(authority)) = (&req.path, &req.authority) else {
        // CONNECT (no :path) is judged as on HTTP/1.1: frang's http_methods refuses it (403)
        // unless it lists `unknown`, and only then is it 501 (the proxy does not tunnel). A
        // request without any authority is not proxied.
        if req.path.is_none() {
            return Err(Unservable::Invalid(ParseError::ConnectNotSupported));
        }
        return Err(Unservable::NotProxied(400));
    };
    // The field limit counts the list as the client sent it: here the four pseudo-headers
    // are one host field and the cookie crumbs are joined.
    if req.field_count > limits.max_headers {
        return Err(Unservable::Invalid(ParseError::TooManyHeaders));
    }
    let kept = |f: &&Field| f.name != b"host" && f.name != b"te";
    let capacity = req.method.len()
        + path.len()
        + "host".len()
        + authority.len()
        + req
            .fields
            .iter()
            .filter(kept)
            .map(|f| f.name.len() + f.value.len())
            .sum::<usize>();
    let mut head =
        http1::RequestBuilder::new(&req.method, path, capacity).map_err(Unservable::Invalid)?;
    head.field(b"host", authority)
        .map_err(Unservable::Invalid)?;
    for f in req.fields.iter().filter(kept) {
        // `expect` stays: `100-continue` is answered as on HTTP/1.1, when the request goes
        // upstream.
        head.field(&f.name, &f.value).map_err(Unservable::Invalid)?;
    }
    let unframed_body = !end_stream && req.content_length.is_none();
    head.finish(unframed_body, limits)
        .map_err(Unservable::Invalid)
}
