//! HPACK (RFC 7541): our own decoder ([`decoder`], [`huffman`]; loona-hpack's
//! built a hash map of the Huffman code for every Huffman string) and
//! `loona-hpack`'s encoder, wrapped so a peer cannot make the decoder use more
//! memory or time than we configured:
//!
//! - a structural pre-scan of each block (integers and string lengths
//!   only, nothing decompressed) refuses dynamic table size updates that
//!   are not at the start of the block (§4.2) or exceed what we advertised,
//!   and truncated representations — all COMPRESSION_ERROR;
//! - the decoder's table is capped at the advertised size;
//! - while decoding, the header list is counted as §6.5.2 of RFC 9113 does
//!   (name + value + 32 per field) and by field count; once over either
//!   limit nothing more is stored. The block is still decoded to its end
//!   because the dynamic table is shared with the peer's encoder; the
//!   work is bounded by the block's compressed size, which the connection
//!   caps before decoding starts.

mod decoder;
mod huffman;
mod tables;

use loona_hpack::Encoder;

use decoder::Decoder;
/// Shared with QPACK (the h3 crate), which uses the same code (RFC 9204 §4.1.2).
pub use huffman::{decode as huffman_decode, HuffmanError};

/// One header field as decoded, bytes as received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: Vec<u8>,
    pub value: Vec<u8>,
}

impl Field {
    pub fn new(name: &[u8], value: &[u8]) -> Field {
        Field {
            name: name.to_vec(),
            value: value.to_vec(),
        }
    }

    /// Size of the field as SETTINGS_MAX_HEADER_LIST_SIZE counts it.
    pub fn list_size(&self) -> usize {
        self.name.len() + self.value.len() + 32
    }
}

/// Why a block was not turned into a field list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The block is not valid HPACK: the connection must end with
    /// COMPRESSION_ERROR (the shared table state is lost).
    Compression(&'static str),
    /// Valid HPACK, but the list is over `max_list_size` or has more than
    /// `max_fields` fields: the table stayed in sync, only this request is
    /// refused (431).
    TooLarge,
}

/// Decoder side of one connection.
pub struct HpackDecoder {
    inner: Decoder,
    max_table_size: usize,
}

fn read_int(buf: &[u8], at: &mut usize, prefix_bits: u8) -> Option<usize> {
    let mask = (1u16 << prefix_bits) as usize - 1;
    let first = *buf.get(*at)? as usize & mask;
    *at += 1;
    if first < mask {
        return Some(first);
    }
    let mut value = mask;
    // Four continuation octets give 28 bits: more than any size HTTP/2
    // can carry; a fifth is refused instead of risking overflow.
    for shift in (0..28).step_by(7) {
        let b = *buf.get(*at)? as usize;
        *at += 1;
        value += (b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

fn skip_string(buf: &[u8], at: &mut usize) -> Option<()> {
    let len = read_int(buf, at, 7)?;
    let end = at.checked_add(len)?;
    if end > buf.len() {
        return None;
    }
    *at = end;
    Some(())
}

impl HpackDecoder {
    /// A decoder whose dynamic table never exceeds `max_table_size`, the
    /// SETTINGS_HEADER_TABLE_SIZE we advertise.
    pub fn new(max_table_size: u32) -> HpackDecoder {
        let max = max_table_size as usize;
        HpackDecoder {
            inner: Decoder::new(max),
            max_table_size: max,
        }
    }

    /// Walks the representations without decoding them. Returns the
    /// number of fields.
    fn prescan(&self, block: &[u8]) -> Result<usize, DecodeError> {
        let bad = DecodeError::Compression;
        let mut at = 0;
        let mut fields = 0;
        while at < block.len() {
            let b = block[at];
            if b & 0x80 != 0 {
                let index = read_int(block, &mut at, 7).ok_or(bad("truncated index"))?;
                if index == 0 {
                    return Err(bad("index 0"));
                }
                fields += 1;
                continue;
            }
            if b & 0xe0 == 0x20 {
                let size = read_int(block, &mut at, 5).ok_or(bad("truncated size update"))?;
                if fields > 0 {
                    return Err(bad("table size update after a field"));
                }
                if size > self.max_table_size {
                    return Err(bad("table size update above SETTINGS_HEADER_TABLE_SIZE"));
                }
                continue;
            }
            let prefix = if b & 0xc0 == 0x40 { 6 } else { 4 };
            let index = read_int(block, &mut at, prefix).ok_or(bad("truncated literal"))?;
            if index == 0 {
                skip_string(block, &mut at).ok_or(bad("truncated name"))?;
            }
            skip_string(block, &mut at).ok_or(bad("truncated value"))?;
            fields += 1;
        }
        Ok(fields)
    }

    /// Decodes one complete header block (HEADERS plus CONTINUATIONs).
    pub fn decode(
        &mut self,
        block: &[u8],
        max_list_size: usize,
        max_fields: usize,
    ) -> Result<Vec<Field>, DecodeError> {
        let count = self.prescan(block)?;
        let mut over = count > max_fields;
        let mut list_size = 0usize;
        let mut fields = Vec::with_capacity(count.min(max_fields));
        self.inner.decode(block, |name, value| {
            list_size = list_size.saturating_add(name.len() + value.len() + 32);
            if list_size > max_list_size {
                over = true;
            }
            if !over {
                fields.push(Field::new(name, value));
            }
        })?;
        if over {
            return Err(DecodeError::TooLarge);
        }
        Ok(fields)
    }
}

/// Encoder side of one connection. Literal strings are not Huffman coded
/// (loona-hpack's encoder does not; the issue asks for Huffman only if it
/// measurably helps).
pub struct HpackEncoder {
    inner: Encoder<'static>,
    /// A table size change the peer's SETTINGS asked for, to be signalled
    /// at the start of the next block (RFC 7541 §4.2).
    pending_size_update: Option<usize>,
}

impl Default for HpackEncoder {
    fn default() -> Self {
        HpackEncoder {
            inner: Encoder::new(),
            pending_size_update: None,
        }
    }
}

impl HpackEncoder {
    /// The peer's SETTINGS_HEADER_TABLE_SIZE changed. We never use more
    /// than the protocol default of 4096 even if it allows more.
    pub fn set_peer_table_size(&mut self, size: u32) {
        let size = (size as usize).min(4096);
        self.inner.set_max_table_size(size);
        self.pending_size_update = Some(size);
    }

    /// Encodes `fields` as one block appended to `out`.
    pub fn encode<'a>(
        &mut self,
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        out: &mut Vec<u8>,
    ) {
        if let Some(size) = self.pending_size_update.take() {
            let start = out.len();
            out.extend(loona_hpack::encoder::encode_integer(size, 5));
            out[start] |= 0x20;
        }
        for field in fields {
            // Writing into a Vec cannot fail.
            let _ = self.inner.encode_header_into(field, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(fields: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut enc = HpackEncoder::default();
        let mut block = Vec::new();
        enc.encode(fields.iter().copied(), &mut block);
        block
    }

    #[test]
    fn decodes_what_the_encoder_writes() {
        let block = roundtrip(&[(b":method", b"GET"), (b"x-a", b"1")]);
        let mut dec = HpackDecoder::new(4096);
        let f = dec.decode(&block, 16384, 100).unwrap();
        assert_eq!(
            f,
            vec![Field::new(b":method", b"GET"), Field::new(b"x-a", b"1")]
        );
    }

    #[test]
    fn size_update_rules() {
        let mut dec = HpackDecoder::new(4096);
        // 0x3f 0xe1 0x1f = size update to 4096+? : 31 + 0x61 + (0x1f<<7) = 4096
        assert!(dec.decode(&[0x3f, 0xe1, 0x1f, 0x82], 16384, 100).is_ok());
        let over = dec.decode(&[0x3f, 0xe2, 0x1f, 0x82], 16384, 100);
        assert!(matches!(over, Err(DecodeError::Compression(_))));
        let late = dec.decode(&[0x82, 0x20], 16384, 100);
        assert!(matches!(late, Err(DecodeError::Compression(_))));
    }

    #[test]
    fn invalid_blocks_are_compression_errors() {
        let mut dec = HpackDecoder::new(4096);
        for block in [
            &[0x80][..],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
            &[0x40, 0x05, b'a'],
            &[0xbf, 0x7f],
        ] {
            let r = dec.decode(block, 16384, 100);
            assert!(matches!(r, Err(DecodeError::Compression(_))), "{block:?}");
        }
    }

    #[test]
    fn list_size_and_field_count_caps() {
        let mut dec = HpackDecoder::new(4096);
        let block = roundtrip(&[(b"a", &[b'v'; 100])]);
        assert_eq!(dec.decode(&block, 133, 100).unwrap().len(), 1);
        let mut dec = HpackDecoder::new(4096);
        assert_eq!(dec.decode(&block, 132, 100), Err(DecodeError::TooLarge));
        // 200 indexed references to :method GET.
        let bomb = vec![0x82; 200];
        assert_eq!(dec.decode(&bomb, 1 << 20, 100), Err(DecodeError::TooLarge));
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn pairs(fields: &[Field]) -> Vec<(&str, &str)> {
        fields
            .iter()
            .map(|f| {
                (
                    std::str::from_utf8(&f.name).unwrap(),
                    std::str::from_utf8(&f.value).unwrap(),
                )
            })
            .collect()
    }

    /// RFC 7541 Appendix C.3 (raw literals) and C.4 (Huffman): three requests on one
    /// connection, the later ones referring to entries the earlier ones added.
    #[test]
    fn rfc_7541_request_examples_share_the_dynamic_table() {
        for blocks in [
            [
                "828684410f7777772e6578616d706c652e636f6d",
                "828684be58086e6f2d6361636865",
                "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
            ],
            [
                "828684418cf1e3c2e5f23a6ba0ab90f4ff",
                "828684be5886a8eb10649cbf",
                "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
            ],
        ] {
            let mut dec = HpackDecoder::new(4096);
            let base = [
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
            ];
            assert_eq!(
                pairs(&dec.decode(&hex(blocks[0]), 16384, 100).unwrap()),
                base
            );
            let mut second = base.to_vec();
            second.push(("cache-control", "no-cache"));
            assert_eq!(
                pairs(&dec.decode(&hex(blocks[1]), 16384, 100).unwrap()),
                second
            );
            assert_eq!(
                pairs(&dec.decode(&hex(blocks[2]), 16384, 100).unwrap()),
                [
                    (":method", "GET"),
                    (":scheme", "https"),
                    (":path", "/index.html"),
                    (":authority", "www.example.com"),
                    ("custom-key", "custom-value"),
                ]
            );
        }
    }

    #[test]
    fn the_table_evicts_oldest_first_and_a_size_update_shrinks_it() {
        let mut dec = HpackDecoder::new(4096);
        // Two entries of 32 + 1 + 1 = 34 bytes: "a: 1" then "b: 2".
        let add = |n: u8, v: u8| vec![0x40, 0x01, n, 0x01, v];
        dec.decode(&add(b'a', b'1'), 16384, 100).unwrap();
        dec.decode(&add(b'b', b'2'), 16384, 100).unwrap();
        // 62 is the newest (b), 63 the oldest (a).
        assert_eq!(
            pairs(&dec.decode(&[0xbe, 0xbf], 16384, 100).unwrap()),
            [("b", "2"), ("a", "1")]
        );
        // Shrink to 34 bytes: only b stays; 63 is now out of the table.
        assert_eq!(
            pairs(&dec.decode(&[0x3f, 0x03, 0xbe], 16384, 100).unwrap()),
            [("b", "2")]
        );
        assert!(matches!(
            dec.decode(&[0xbf], 16384, 100),
            Err(DecodeError::Compression(_))
        ));
        // An entry larger than the table empties it and is not added.
        let mut big = vec![0x40, 0x01, b'c', 0x7f, 0x00];
        big.extend_from_slice(&[b'v'; 127]);
        dec.decode(&big, 16384, 100).unwrap();
        assert!(matches!(
            dec.decode(&[0xbe], 16384, 100),
            Err(DecodeError::Compression(_))
        ));
    }

    #[test]
    fn peer_table_size_change_is_signalled() {
        let mut enc = HpackEncoder::default();
        enc.set_peer_table_size(0);
        let mut block = Vec::new();
        enc.encode([(&b"x-a"[..], &b"1"[..])], &mut block);
        assert_eq!(block[0], 0x20);
        let mut dec = HpackDecoder::new(4096);
        assert_eq!(
            dec.decode(&block, 16384, 100).unwrap(),
            vec![Field::new(b"x-a", b"1")]
        );
    }
}
