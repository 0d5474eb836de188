//! Incremental, zero-copy decoding of the chunked transfer coding
//! (RFC 9112 §7.1).
//!
//! The decoder keeps a few integers of state and never buffers: each call
//! reports how many input bytes it consumed and where the data bytes are
//! within them. Everything consumed belongs to the message, so a proxy
//! that forwards the body as received can pass `input[..consumed]` on
//! verbatim once the decoder has accepted it; one that re-encodes uses the
//! data ranges.

use std::ops::Range;

use crate::byteset::{FIELD_VALUE, TCHAR};
use crate::error::ParseError;
use crate::limits::Limits;

/// At most 16 hexadecimal digits: every such size fits a `u64`, and
/// nothing sane pads further.
const MAX_SIZE_DIGITS: u8 = 16;

/// The result of one decoding step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// Input bytes consumed by this step; all belong to this message.
    pub consumed: usize,
    /// Body data within the consumed bytes (possibly empty).
    pub data: Range<usize>,
    /// The message body is complete; input past `consumed` belongs to
    /// the next message.
    pub done: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Reading the hex digits of a chunk size.
    Size { digits: u8 },
    /// Whitespace after the size; only `;` may follow.
    SizeSpace,
    /// After `;`, before the extension name.
    ExtensionStart,
    /// Inside an extension, up to CR.
    Extension,
    /// CR seen at the end of a chunk line.
    SizeLf,
    /// Inside chunk data.
    Data,
    /// Expecting the CR after chunk data.
    DataCr,
    /// Expecting the LF after chunk data.
    DataLf,
    /// Start of a trailer line (or of the final empty line).
    TrailerStart,
    /// Inside a trailer field name.
    TrailerName,
    /// Inside a trailer field value.
    TrailerValue,
    /// CR seen at the end of a trailer line.
    TrailerLf,
    /// CR seen on the final empty line.
    FinalLf,
    /// The body is complete.
    Done,
}

/// Decoder for one chunked body.
#[derive(Clone, Debug)]
pub struct ChunkedDecoder {
    state: State,
    /// Size being parsed, then data bytes left in the current chunk.
    chunk: u64,
    /// Data bytes so far, to enforce the body limit.
    total: u64,
    extension_len: usize,
    trailer_len: usize,
    max_body: Option<u64>,
    max_extension: usize,
    max_trailer: usize,
    trailers_seen: bool,
    /// The trailer section's field lines as received (bounded by `max_trailer`), for a
    /// forwarder that re-encodes the body and must choose which trailer fields go on.
    trailer: Vec<u8>,
}

impl ChunkedDecoder {
    /// A decoder bounded by `limits` (body, extension and trailer sizes).
    pub fn new(limits: &Limits) -> Self {
        ChunkedDecoder {
            state: State::Size { digits: 0 },
            chunk: 0,
            total: 0,
            extension_len: 0,
            trailer_len: 0,
            max_body: limits.max_body_bytes,
            max_extension: limits.max_chunk_ext_bytes,
            max_trailer: limits.max_trailer_bytes,
            trailers_seen: false,
            trailer: Vec::new(),
        }
    }

    /// Whether the final chunk and trailer section have been consumed.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Body data bytes decoded so far.
    pub fn data_len(&self) -> u64 {
        self.total
    }

    /// Whether the body carried at least one trailer field. A proxy that
    /// re-encodes drops them; one that forwards verbatim passes them on.
    pub fn trailers_seen(&self) -> bool {
        self.trailers_seen
    }

    /// The trailer field lines received so far (`name: value\r\n` each, already
    /// validated), without the final empty line.
    pub fn trailer_section(&self) -> &[u8] {
        &self.trailer
    }

    /// Decodes from the start of `input` up to the end of the first run of
    /// data (so that one step reports at most one range), or to the end of
    /// the input, or to the end of the body.
    pub fn decode(&mut self, input: &[u8]) -> Result<Step, ParseError> {
        let mut pos = 0;
        while let Some(&byte) = input.get(pos) {
            if self.state == State::Done {
                break;
            }
            if self.state == State::Data {
                let available = (input.len() - pos) as u64;
                let take = self.chunk.min(available);
                // `take` is at most `available`, which came from a usize.
                let end = pos + take as usize;
                self.chunk -= take;
                if self.chunk == 0 {
                    self.state = State::DataCr;
                }
                return Ok(Step {
                    consumed: end,
                    data: pos..end,
                    done: false,
                });
            }
            self.state = self.advance(byte)?;
            pos += 1;
        }
        Ok(Step {
            consumed: pos,
            data: pos..pos,
            done: self.state == State::Done,
        })
    }

    /// Decodes all of `input` (or up to the end of the body), calling
    /// `on_data` with each run of data. Returns the bytes consumed and
    /// whether the body is complete.
    pub fn decode_all(
        &mut self,
        input: &[u8],
        mut on_data: impl FnMut(&[u8]),
    ) -> Result<(usize, bool), ParseError> {
        let mut offset = 0;
        loop {
            let rest = input.get(offset..).unwrap_or(&[]);
            let step = self.decode(rest)?;
            if let Some(data) = rest.get(step.data.clone()) {
                if !data.is_empty() {
                    on_data(data);
                }
            }
            offset += step.consumed;
            if step.done || step.consumed == 0 || offset >= input.len() {
                return Ok((offset, step.done));
            }
        }
    }

    /// One byte of framing: the whole grammar outside chunk data.
    fn advance(&mut self, byte: u8) -> Result<State, ParseError> {
        match self.state {
            State::Size { digits } => self.size_byte(digits, byte),
            State::SizeSpace | State::ExtensionStart | State::Extension => {
                self.extension_byte(byte)
            }
            State::SizeLf | State::DataCr | State::DataLf | State::FinalLf => {
                self.line_end_byte(byte)
            }
            State::TrailerStart | State::TrailerName | State::TrailerValue | State::TrailerLf => {
                self.trailer_byte(byte)
            }
            // `decode` never calls this in these states.
            State::Data | State::Done => Ok(self.state),
        }
    }

    /// A byte of the chunk size, or the first byte after it.
    fn size_byte(&mut self, digits: u8, byte: u8) -> Result<State, ParseError> {
        Ok(match hex_value(byte) {
            Some(value) if digits < MAX_SIZE_DIGITS => {
                // 16 digits of 4 bits: cannot overflow a u64.
                self.chunk = (self.chunk << 4) | u64::from(value);
                State::Size { digits: digits + 1 }
            }
            Some(_) => return Err(ParseError::InvalidChunkSize),
            None if digits == 0 => return Err(ParseError::InvalidChunkSize),
            None => {
                self.size_complete()?;
                self.extension_len = 0;
                if byte != b'\r' {
                    // The extension's length includes the `;` or blank.
                    self.count_extension_byte()?;
                }
                match byte {
                    b'\r' => State::SizeLf,
                    b';' => State::ExtensionStart,
                    b' ' | b'\t' => State::SizeSpace,
                    _ => return Err(ParseError::InvalidChunkSize),
                }
            }
        })
    }

    /// A byte between the chunk size and the CR ending its line: blanks
    /// and chunk extensions.
    fn extension_byte(&mut self, byte: u8) -> Result<State, ParseError> {
        Ok(match self.state {
            State::SizeSpace => {
                self.count_extension_byte()?;
                match byte {
                    b' ' | b'\t' => State::SizeSpace,
                    b';' => State::ExtensionStart,
                    _ => return Err(ParseError::InvalidChunkExtension),
                }
            }
            State::ExtensionStart => {
                self.count_extension_byte()?;
                match byte {
                    b' ' | b'\t' => State::ExtensionStart,
                    b if TCHAR.contains(b) => State::Extension,
                    _ => return Err(ParseError::InvalidChunkExtension),
                }
            }
            // `State::Extension`, the only other state `advance` sends here.
            _ => match byte {
                b'\r' => State::SizeLf,
                // Names, `=`, values and quoted strings: any visible byte
                // or blank. A CR or LF inside quotes is still refused, so
                // the line always ends at the first CR.
                b if FIELD_VALUE.contains(b) => {
                    self.count_extension_byte()?;
                    State::Extension
                }
                _ => return Err(ParseError::InvalidChunkExtension),
            },
        })
    }

    /// The CR or LF expected after a chunk line, after chunk data, or on
    /// the final empty line.
    fn line_end_byte(&self, byte: u8) -> Result<State, ParseError> {
        match (self.state, byte) {
            (State::SizeLf, b'\n') if self.chunk == 0 => Ok(State::TrailerStart),
            (State::SizeLf, b'\n') => Ok(State::Data),
            (State::DataCr, b'\r') => Ok(State::DataLf),
            (State::DataLf, b'\n') => Ok(State::Size { digits: 0 }),
            (State::FinalLf, b'\n') => Ok(State::Done),
            _ => Err(ParseError::MissingChunkCrlf),
        }
    }

    /// A byte of the trailer section, counted against its limit and kept
    /// when trailers are kept.
    fn trailer_byte(&mut self, byte: u8) -> Result<State, ParseError> {
        if self.state == State::TrailerStart {
            return match byte {
                b'\r' => {
                    self.count_trailer_byte()?;
                    Ok(State::FinalLf)
                }
                b if TCHAR.contains(b) => {
                    self.count_trailer_byte()?;
                    self.keep_trailer_byte(b);
                    self.trailers_seen = true;
                    Ok(State::TrailerName)
                }
                // Includes SP/HTAB: obs-fold is refused in trailers too.
                _ => Err(ParseError::InvalidTrailer),
            };
        }
        self.count_trailer_byte()?;
        self.keep_trailer_byte(byte);
        match (self.state, byte) {
            (State::TrailerName, b':') => Ok(State::TrailerValue),
            (State::TrailerName, b) if TCHAR.contains(b) => Ok(State::TrailerName),
            (State::TrailerValue, b'\r') => Ok(State::TrailerLf),
            (State::TrailerValue, b) if FIELD_VALUE.contains(b) => Ok(State::TrailerValue),
            (State::TrailerLf, b'\n') => Ok(State::TrailerStart),
            _ => Err(ParseError::InvalidTrailer),
        }
    }

    /// A chunk size has been read: enforce the body limit before any of
    /// its data arrives.
    fn size_complete(&mut self) -> Result<(), ParseError> {
        self.total = self
            .total
            .checked_add(self.chunk)
            .ok_or(ParseError::BodyTooLarge)?;
        match self.max_body {
            Some(max) if self.total > max => Err(ParseError::BodyTooLarge),
            _ => Ok(()),
        }
    }

    fn count_extension_byte(&mut self) -> Result<(), ParseError> {
        self.extension_len = self.extension_len.saturating_add(1);
        if self.extension_len > self.max_extension {
            return Err(ParseError::InvalidChunkExtension);
        }
        Ok(())
    }

    fn count_trailer_byte(&mut self) -> Result<(), ParseError> {
        self.trailer_len = self.trailer_len.saturating_add(1);
        if self.trailer_len > self.max_trailer {
            return Err(ParseError::TrailerTooLarge);
        }
        Ok(())
    }

    /// Keeps a byte of a trailer field line (never more than `max_trailer`, counted above).
    fn keep_trailer_byte(&mut self, byte: u8) {
        self.trailer.push(byte);
    }
}

fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}
