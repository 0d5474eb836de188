//! The application's side of a client connection: requests, their
//! bodies and trailers, resets, GOAWAY, and the timers.

use std::time::Instant;

use super::{ClientConnection, ClientEvent, ClientStream, Head};
use crate::counters::Flood;
use crate::error::{ConnError, ErrorCode, SendError};
use crate::frame::HEADER_LEN;
use crate::hpack::Field;
use crate::request::{check_field, check_regular, Request};
use crate::stream::{SendState, Stream};
use crate::write;

/// A regular field we may send: §8.2.1's shape, no connection-specific
/// field (§8.2.2), no pseudo-header.
fn check_request_field(f: &Field) -> Result<(), SendError> {
    if f.name.first() == Some(&b':') {
        return Err(SendError::InvalidRequest("pseudo-header among the fields"));
    }
    check_field(f).map_err(SendError::InvalidRequest)?;
    check_regular(f).map_err(SendError::InvalidRequest)
}

/// A field to encode: name and value.
type Pair<'a> = (&'a [u8], &'a [u8]);

/// The pseudo-headers of `r` (§8.3.1), checked.
fn pseudo(r: &Request) -> Result<Vec<Pair<'_>>, SendError> {
    let bad = SendError::InvalidRequest;
    if r.method.is_empty() {
        return Err(bad("empty :method"));
    }
    let mut p: Vec<Pair<'_>> = vec![(b":method", &r.method)];
    if r.method == b"CONNECT" {
        let a = r
            .authority
            .as_deref()
            .ok_or(bad("CONNECT needs :authority"))?;
        p.push((b":authority", a));
        return Ok(p);
    }
    let scheme = r.scheme.as_deref().filter(|s| !s.is_empty());
    let path = r.path.as_deref().filter(|s| !s.is_empty());
    p.push((b":scheme", scheme.ok_or(bad("missing :scheme"))?));
    if let Some(a) = &r.authority {
        p.push((b":authority", a));
    }
    p.push((b":path", path.ok_or(bad("missing :path"))?));
    Ok(p)
}

impl ClientConnection {
    /// Opens a stream carrying `request` (the same neutral request the
    /// server side produces): HEADERS, with END_STREAM when `end_stream`
    /// (no body). Returns the stream id. Refused when
    /// [`ClientConnection::can_open`] is false or the request cannot be
    /// carried; nothing is written then.
    pub fn open(&mut self, request: &Request, end_stream: bool) -> Result<u32, SendError> {
        if self.closed_conn {
            return Err(SendError::ConnectionClosed);
        }
        if !self.can_open() {
            return Err(SendError::NoStreamAvailable);
        }
        let pseudo = pseudo(request)?;
        let mut size = 0;
        for f in &request.fields {
            check_request_field(f)?;
            size += f.list_size();
        }
        size += pseudo
            .iter()
            .map(|(n, v)| n.len() + v.len() + 32)
            .sum::<usize>();
        if self
            .peer
            .max_header_list_size
            .is_some_and(|max| size > max as usize)
        {
            return Err(SendError::InvalidRequest(
                "header list over the origin's SETTINGS_MAX_HEADER_LIST_SIZE",
            ));
        }
        let id = self.next_stream;
        self.next_stream += 2;
        let mut s = Stream::new(
            self.peer.initial_window_size,
            self.limits.initial_window_size,
        );
        s.send = if end_stream {
            SendState::Done
        } else {
            SendState::Open
        };
        s.delivered = true;
        let cs = ClientStream {
            s,
            head: Head::Awaiting,
            bodiless: request.method == b"HEAD",
        };
        self.streams.insert(id, cs);
        self.counters.streams_total += 1;
        let regular = request.fields.iter().map(|f| (&f.name[..], &f.value[..]));
        let all: Vec<(&[u8], &[u8])> = pseudo.into_iter().chain(regular).collect();
        self.write_block(id, &all, end_stream);
        Ok(id)
    }

    fn write_block(&mut self, stream: u32, fields: &[(&[u8], &[u8])], end: bool) {
        let mut block = Vec::new();
        self.encoder.encode(fields.iter().copied(), &mut block);
        let frame = self.peer.max_frame_size as usize;
        write::headers(&mut self.output.buf, stream, &block, end, frame);
        self.guards.sent_payload(block.len());
        self.note_output();
    }

    fn writable(&mut self, stream: u32) -> Result<&mut ClientStream, SendError> {
        if self.closed_conn {
            return Err(SendError::ConnectionClosed);
        }
        match self.streams.get_mut(&stream) {
            Some(cs) if cs.s.send == SendState::Open => Ok(cs),
            _ => Err(SendError::StreamNotWritable(stream)),
        }
    }

    /// Request body bytes: returns how many were taken, limited by the
    /// stream's and the connection's send windows (the origin's flow
    /// control) and by the output queue. When fewer than `data.len()` are
    /// taken, send the rest after [`ClientEvent::WindowOpened`] if
    /// [`ClientConnection::send_capacity`] is 0, else once output drained.
    /// `end_stream` applies only if everything was taken.
    pub fn send_data(
        &mut self,
        stream: u32,
        data: &[u8],
        end_stream: bool,
    ) -> Result<usize, SendError> {
        let frame = self.peer.max_frame_size as usize;
        let room = self
            .limits
            .max_output_bytes
            .saturating_sub(self.output_len());
        let frames_room = room / (frame + HEADER_LEN) * frame
            + (room % (frame + HEADER_LEN)).saturating_sub(HEADER_LEN);
        let (now, conn_window) = (self.now, self.send_window);
        let cs = self.writable(stream)?;
        let window = cs.s.send_window.min(conn_window).max(0) as usize;
        let n = data.len().min(window).min(frames_room);
        if window < data.len() {
            cs.s.blocked_since.get_or_insert(now);
        } else {
            cs.s.blocked_since = None;
        }
        cs.s.send_window -= n as i64;
        let end = n == data.len() && end_stream;
        if end {
            cs.s.send = SendState::Done;
        }
        self.send_window -= n as i64;
        self.guards.payload_bytes += n as u64;
        if n == 0 && !end {
            return Ok(0);
        }
        let mut chunks = data[..n].chunks(frame.max(1)).peekable();
        if chunks.peek().is_none() {
            write::data(&mut self.output.buf, stream, &[], end);
        }
        while let Some(chunk) = chunks.next() {
            let last = chunks.peek().is_none();
            write::data(&mut self.output.buf, stream, chunk, end && last);
        }
        if end {
            self.close_if_finished(stream);
        }
        self.note_output();
        Ok(n)
    }

    /// Request trailers (gRPC sends none, but HTTP allows them): HEADERS
    /// with END_STREAM after the body.
    pub fn send_trailers(&mut self, stream: u32, fields: &[Field]) -> Result<(), SendError> {
        self.writable(stream)?;
        for f in fields {
            check_request_field(f)?;
        }
        let all: Vec<(&[u8], &[u8])> = fields.iter().map(|f| (&f.name[..], &f.value[..])).collect();
        self.write_block(stream, &all, true);
        if let Some(cs) = self.streams.get_mut(&stream) {
            cs.s.send = SendState::Done;
        }
        self.close_if_finished(stream);
        Ok(())
    }

    /// The application gives up on a stream (its client went away...):
    /// RST_STREAM with `code` (CANCEL usually); no event comes back.
    pub fn reset(&mut self, stream: u32, code: ErrorCode) {
        if !self.closed_conn && self.streams.contains_key(&stream) {
            self.send_reset(stream, code);
            self.note_output();
        }
    }

    /// Graceful close: GOAWAY NO_ERROR (we accept no stream of the
    /// origin's: last id 0); no new streams, those open finish, and
    /// [`ClientConnection::is_done`] turns true when none is left.
    pub fn close(&mut self) {
        if self.closed_conn || self.goaway_sent {
            return;
        }
        write::goaway(&mut self.output.buf, 0, ErrorCode::NO_ERROR, b"");
        self.counters.goaways_sent += 1;
        self.goaway_sent = true;
        self.note_output();
    }

    /// How many request body bytes `stream` could send right now.
    pub fn send_capacity(&self, stream: u32) -> usize {
        self.streams.get(&stream).map_or(0, |cs| {
            cs.s.send_window.min(self.send_window).max(0) as usize
        })
    }

    /// The earliest instant at which [`ClientConnection::on_timeout`] has
    /// work: the SETTINGS ack deadline, a stalled stream, stalled output.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.closed_conn {
            return None;
        }
        let l = &self.limits;
        let settings = self
            .settings_unacked_since
            .map(|t| t + l.settings_ack_timeout);
        let output = self.output.stall_since.map(|t| t + l.output_stall_timeout);
        let stream = self
            .streams
            .values()
            .filter_map(|cs| cs.s.blocked_since)
            .min()
            .map(|t| t + l.send_window_timeout);
        [settings, output, stream].into_iter().flatten().min()
    }

    /// Acts on the deadlines that passed by `now`: an origin that never
    /// acks our SETTINGS or reads nothing loses the connection; a request
    /// body stalled by a window that never opens loses its stream (CANCEL,
    /// reported as a reset).
    pub fn on_timeout(&mut self, now: Instant) {
        self.now = now;
        if self.closed_conn {
            return;
        }
        let l = self.limits.clone();
        let fail = if matches!(self.output.stall_since, Some(t) if now >= t + l.output_stall_timeout)
        {
            Some((
                Flood::OutputStall,
                ErrorCode::ENHANCE_YOUR_CALM,
                "origin reads nothing",
            ))
        } else if matches!(self.settings_unacked_since, Some(t) if now >= t + l.settings_ack_timeout)
        {
            let why = "SETTINGS not acknowledged";
            Some((Flood::SettingsTimeout, ErrorCode::SETTINGS_TIMEOUT, why))
        } else {
            None
        };
        if let Some((flood, code, reason)) = fail {
            self.counters.flood(flood);
            self.fail(ConnError { code, reason });
            return;
        }
        let stalled: Vec<u32> = self
            .streams
            .iter()
            .filter(
                |(_, cs)| matches!(cs.s.blocked_since, Some(t) if now >= t + l.send_window_timeout),
            )
            .map(|(id, _)| *id)
            .collect();
        for stream in stalled {
            self.counters.flood(Flood::SendWindowStall);
            self.send_reset(stream, ErrorCode::CANCEL);
            let code = ErrorCode::CANCEL;
            let ev = ClientEvent::Reset {
                stream,
                code,
                retryable: false,
            };
            self.events.push_back(ev);
        }
        self.note_output();
    }
}
