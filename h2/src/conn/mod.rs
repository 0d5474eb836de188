//! The server side of one HTTP/2 connection, without I/O: the caller
//! feeds received bytes to [`Connection::recv`], takes [`Event`]s from
//! [`Connection::poll_event`], calls the send methods for responses,
//! and writes [`Connection::output`] to the socket.

mod frames;
mod guard;
mod headers;
mod send;

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use crate::counters::Counters;
use crate::error::{ConnError, ErrorCode, H2Error};
use crate::event::Event;
use crate::frame::{FrameHeader, HEADER_LEN, PREFACE};
use crate::guards::Guards;
use crate::hpack::{HpackDecoder, HpackEncoder};
use crate::limits::Limits;
use crate::outq::OutQueue;
use crate::settings::{PeerSettings, SettingId};
use crate::stream::{ClosedStreams, Stream};
use crate::write;

/// Where the connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for the 24 preface octets.
    Preface,
    /// Preface seen; the first frame must be SETTINGS.
    FirstSettings,
    Open,
    /// A connection error was answered with GOAWAY; input is ignored.
    Closed,
}

/// A header block being assembled from HEADERS and CONTINUATION frames.
struct PendingBlock {
    stream: u32,
    block: Vec<u8>,
    end_stream: bool,
    continuations: u32,
}

/// One server connection.
pub struct Connection {
    limits: Limits,
    phase: Phase,
    peer: PeerSettings,
    input: Vec<u8>,
    output: OutQueue,
    events: VecDeque<Event>,
    streams: BTreeMap<u32, Stream>,
    closed: ClosedStreams,
    highest_stream: u32,
    pending_block: Option<PendingBlock>,
    decoder: HpackDecoder,
    encoder: HpackEncoder,
    send_window: i64,
    recv_window: i64,
    recv_unacked: u32,
    /// When our SETTINGS went out and no ack has come yet.
    settings_unacked_since: Option<Instant>,
    /// GOAWAY sent: streams above this id are ignored.
    goaway_sent: Option<u32>,
    guards: Guards,
    counters: Counters,
    now: Instant,
}

impl Connection {
    /// A server connection that has queued its SETTINGS (and the
    /// connection WINDOW_UPDATE) in the output. Fails only on limits the
    /// protocol cannot express.
    pub fn new(limits: Limits, now: Instant) -> Result<Connection, &'static str> {
        limits.validate()?;
        let ring = (limits.max_concurrent_streams as usize * 2).clamp(32, 4096);
        let guards = Guards::new(&limits);
        let mut conn = Connection {
            decoder: HpackDecoder::new(limits.header_table_size),
            encoder: HpackEncoder::default(),
            phase: Phase::Preface,
            peer: PeerSettings::default(),
            input: Vec::new(),
            output: OutQueue::new(),
            events: VecDeque::new(),
            streams: BTreeMap::new(),
            closed: ClosedStreams::new(ring),
            highest_stream: 0,
            pending_block: None,
            send_window: 65_535,
            recv_window: i64::from(limits.connection_window_size),
            recv_unacked: 0,
            settings_unacked_since: Some(now),
            goaway_sent: None,
            guards,
            counters: Counters::default(),
            now,
            limits,
        };
        conn.write_settings();
        Ok(conn)
    }

    fn write_settings(&mut self) {
        let l = &self.limits;
        let mut params = vec![
            (SettingId::EnablePush, 0),
            (SettingId::MaxConcurrentStreams, l.max_concurrent_streams),
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

    /// Feeds received bytes; one call is one read pass (the per-read
    /// new-stream cap counts per call). Events and output follow.
    pub fn recv(&mut self, data: &[u8], now: Instant) {
        self.now = now;
        self.guards.new_streams_this_read = 0;
        if self.phase == Phase::Closed {
            return;
        }
        // Frames are read straight from `data` unless a partial frame
        // from the previous pass is waiting in `input`.
        let mut input = std::mem::take(&mut self.input);
        let buf: &[u8] = if input.is_empty() {
            data
        } else {
            input.extend_from_slice(data);
            &input
        };
        let mut at = 0;
        while self.phase != Phase::Closed {
            match self.step(&buf[at..]) {
                Ok(0) => break,
                Ok(n) => at += n,
                Err(e) => self.fail(e),
            }
        }
        let rest = if self.phase == Phase::Closed {
            Vec::new()
        } else {
            buf[at..].to_vec()
        };
        input.clear();
        input.extend_from_slice(&rest);
        self.input = input;
        self.note_output();
    }

    /// Consumes one unit (the preface or one frame) from `buf`; 0 when
    /// more bytes are needed.
    fn step(&mut self, buf: &[u8]) -> Result<usize, ConnError> {
        if self.phase == Phase::Preface {
            let n = buf.len().min(PREFACE.len());
            if buf[..n] != PREFACE[..n] {
                return Err(ConnError {
                    code: ErrorCode::PROTOCOL_ERROR,
                    reason: "invalid connection preface",
                });
            }
            if n < PREFACE.len() {
                return Ok(0);
            }
            self.phase = Phase::FirstSettings;
            return Ok(PREFACE.len());
        }
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
        if self.phase == Phase::FirstSettings {
            if h.kind != crate::frame::kind::SETTINGS || h.has(crate::frame::flags::ACK) {
                return Err(ConnError {
                    code: ErrorCode::PROTOCOL_ERROR,
                    reason: "first frame is not SETTINGS",
                });
            }
            self.phase = Phase::Open;
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

    /// Ends the connection: GOAWAY with `e`, an event, no more input.
    fn fail(&mut self, e: ConnError) {
        if self.phase == Phase::Closed {
            return;
        }
        let last = self.highest_stream;
        write::goaway(&mut self.output.buf, last, e.code, e.reason.as_bytes());
        self.counters.goaways_sent += 1;
        self.phase = Phase::Closed;
        self.pending_block = None;
        self.events.push_back(Event::Closed { error: e });
    }

    /// A request head is part-way in: a header block without its
    /// END_HEADERS yet, or a HEADERS or CONTINUATION frame whose header
    /// arrived without the rest of it. While it lasts, every byte read
    /// belongs to that head (§6.10 allows no other frame in between): the
    /// application's slow-head limits apply to it.
    pub fn head_in_progress(&self) -> bool {
        use crate::frame::kind;
        self.pending_block.is_some()
            || FrameHeader::parse(&self.input)
                .is_some_and(|h| h.kind == kind::HEADERS || h.kind == kind::CONTINUATION)
    }

    /// The next event, in order.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Bytes to write to the peer.
    pub fn output(&self) -> &[u8] {
        self.output.pending()
    }

    /// `n` bytes of [`Connection::output`] were written.
    pub fn advance_output(&mut self, n: usize) {
        self.output.advance(n, self.now);
    }

    /// Takes every byte of [`Connection::output`] at once, by value (the caller queues the
    /// buffer itself instead of copying it).
    pub fn take_output(&mut self) -> Vec<u8> {
        self.output.take()
    }

    fn output_len(&self) -> usize {
        self.output.len()
    }

    fn note_output(&mut self) {
        self.output.note(self.now);
    }

    /// False when the caller should stop reading: the connection is closed
    /// or its output queue is at `max_output_bytes` (a peer that does not
    /// read cannot make us queue more acks).
    pub fn wants_read(&self) -> bool {
        self.phase != Phase::Closed && self.output_len() < self.limits.max_output_bytes
    }

    /// True once the connection should be closed after flushing output:
    /// after a connection error, or after a graceful GOAWAY once no stream
    /// is left.
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Closed || (self.goaway_sent.is_some() && self.streams.is_empty())
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Streams open or half-closed.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// The peer's settings as they stand.
    pub fn peer_settings(&self) -> PeerSettings {
        self.peer
    }
}

#[cfg(test)]
mod tests;
