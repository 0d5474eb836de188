//! Complete header blocks from the origin (interim and final heads,
//! trailers), the resets we send on our own, and the receive-side flow
//! control the application drives with `consumed`.

use super::{ClientConnection, ClientEvent, Head};
use crate::counters::Flood;
use crate::error::{ConnError, ErrorCode, H2Error};
use crate::hpack::{DecodeError, Field};
use crate::request::check_trailers;
use crate::response::response_from_fields;
use crate::stream::{owe, Closed};
use crate::write;

impl ClientConnection {
    /// The block is complete: decode it (always, to keep the HPACK table
    /// in step with the origin's) and act on it.
    pub(super) fn end_block(&mut self) -> Result<(), H2Error> {
        let Some(p) = self.pending_block.take() else {
            return Ok(());
        };
        let l = &self.limits;
        let decoded = self.decoder.decode(
            &p.block,
            l.max_header_list_size as usize,
            l.max_header_fields as usize,
        );
        let fields = match decoded {
            Ok(fields) => fields,
            Err(DecodeError::Compression(why)) => {
                return Err(H2Error::conn(ErrorCode::COMPRESSION_ERROR, why))
            }
            Err(DecodeError::TooLarge) => {
                if !self.streams.contains_key(&p.stream) {
                    return Ok(());
                }
                self.counters.flood(Flood::HeaderList);
                let why = "response head over the header list limit";
                return Err(H2Error::stream(p.stream, ErrorCode::CANCEL, why));
            }
        };
        let Some(cs) = self.streams.get(&p.stream) else {
            // A stream we reset: the origin's late block, already decoded.
            return Ok(());
        };
        let malformed = |why| Err(H2Error::stream(p.stream, ErrorCode::PROTOCOL_ERROR, why));
        if !cs.s.recv_open {
            let why = "HEADERS after END_STREAM";
            return Err(H2Error::stream(p.stream, ErrorCode::STREAM_CLOSED, why));
        }
        match cs.head {
            Head::Body if !p.end_stream => malformed("trailers without END_STREAM"),
            Head::Body => self.on_trailers(p.stream, fields),
            Head::Awaiting => self.on_head(p.stream, fields, p.end_stream),
        }
    }

    fn on_head(&mut self, id: u32, fields: Vec<Field>, end: bool) -> Result<(), H2Error> {
        let malformed = |why| Err(H2Error::stream(id, ErrorCode::PROTOCOL_ERROR, why));
        let response = match response_from_fields(fields) {
            Ok(r) => r,
            Err(why) => return malformed(why),
        };
        let Some(cs) = self.streams.get_mut(&id) else {
            return Ok(());
        };
        if response.is_interim() {
            if end {
                return malformed("interim response with END_STREAM");
            }
            let ev = ClientEvent::Interim {
                stream: id,
                response,
            };
            self.events.push_back(ev);
            return Ok(());
        }
        cs.head = Head::Body;
        cs.bodiless |= response.status == 304 || response.status == 204;
        cs.s.content_length = response.content_length;
        if end && !cs.bodiless && response.content_length.is_some_and(|cl| cl != 0) {
            return malformed("content-length without DATA");
        }
        if end {
            cs.s.recv_open = false;
        }
        self.events.push_back(ClientEvent::Response {
            stream: id,
            response,
            end_stream: end,
        });
        self.close_if_finished(id);
        Ok(())
    }

    fn on_trailers(&mut self, id: u32, fields: Vec<Field>) -> Result<(), H2Error> {
        let malformed = |why| Err(H2Error::stream(id, ErrorCode::PROTOCOL_ERROR, why));
        if let Err(why) = check_trailers(&fields) {
            return malformed(why);
        }
        let Some(cs) = self.streams.get_mut(&id) else {
            return Ok(());
        };
        cs.s.recv_open = false;
        let s = &cs.s;
        if !cs.bodiless && s.content_length.is_some_and(|cl| cl != s.received) {
            return malformed("body length differs from content-length");
        }
        self.events
            .push_back(ClientEvent::Trailers { stream: id, fields });
        self.close_if_finished(id);
        Ok(())
    }

    /// Resets `stream` because the origin broke a stream-level rule; the
    /// application hears of it (not retryable: the origin answered). Such
    /// resets spend the provoked-reset budget, as on the server side.
    pub(super) fn stream_error(&mut self, stream: u32, code: ErrorCode) {
        if self.send_reset(stream, code) {
            self.events.push_back(ClientEvent::Reset {
                stream,
                code,
                retryable: false,
            });
        }
        if !self.guards.provoked.spend() {
            self.counters.flood(Flood::MadeYouReset);
            self.fail(ConnError {
                code: ErrorCode::ENHANCE_YOUR_CALM,
                reason: "too many stream errors",
            });
        }
    }

    /// Writes RST_STREAM and forgets the stream; true if it was open.
    pub(super) fn send_reset(&mut self, stream: u32, code: ErrorCode) -> bool {
        write::rst_stream(&mut self.output.buf, stream, code);
        self.counters.reset_sent(code);
        self.closed.push(stream, Closed::ResetByUs);
        let Some(cs) = self.streams.remove(&stream) else {
            return false;
        };
        self.release_connection_window(cs.s.unconsumed);
        true
    }

    /// Removes a stream whose both directions ended.
    pub(super) fn close_if_finished(&mut self, id: u32) {
        if self.streams.get(&id).is_some_and(|cs| cs.s.is_finished()) {
            if let Some(cs) = self.streams.remove(&id) {
                self.release_connection_window(cs.s.unconsumed);
            }
            self.closed.push(id, Closed::Finished);
            self.guards.provoked.refill();
        }
    }

    /// Gives `n` bytes back to the origin's connection window, with a
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
        let Some(cs) = self.streams.get_mut(&id) else {
            return;
        };
        let s = &mut cs.s;
        if !s.recv_open || n == 0 {
            return;
        }
        if let Some(inc) = owe(&mut s.recv_window, &mut s.recv_unacked, n, threshold) {
            write::window_update(&mut self.output.buf, id, inc);
        }
    }

    /// The application passed on `n` response body bytes of `stream`:
    /// the origin may send that much more. Until then it may not, beyond
    /// the windows: a slow reader downstream slows the origin. A stream
    /// that is gone is ignored.
    pub fn consumed(&mut self, stream: u32, n: usize) {
        let Some(cs) = self.streams.get_mut(&stream) else {
            return;
        };
        let n = (n as u64).min(cs.s.unconsumed);
        cs.s.unconsumed -= n;
        self.release_connection_window(n);
        self.release_stream_window(stream, n as u32);
        self.note_output();
    }
}
