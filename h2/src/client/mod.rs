//! The client side of one HTTP/2 connection to an origin, without I/O:
//! the mirror of [`crate::Connection`]. The caller writes
//! [`ClientConnection::output`] (the preface and SETTINGS first), feeds
//! what it reads to [`ClientConnection::recv`], opens streams with
//! [`ClientConnection::open`] while [`ClientConnection::can_open`], sends
//! request bodies with [`ClientConnection::send_data`] and takes
//! [`ClientEvent`]s. The same [`Limits`] that bound a client of the
//! server bound a misbehaving origin here, counted in the same
//! [`Counters`].
//!
//! ```
//! use std::time::Instant;
//! use h2::{write, ClientConnection, ClientEvent, Limits, Request};
//!
//! let now = Instant::now();
//! let mut conn = ClientConnection::new(Limits::default(), now).unwrap();
//! let get = Request {
//!     method: b"GET".to_vec(),
//!     scheme: Some(b"http".to_vec()),
//!     authority: Some(b"origin.test".to_vec()),
//!     path: Some(b"/".to_vec()),
//!     fields: Vec::new(),
//!     content_length: None,
//!     field_count: 0,
//! };
//! let stream = conn.open(&get, true).unwrap();
//! let n = conn.output().len(); // preface, SETTINGS, WINDOW_UPDATE, HEADERS
//! conn.advance_output(n);
//! // The origin: SETTINGS, then `:status 200` (HPACK static index 8) and a body.
//! let mut origin = Vec::new();
//! write::settings(&mut origin, &[]);
//! write::headers(&mut origin, stream, &[0x88], false, 16_384);
//! write::data(&mut origin, stream, b"hi", true);
//! conn.recv(&origin, now);
//! let Some(ClientEvent::Response { response, .. }) = conn.poll_event() else { panic!() };
//! assert_eq!(response.status, 200);
//! let Some(ClientEvent::Data { data, end_stream: true, .. }) = conn.poll_event() else { panic!() };
//! conn.consumed(stream, data.len()); // lets the origin send that much more
//! assert!(conn.can_open());
//! ```

mod event;
mod recv;
mod response;
mod send;

pub use event::ClientEvent;

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use crate::counters::Counters;
use crate::error::{ConnError, ErrorCode, H2Error};
use crate::frame::{kind, FrameHeader, HEADER_LEN};
use crate::guards::Guards;
use crate::hpack::{HpackDecoder, HpackEncoder};
use crate::limits::Limits;
use crate::outq::OutQueue;
use crate::settings::{PeerSettings, SettingId};
use crate::stream::{ClosedStreams, Stream};
use crate::write;

/// Where the response of a stream is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Head {
    /// No final head yet (interim ones may come).
    Awaiting,
    /// The final head came: DATA and trailers may follow.
    Body,
}

/// One stream we opened.
struct ClientStream {
    s: Stream,
    head: Head,
    /// The response has no body whatever its content-length says (a
    /// request with HEAD, a 304): the length is not checked.
    bodiless: bool,
}

/// A response head being assembled from HEADERS and CONTINUATION frames.
struct PendingBlock {
    stream: u32,
    block: Vec<u8>,
    end_stream: bool,
    continuations: u32,
}

/// One client connection to an origin.
pub struct ClientConnection {
    limits: Limits,
    /// The origin's SETTINGS arrived (its first frame must be SETTINGS).
    settings_seen: bool,
    closed_conn: bool,
    peer: PeerSettings,
    /// The origin's SETTINGS_MAX_CONCURRENT_STREAMS (none: unlimited).
    peer_max_streams: Option<u32>,
    input: Vec<u8>,
    output: OutQueue,
    events: VecDeque<ClientEvent>,
    streams: BTreeMap<u32, ClientStream>,
    closed: ClosedStreams,
    next_stream: u32,
    pending_block: Option<PendingBlock>,
    decoder: HpackDecoder,
    encoder: HpackEncoder,
    send_window: i64,
    recv_window: i64,
    recv_unacked: u32,
    settings_unacked_since: Option<Instant>,
    goaway_sent: bool,
    goaway_received: Option<u32>,
    guards: Guards,
    counters: Counters,
    now: Instant,
}

impl ClientConnection {
    /// A client connection whose output holds the preface, our SETTINGS
    /// (ENABLE_PUSH 0) and the connection WINDOW_UPDATE. Requests may be
    /// opened at once (RFC 9113 §3.4: no need to wait for the origin's
    /// SETTINGS).
    pub fn new(limits: Limits, now: Instant) -> Result<ClientConnection, &'static str> {
        limits.validate()?;
        let ring = (limits.max_concurrent_streams as usize * 2).clamp(32, 4096);
        let mut c = ClientConnection {
            decoder: HpackDecoder::new(limits.header_table_size),
            encoder: HpackEncoder::default(),
            settings_seen: false,
            closed_conn: false,
            peer: PeerSettings::default(),
            peer_max_streams: None,
            input: Vec::new(),
            output: OutQueue::new(),
            events: VecDeque::new(),
            streams: BTreeMap::new(),
            closed: ClosedStreams::new(ring),
            next_stream: 1,
            pending_block: None,
            send_window: 65_535,
            recv_window: i64::from(limits.connection_window_size),
            recv_unacked: 0,
            settings_unacked_since: Some(now),
            goaway_sent: false,
            goaway_received: None,
            guards: Guards::new(&limits),
            counters: Counters::default(),
            now,
            limits,
        };
        c.write_preface();
        c.note_output();
        Ok(c)
    }

    fn write_preface(&mut self) {
        let l = &self.limits;
        write::client_preface(&mut self.output.buf);
        let mut params = vec![
            (SettingId::EnablePush, 0),
            (SettingId::InitialWindowSize, l.initial_window_size),
            (SettingId::MaxFrameSize, l.max_frame_size),
            (SettingId::MaxHeaderListSize, l.max_header_list_size),
        ];
        if l.header_table_size != 4096 {
            params.push((SettingId::HeaderTableSize, l.header_table_size));
        }
        write::settings(&mut self.output.buf, &params);
        let extra = l.connection_window_size.saturating_sub(65_535);
        if extra > 0 {
            write::window_update(&mut self.output.buf, 0, extra);
        }
    }

    /// Feeds bytes read from the origin. Events and output follow.
    pub fn recv(&mut self, data: &[u8], now: Instant) {
        self.now = now;
        if self.closed_conn {
            return;
        }
        let mut input = std::mem::take(&mut self.input);
        let buf: &[u8] = if input.is_empty() {
            data
        } else {
            input.extend_from_slice(data);
            &input
        };
        let mut at = 0;
        while !self.closed_conn {
            match self.step(&buf[at..]) {
                Ok(0) => break,
                Ok(n) => at += n,
                Err(e) => self.fail(e),
            }
        }
        let rest = if self.closed_conn {
            Vec::new()
        } else {
            buf[at..].to_vec()
        };
        input.clear();
        input.extend_from_slice(&rest);
        self.input = input;
        self.note_output();
    }

    /// Consumes one frame from `buf`; 0 when more bytes are needed.
    fn step(&mut self, buf: &[u8]) -> Result<usize, ConnError> {
        let Some(h) = FrameHeader::parse(buf) else {
            return Ok(0);
        };
        if h.length > self.limits.max_frame_size {
            return Err(ConnError {
                code: ErrorCode::FRAME_SIZE_ERROR,
                reason: "frame larger than SETTINGS_MAX_FRAME_SIZE",
            });
        }
        let total = HEADER_LEN + h.length as usize;
        if buf.len() < total {
            return Ok(0);
        }
        if !self.settings_seen {
            if h.kind != kind::SETTINGS || h.has(crate::frame::flags::ACK) {
                return Err(ConnError {
                    code: ErrorCode::PROTOCOL_ERROR,
                    reason: "the origin's first frame is not SETTINGS",
                });
            }
            self.settings_seen = true;
        }
        match self.on_frame(&h, &buf[HEADER_LEN..total]) {
            Ok(()) => Ok(total),
            Err(H2Error::Connection(e)) => Err(e),
            Err(H2Error::Stream(e)) => {
                self.stream_error(e.stream, e.code);
                Ok(total)
            }
        }
    }

    /// Ends the connection: every stream reported reset, GOAWAY with `e`.
    fn fail(&mut self, e: ConnError) {
        if self.closed_conn {
            return;
        }
        self.drop_all_streams(e.code);
        write::goaway(&mut self.output.buf, 0, e.code, e.reason.as_bytes());
        self.counters.goaways_sent += 1;
        self.closed_conn = true;
        self.pending_block = None;
        self.events.push_back(ClientEvent::Closed { error: e });
    }

    /// Every stream left is gone and not retryable (the origin may have
    /// processed any of them).
    fn drop_all_streams(&mut self, code: ErrorCode) {
        for stream in std::mem::take(&mut self.streams).into_keys() {
            self.events.push_back(ClientEvent::Reset {
                stream,
                code,
                retryable: false,
            });
        }
    }

    /// The origin closed the connection (EOF or a socket error): the
    /// streams left are reported reset with CANCEL, not retryable, unless
    /// a GOAWAY already released them.
    pub fn peer_closed(&mut self) {
        if !self.closed_conn {
            self.drop_all_streams(ErrorCode::CANCEL);
            self.closed_conn = true;
        }
    }

    /// The next event, in order.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// Bytes to write to the origin.
    pub fn output(&self) -> &[u8] {
        self.output.pending()
    }

    /// `n` bytes of [`ClientConnection::output`] were written.
    pub fn advance_output(&mut self, n: usize) {
        self.output.advance(n, self.now);
    }

    /// Takes every byte of [`ClientConnection::output`] at once, by value.
    pub fn take_output(&mut self) -> Vec<u8> {
        self.output.take()
    }

    fn output_len(&self) -> usize {
        self.output.len()
    }

    fn note_output(&mut self) {
        self.output.note(self.now);
    }

    /// False when the caller should stop reading: the connection is over,
    /// or its output queue is at `max_output_bytes`.
    pub fn wants_read(&self) -> bool {
        !self.closed_conn && self.output_len() < self.limits.max_output_bytes
    }

    /// True once the socket should be closed after flushing the output:
    /// after a connection error, or after either side's GOAWAY once no
    /// stream is left.
    pub fn is_done(&self) -> bool {
        self.closed_conn
            || ((self.goaway_sent || self.goaway_received.is_some()) && self.streams.is_empty())
    }

    /// How many more streams may be opened now: the origin's
    /// MAX_CONCURRENT_STREAMS (and ours, `Limits::max_concurrent_streams`)
    /// minus those open; 0 after a GOAWAY either way, or when stream ids
    /// ran out. Requests beyond it wait for a stream to end. Until the
    /// origin's SETTINGS arrive one stream is allowed: its limit may be
    /// lower than what we would open (nginx refuses streams above it).
    pub fn available_streams(&self) -> usize {
        if self.closed_conn || self.goaway_sent || self.goaway_received.is_some() {
            return 0;
        }
        if self.next_stream > 0x7fff_ffff {
            return 0;
        }
        let peer = match (self.settings_seen, self.peer_max_streams) {
            (false, _) => 1,
            (true, max) => max.unwrap_or(u32::MAX),
        };
        let cap = peer.min(self.limits.max_concurrent_streams) as usize;
        cap.saturating_sub(self.streams.len())
    }

    /// A stream can be opened now.
    pub fn can_open(&self) -> bool {
        self.available_streams() > 0
    }

    /// Streams open or half-closed.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// The origin's settings as they stand.
    pub fn peer_settings(&self) -> PeerSettings {
        self.peer
    }

    /// The origin's first SETTINGS frame arrived.
    pub fn settings_received(&self) -> bool {
        self.settings_seen
    }

    /// The origin's SETTINGS_MAX_CONCURRENT_STREAMS, if it sent one.
    pub fn peer_max_concurrent_streams(&self) -> Option<u32> {
        self.peer_max_streams
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }
}

#[cfg(test)]
mod tests;
