//! Writing responses (RFC 9114 §4.1): HEADERS (interim ones, then the final one), DATA,
//! trailing HEADERS, into a buffer the caller writes on the request stream; and our
//! GOAWAY on the control stream (§5.2).

use super::Connection;
use crate::event::{Event, LocalStream};
use crate::frame;
use crate::qpack;

/// Why a response part was not written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// A status outside 100..=999.
    InvalidStatus,
    /// The field section is over the peer's SETTINGS_MAX_FIELD_SECTION_SIZE (§4.2.2).
    TooLarge,
}

impl Connection {
    /// Appends a HEADERS frame with `:status` and `fields` (lowercase names, no
    /// connection-specific fields: the caller's head is already HTTP-neutral).
    pub fn send_headers(
        &self,
        out: &mut Vec<u8>,
        status: u16,
        fields: &[(&[u8], &[u8])],
    ) -> Result<(), SendError> {
        if !(100..=999).contains(&status) {
            return Err(SendError::InvalidStatus);
        }
        let digits = [
            b'0' + (status / 100) as u8,
            b'0' + (status / 10 % 10) as u8,
            b'0' + (status % 10) as u8,
        ];
        let all = std::iter::once((&b":status"[..], &digits[..])).chain(fields.iter().copied());
        self.encode_section(out, all)
    }

    /// Appends trailing HEADERS (no pseudo-headers); the caller then ends the stream.
    pub fn send_trailers(
        &self,
        out: &mut Vec<u8>,
        fields: &[(&[u8], &[u8])],
    ) -> Result<(), SendError> {
        self.encode_section(out, fields.iter().copied())
    }

    fn encode_section<'a>(
        &self,
        out: &mut Vec<u8>,
        fields: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    ) -> Result<(), SendError> {
        let limit = self.peer.and_then(|p| p.max_field_section_size);
        if limit.is_some_and(|max| qpack::section_size(fields.clone()) > max) {
            return Err(SendError::TooLarge);
        }
        let mut block = Vec::new();
        qpack::encode(fields, &mut block);
        frame::write(out, frame::HEADERS, &block);
        Ok(())
    }

    /// Queues our GOAWAY on the control stream (§5.2): request streams from the lowest one
    /// not seen yet on are refused (H3_REQUEST_REJECTED); those below are served. A second
    /// call never raises the ID.
    pub fn send_goaway(&mut self) {
        let id = self
            .goaway_sent
            .map_or(self.next_request, |prev| prev.min(self.next_request));
        self.goaway_sent = Some(id);
        let mut bytes = Vec::new();
        frame::write_varint_frame(&mut bytes, frame::GOAWAY, id);
        self.events.push_back(Event::Send {
            on: LocalStream::Control,
            bytes,
        });
    }
}

/// Appends a DATA frame carrying `data` (an empty one is allowed but pointless).
pub fn data(out: &mut Vec<u8>, data: &[u8]) {
    frame::write(out, frame::DATA, data);
}

/// Appends only the header of a DATA frame of `len` bytes, for a caller that writes the
/// payload from its own buffer (a cached body) without copying it here.
pub fn data_head(out: &mut Vec<u8>, len: u64) {
    frame::write_head(out, frame::DATA, len);
}
