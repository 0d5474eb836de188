//! Complete header blocks: decoding, opening streams, trailers, and the
//! receive-side flow control the application drives.

use super::Connection;
use crate::counters::Flood;
use crate::error::{ErrorCode, H2Error};
use crate::event::Event;
use crate::hpack::{DecodeError, Field};
use crate::request::{check_trailers, request_from_fields};
use crate::stream::{owe, Closed, SendState, Stream};
use crate::write;

impl Connection {
    /// The block is complete: decode it (always, to keep the HPACK table
    /// in step with the peer's) and act on it.
    pub(super) fn end_block(&mut self) -> Result<(), H2Error> {
        let Some(p) = self.pending_block.take() else {
            return Ok(());
        };
        let limits = &self.limits;
        let decoded = self.decoder.decode(
            &p.block,
            limits.max_header_list_size as usize,
            limits.max_header_fields as usize,
        );
        let fields = match decoded {
            Ok(fields) => Ok(fields),
            Err(DecodeError::Compression(why)) => {
                return Err(H2Error::conn(ErrorCode::COMPRESSION_ERROR, why))
            }
            Err(DecodeError::TooLarge) => Err(()),
        };
        if self.streams.contains_key(&p.stream) {
            return self.on_trailers(p.stream, fields, p.end_stream);
        }
        if p.stream <= self.highest_stream {
            // A stream we reset: the peer's late block, already decoded.
            return Ok(());
        }
        self.open_stream(p.stream, fields, p.end_stream)
    }

    fn on_trailers(
        &mut self,
        id: u32,
        fields: Result<Vec<Field>, ()>,
        end: bool,
    ) -> Result<(), H2Error> {
        let open = self.streams.get(&id).is_some_and(|s| s.recv_open);
        if !open {
            return Err(H2Error::stream(
                id,
                ErrorCode::STREAM_CLOSED,
                "HEADERS after END_STREAM",
            ));
        }
        let malformed = |why| Err(H2Error::stream(id, ErrorCode::PROTOCOL_ERROR, why));
        if !end {
            return malformed("trailers without END_STREAM");
        }
        let Ok(fields) = fields else {
            self.counters.flood(Flood::HeaderList);
            return malformed("trailers over the header list limit");
        };
        if let Err(why) = check_trailers(&fields) {
            return malformed(why);
        }
        let Some(s) = self.streams.get_mut(&id) else {
            return Ok(());
        };
        s.recv_open = false;
        if s.content_length.is_some_and(|cl| cl != s.received) {
            return malformed("body length differs from content-length");
        }
        self.events
            .push_back(Event::Trailers { stream: id, fields });
        self.close_if_finished(id);
        Ok(())
    }

    fn open_stream(
        &mut self,
        id: u32,
        fields: Result<Vec<Field>, ()>,
        end: bool,
    ) -> Result<(), H2Error> {
        self.highest_stream = id;
        if self.goaway_sent.is_some() {
            // §6.8: streams above the last id of our GOAWAY are ignored.
            self.closed.push(id, Closed::ResetByUs);
            return Ok(());
        }
        self.guards.new_streams_this_read += 1;
        let refuse = if self.streams.len() >= self.limits.max_concurrent_streams as usize {
            true
        } else if self.guards.new_streams_this_read > self.limits.new_streams_per_read() {
            self.counters.flood(Flood::NewStreamsPerRead);
            true
        } else {
            false
        };
        if refuse {
            self.counters.streams_refused += 1;
            self.send_reset(id, ErrorCode::REFUSED_STREAM);
            return Ok(());
        }
        let mut stream = Stream::new(
            self.peer.initial_window_size,
            self.limits.initial_window_size,
        );
        stream.recv_open = !end;
        self.streams.insert(id, stream);
        self.counters.streams_total += 1;
        let Ok(fields) = fields else {
            self.counters.flood(Flood::HeaderList);
            return self.answer_431(id);
        };
        let request = match request_from_fields(fields) {
            Ok(r) => r,
            Err(why) => return Err(H2Error::stream(id, ErrorCode::PROTOCOL_ERROR, why)),
        };
        if end && request.content_length.is_some_and(|cl| cl != 0) {
            return Err(H2Error::stream(
                id,
                ErrorCode::PROTOCOL_ERROR,
                "content-length without DATA",
            ));
        }
        if let Some(s) = self.streams.get_mut(&id) {
            s.content_length = request.content_length;
            s.delivered = true;
        }
        self.events.push_back(Event::Request {
            stream: id,
            request,
            end_stream: end,
        });
        Ok(())
    }

    /// A header list over the limit (§10.5.1): 431 on the stream, whose
    /// request the application never sees.
    fn answer_431(&mut self, id: u32) -> Result<(), H2Error> {
        let mut block = Vec::new();
        self.encoder
            .encode([(&b":status"[..], &b"431"[..])], &mut block);
        write::headers(
            &mut self.output.buf,
            id,
            &block,
            true,
            self.peer.max_frame_size as usize,
        );
        if let Some(s) = self.streams.get_mut(&id) {
            s.send = SendState::Done;
            if s.recv_open {
                // Its body is of no use: stop it (§8.1).
                self.send_reset(id, ErrorCode::NO_ERROR);
                return Ok(());
            }
        }
        self.close_if_finished(id);
        Ok(())
    }

    /// Removes a stream whose both directions ended.
    pub(super) fn close_if_finished(&mut self, id: u32) {
        if self.streams.get(&id).is_some_and(Stream::is_finished) {
            if let Some(s) = self.streams.remove(&id) {
                self.release_connection_window(s.unconsumed);
            }
            self.closed.push(id, Closed::Finished);
            self.refill_budgets();
        }
    }

    /// Gives `n` bytes back to the peer's connection window, with a
    /// WINDOW_UPDATE once half the window is owed.
    pub(super) fn release_connection_window(&mut self, n: u64) {
        if n == 0 {
            return;
        }
        let n = n.min(u64::from(u32::MAX)) as u32;
        let half = self.limits.connection_window_size / 2;
        if let Some(inc) = owe(&mut self.recv_window, &mut self.recv_unacked, n, half) {
            write::window_update(&mut self.output.buf, 0, inc);
        }
    }

    pub(super) fn release_stream_window(&mut self, id: u32, n: u32) {
        let threshold = (self.limits.initial_window_size / 2).max(1);
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        if !s.recv_open {
            return;
        }
        if let Some(inc) = owe(&mut s.recv_window, &mut s.recv_unacked, n, threshold) {
            write::window_update(&mut self.output.buf, id, inc);
        }
    }

    /// The application passed on `n` body bytes of `stream`: the peer may
    /// send that much more. A stream that is gone is ignored (its bytes
    /// went back to the connection window when it closed).
    pub fn consumed(&mut self, stream: u32, n: usize) {
        let Some(s) = self.streams.get_mut(&stream) else {
            return;
        };
        let n = (n as u64).min(s.unconsumed);
        s.unconsumed -= n;
        self.release_connection_window(n);
        self.release_stream_window(stream, n as u32);
        self.note_output();
    }
}
