//! HTTP/3 frames (RFC 9114 §7): a type and a length as varints, then the payload. A
//! [`FrameReader`] takes a stream's bytes in whatever pieces they arrive and hands out
//! [`Piece`]s: DATA payload as it comes (never buffered), the other frames whole (buffered
//! up to their limit), and the header of every frame whose type is skipped.
//!
//! The reader knows which kind of stream it reads (§7.2, table 1 of §7): a frame type that
//! may not appear there at all is H3_FRAME_UNEXPECTED when its header arrives, before any
//! payload is kept. The order of frames (SETTINGS first, HEADERS before DATA) is the
//! stream's own rule, in `conn`.

use crate::counters::Flood;
use crate::error::{conn, Error, ErrorCode};
use crate::limits::Limits;
use crate::varint;

pub const DATA: u64 = 0x0;
pub const HEADERS: u64 = 0x1;
pub const CANCEL_PUSH: u64 = 0x3;
pub const SETTINGS: u64 = 0x4;
pub const PUSH_PROMISE: u64 = 0x5;
pub const GOAWAY: u64 = 0x7;
pub const MAX_PUSH_ID: u64 = 0xd;

/// HTTP/2 frame types with no HTTP/3 meaning (§7.2.8, §11.2.1): PRIORITY, PING,
/// WINDOW_UPDATE, CONTINUATION. Receiving one is H3_FRAME_UNEXPECTED.
pub fn is_http2_only(ty: u64) -> bool {
    matches!(ty, 0x2 | 0x6 | 0x8 | 0x9)
}

/// Reserved types `0x1f * N + 0x21` (§7.2.8), sent to exercise the rule that unknown types
/// are skipped ("greasing").
pub fn is_reserved(ty: u64) -> bool {
    ty >= 0x21 && (ty - 0x21).is_multiple_of(0x1f)
}

/// Which stream a reader reads: the frames allowed differ (§7.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// A request stream: DATA and HEADERS (PUSH_PROMISE only from a server).
    Request,
    /// The peer's control stream: SETTINGS, GOAWAY, MAX_PUSH_ID, CANCEL_PUSH.
    Control,
}

/// A complete frame other than DATA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// An encoded field section (QPACK).
    Headers(Vec<u8>),
    CancelPush(u64),
    /// Identifier and value pairs, as received (checked by `settings`).
    Settings(Vec<(u64, u64)>),
    /// From a client, the push ID after which it will process no pushes (§5.2).
    GoAway(u64),
    MaxPushId(u64),
}

/// What the reader found next in a stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Part of a DATA frame's payload. `end` is set on the frame's last part; an empty DATA
    /// frame is one empty part with `end`.
    Data {
        chunk: &'a [u8],
        end: bool,
    },
    Frame(Frame),
    /// The header of a frame of unknown or reserved type; its payload is skipped unread.
    Skipped {
        ty: u64,
        len: u64,
    },
    /// A HEADERS frame longer than `max_field_section_size`: skipped unread, so the stream
    /// can be answered (431) while its connection goes on.
    Oversized {
        len: u64,
    },
}

enum State {
    /// Between frames; `FrameReader::head` holds the part of a header read so far.
    Head,
    /// A frame buffered whole until `left` more bytes arrive.
    Body { ty: u64, left: u64 },
    /// DATA payload, handed out as it comes.
    Data { left: u64 },
    /// A payload read and dropped.
    Skip { left: u64 },
}

/// The incremental frame reader of one stream.
pub struct FrameReader {
    kind: StreamKind,
    state: State,
    /// Type and length varints: at most 8 bytes each.
    head: [u8; 16],
    head_len: usize,
    payload: Vec<u8>,
}

impl FrameReader {
    pub fn new(kind: StreamKind) -> FrameReader {
        FrameReader {
            kind,
            state: State::Head,
            head: [0; 16],
            head_len: 0,
            payload: Vec::new(),
        }
    }

    /// Bytes of a frame read and kept until it is whole (its header, a HEADERS or control
    /// frame's payload; DATA is passed through).
    pub fn buffered(&self) -> usize {
        self.head_len + self.payload.len()
    }

    /// True between frames: a stream may end only here (§7.1: a truncated last frame is
    /// H3_FRAME_ERROR).
    pub fn at_boundary(&self) -> bool {
        matches!(self.state, State::Head) && self.head_len == 0
    }

    /// The next piece from `input`, advancing it past what was used; `Ok(None)` when
    /// `input` is used up without completing one.
    pub fn next<'a>(
        &mut self,
        input: &mut &'a [u8],
        limits: &Limits,
    ) -> Result<Option<Piece<'a>>, Error> {
        loop {
            match self.state {
                State::Head => {
                    let Some((ty, len)) = self.read_head(input) else {
                        return Ok(None);
                    };
                    if let Some(piece) = self.start(ty, len, limits)? {
                        return Ok(Some(piece));
                    }
                }
                State::Data { left } => {
                    if input.is_empty() {
                        return Ok(None);
                    }
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(input.len());
                    let (chunk, rest) = input.split_at(n);
                    *input = rest;
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::Head
                    } else {
                        State::Data { left }
                    };
                    return Ok(Some(Piece::Data {
                        chunk,
                        end: left == 0,
                    }));
                }
                State::Skip { left } => {
                    if input.is_empty() {
                        return Ok(None);
                    }
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(input.len());
                    *input = &input[n..];
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::Head
                    } else {
                        State::Skip { left }
                    };
                }
                State::Body { ty, left } => {
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(input.len());
                    self.payload.extend_from_slice(&input[..n]);
                    *input = &input[n..];
                    if left > n as u64 {
                        self.state = State::Body {
                            ty,
                            left: left - n as u64,
                        };
                        return Ok(None);
                    }
                    self.state = State::Head;
                    let payload = std::mem::take(&mut self.payload);
                    return parse(ty, payload).map(|f| Some(Piece::Frame(f)));
                }
            }
        }
    }

    /// Moves bytes of `input` into the header buffer one at a time until both varints are
    /// whole; never takes a byte past the header.
    fn read_head(&mut self, input: &mut &[u8]) -> Option<(u64, u64)> {
        while let Some((&b, rest)) = input.split_first() {
            *input = rest;
            self.head[self.head_len] = b;
            self.head_len += 1;
            let Some((ty, n)) = varint::read(&self.head[..self.head_len]) else {
                continue;
            };
            if let Some((len, m)) = varint::read(&self.head[n..self.head_len]) {
                debug_assert_eq!(n + m, self.head_len);
                self.head_len = 0;
                return Some((ty, len));
            }
        }
        None
    }

    /// Decides what a frame whose header was just read becomes. `Ok(None)`: nothing to hand
    /// out yet (a payload to buffer or skip).
    fn start(
        &mut self,
        ty: u64,
        len: u64,
        limits: &Limits,
    ) -> Result<Option<Piece<'static>>, Error> {
        let request = self.kind == StreamKind::Request;
        let max = match ty {
            DATA | HEADERS if !request => {
                return Err(unexpected("DATA or HEADERS on the control stream"))
            }
            DATA => {
                if len == 0 {
                    return Ok(Some(Piece::Data {
                        chunk: &[],
                        end: true,
                    }));
                }
                self.state = State::Data { left: len };
                return Ok(None);
            }
            HEADERS if len > limits.max_field_section_size => {
                self.skip(len);
                return Ok(Some(Piece::Oversized { len }));
            }
            HEADERS => len,
            PUSH_PROMISE => return Err(unexpected("PUSH_PROMISE from a client")),
            CANCEL_PUSH | SETTINGS | GOAWAY | MAX_PUSH_ID if request => {
                return Err(unexpected("control frame on a request stream"))
            }
            SETTINGS if len > limits.max_settings_size => {
                return Err(Error::Flood(Flood::SettingsSize))
            }
            SETTINGS => len,
            CANCEL_PUSH | GOAWAY | MAX_PUSH_ID if len > 8 => {
                return Err(conn(
                    ErrorCode::FrameError,
                    "frame longer than its one varint",
                ))
            }
            CANCEL_PUSH | GOAWAY | MAX_PUSH_ID => len,
            ty if is_http2_only(ty) => return Err(unexpected("HTTP/2 frame type")),
            _ => {
                self.skip(len);
                return Ok(Some(Piece::Skipped { ty, len }));
            }
        };
        if max == 0 {
            return parse(ty, Vec::new()).map(|f| Some(Piece::Frame(f)));
        }
        self.payload = Vec::with_capacity(usize::try_from(max).unwrap_or_default());
        self.state = State::Body { ty, left: max };
        Ok(None)
    }

    fn skip(&mut self, len: u64) {
        if len > 0 {
            self.state = State::Skip { left: len };
        }
    }
}

fn unexpected(reason: &'static str) -> Error {
    conn(ErrorCode::FrameUnexpected, reason)
}

/// Parses a buffered payload: one varint for CANCEL_PUSH, GOAWAY and MAX_PUSH_ID, pairs
/// for SETTINGS (§7.2). Anything else in the payload is H3_FRAME_ERROR (§7.1: "exactly").
fn parse(ty: u64, payload: Vec<u8>) -> Result<Frame, Error> {
    let bad = || conn(ErrorCode::FrameError, "frame payload not as its type says");
    let one = |p: &[u8]| match varint::read(p) {
        Some((v, n)) if n == p.len() => Ok(v),
        _ => Err(bad()),
    };
    match ty {
        HEADERS => Ok(Frame::Headers(payload)),
        CANCEL_PUSH => one(&payload).map(Frame::CancelPush),
        GOAWAY => one(&payload).map(Frame::GoAway),
        MAX_PUSH_ID => one(&payload).map(Frame::MaxPushId),
        _ => {
            let mut pairs = Vec::new();
            let mut at = &payload[..];
            while !at.is_empty() {
                let (id, n) = varint::read(at).ok_or_else(bad)?;
                let (value, m) = varint::read(&at[n..]).ok_or_else(bad)?;
                pairs.push((id, value));
                at = &at[n + m..];
            }
            Ok(Frame::Settings(pairs))
        }
    }
}

/// Appends a frame header.
pub fn write_head(out: &mut Vec<u8>, ty: u64, len: u64) {
    varint::write(out, ty);
    varint::write(out, len);
}

/// Appends a whole frame.
pub fn write(out: &mut Vec<u8>, ty: u64, payload: &[u8]) {
    write_head(out, ty, payload.len() as u64);
    out.extend_from_slice(payload);
}

/// Appends a frame whose payload is one varint (GOAWAY, MAX_PUSH_ID, CANCEL_PUSH).
pub fn write_varint_frame(out: &mut Vec<u8>, ty: u64, value: u64) {
    write_head(out, ty, varint::len(value) as u64);
    varint::write(out, value);
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
