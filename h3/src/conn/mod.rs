//! The HTTP/3 connection without I/O. QUIC (the caller) hands over each stream's bytes as
//! they arrive, with the stream's FIN, and reports resets; the connection turns them into
//! [`Event`]s and writes responses into buffers the caller provides.
//!
//! The state travels as the parts it touches: a request stream (`request.rs`) is taken out
//! of the table, driven, and put back; the unidirectional streams (`uni.rs`) are one enum
//! of stages, replaced by value when their type is known.

mod request;
mod send;
mod uni;

use std::collections::{HashMap, VecDeque};

use crate::counters::Counters;
use crate::error::{conn, ConnError, Error, ErrorCode};
use crate::event::{Event, LocalStream};
use crate::limits::Limits;
use crate::qpack::Decoder;
use crate::settings::{self, PeerSettings};
use crate::varint;

use request::RequestStream;
use uni::Uni;

pub use send::{data, data_head, SendError};

/// The peer's critical unidirectional streams (§6.2.1, RFC 9204 §4.2): one of each at
/// most, and none may close.
#[derive(Default)]
struct Critical {
    control: Option<u64>,
    encoder: Option<u64>,
    decoder: Option<u64>,
}

impl Critical {
    fn contains(&self, id: u64) -> bool {
        [self.control, self.encoder, self.decoder].contains(&Some(id))
    }
}

/// The server side of one HTTP/3 connection.
pub struct Connection {
    limits: Limits,
    /// The peer's SETTINGS once received (§7.2.4.2: defaults until then).
    peer: Option<PeerSettings>,
    critical: Critical,
    uni: HashMap<u64, Uni>,
    requests: HashMap<u64, RequestStream>,
    qpack: Decoder,
    events: VecDeque<Event>,
    counters: Counters,
    closed: Option<ConnError>,
    /// The stream ID of the GOAWAY we sent: no request stream at or above it is served.
    goaway_sent: Option<u64>,
    /// The push ID of the peer's last GOAWAY: later ones may not increase it (§5.2).
    peer_goaway: Option<u64>,
    max_push_id: Option<u64>,
    /// One more than the highest request stream ID seen, in stream IDs (a multiple of 4).
    next_request: u64,
}

impl Connection {
    /// A connection whose first events are the bytes opening our control stream (with
    /// SETTINGS), encoder stream and decoder stream.
    pub fn new(limits: Limits) -> Result<Connection, &'static str> {
        limits.validate()?;
        let mut control = Vec::new();
        varint::write(&mut control, uni::CONTROL);
        settings::write(&mut control, &limits);
        let events = VecDeque::from([
            Event::Send {
                on: LocalStream::Control,
                bytes: control,
            },
            Event::Send {
                on: LocalStream::Encoder,
                bytes: vec![uni::ENCODER as u8],
            },
            Event::Send {
                on: LocalStream::Decoder,
                bytes: vec![uni::DECODER as u8],
            },
        ]);
        Ok(Connection {
            qpack: Decoder::new(&limits),
            limits,
            peer: None,
            critical: Critical::default(),
            uni: HashMap::new(),
            requests: HashMap::new(),
            events,
            counters: Counters::default(),
            closed: None,
            goaway_sent: None,
            peer_goaway: None,
            max_push_id: None,
            next_request: 0,
        })
    }

    /// Bytes received on stream `stream`; `fin` when the peer ended the stream with them
    /// (or with no bytes at all). Client-initiated bidirectional streams are requests,
    /// client-initiated unidirectional ones are typed by their first varint (§6).
    pub fn recv(&mut self, stream: u64, data: &[u8], fin: bool) {
        if self.closed.is_some() {
            return;
        }
        let result = match stream % 4 {
            0 => self.recv_request(stream, data, fin),
            2 => self.recv_uni(stream, data, fin),
            _ => Err(conn(
                ErrorCode::StreamCreationError,
                "data on a server-initiated stream",
            )),
        };
        self.settle(stream, result);
        self.flush_decoder();
    }

    /// The peer reset `stream` (RESET_STREAM). A critical stream is
    /// H3_CLOSED_CRITICAL_STREAM; a request stream is forgotten (with a Stream
    /// Cancellation if its field section was not decoded).
    pub fn stream_reset(&mut self, stream: u64) {
        if self.closed.is_some() {
            return;
        }
        if self.critical.contains(stream) {
            self.close(ConnError {
                code: ErrorCode::ClosedCriticalStream,
                reason: "critical stream reset",
            });
            return;
        }
        self.uni.remove(&stream);
        self.stream_done(stream);
    }

    /// The caller is done with request stream `stream` (answered and closed, or reset):
    /// its state is dropped. The caller stops reading the stream too (STOP_SENDING when the
    /// peer has not finished it): bytes given for it afterwards would be read as a new
    /// stream, since QUIC streams may open out of order and no ID is remembered.
    pub fn stream_done(&mut self, stream: u64) {
        if let Some(s) = self.requests.remove(&stream) {
            if s.head_pending() {
                self.qpack.cancel_stream(stream);
                self.flush_decoder();
            }
        }
    }

    /// Gives back the capacity of what is empty now: the event queue, the request table,
    /// the QPACK decoder's buffers. For a connection going idle (no request stream): a
    /// queue or table grown by its last requests is allocated again when next used.
    pub fn release_idle(&mut self) {
        if self.events.is_empty() {
            self.events.shrink_to_fit();
        }
        if self.requests.is_empty() {
            self.requests.shrink_to_fit();
        }
        self.qpack.release_idle();
    }

    /// The next event, in order.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The peer's SETTINGS, once received.
    pub fn peer_settings(&self) -> Option<&PeerSettings> {
        self.peer.as_ref()
    }

    /// Request streams with state kept (open, blocked, or being dropped).
    pub fn open_streams(&self) -> usize {
        self.requests.len()
    }

    /// Whether request stream `stream` has sent bytes (or its end) and its request head is
    /// not decoded yet: the caller's slow-head deadline runs while this holds.
    pub fn awaiting_request(&self, stream: u64) -> bool {
        self.requests
            .get(&stream)
            .is_some_and(|s| s.awaiting_request())
    }

    /// Bytes this connection holds for its peer (`client_mem`): frames and input of request
    /// streams being read, partial unidirectional-stream input, the QPACK decoder's table
    /// and buffers. Events not yet polled are the caller's as soon as it polls.
    pub fn held_bytes(&self) -> usize {
        let requests: usize = self.requests.values().map(|s| s.held_bytes()).sum();
        let uni: usize = self.uni.values().map(Uni::held_bytes).sum();
        requests
            .saturating_add(uni)
            .saturating_add(self.qpack.held_bytes())
    }

    /// Field sections waiting for encoder-stream inserts.
    pub fn blocked_streams(&self) -> usize {
        self.qpack.blocked_streams()
    }

    pub fn is_closed(&self) -> bool {
        self.closed.is_some()
    }

    /// Acts on what a stream's processing returned.
    fn settle(&mut self, stream: u64, result: Result<(), Error>) {
        match result {
            Ok(()) => {}
            Err(Error::Connection(e)) => self.close(e),
            Err(Error::Flood(kind)) => {
                self.counters.trip(kind);
                self.close(kind.conn_error());
            }
            Err(Error::Stream(code, reason)) => self.stream_error(stream, code, reason),
        }
    }

    fn close(&mut self, error: ConnError) {
        if self.closed.is_some() {
            return;
        }
        self.counters.conn_error(error.code);
        self.closed = Some(error);
        self.events.push_back(Event::Closed { error });
    }

    /// A request stream broke a rule: its input is dropped from now on, and the caller
    /// resets it.
    fn stream_error(&mut self, stream: u64, code: ErrorCode, reason: &'static str) {
        self.counters.stream_error(code);
        let mut s = self.requests.remove(&stream).unwrap_or_default();
        if s.head_pending() {
            self.qpack.cancel_stream(stream);
        }
        if !s.discard() {
            self.requests.insert(stream, s);
        }
        self.events.push_back(Event::StreamError {
            stream,
            code,
            reason,
        });
    }

    fn flush_decoder(&mut self) {
        let bytes = self.qpack.take_instructions();
        if !bytes.is_empty() {
            self.events.push_back(Event::Send {
                on: LocalStream::Decoder,
                bytes,
            });
        }
    }
}

#[cfg(test)]
mod tests;
