//! Request streams (RFC 9114 §4.1): HEADERS, then DATA, then optionally trailing HEADERS,
//! and the stream's end. DATA before HEADERS or anything after trailers is
//! H3_FRAME_UNEXPECTED; a stream ending before HEADERS is H3_REQUEST_INCOMPLETE; a body
//! unlike its Content-Length is H3_MESSAGE_ERROR (§4.1.2).

use super::Connection;
use crate::counters::Flood;
use crate::error::{conn, stream, Error, ErrorCode};
use crate::event::Event;
use crate::frame::{Frame, FrameReader, Piece, StreamKind};
use crate::qpack::{Decoded, Outcome};
use crate::request::{check_trailers, request_from_fields};

/// Where a request stream is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for HEADERS.
    Head,
    /// A field section waits in the QPACK decoder for inserts (the head, or the
    /// trailers); later input is held.
    Blocked {
        trailers: bool,
    },
    Body,
    /// Trailers received: only unknown frames and the stream's end may follow.
    Trailed,
    /// Refused or reset: input is dropped.
    Discard,
    /// Ended; the state is dropped.
    Done,
}

pub struct RequestStream {
    reader: FrameReader,
    phase: Phase,
    content_length: Option<u64>,
    received: u64,
    /// Input that arrived while a section was blocked.
    held: Vec<u8>,
    /// The peer ended the stream.
    fin: bool,
    empty: u32,
    skipped: u32,
}

impl Default for RequestStream {
    fn default() -> Self {
        RequestStream {
            reader: FrameReader::new(StreamKind::Request),
            phase: Phase::Head,
            content_length: None,
            received: 0,
            held: Vec::new(),
            fin: false,
            empty: 0,
            skipped: 0,
        }
    }
}

impl RequestStream {
    /// Its head is not decoded: the peer's encoder may be waiting to hear of it.
    pub fn head_pending(&self) -> bool {
        matches!(self.phase, Phase::Head | Phase::Blocked { .. })
    }

    /// Its request head is not decoded yet (bytes of it may have arrived, or it waits for
    /// QPACK inserts): what a slow-head deadline measures. Trailers are not a head.
    pub fn awaiting_request(&self) -> bool {
        matches!(self.phase, Phase::Head | Phase::Blocked { trailers: false })
    }

    /// Bytes held for the stream: a frame being read, input behind a blocked section.
    pub fn held_bytes(&self) -> usize {
        self.reader.buffered() + self.held.len()
    }

    /// Drops input from now on; true when the stream already ended (nothing is kept).
    pub fn discard(&mut self) -> bool {
        self.phase = Phase::Discard;
        self.held = Vec::new();
        self.fin
    }
}

impl Connection {
    pub(super) fn recv_request(&mut self, id: u64, data: &[u8], fin: bool) -> Result<(), Error> {
        let mut s = match self.requests.remove(&id) {
            Some(s) => s,
            None => {
                self.next_request = self.next_request.max(id + 4);
                if self.goaway_sent.is_some_and(|g| id >= g) {
                    return Err(stream(
                        ErrorCode::RequestRejected,
                        "stream after our GOAWAY",
                    ));
                }
                RequestStream::default()
            }
        };
        let result = self.drive(id, &mut s, data, fin);
        if s.phase != Phase::Done {
            self.requests.insert(id, s);
        }
        result
    }

    fn drive(
        &mut self,
        id: u64,
        s: &mut RequestStream,
        data: &[u8],
        fin: bool,
    ) -> Result<(), Error> {
        s.fin |= fin;
        match s.phase {
            Phase::Discard => {
                if s.fin {
                    s.phase = Phase::Done;
                }
                Ok(())
            }
            Phase::Blocked { .. } => {
                s.held.extend_from_slice(data);
                if s.held.len() > self.limits.max_blocked_input {
                    self.counters.trip(Flood::BlockedInput);
                    return Err(stream(
                        ErrorCode::ExcessiveLoad,
                        "input behind a blocked section",
                    ));
                }
                Ok(())
            }
            _ => {
                self.read_frames(id, s, data)?;
                self.maybe_end(id, s)
            }
        }
    }

    /// Reads frames until the input is used up, the stream is dropped, or a section blocks
    /// (the rest of the input is then held).
    fn read_frames(&mut self, id: u64, s: &mut RequestStream, data: &[u8]) -> Result<(), Error> {
        let mut input = data;
        while matches!(s.phase, Phase::Head | Phase::Body | Phase::Trailed) {
            let Some(piece) = s.reader.next(&mut input, &self.limits)? else {
                return Ok(());
            };
            match piece {
                Piece::Data { chunk, end } => self.on_data(id, s, chunk, end)?,
                Piece::Frame(Frame::Headers(block)) => self.on_headers(id, s, block)?,
                Piece::Skipped { .. } => {
                    s.skipped += 1;
                    self.counters.skipped_frames += 1;
                    if s.skipped > self.limits.max_skipped_frames {
                        self.counters.trip(Flood::SkippedFrames);
                        return Err(stream(ErrorCode::ExcessiveLoad, "too many unknown frames"));
                    }
                }
                Piece::Oversized { .. } => self.on_oversized(id, s)?,
                Piece::Frame(_) => {
                    return Err(conn(
                        ErrorCode::FrameUnexpected,
                        "control frame on a request",
                    ))
                }
            }
            if matches!(s.phase, Phase::Blocked { .. }) {
                s.held.extend_from_slice(input);
            }
        }
        Ok(())
    }

    fn on_headers(&mut self, id: u64, s: &mut RequestStream, block: Vec<u8>) -> Result<(), Error> {
        let trailers = match s.phase {
            Phase::Head => false,
            Phase::Body => true,
            _ => return Err(conn(ErrorCode::FrameUnexpected, "HEADERS after trailers")),
        };
        match self.qpack.decode_section(id, block)? {
            Outcome::Blocked => {
                s.phase = Phase::Blocked { trailers };
                Ok(())
            }
            Outcome::Decoded(d) => self.on_section(id, s, d, trailers),
        }
    }

    /// A decoded field section: the request's head, or its trailers.
    fn on_section(
        &mut self,
        id: u64,
        s: &mut RequestStream,
        decoded: Decoded,
        trailers: bool,
    ) -> Result<(), Error> {
        let fields = match decoded {
            Decoded::Fields(fields) => fields,
            Decoded::TooLarge(kind) => {
                self.counters.trip(kind);
                if trailers {
                    return Err(stream(ErrorCode::ExcessiveLoad, "trailers over the limits"));
                }
                self.refuse(id, s);
                return Ok(());
            }
        };
        let malformed = |why| stream(ErrorCode::MessageError, why);
        if trailers {
            check_trailers(&fields).map_err(malformed)?;
            check_length(s)?;
            s.phase = Phase::Trailed;
            self.events
                .push_back(Event::Trailers { stream: id, fields });
            return Ok(());
        }
        let request = request_from_fields(fields).map_err(malformed)?;
        s.content_length = request.content_length;
        s.phase = Phase::Body;
        self.counters.requests += 1;
        self.events.push_back(Event::Request {
            stream: id,
            request,
            end_stream: false,
        });
        Ok(())
    }

    /// A HEADERS frame over `max_field_section_size`, skipped unread.
    fn on_oversized(&mut self, id: u64, s: &mut RequestStream) -> Result<(), Error> {
        self.counters.trip(Flood::HeadersFrameSize);
        match s.phase {
            Phase::Head => {
                // Its section is never decoded: tell the peer's encoder (RFC 9204 §4.4.2).
                self.qpack.cancel_stream(id);
                self.refuse(id, s);
                Ok(())
            }
            Phase::Body => Err(stream(ErrorCode::ExcessiveLoad, "trailers over the limits")),
            _ => Err(conn(ErrorCode::FrameUnexpected, "HEADERS after trailers")),
        }
    }

    fn refuse(&mut self, id: u64, s: &mut RequestStream) {
        s.discard();
        self.events.push_back(Event::Refuse {
            stream: id,
            status: 431,
        });
    }

    fn on_data(
        &mut self,
        id: u64,
        s: &mut RequestStream,
        chunk: &[u8],
        end: bool,
    ) -> Result<(), Error> {
        match s.phase {
            Phase::Head => return Err(conn(ErrorCode::FrameUnexpected, "DATA before HEADERS")),
            Phase::Trailed => return Err(conn(ErrorCode::FrameUnexpected, "DATA after trailers")),
            _ => {}
        }
        if chunk.is_empty() {
            if end {
                s.empty += 1;
                if s.empty > self.limits.max_empty_frames {
                    self.counters.trip(Flood::EmptyFrames);
                    return Err(stream(
                        ErrorCode::ExcessiveLoad,
                        "too many empty DATA frames",
                    ));
                }
            }
            return Ok(());
        }
        s.received += chunk.len() as u64;
        if s.content_length.is_some_and(|cl| s.received > cl) {
            return Err(stream(
                ErrorCode::MessageError,
                "body longer than Content-Length",
            ));
        }
        self.events.push_back(Event::Data {
            stream: id,
            data: chunk.to_vec(),
            end_stream: false,
        });
        Ok(())
    }

    /// At the peer's FIN, once nothing is blocked: the stream must end between frames
    /// (§7.1), after HEADERS (§4.1), with the body Content-Length announced (§4.1.2).
    fn maybe_end(&mut self, id: u64, s: &mut RequestStream) -> Result<(), Error> {
        if !s.fin || matches!(s.phase, Phase::Blocked { .. } | Phase::Done) {
            return Ok(());
        }
        if s.phase == Phase::Discard {
            s.phase = Phase::Done;
            return Ok(());
        }
        if !s.reader.at_boundary() {
            return Err(conn(ErrorCode::FrameError, "stream ended inside a frame"));
        }
        match s.phase {
            Phase::Head => Err(stream(
                ErrorCode::RequestIncomplete,
                "stream ended before HEADERS",
            )),
            Phase::Body => {
                check_length(s)?;
                s.phase = Phase::Done;
                self.mark_end(id);
                Ok(())
            }
            _ => {
                s.phase = Phase::Done;
                Ok(())
            }
        }
    }

    /// Sets `end_stream` on the stream's last event if it is still the newest one, or
    /// queues an empty last piece of body.
    fn mark_end(&mut self, id: u64) {
        match self.events.back_mut() {
            Some(Event::Request {
                stream, end_stream, ..
            })
            | Some(Event::Data {
                stream, end_stream, ..
            }) if *stream == id => *end_stream = true,
            _ => self.events.push_back(Event::Data {
                stream: id,
                data: Vec::new(),
                end_stream: true,
            }),
        }
    }

    /// A section the encoder stream unblocked: go on with the stream where it stopped.
    pub(super) fn on_unblocked(&mut self, id: u64, decoded: Decoded) {
        let Some(mut s) = self.requests.remove(&id) else {
            return;
        };
        let Phase::Blocked { trailers } = s.phase else {
            self.requests.insert(id, s);
            return;
        };
        s.phase = if trailers { Phase::Body } else { Phase::Head };
        let held = std::mem::take(&mut s.held);
        let result = self
            .on_section(id, &mut s, decoded, trailers)
            .and_then(|()| {
                self.read_frames(id, &mut s, &held)?;
                self.maybe_end(id, &mut s)
            });
        if s.phase != Phase::Done {
            self.requests.insert(id, s);
        }
        self.settle(id, result);
    }
}

fn check_length(s: &RequestStream) -> Result<(), Error> {
    match s.content_length {
        Some(cl) if cl != s.received => Err(stream(
            ErrorCode::MessageError,
            "body shorter than Content-Length",
        )),
        _ => Ok(()),
    }
}
