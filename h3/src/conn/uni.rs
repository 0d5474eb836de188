//! The peer's unidirectional streams (RFC 9114 §6.2): typed by their first varint; the
//! control stream's frames (§6.2.1, §7.2), the QPACK encoder stream (into our decoder) and
//! decoder stream (about our encoder, RFC 9204 §4.2).

use super::Connection;
use crate::counters::Flood;
use crate::error::{conn, Error, ErrorCode};
use crate::event::Event;
use crate::frame::{Frame, FrameReader, Piece, StreamKind};
use crate::qpack::prefix::{read_int, Bad};
use crate::settings::PeerSettings;
use crate::varint;

pub const CONTROL: u64 = 0x00;
pub const PUSH: u64 = 0x01;
pub const ENCODER: u64 = 0x02;
pub const DECODER: u64 = 0x03;

/// A unidirectional stream's stage.
pub enum Uni {
    /// Its type is not whole yet: the bytes of the varint so far.
    Opening(Vec<u8>),
    Control(ControlStream),
    Encoder,
    /// The peer's decoder stream, with a partial instruction.
    Decoder(Vec<u8>),
    /// A reserved or unknown type (§6.2): its bytes are dropped.
    Ignored,
}

impl Uni {
    /// Input held until it is whole (a type, a control frame, a decoder instruction).
    pub fn held_bytes(&self) -> usize {
        match self {
            Uni::Opening(buf) | Uni::Decoder(buf) => buf.len(),
            Uni::Control(c) => c.reader.buffered(),
            Uni::Encoder | Uni::Ignored => 0,
        }
    }
}

pub struct ControlStream {
    reader: FrameReader,
    settings: bool,
    skipped: u32,
}

fn creation(reason: &'static str) -> Error {
    conn(ErrorCode::StreamCreationError, reason)
}

impl Connection {
    pub(super) fn recv_uni(&mut self, id: u64, data: &[u8], fin: bool) -> Result<(), Error> {
        let mut input = data;
        let mut stage = self.uni.remove(&id).unwrap_or(Uni::Opening(Vec::new()));
        if let Uni::Opening(buf) = &mut stage {
            while varint::read(buf).is_none() {
                let Some((&b, rest)) = input.split_first() else {
                    break;
                };
                buf.push(b);
                input = rest;
            }
            let Some((ty, _)) = varint::read(buf) else {
                // §6.2: a stream that ends before its type is ignored.
                if !fin {
                    self.uni.insert(id, stage);
                }
                return Ok(());
            };
            stage = self.open_uni(id, ty)?;
        }
        let result = match &mut stage {
            Uni::Control(c) => self.on_control(c, input),
            Uni::Encoder => self.on_encoder(input),
            Uni::Decoder(buf) => on_decoder(buf, input),
            Uni::Opening(_) | Uni::Ignored => Ok(()),
        };
        result?;
        if fin && self.critical.contains(id) {
            return Err(conn(
                ErrorCode::ClosedCriticalStream,
                "critical stream closed",
            ));
        }
        if !fin {
            self.uni.insert(id, stage);
        }
        Ok(())
    }

    /// §6.2.1, §6.2.2, RFC 9204 §4.2: one control, encoder and decoder stream each, and no
    /// push stream from a client.
    fn open_uni(&mut self, id: u64, ty: u64) -> Result<Uni, Error> {
        let slot = match ty {
            CONTROL => &mut self.critical.control,
            ENCODER => &mut self.critical.encoder,
            DECODER => &mut self.critical.decoder,
            PUSH => return Err(creation("push stream from a client")),
            _ => return Ok(Uni::Ignored),
        };
        if slot.is_some() {
            return Err(creation("a second control, encoder or decoder stream"));
        }
        *slot = Some(id);
        Ok(match ty {
            CONTROL => Uni::Control(ControlStream {
                reader: FrameReader::new(StreamKind::Control),
                settings: false,
                skipped: 0,
            }),
            ENCODER => Uni::Encoder,
            _ => Uni::Decoder(Vec::new()),
        })
    }

    fn on_control(&mut self, c: &mut ControlStream, mut input: &[u8]) -> Result<(), Error> {
        loop {
            let piece = match c.reader.next(&mut input, &self.limits) {
                Ok(Some(piece)) => piece,
                Ok(None) => return Ok(()),
                // §6.2.1: whatever comes first other than SETTINGS is H3_MISSING_SETTINGS.
                Err(Error::Connection(e))
                    if !c.settings && e.code == ErrorCode::FrameUnexpected =>
                {
                    return Err(missing_settings())
                }
                Err(e) => return Err(e),
            };
            match piece {
                Piece::Frame(Frame::Settings(pairs)) => {
                    if c.settings {
                        return Err(conn(ErrorCode::FrameUnexpected, "a second SETTINGS"));
                    }
                    c.settings = true;
                    self.peer = Some(PeerSettings::from_pairs(&pairs)?);
                }
                _ if !c.settings => return Err(missing_settings()),
                Piece::Skipped { .. } => {
                    c.skipped += 1;
                    self.counters.skipped_frames += 1;
                    if c.skipped > self.limits.max_skipped_frames {
                        return Err(Error::Flood(Flood::SkippedFrames));
                    }
                }
                Piece::Frame(frame) => self.on_control_frame(frame)?,
                Piece::Data { .. } | Piece::Oversized { .. } => {
                    return Err(conn(
                        ErrorCode::FrameUnexpected,
                        "DATA or HEADERS on control",
                    ))
                }
            }
        }
    }

    /// GOAWAY, MAX_PUSH_ID and CANCEL_PUSH from a client (§5.2, §7.2.3, §7.2.7).
    fn on_control_frame(&mut self, frame: Frame) -> Result<(), Error> {
        let id_error = |why| conn(ErrorCode::IdError, why);
        match frame {
            Frame::GoAway(id) => {
                if self.peer_goaway.is_some_and(|prev| id > prev) {
                    return Err(id_error("GOAWAY with a larger ID than the last"));
                }
                self.peer_goaway = Some(id);
                self.events.push_back(Event::GoAway { push_id: id });
            }
            Frame::MaxPushId(id) => {
                if self.max_push_id.is_some_and(|prev| id < prev) {
                    return Err(id_error("MAX_PUSH_ID lower than before"));
                }
                self.max_push_id = Some(id);
            }
            // We never push: a CANCEL_PUSH can only name a push ID the client allowed.
            Frame::CancelPush(id) => {
                if self.max_push_id.is_none_or(|max| id > max) {
                    return Err(id_error("CANCEL_PUSH above MAX_PUSH_ID"));
                }
            }
            Frame::Settings(_) | Frame::Headers(_) => {
                return Err(conn(ErrorCode::FrameUnexpected, "frame out of place"))
            }
        }
        Ok(())
    }

    fn on_encoder(&mut self, input: &[u8]) -> Result<(), Error> {
        let mut unblocked = Vec::new();
        let result = self.qpack.feed_encoder(input, &mut unblocked);
        for (stream, decoded) in unblocked {
            self.on_unblocked(stream, decoded);
        }
        result
    }
}

fn missing_settings() -> Error {
    conn(
        ErrorCode::MissingSettings,
        "first control frame not SETTINGS",
    )
}

/// The peer's decoder stream, about our encoder (RFC 9204 §4.4). Our sections never
/// reference the dynamic table, so a Section Acknowledgment or an Insert Count Increment
/// can only be wrong (§4.4.1, §4.4.3: QPACK_DECODER_STREAM_ERROR); a Stream Cancellation
/// is allowed and means nothing to us.
fn on_decoder(buf: &mut Vec<u8>, input: &[u8]) -> Result<(), Error> {
    let bad = |why| conn(ErrorCode::QpackDecoderStreamError, why);
    buf.extend_from_slice(input);
    let mut at = 0;
    while let Some(&first) = buf.get(at) {
        let prefix = if first & 0x80 != 0 { 7 } else { 6 };
        match read_int(buf, &mut at, prefix) {
            Ok(_) if first & 0x80 != 0 => {
                return Err(bad("Section Acknowledgment of a section that needs none"))
            }
            Ok(_) if first & 0x40 == 0 => {
                return Err(bad("Insert Count Increment beyond our inserts (none)"))
            }
            Ok(_) => {}
            Err(Bad::Incomplete) => break,
            Err(Bad::Invalid(why)) => return Err(bad(why)),
        }
    }
    buf.drain(..at);
    Ok(())
}
