//! The decoder's dynamic table (RFC 9204 §3.2) and the encoder-stream instructions that
//! change it (§4.3). Entries are named by absolute index (§3.2.4): the first insert is 0.

use std::collections::VecDeque;

use super::prefix::{read_int, read_string, Bad};

/// §3.2.1: an entry's size is its name and value lengths plus 32.
pub fn entry_size(name: &[u8], value: &[u8]) -> u64 {
    name.len() as u64 + value.len() as u64 + 32
}

/// A name and a value.
type Entry = (Box<[u8]>, Box<[u8]>);

/// The dynamic table, oldest entry first.
pub struct DynamicTable {
    entries: VecDeque<Entry>,
    /// Absolute index of `entries[0]`: the number of entries evicted.
    evicted: u64,
    size: u64,
    capacity: u64,
    /// QPACK_MAX_TABLE_CAPACITY we advertised: the capacity may not exceed it.
    max_capacity: u64,
}

impl DynamicTable {
    pub fn new(max_capacity: u64) -> DynamicTable {
        DynamicTable {
            entries: VecDeque::new(),
            evicted: 0,
            size: 0,
            capacity: 0,
            max_capacity,
        }
    }

    /// The entries' size as §3.2.1 counts it (names, values, 32 bytes each).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The Insert Count (§3.2.4): entries ever inserted.
    pub fn insert_count(&self) -> u64 {
        self.evicted + self.entries.len() as u64
    }

    pub fn max_capacity(&self) -> u64 {
        self.max_capacity
    }

    /// §4.3.1: a capacity above our advertised maximum is the caller's error to report.
    pub fn set_capacity(&mut self, capacity: u64) -> Result<(), &'static str> {
        if capacity > self.max_capacity {
            return Err("capacity above QPACK_MAX_TABLE_CAPACITY");
        }
        self.capacity = capacity;
        self.evict_to(capacity);
        Ok(())
    }

    fn evict_to(&mut self, room: u64) {
        while self.size > room {
            let Some((n, v)) = self.entries.pop_front() else {
                break;
            };
            self.size -= entry_size(&n, &v);
            self.evicted += 1;
        }
    }

    /// §3.2.2, §4.3.2: an entry larger than the capacity is an encoder stream error.
    pub fn insert(&mut self, name: Box<[u8]>, value: Box<[u8]>) -> Result<(), &'static str> {
        let size = entry_size(&name, &value);
        if size > self.capacity {
            return Err("inserted entry larger than the table capacity");
        }
        self.evict_to(self.capacity - size);
        self.entries.push_back((name, value));
        self.size += size;
        Ok(())
    }

    /// The entry at an absolute index, if inserted and not evicted.
    pub fn get(&self, absolute: u64) -> Option<(&[u8], &[u8])> {
        let i = usize::try_from(absolute.checked_sub(self.evicted)?).ok()?;
        self.entries.get(i).map(|(n, v)| (&n[..], &v[..]))
    }

    /// The entry `relative` places before the newest (§3.2.5, encoder-stream indexing).
    pub fn get_relative(&self, relative: u64) -> Option<(&[u8], &[u8])> {
        let absolute = self.insert_count().checked_sub(relative)?.checked_sub(1)?;
        self.get(absolute)
    }
}

/// One encoder-stream instruction (§4.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Instruction {
    SetCapacity(u64),
    /// The name of a static (`is_static`) or dynamic (relative index) entry and a value.
    InsertWithNameRef {
        is_static: bool,
        index: u64,
        value: Vec<u8>,
    },
    InsertWithLiteralName {
        name: Vec<u8>,
        value: Vec<u8>,
    },
    /// A relative index.
    Duplicate(u64),
}

/// Reads the instruction at the start of `buf`: it and its length, `Ok(None)` while it is
/// not all there.
pub fn parse_instruction(buf: &[u8]) -> Result<Option<(Instruction, usize)>, &'static str> {
    match parse(buf) {
        Ok(v) => Ok(Some(v)),
        Err(Bad::Incomplete) => Ok(None),
        Err(Bad::Invalid(why)) => Err(why),
    }
}

fn parse(buf: &[u8]) -> Result<(Instruction, usize), Bad> {
    let first = *buf.first().ok_or(Bad::Incomplete)?;
    let mut at = 0;
    let ins = if first & 0x80 != 0 {
        // 1Txxxxxx: Insert with Name Reference, then the value (H + 7-bit length).
        let index = read_int(buf, &mut at, 6)?;
        let mut value = Vec::new();
        read_string(buf, &mut at, 7, &mut value)?;
        Instruction::InsertWithNameRef {
            is_static: first & 0x40 != 0,
            index,
            value,
        }
    } else if first & 0x40 != 0 {
        // 01Hxxxxx: Insert with Literal Name.
        let mut name = Vec::new();
        read_string(buf, &mut at, 5, &mut name)?;
        let mut value = Vec::new();
        read_string(buf, &mut at, 7, &mut value)?;
        Instruction::InsertWithLiteralName { name, value }
    } else if first & 0x20 != 0 {
        Instruction::SetCapacity(read_int(buf, &mut at, 5)?)
    } else {
        Instruction::Duplicate(read_int(buf, &mut at, 5)?)
    };
    Ok((ins, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9204 §3.2.4, §3.2.5: absolute and relative indexing and eviction.
    #[test]
    fn rfc9204_3_2_indexing_and_eviction() {
        let mut t = DynamicTable::new(100);
        assert!(t.set_capacity(101).is_err());
        t.set_capacity(100).unwrap();
        t.insert(b"a".to_vec().into(), b"1".to_vec().into())
            .unwrap(); // 34
        t.insert(b"b".to_vec().into(), b"2".to_vec().into())
            .unwrap(); // 68
        assert_eq!(t.get_relative(0), Some((&b"b"[..], &b"2"[..])));
        assert_eq!(t.get_relative(1), Some((&b"a"[..], &b"1"[..])));
        t.insert(b"c".to_vec().into(), b"3".to_vec().into())
            .unwrap(); // evicts "a"
        assert_eq!(t.insert_count(), 3);
        assert_eq!(t.get(0), None);
        assert_eq!(t.get(2), Some((&b"c"[..], &b"3"[..])));
        assert!(t.insert(vec![0; 60].into(), vec![0; 9].into()).is_err());
        t.set_capacity(40).unwrap();
        assert_eq!(t.get(1), None);
        assert_eq!(t.get(2), Some((&b"c"[..], &b"3"[..])));
    }

    /// RFC 9204 Appendix B.2's encoder stream, byte by byte.
    #[test]
    fn rfc9204_b2_encoder_stream_instructions() {
        let stream = [
            0x3f, 0xbd, 0x01, // Set Dynamic Table Capacity=220
            0xc0, 0x0f, 0x77, 0x77, 0x77, 0x2e, 0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x2e,
            0x63, 0x6f, 0x6d, // Insert With Name Reference, static 0, "www.example.com"
            0xc1, 0x0c, 0x2f, 0x73, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x2f, 0x70, 0x61, 0x74, 0x68,
        ];
        let mut at = 0;
        let mut got = Vec::new();
        while at < stream.len() {
            let (ins, n) = parse_instruction(&stream[at..]).unwrap().unwrap();
            for cut in at..at + n {
                assert_eq!(
                    parse_instruction(&stream[at..cut]),
                    Ok(None),
                    "cut at {cut}"
                );
            }
            got.push(ins);
            at += n;
        }
        assert_eq!(
            got,
            [
                Instruction::SetCapacity(220),
                Instruction::InsertWithNameRef {
                    is_static: true,
                    index: 0,
                    value: b"www.example.com".to_vec()
                },
                Instruction::InsertWithNameRef {
                    is_static: true,
                    index: 1,
                    value: b"/sample/path".to_vec()
                },
            ]
        );
    }
}
