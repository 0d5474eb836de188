//! The HPACK block decoder (RFC 7541 §3, §6): representations in, `(name, value)` out, and
//! the dynamic table kept in step with the peer's encoder.
//!
//! Structure is checked by the caller's pre-scan (size updates, truncation, index 0) before
//! a block gets here; this still refuses everything invalid on its own, since the table must
//! never be touched by a half-understood representation.

use std::collections::VecDeque;

use super::huffman;
use super::tables::STATIC_TABLE;
use super::{read_int, DecodeError};

fn bad(why: &'static str) -> DecodeError {
    DecodeError::Compression(why)
}

/// A dynamic table entry: name and value.
type Entry = (Box<[u8]>, Box<[u8]>);

/// The dynamic table (§2.3.2, §4): newest entry first, sizes counted as §4.1 says.
struct DynamicTable {
    entries: VecDeque<Entry>,
    size: usize,
    max: usize,
}

impl DynamicTable {
    fn entry_size(name: &[u8], value: &[u8]) -> usize {
        name.len() + value.len() + 32
    }

    fn evict_to(&mut self, room: usize) {
        while self.size > room {
            let Some((n, v)) = self.entries.pop_back() else {
                break;
            };
            self.size -= Self::entry_size(&n, &v);
        }
    }

    fn set_max(&mut self, max: usize) {
        self.max = max;
        self.evict_to(max);
    }

    /// §4.4: an entry larger than the table empties it and is not added.
    fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = Self::entry_size(name, value);
        if size > self.max {
            self.evict_to(0);
            return;
        }
        self.evict_to(self.max - size);
        self.entries.push_front((name.into(), value.into()));
        self.size += size;
    }

    /// Index as in §2.3.3: 1..=61 the static table, then the dynamic one, newest first.
    fn get(&self, index: usize) -> Option<(&[u8], &[u8])> {
        if index == 0 {
            return None;
        }
        if let Some(&(n, v)) = STATIC_TABLE.get(index - 1) {
            return Some((n, v));
        }
        self.entries
            .get(index - 1 - STATIC_TABLE.len())
            .map(|(n, v)| (&n[..], &v[..]))
    }
}

/// One connection's decoder: the table and two reusable buffers for Huffman strings.
pub(super) struct Decoder {
    table: DynamicTable,
    name: Vec<u8>,
    value: Vec<u8>,
}

/// A string literal (§5.2): raw bytes of `block`, or decoded into `buf`.
fn string<'a>(
    block: &'a [u8],
    at: &mut usize,
    buf: &'a mut Vec<u8>,
) -> Result<&'a [u8], DecodeError> {
    let huffman = block.get(*at).ok_or(bad("truncated string"))? & 0x80 != 0;
    let len = read_int(block, at, 7).ok_or(bad("bad string length"))?;
    let end = at
        .checked_add(len)
        .filter(|&e| e <= block.len())
        .ok_or(bad("truncated string"))?;
    let raw = &block[*at..end];
    *at = end;
    if !huffman {
        return Ok(raw);
    }
    buf.clear();
    huffman::decode(raw, buf).map_err(|e| match e {
        huffman::HuffmanError::Eos => bad("EOS in a Huffman string"),
        huffman::HuffmanError::Padding => bad("bad Huffman padding"),
    })?;
    Ok(buf)
}

impl Decoder {
    pub(super) fn new(max_table_size: usize) -> Decoder {
        Decoder {
            table: DynamicTable {
                entries: VecDeque::new(),
                size: 0,
                max: max_table_size,
            },
            name: Vec::new(),
            value: Vec::new(),
        }
    }

    /// Decodes `block`, calling `field` for each header field in order. A table size update
    /// is applied as it comes (the caller checked it against what we advertised).
    pub(super) fn decode(
        &mut self,
        block: &[u8],
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), DecodeError> {
        let mut at = 0;
        while at < block.len() {
            let first = block[at];
            if first & 0x80 != 0 {
                let index = read_int(block, &mut at, 7).ok_or(bad("bad index"))?;
                let (n, v) = self.table.get(index).ok_or(bad("index out of the table"))?;
                field(n, v);
            } else if first & 0xe0 == 0x20 {
                let size = read_int(block, &mut at, 5).ok_or(bad("bad size update"))?;
                self.table.set_max(size);
            } else {
                // 01: with incremental indexing (6-bit index); 0000 without, 0001 never
                // indexed (4-bit index).
                let indexing = first & 0xc0 == 0x40;
                let prefix = if indexing { 6 } else { 4 };
                let index = read_int(block, &mut at, prefix).ok_or(bad("bad literal"))?;
                if index == 0 {
                    let name = string(block, &mut at, &mut self.name)?;
                    let value = string(block, &mut at, &mut self.value)?;
                    field(name, value);
                    if indexing {
                        self.table.insert(name, value);
                    }
                } else {
                    // The name is copied out: inserting may evict the entry it came from.
                    let (n, _) = self.table.get(index).ok_or(bad("index out of the table"))?;
                    self.name.clear();
                    self.name.extend_from_slice(n);
                    let value = string(block, &mut at, &mut self.value)?;
                    field(&self.name, value);
                    if indexing {
                        self.table.insert(&self.name, value);
                    }
                }
            }
        }
        Ok(())
    }
}
