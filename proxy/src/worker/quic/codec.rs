//! The HTTP/3 codec of one QUIC connection (the client entry's `Codec::H3`): the QUIC
//! connection itself (quinn-proto), its HTTP/3 state (the `h3` crate), and per request
//! stream the exchange it carries, the request body until the exchange takes it, and the
//! response bytes (HEADERS and DATA frames) until the stream's credit takes them. What a
//! stream holds back is bounded by [`STREAM_OUT_MAX`]: over it the exchange stops relaying
//! (its upstream is not read), as HTTP/2's windows do. A stored body goes to QUIC as the
//! cache holds it (a `Bytes` over the entry's body): quinn-proto keeps the chunks it is given
//! until they are acknowledged, so the body is neither copied here nor into its send buffer.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use bytes::Bytes;
use quinn_proto::{ConnectionHandle, Dir, StreamId};

use crate::worker::client::ClientId;
use crate::worker::exchange::ExchangeId;
use crate::worker::h2::InBody;
use crate::worker::request::{Request, Scheme};

/// Response bytes a stream may hold before its exchange stops relaying.
pub const STREAM_OUT_MAX: usize = 64 * 1024;

/// Request body bytes a stream may hold before it is no longer read (QUIC's stream credit
/// then stops the client).
pub const STREAM_IN_MAX: usize = 64 * 1024;

/// Rapid reset over QUIC (CVE-2023-44487's shape), the scheme of the h2 crate's
/// `reset_budget` (h2o's): every exchange the client stops (STOP_SENDING) before its
/// response is complete spends one unit, every response completed gives one back, up to this
/// cap; at zero the connection is closed with H3_EXCESSIVE_LOAD. Twice the default stream
/// limit, as HTTP/2's. A request stream the client resets (RESET_STREAM) before its request
/// is complete drops its exchange and spends a unit the same way.
pub const RESET_BUDGET: u32 = 200;

/// One request stream.
#[derive(Default)]
pub struct Stream {
    pub exchange: Option<ExchangeId>,
    pub body: InBody,
    /// Response bytes not yet taken by the QUIC stream, in order: frames of our own and
    /// stored bodies shared with the cache.
    pub out: Outgoing,
    /// The response is complete: finish the stream once `out` is written.
    pub fin: bool,
    /// Reading stopped with body bytes held (`STREAM_IN_MAX`): read again once passed on.
    pub paused: bool,
    /// The client reset its side (RESET_STREAM) before its request was complete: the
    /// connection's turn decides what becomes of the exchange (`budget.rs` `reset_requests`).
    pub reset: bool,
}

impl Stream {
    pub fn pending(&self) -> usize {
        self.out.len
    }
}

/// A stream's response bytes waiting for its credit. `shared` says, chunk by chunk, which
/// are a stored body's (the cache's memory, not this connection's: `client_mem` does not
/// count them, as on HTTP/2).
#[derive(Default)]
pub struct Outgoing {
    pub chunks: VecDeque<Bytes>,
    shared: VecDeque<bool>,
    len: usize,
}

impl Outgoing {
    fn push(&mut self, bytes: Bytes, shared: bool) {
        if bytes.is_empty() {
            return;
        }
        self.len += bytes.len();
        self.chunks.push_back(bytes);
        self.shared.push_back(shared);
    }

    /// The first `chunks` chunks and `bytes` bytes in all were written (the chunk after
    /// them, if partly written, was advanced in place by quinn-proto).
    pub fn written(&mut self, chunks: usize, bytes: usize) {
        self.chunks.drain(..chunks.min(self.chunks.len()));
        self.shared.drain(..chunks.min(self.shared.len()));
        self.len = self.len.saturating_sub(bytes);
    }

    pub fn clear(&mut self) {
        *self = Outgoing::default();
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of this connection's own (frames, relayed bodies), not a stored body's.
    fn owned(&self) -> usize {
        let chunks = self.chunks.iter().zip(&self.shared);
        chunks.filter(|(_, &s)| !s).map(|(c, _)| c.len()).sum()
    }
}

pub struct H3Codec {
    pub quic: quinn_proto::Connection,
    pub handle: ConnectionHandle,
    /// Which of the worker's QUIC sockets the connection came in on.
    pub endpoint: usize,
    pub h3: h3::Connection,
    pub streams: HashMap<u64, Stream>,
    /// Our control, QPACK encoder and decoder streams, opened once the handshake is done,
    /// and what waits to go on each.
    pub uni: [(Option<StreamId>, Vec<u8>); 3],
    /// The deadline the client timer was last armed for.
    pub armed_at: Option<Instant>,
    /// The `h3` crate's flood trips already added to the metrics, by `h3::Flood::ALL`.
    pub floods_counted: [u64; h3::Flood::ALL.len()],
    /// What is left of [`RESET_BUDGET`].
    pub resets_left: u32,
    /// `max_concurrent_streams` when the connection came: the most its request stream
    /// limit is widened to.
    pub max_streams: u64,
    /// When the handshake is cut if it is not done (`budget.rs`); none once it is.
    pub handshake_deadline: Option<Instant>,
    /// The ACK and CRYPTO frames received already added to the metrics.
    pub frames_counted: [u64; 2],
    /// What is left of the budget of datagrams that move the connection nowhere (`budget.rs`).
    pub idle: super::budget::IdleBudget,
    /// Stream bytes read from the connection, every stream's (the idle budget's measure of
    /// STREAM frames that brought something).
    pub stream_bytes_read: u64,
    /// frang's slow-head limits, per request stream whose head is incomplete.
    pub heads: super::heads::Heads,
}

impl H3Codec {
    pub fn new(
        quic: quinn_proto::Connection,
        (handle, endpoint, max_streams): (ConnectionHandle, usize, u32),
        limits: h3::Limits,
    ) -> Result<H3Codec, &'static str> {
        Ok(H3Codec {
            quic,
            handle,
            endpoint,
            h3: h3::Connection::new(limits)?,
            streams: HashMap::new(),
            uni: Default::default(),
            armed_at: None,
            floods_counted: [0; h3::Flood::ALL.len()],
            resets_left: RESET_BUDGET,
            max_streams: u64::from(max_streams),
            handshake_deadline: None,
            frames_counted: [0; 2],
            idle: Default::default(),
            stream_bytes_read: 0,
            heads: super::heads::Heads::default(),
        })
    }

    /// The client has opened request streams: once half of the limit it may open at once
    /// is in use, the limit is doubled (MAX_STREAMS), up to `max_concurrent_streams`.
    /// quinn-proto holds a table entry per stream the limit allows, so a connection pays
    /// for the concurrency it used, not for the most it may use.
    pub fn widen_streams(&mut self) {
        let limit = self.quic.max_concurrent_streams(Dir::Bi);
        let open = self.quic.streams().remote_open_streams(Dir::Bi);
        if limit >= self.max_streams || open * 2 < limit {
            return;
        }
        let wider = (limit * 2).min(self.max_streams);
        if let Ok(wider) = quinn_proto::VarInt::from_u64(wider) {
            self.quic.set_max_concurrent_streams(Dir::Bi, wider);
        }
    }

    /// Gives back what an idle connection (no request stream) keeps allocated from its
    /// last requests and from its start: the stream table, our unidirectional streams'
    /// buffers once written, the `h3` connection's emptied queues and tables.
    pub fn release_idle(&mut self) {
        if !self.streams.is_empty() {
            return;
        }
        self.heads.release_idle();
        self.streams.shrink_to_fit();
        for (_, waiting) in self.uni.iter_mut() {
            if waiting.is_empty() {
                waiting.shrink_to_fit();
            }
        }
        self.h3.release_idle();
    }

    /// No exchange in progress and nothing waiting to be sent.
    pub fn is_idle(&self) -> bool {
        self.streams.is_empty()
    }

    /// The request of a stream as the exchange core takes it (the HTTP/2 mapping: the
    /// same neutral request and checks).
    pub fn request(
        req: &h2::Request,
        end_stream: bool,
        limits: &http1::Limits,
    ) -> Result<Request, crate::worker::h2::Unservable> {
        let (head, bytes) = crate::worker::h2::neutral_head(req, end_stream, limits)?;
        Ok(Request::from_h3(head, bytes, Scheme::Https))
    }

    pub fn exchange_of(&self, stream: u32) -> Option<ExchangeId> {
        self.streams.get(&u64::from(stream))?.exchange
    }

    pub fn stream_mut(&mut self, stream: u32) -> &mut Stream {
        self.streams.entry(u64::from(stream)).or_default()
    }

    /// Bytes for `stream`'s response (a frame or frames), taken without a copy.
    pub fn push(&mut self, stream: u32, bytes: Vec<u8>) {
        self.stream_mut(stream).out.push(Bytes::from(bytes), false);
    }

    /// A stored body's bytes for `stream`'s response (after their DATA frame's head).
    pub fn push_shared(&mut self, stream: u32, bytes: Bytes) {
        self.stream_mut(stream).out.push(bytes, true);
    }

    /// The response on `stream` is complete.
    pub fn end(&mut self, stream: u32) {
        self.stream_mut(stream).fin = true;
    }

    pub fn has_room(&self, stream: u32) -> bool {
        self.streams
            .get(&u64::from(stream))
            .is_none_or(|s| s.pending() < STREAM_OUT_MAX)
    }

    /// The exchange on `stream` is done: the stream is forgotten once its response is out
    /// (the connection is queued to drive it).
    pub fn exchange_done(
        &mut self,
        stream: u32,
        (dirty, ci): (&mut std::collections::VecDeque<mio::Token>, ClientId),
    ) {
        if let Some(s) = self.streams.get_mut(&u64::from(stream)) {
            s.exchange = None;
            s.fin = true;
        }
        dirty.push_back(crate::worker::token::client_token(ci));
    }

    /// Stops `stream` now (its response cannot be completed): RESET_STREAM and
    /// STOP_SENDING with H3_INTERNAL_ERROR, or `code`. Its exchange, if any, is returned.
    pub fn cancel(&mut self, stream: u64, code: u64) -> Option<ExchangeId> {
        let s = self.streams.remove(&stream);
        let id = StreamId::from(quinn_proto::VarInt::from_u64(stream).ok()?);
        let code =
            quinn_proto::VarInt::from_u64(code).unwrap_or(quinn_proto::VarInt::from_u32(0x102));
        let _ = self.quic.send_stream(id).reset(code);
        let _ = self.quic.recv_stream(id).stop(code);
        self.h3.stream_done(stream);
        s.and_then(|s| s.exchange)
    }

    /// Every exchange in progress (the connection is gone).
    pub fn reset_all(&mut self) -> Vec<ExchangeId> {
        self.streams
            .drain()
            .filter_map(|(_, s)| s.exchange)
            .collect()
    }

    /// Closes the connection with H3_EXCESSIVE_LOAD (RFC 9114 §8.1: the peer generates
    /// excessive load), `reason` as the close's reason phrase, counted in `m` as
    /// `closes_total{reason=label}`: a flood budget spent, a frang block, a refused
    /// fingerprint.
    pub fn close_excessive(
        &mut self,
        m: &crate::metrics_quic::QuicMetrics,
        (label, reason): (&'static str, &'static str),
        now: Instant,
    ) {
        let code = h3::ErrorCode::ExcessiveLoad as u16;
        m.count_close(label, Some(u64::from(code)));
        let reason = Bytes::from_static(reason.as_bytes());
        self.quic
            .close(now, quinn_proto::VarInt::from(u32::from(code)), reason);
    }

    /// Bytes this connection holds for its client (`client_mem`): per request stream the
    /// response bytes not yet taken by quinn-proto (a stored body shared from the cache is
    /// the cache's, not counted) and the request body not yet passed upstream; our
    /// unidirectional streams' bytes waiting; the `h3` crate's frames being read, input
    /// behind blocked sections and QPACK dynamic table. quinn-proto's own buffers are not
    /// counted: they are bounded by `h3_*_window` (docs/HTTP3.md, "Limits").
    pub fn held_bytes(&self) -> usize {
        let streams: usize = (self.streams.values())
            .map(|s| s.out.owned() + s.body.data.len())
            .sum();
        let uni: usize = self.uni.iter().map(|(_, waiting)| waiting.len()).sum();
        streams + uni + self.h3.held_bytes()
    }
}
