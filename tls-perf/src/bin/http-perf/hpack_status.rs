//! `--h2` load: the `:status` of each response head, with the HPACK dynamic table kept in
//! step with the server's (RFC 7541 §2.3, §4, §6). Only what the status needs is decoded:
//! strings that enter the table or may be a `:status`. One Huffman decoder serves the whole
//! connection; `loona_hpack::Decoder` builds a new one (a hash table of the code) for every
//! Huffman string, which cost the client ~200 µs per nginx response (nginx sends every
//! field Huffman-coded, with incremental indexing) and held it far below what nginx
//! serves; and the strings a server repeats are decoded once.

use std::collections::{HashMap, VecDeque};

use loona_hpack::huffman::HuffmanDecoder;

/// The names of the static table (Appendix A), index 1 first.
const STATIC_NAMES: [&str; 61] = [
    ":authority",
    ":method",
    ":method",
    ":path",
    ":path",
    ":scheme",
    ":scheme",
    ":status",
    ":status",
    ":status",
    ":status",
    ":status",
    ":status",
    ":status",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "accept",
    "access-control-allow-origin",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-range",
    "content-type",
    "cookie",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "link",
    "location",
    "max-forwards",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "refresh",
    "retry-after",
    "server",
    "set-cookie",
    "strict-transport-security",
    "transfer-encoding",
    "user-agent",
    "vary",
    "via",
    "www-authenticate",
];
/// The values of static entries 8..=14.
const STATIC_STATUS: [u16; 7] = [200, 204, 206, 304, 400, 404, 500];
/// Distinct Huffman strings remembered (then forgotten all at once).
const HUFFMAN_CACHE: usize = 256;
/// SETTINGS_HEADER_TABLE_SIZE: the client never changes the default (§6.5.2 of RFC 9113).
const TABLE_LIMIT: usize = 4096;

/// A block the reader cannot follow (the connection is then replaced).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadBlock;

pub struct StatusReader {
    /// Newest first: index 62 is `table[0]`.
    table: VecDeque<(Vec<u8>, Vec<u8>)>,
    size: usize,
    max: usize,
    huffman: HuffmanDecoder,
    /// Huffman strings decoded before: a server repeats most of its fields (all but Date,
    /// for a static page), and loona's decoder walks a hash table per bit.
    decoded: HashMap<Vec<u8>, Vec<u8>>,
}

impl StatusReader {
    pub fn new() -> StatusReader {
        StatusReader {
            table: VecDeque::new(),
            size: 0,
            max: TABLE_LIMIT,
            huffman: HuffmanDecoder::new(),
            decoded: HashMap::new(),
        }
    }

    /// Reads one complete header block: its `:status`, if it has one.
    pub fn read(&mut self, block: &[u8]) -> Result<Option<u16>, BadBlock> {
        let mut status = None;
        let mut pos = 0;
        while let Some(&first) = block.get(pos) {
            let rest = &block[pos..];
            if first & 0x80 != 0 {
                let (index, used) = uint(rest, 7)?;
                pos += used;
                if let Some(s) = self.indexed_status(index)? {
                    status = Some(s);
                }
            } else if first & 0xe0 == 0x20 {
                let (max, used) = uint(rest, 5)?;
                pos += used;
                if max > TABLE_LIMIT {
                    return Err(BadBlock);
                }
                self.max = max;
                self.evict(0);
            } else {
                let indexing = first & 0xc0 == 0x40;
                let (index, used) = uint(rest, if indexing { 6 } else { 4 })?;
                pos += used;
                let name = match index {
                    0 => {
                        let (name, used) = self.string(&block[pos..], true)?;
                        pos += used;
                        name
                    }
                    i => self.name(i)?.to_vec(),
                };
                let is_status = name == b":status";
                let (value, used) = self.string(&block[pos..], indexing || is_status)?;
                pos += used;
                if is_status {
                    status = parse_status(&value);
                }
                if indexing {
                    self.insert(name, value);
                }
            }
        }
        Ok(status)
    }

    /// The status an indexed field carries, if it is a `:status` one.
    fn indexed_status(&self, index: usize) -> Result<Option<u16>, BadBlock> {
        match index {
            0 => Err(BadBlock),
            8..=14 => Ok(STATIC_STATUS.get(index - 8).copied()),
            1..=61 => Ok(None),
            _ => {
                let (name, value) = self.table.get(index - 62).ok_or(BadBlock)?;
                Ok((name == b":status").then(|| parse_status(value)).flatten())
            }
        }
    }

    fn name(&self, index: usize) -> Result<&[u8], BadBlock> {
        match index {
            1..=61 => Ok(STATIC_NAMES[index - 1].as_bytes()),
            _ => self
                .table
                .get(index.wrapping_sub(62))
                .map(|(n, _)| n.as_slice())
                .ok_or(BadBlock),
        }
    }

    /// A string literal: (its octets if `wanted`, else nothing; the bytes it took).
    fn string(&mut self, buf: &[u8], wanted: bool) -> Result<(Vec<u8>, usize), BadBlock> {
        let (len, used) = uint(buf, 7)?;
        let raw = buf.get(used..used + len).ok_or(BadBlock)?;
        let octets = match (wanted, buf[0] & 0x80 != 0) {
            (false, _) => Vec::new(),
            (true, false) => raw.to_vec(),
            (true, true) => match self.decoded.get(raw) {
                Some(octets) => octets.clone(),
                None => {
                    let octets = self.huffman.decode(raw).map_err(|_| BadBlock)?;
                    if self.decoded.len() >= HUFFMAN_CACHE {
                        self.decoded.clear();
                    }
                    self.decoded.insert(raw.to_vec(), octets.clone());
                    octets
                }
            },
        };
        Ok((octets, used + len))
    }

    fn insert(&mut self, name: Vec<u8>, value: Vec<u8>) {
        let size = name.len() + value.len() + 32;
        self.evict(size);
        if size <= self.max {
            self.size += size;
            self.table.push_front((name, value));
        }
    }

    /// Evicts the oldest entries until `room` more octets fit (all of them if it cannot).
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            let Some((n, v)) = self.table.pop_back() else {
                break;
            };
            self.size -= n.len() + v.len() + 32;
        }
    }
}

fn parse_status(value: &[u8]) -> Option<u16> {
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// An HPACK integer with an N-bit prefix (§5.1): (value, bytes used).
fn uint(buf: &[u8], prefix_bits: u8) -> Result<(usize, usize), BadBlock> {
    let max = (1usize << prefix_bits) - 1;
    let mut value = usize::from(*buf.first().ok_or(BadBlock)?) & max;
    if value < max {
        return Ok((value, 1));
    }
    for (i, &b) in buf.iter().enumerate().skip(1).take(4) {
        value += usize::from(b & 0x7f) << (7 * (i - 1));
        if b & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    Err(BadBlock)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flood::wire;

    #[test]
    fn follows_the_table_through_indexing_and_eviction() {
        let mut r = StatusReader::new();
        // :status 302, indexed under the static name (8), then a field of a new name.
        let mut first = vec![0x48, 0x03, b'3', b'0', b'2'];
        wire::hpack_indexed_literal(&mut first, b"x-a", b"1");
        assert_eq!(r.read(&first), Ok(Some(302)));
        // Entry 62 is now x-a, 63 :status 302.
        assert_eq!(r.read(&[0xbf]), Ok(Some(302)));
        assert_eq!(r.read(&[0xbe]), Ok(None));
        // 1034-octet entries: three fit in 4096, the older ones go.
        let big = vec![b'v'; 1000];
        for i in 0..6u8 {
            let mut block = Vec::new();
            wire::hpack_indexed_literal(&mut block, &[b'n', b'0' + i], &big);
            assert_eq!(r.read(&block), Ok(None));
        }
        assert_eq!((r.table.len(), r.size), (3, 3 * 1034));
        assert_eq!(r.table[0].0, b"n5");
        assert_eq!(r.read(&[0xc1]), Err(BadBlock)); // 65: evicted
                                                    // A size update to 0 empties the table.
        assert_eq!(r.read(&[0x20, 0x88]), Ok(Some(200)));
        assert!(r.table.is_empty());
    }

    #[test]
    fn huffman_values_and_static_statuses() {
        let mut r = StatusReader::new();
        // RFC 7541 C.4.1: "www.example.com", Huffman-coded, as a literal with indexing.
        let mut block = vec![0x88, 0x41, 0x8c];
        block.extend_from_slice(&[
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ]);
        assert_eq!(r.read(&block), Ok(Some(200)));
        assert_eq!(
            r.table[0],
            (b":authority".to_vec(), b"www.example.com".to_vec())
        );
        assert_eq!(r.read(&[0x8d]), Ok(Some(404)));
        assert_eq!(r.read(&[0xff, 0x80]), Err(BadBlock)); // index 254: no such entry
        assert_eq!(r.read(&[0x0f]), Err(BadBlock)); // truncated integer
    }
}
