//! The QPACK decoder of one connection (RFC 9204 §2.2, §4.4): the dynamic table the peer's
//! encoder stream fills, the field sections of request streams (decoded at once, or held
//! while blocked on inserts not yet received), and the instructions our decoder stream
//! sends back: Section Acknowledgment, Stream Cancellation, Insert Count Increment.

use super::prefix::write_int;
use super::section::{decode_lines, read_prefix, Decoded, Prefix, SectionLimits};
use super::static_table;
use super::table::{parse_instruction, DynamicTable, Instruction};
use crate::counters::Flood;
use crate::error::{conn, Error, ErrorCode};
use crate::limits::Limits;

/// What became of a field section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Decoded(Decoded),
    /// It needs inserts not received yet (§2.1.2); it is decoded when they arrive and
    /// returned by [`Decoder::feed_encoder`].
    Blocked,
}

struct Blocked {
    stream: u64,
    prefix: Prefix,
    block: Vec<u8>,
}

pub struct Decoder {
    table: DynamicTable,
    limits: SectionLimits,
    max_blocked: u64,
    max_instruction: usize,
    /// Encoder-stream bytes not yet a whole instruction.
    encoder_buf: Vec<u8>,
    blocked: Vec<Blocked>,
    /// What the peer's encoder knows we received (§2.2.2.3): raised by our section
    /// acknowledgments and insert count increments.
    known_received: u64,
    /// Decoder-stream bytes to send.
    instructions: Vec<u8>,
}

fn failed(why: &'static str) -> Error {
    conn(ErrorCode::QpackDecompressionFailed, why)
}

fn encoder_error(why: &'static str) -> Error {
    conn(ErrorCode::QpackEncoderStreamError, why)
}

impl Decoder {
    pub fn new(limits: &Limits) -> Decoder {
        Decoder {
            table: DynamicTable::new(limits.qpack_max_table_capacity),
            limits: SectionLimits {
                max_size: limits.max_field_section_size,
                max_fields: limits.max_header_fields as usize,
            },
            max_blocked: limits.qpack_blocked_streams,
            max_instruction: limits.max_encoder_instruction(),
            encoder_buf: Vec::new(),
            blocked: Vec::new(),
            known_received: 0,
            instructions: Vec::new(),
        }
    }

    /// Gives back the capacity of the buffers that are empty (see
    /// `Connection::release_idle`); the dynamic table keeps its entries.
    pub fn release_idle(&mut self) {
        for buf in [&mut self.encoder_buf, &mut self.instructions] {
            if buf.is_empty() {
                buf.shrink_to_fit();
            }
        }
        if self.blocked.is_empty() {
            self.blocked.shrink_to_fit();
        }
    }

    /// Decodes the field section of a HEADERS frame on `stream`, or holds it while it is
    /// blocked. A stream has at most one section held: its caller reads nothing more of
    /// the stream until it is decoded.
    pub fn decode_section(&mut self, stream: u64, block: Vec<u8>) -> Result<Outcome, Error> {
        let prefix = read_prefix(&block, &self.table).map_err(failed)?;
        if prefix.required_insert_count > self.table.insert_count() {
            if self.blocked.len() as u64 >= self.max_blocked {
                return Err(Error::Flood(Flood::BlockedStreams));
            }
            self.blocked.push(Blocked {
                stream,
                prefix,
                block,
            });
            return Ok(Outcome::Blocked);
        }
        self.finish(stream, prefix, &block).map(Outcome::Decoded)
    }

    fn finish(&mut self, stream: u64, prefix: Prefix, block: &[u8]) -> Result<Decoded, Error> {
        let decoded = decode_lines(block, prefix, &self.table, self.limits).map_err(failed)?;
        // §4.4.1: acknowledge every section that referenced the dynamic table.
        if prefix.required_insert_count > 0 {
            write_int(&mut self.instructions, 0x80, 7, stream);
            self.known_received = self.known_received.max(prefix.required_insert_count);
        }
        Ok(decoded)
    }

    /// Takes bytes of the peer's encoder stream: applies each whole instruction, and after
    /// each one decodes the held sections it unblocked, appending them to `unblocked`.
    pub fn feed_encoder(
        &mut self,
        bytes: &[u8],
        unblocked: &mut Vec<(u64, Decoded)>,
    ) -> Result<(), Error> {
        self.encoder_buf.extend_from_slice(bytes);
        let mut at = 0;
        let result = loop {
            match parse_instruction(&self.encoder_buf[at..]) {
                Ok(Some((ins, n))) => {
                    at += n;
                    if let Err(e) = self.apply(ins).and_then(|()| self.unblock(unblocked)) {
                        break Err(e);
                    }
                }
                Ok(None) => break Ok(()),
                Err(why) => break Err(encoder_error(why)),
            }
        };
        self.encoder_buf.drain(..at);
        result?;
        if self.encoder_buf.len() > self.max_instruction {
            return Err(Error::Flood(Flood::EncoderInstruction));
        }
        // §4.4.3: tell the encoder about inserts no acknowledgment covered.
        let count = self.table.insert_count();
        if count > self.known_received {
            write_int(&mut self.instructions, 0x00, 6, count - self.known_received);
            self.known_received = count;
        }
        Ok(())
    }

    fn apply(&mut self, ins: Instruction) -> Result<(), Error> {
        let (name, value): (Box<[u8]>, Box<[u8]>) = match ins {
            Instruction::SetCapacity(c) => {
                return self
                    .table
                    .set_capacity(c)
                    .map_err(|_| Error::Flood(Flood::TableCapacity));
            }
            Instruction::InsertWithNameRef {
                is_static: true,
                index,
                value,
            } => {
                let (name, _) = static_table::get(index)
                    .ok_or_else(|| encoder_error("static index out of range"))?;
                (name.into(), value.into())
            }
            Instruction::InsertWithNameRef { index, value, .. } => {
                let (name, _) = self.relative(index)?;
                (name.into(), value.into())
            }
            Instruction::InsertWithLiteralName { name, value } => (name.into(), value.into()),
            Instruction::Duplicate(index) => {
                let (name, value) = self.relative(index)?;
                (name.into(), value.into())
            }
        };
        self.table.insert(name, value).map_err(encoder_error)
    }

    fn relative(&self, index: u64) -> Result<(&[u8], &[u8]), Error> {
        self.table
            .get_relative(index)
            .ok_or_else(|| encoder_error("dynamic index not in the table"))
    }

    fn unblock(&mut self, unblocked: &mut Vec<(u64, Decoded)>) -> Result<(), Error> {
        let count = self.table.insert_count();
        let mut i = 0;
        while i < self.blocked.len() {
            if self.blocked[i].prefix.required_insert_count > count {
                i += 1;
                continue;
            }
            let b = self.blocked.remove(i);
            let decoded = self.finish(b.stream, b.prefix, &b.block)?;
            unblocked.push((b.stream, decoded));
        }
        Ok(())
    }

    /// The stream was reset or its reading abandoned (§4.4.2): forget its held section and
    /// tell the peer's encoder, which may then release the entries it referenced.
    pub fn cancel_stream(&mut self, stream: u64) {
        self.blocked.retain(|b| b.stream != stream);
        if self.table.max_capacity() > 0 {
            write_int(&mut self.instructions, 0x40, 6, stream);
        }
    }

    /// Bytes the decoder holds for the peer: its dynamic table's entries, a partial
    /// encoder instruction, blocked sections, instructions not yet taken.
    pub fn held_bytes(&self) -> usize {
        let table = usize::try_from(self.table.size()).unwrap_or(usize::MAX);
        let blocked: usize = self.blocked.iter().map(|b| b.block.len()).sum();
        table
            .saturating_add(self.encoder_buf.len())
            .saturating_add(blocked)
            .saturating_add(self.instructions.len())
    }

    pub fn is_blocked(&self, stream: u64) -> bool {
        self.blocked.iter().any(|b| b.stream == stream)
    }

    pub fn blocked_streams(&self) -> usize {
        self.blocked.len()
    }

    /// Decoder-stream bytes to send, taken.
    pub fn take_instructions(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.instructions)
    }
}

#[cfg(test)]
#[path = "decoder_tests.rs"]
mod tests;
