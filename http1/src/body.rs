//! Body decoding for every framing, behind one type the event loop can
//! hold per message.

use crate::chunked::{ChunkedDecoder, Step};
use crate::error::ParseError;
use crate::limits::Limits;
use crate::message::BodyFraming;

/// A Content-Length body: a counter.
#[derive(Clone, Debug)]
pub struct LengthDecoder {
    remaining: u64,
}

impl LengthDecoder {
    /// A body of exactly `length` bytes.
    pub fn new(length: u64) -> Self {
        LengthDecoder { remaining: length }
    }

    /// Bytes still expected.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Takes as much of `input` as belongs to the body.
    pub fn decode(&mut self, input: &[u8]) -> Step {
        let take = self.remaining.min(input.len() as u64);
        self.remaining -= take;
        // `take` is at most `input.len()`.
        let take = take as usize;
        Step {
            consumed: take,
            data: 0..take,
            done: self.remaining == 0,
        }
    }
}

/// A decoder for any framing. Feed it what follows the head; it says how
/// much is body and where the data is. It never copies or buffers.
#[derive(Clone, Debug)]
pub enum BodyDecoder {
    /// No body.
    Empty,
    /// Content-Length.
    Length(LengthDecoder),
    /// Chunked.
    Chunked(ChunkedDecoder),
    /// Until the connection closes; counts bytes against the body limit.
    UntilClose {
        /// Data bytes so far.
        seen: u64,
        /// Limit, from `Limits::max_body_bytes`.
        max: Option<u64>,
    },
}

impl BodyDecoder {
    /// The decoder for a head's framing.
    pub fn new(framing: BodyFraming, limits: &Limits) -> Self {
        match framing {
            BodyFraming::None => BodyDecoder::Empty,
            BodyFraming::Length(length) => BodyDecoder::Length(LengthDecoder::new(length)),
            BodyFraming::Chunked => BodyDecoder::Chunked(ChunkedDecoder::new(limits)),
            BodyFraming::CloseDelimited => BodyDecoder::UntilClose {
                seen: 0,
                max: limits.max_body_bytes,
            },
        }
    }

    /// One step; see [`ChunkedDecoder::decode`]. A response body's length
    /// limit is checked here too (a request's Content-Length was checked
    /// against it when the head was parsed).
    pub fn decode(&mut self, input: &[u8]) -> Result<Step, ParseError> {
        match self {
            BodyDecoder::Empty => Ok(Step {
                consumed: 0,
                data: 0..0,
                done: true,
            }),
            BodyDecoder::Length(decoder) => Ok(decoder.decode(input)),
            BodyDecoder::Chunked(decoder) => decoder.decode(input),
            BodyDecoder::UntilClose { seen, max } => {
                *seen = seen.saturating_add(input.len() as u64);
                if matches!(max, Some(max) if *seen > *max) {
                    return Err(ParseError::BodyTooLarge);
                }
                Ok(Step {
                    consumed: input.len(),
                    data: 0..input.len(),
                    done: false,
                })
            }
        }
    }

    /// Whether the whole body has been consumed (never, for a
    /// close-delimited body: that ends with [`BodyDecoder::finish_at_eof`]).
    pub fn is_done(&self) -> bool {
        match self {
            BodyDecoder::Empty => true,
            BodyDecoder::Length(decoder) => decoder.remaining() == 0,
            BodyDecoder::Chunked(decoder) => decoder.is_done(),
            BodyDecoder::UntilClose { .. } => false,
        }
    }

    /// The peer closed the connection in order (a read returned 0): fine
    /// for a close-delimited body or a complete one, otherwise the message
    /// was truncated. A reset or a failed read is no end for a
    /// close-delimited body (RFC 9112 §8): do not call this then.
    pub fn finish_at_eof(&self) -> Result<(), ParseError> {
        match self {
            BodyDecoder::UntilClose { .. } => Ok(()),
            _ if self.is_done() => Ok(()),
            _ => Err(ParseError::IncompleteBody),
        }
    }
}
