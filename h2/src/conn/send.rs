//! The application's side: responses, bodies, trailers, resets, GOAWAY.

use super::{Connection, Phase};
use crate::error::{ErrorCode, SendError};
use crate::frame::HEADER_LEN;
use crate::hpack::Field;
use crate::request::check_field;
use crate::stream::SendState;
use crate::write;

fn check_response_field(name: &[u8], value: &[u8]) -> Result<(), SendError> {
    let f = Field::new(name, value);
    if name.first() == Some(&b':') || check_field(&f).is_err() {
        return Err(SendError::InvalidResponse(
            "field names must be lowercase tokens, values without CR/LF/NUL",
        ));
    }
    if matches!(
        name,
        b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade"
    ) {
        return Err(SendError::InvalidResponse(
            "connection-specific field in an HTTP/2 response",
        ));
    }
    Ok(())
}

impl Connection {
    fn writable(&self, stream: u32) -> Result<SendState, SendError> {
        if self.phase == Phase::Closed {
            return Err(SendError::ConnectionClosed);
        }
        match self.streams.get(&stream) {
            Some(s) if s.send != SendState::Done => Ok(s.send),
            _ => Err(SendError::StreamNotWritable(stream)),
        }
    }

    /// Response HEADERS (split into CONTINUATION frames by the peer's
    /// frame size). Fields are written as given after `:status`.
    pub fn send_headers(
        &mut self,
        stream: u32,
        status: u16,
        fields: &[(&[u8], &[u8])],
        end_stream: bool,
    ) -> Result<(), SendError> {
        if self.writable(stream)? != SendState::Idle {
            return Err(SendError::HeadersAlreadySent(stream));
        }
        if !(200..=999).contains(&status) {
            return Err(SendError::InvalidResponse(
                "final status outside 200..=999 (interim ones go through send_interim)",
            ));
        }
        for (n, v) in fields {
            check_response_field(n, v)?;
        }
        let status = status.to_string();
        let all =
            std::iter::once((&b":status"[..], status.as_bytes())).chain(fields.iter().copied());
        self.write_block(stream, all, end_stream);
        Ok(())
    }

    /// An interim response (RFC 9113 §8.1: `100 Continue`, `103 Early Hints`...): HEADERS
    /// without END_STREAM before the final response, which is still to be sent. `101` has
    /// no meaning in HTTP/2 (§8.6) and is refused, as is any status outside 1xx.
    pub fn send_interim(
        &mut self,
        stream: u32,
        status: u16,
        fields: &[(&[u8], &[u8])],
    ) -> Result<(), SendError> {
        if self.writable(stream)? != SendState::Idle {
            return Err(SendError::HeadersAlreadySent(stream));
        }
        if !(100..=199).contains(&status) || status == 101 {
            return Err(SendError::InvalidResponse(
                "interim status must be 1xx other than 101",
            ));
        }
        for (n, v) in fields {
            check_response_field(n, v)?;
        }
        let status = status.to_string();
        let all =
            std::iter::once((&b":status"[..], status.as_bytes())).chain(fields.iter().copied());
        self.write_block(stream, all, false);
        // The final response is still to come: the stream stays as if nothing was sent.
        if let Some(s) = self.streams.get_mut(&stream) {
            s.send = SendState::Idle;
        }
        Ok(())
    }

    fn write_block<'a>(
        &mut self,
        stream: u32,
        fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
        end: bool,
    ) {
        let mut block = Vec::new();
        self.encoder.encode(fields, &mut block);
        write::headers(
            &mut self.output.buf,
            stream,
            &block,
            end,
            self.peer.max_frame_size as usize,
        );
        if let Some(s) = self.streams.get_mut(&stream) {
            s.send = if end {
                SendState::Done
            } else {
                SendState::Open
            };
        }
        if end {
            self.close_if_finished(stream);
        }
        self.note_output();
    }

    /// Response body bytes: returns how many were accepted, limited by the
    /// stream and connection windows and by the output queue. When fewer
    /// than `data.len()` are accepted, send the rest after
    /// [`crate::Event::WindowOpened`] if [`Connection::send_capacity`] is
    /// 0, otherwise once output has drained. `end_stream` applies only if
    /// everything was accepted.
    pub fn send_data(
        &mut self,
        stream: u32,
        data: &[u8],
        end_stream: bool,
    ) -> Result<usize, SendError> {
        let Some((n, end)) = self.data_allowance(stream, data.len(), end_stream)? else {
            return Ok(0);
        };
        let frame = self.peer.max_frame_size as usize;
        // One allocation for every frame of this call, not a doubling chain of them: the
        // caller often takes the output away after each response, leaving an empty buffer.
        self.output
            .buf
            .reserve(n + n.div_ceil(frame.max(1)).max(1) * HEADER_LEN);
        let mut chunks = data[..n].chunks(frame).peekable();
        if chunks.peek().is_none() {
            write::data(&mut self.output.buf, stream, &[], end);
        }
        while let Some(chunk) = chunks.next() {
            write::data(
                &mut self.output.buf,
                stream,
                chunk,
                end && chunks.peek().is_none(),
            );
        }
        self.data_sent(stream, end);
        Ok(n)
    }

    /// [`Connection::send_data`] for a payload the caller queues itself (a body it shares,
    /// not copies): the same windows and limits, but only the frame headers are made. For
    /// each DATA frame, in order, `frame` gets its 9-byte header and the range of the
    /// payload (from its start) that must follow the header on the wire. The frames come
    /// after everything already in [`Connection::output`], so the caller takes that first.
    pub fn send_data_frames(
        &mut self,
        stream: u32,
        len: usize,
        end_stream: bool,
        mut frame: impl FnMut([u8; HEADER_LEN], std::ops::Range<usize>),
    ) -> Result<usize, SendError> {
        let Some((n, end)) = self.data_allowance(stream, len, end_stream)? else {
            return Ok(0);
        };
        let max = (self.peer.max_frame_size as usize).max(1);
        let mut at = 0;
        loop {
            let m = (n - at).min(max);
            let last = at + m == n;
            frame(write::data_header(stream, m, end && last), at..at + m);
            at += m;
            if last {
                break;
            }
        }
        self.data_sent(stream, end);
        Ok(n)
    }

    /// How many of `len` body bytes may go now (windows, output room) and whether
    /// END_STREAM goes with them; the windows are charged. `None`: nothing to send yet.
    fn data_allowance(
        &mut self,
        stream: u32,
        len: usize,
        end_stream: bool,
    ) -> Result<Option<(usize, bool)>, SendError> {
        match self.writable(stream)? {
            SendState::Idle => return Err(SendError::HeadersNotSent(stream)),
            SendState::Open | SendState::Done => {}
        }
        let frame = self.peer.max_frame_size as usize;
        let room = self
            .limits
            .max_output_bytes
            .saturating_sub(self.output_len());
        let frames_room = room / (frame + HEADER_LEN) * frame
            + (room % (frame + HEADER_LEN)).saturating_sub(HEADER_LEN);
        let Some(s) = self.streams.get_mut(&stream) else {
            return Err(SendError::StreamNotWritable(stream));
        };
        let window = s.send_window.min(self.send_window).max(0) as usize;
        let n = len.min(window).min(frames_room);
        // Only a closed window stalls a stream (its timer and the
        // WindowOpened event); a full output queue is the caller's to drain.
        if window < len {
            s.blocked_since.get_or_insert(self.now);
        } else {
            s.blocked_since = None;
        }
        s.send_window -= n as i64;
        self.send_window -= n as i64;
        // Response payload counts for the overhead ratio: the WINDOW_UPDATE
        // frames a downloading client sends are its answer to it.
        self.guards.sent_payload(n);
        let end = n == len && end_stream;
        if n == 0 && !end {
            return Ok(None);
        }
        Ok(Some((n, end)))
    }

    /// After DATA frames went out: the stream's end, the output's stall clock.
    fn data_sent(&mut self, stream: u32, end: bool) {
        if end {
            if let Some(s) = self.streams.get_mut(&stream) {
                s.send = SendState::Done;
            }
            self.close_if_finished(stream);
        }
        self.note_output();
    }

    /// Response trailers: HEADERS with END_STREAM after the body.
    pub fn send_trailers(
        &mut self,
        stream: u32,
        fields: &[(&[u8], &[u8])],
    ) -> Result<(), SendError> {
        if self.writable(stream)? == SendState::Idle {
            return Err(SendError::HeadersNotSent(stream));
        }
        for (n, v) in fields {
            check_response_field(n, v)?;
        }
        self.write_block(stream, fields.iter().copied(), true);
        Ok(())
    }

    /// The application gives up on a stream (upstream failed, client
    /// went away...): RST_STREAM with `code`.
    pub fn reset(&mut self, stream: u32, code: ErrorCode) {
        if self.phase != Phase::Closed && self.streams.contains_key(&stream) {
            if let Some(s) = self.streams.get_mut(&stream) {
                // The application knows; no Reset event back to it.
                s.delivered = false;
            }
            self.send_reset(stream, code);
            self.note_output();
        }
    }

    /// Graceful shutdown (SIGTERM, reload): GOAWAY NO_ERROR with the last
    /// stream we accepted; streams in flight finish, newer ones are
    /// ignored. [`Connection::is_done`] turns true when none is left.
    pub fn go_away(&mut self) {
        if self.phase == Phase::Closed || self.goaway_sent.is_some() {
            return;
        }
        let last = self.highest_stream;
        write::goaway(&mut self.output.buf, last, ErrorCode::NO_ERROR, b"");
        self.counters.goaways_sent += 1;
        self.goaway_sent = Some(last);
        self.note_output();
    }

    /// How many bytes `stream` could send right now (the smaller window).
    pub fn send_capacity(&self, stream: u32) -> usize {
        self.streams
            .get(&stream)
            .map_or(0, |s| s.send_window.min(self.send_window).max(0) as usize)
    }
}
