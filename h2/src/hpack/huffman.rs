//! HPACK's Huffman code (RFC 7541 §5.2, Appendix B), decoding only: the encoder sends
//! literals raw.
//!
//! The code is walked as a binary tree built once per process from the table: a node is a
//! pair of children, each either another node or a symbol. A string costs one step per bit
//! and allocates nothing beyond its output (the decoder reuses one output buffer per
//! connection). The decoder this replaces (loona-hpack's) built a hash map of the whole code
//! for every Huffman string: a quarter of the proxy's CPU on HTTP/2 requests.

use std::sync::OnceLock;

use super::tables::HUFFMAN_CODES;

/// The end-of-string symbol: never valid inside a string (§5.2).
const EOS: u16 = 256;
/// A child that is a symbol, not a node.
const LEAF: u16 = 0x8000;

struct Tree {
    /// `nodes[i] = [child on bit 0, child on bit 1]`; node 0 is the root; 0 is "no child"
    /// (the root is never a child).
    nodes: Vec<[u16; 2]>,
}

fn tree() -> &'static Tree {
    static TREE: OnceLock<Tree> = OnceLock::new();
    TREE.get_or_init(|| {
        let mut nodes = vec![[0u16; 2]];
        for (symbol, &(code, len)) in HUFFMAN_CODES.iter().enumerate() {
            let mut at = 0usize;
            for i in (0..len).rev() {
                let bit = ((code >> i) & 1) as usize;
                if i == 0 {
                    nodes[at][bit] = LEAF | symbol as u16;
                } else {
                    if nodes[at][bit] == 0 {
                        nodes.push([0, 0]);
                        nodes[at][bit] = (nodes.len() - 1) as u16;
                    }
                    at = usize::from(nodes[at][bit]);
                }
            }
        }
        Tree { nodes }
    })
}

/// Why a Huffman string is refused (all are COMPRESSION_ERROR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HuffmanError {
    /// The EOS symbol inside the string.
    Eos,
    /// Padding longer than 7 bits, or not the most significant bits of EOS (all ones).
    Padding,
}

/// Appends the decoding of `input` to `out`.
pub fn decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
    let nodes = &tree().nodes;
    let mut at = 0usize;
    // Bits read since the last symbol, and whether they were all ones: what is left at the
    // end is padding, which must be a prefix of EOS no longer than 7 bits.
    let mut pending_bits = 0u32;
    let mut pending_ones = true;
    out.reserve(input.len() * 8 / 5);
    for &byte in input {
        for shift in (0..8).rev() {
            let bit = (byte >> shift) & 1;
            let next = nodes[at][usize::from(bit)];
            pending_bits += 1;
            pending_ones &= bit == 1;
            if next & LEAF != 0 {
                let symbol = next & !LEAF;
                if symbol == EOS {
                    return Err(HuffmanError::Eos);
                }
                out.push(symbol as u8);
                at = 0;
                pending_bits = 0;
                pending_ones = true;
            } else {
                at = usize::from(next);
            }
        }
    }
    if pending_bits > 7 || !pending_ones {
        return Err(HuffmanError::Padding);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn decoded(h: &str) -> Result<Vec<u8>, HuffmanError> {
        let mut out = Vec::new();
        decode(&hex(h), &mut out).map(|_| out)
    }

    /// RFC 7541 Appendix C.4 and C.6, and strings encoded by the Python `hpack` package.
    #[test]
    fn decodes_the_rfc_examples_and_an_independent_encoder() {
        for (h, plain) in [
            ("f1e3c2e5f23a6ba0ab90f4ff", &b"www.example.com"[..]),
            ("a8eb10649cbf", b"no-cache"),
            ("25a849e95ba97d7f", b"custom-key"),
            ("25a849e95bb8e8b4bf", b"custom-value"),
            (
                "d07abe941054d444a8200595040b8166e082a62d1bff",
                b"Mon, 21 Oct 2013 20:13:21 GMT",
            ),
            (
                "9d29ad171863c78f0b97c8e9ae82ae43d3",
                b"https://www.example.com",
            ),
            ("fffffbbfffff87fe3ffffff3", b"\xff\xfe\x00\x7f"),
            ("", b""),
        ] {
            assert_eq!(decoded(h).unwrap(), plain, "{h}");
        }
    }

    #[test]
    fn every_symbol_round_trips_through_the_table() {
        // Encode each byte alone with the table, pad with ones, decode.
        for (symbol, &(code, len)) in HUFFMAN_CODES.iter().enumerate().take(256) {
            let pad = (8 - u32::from(len) % 8) % 8;
            let bits = (u64::from(code) << pad) | ((1u64 << pad) - 1);
            let bytes = (u32::from(len) + pad) / 8;
            let input: Vec<u8> = (0..bytes).rev().map(|i| (bits >> (8 * i)) as u8).collect();
            let mut out = Vec::new();
            decode(&input, &mut out).unwrap();
            assert_eq!(out, [symbol as u8]);
        }
    }

    #[test]
    fn bad_padding_and_eos_are_refused() {
        // "a" is 00011 (5 bits): padding 111 is right, 000 and 110 are not.
        assert_eq!(decoded("1f").unwrap(), b"a");
        assert_eq!(decoded("18"), Err(HuffmanError::Padding));
        assert_eq!(decoded("1e"), Err(HuffmanError::Padding));
        // A whole byte of ones after a symbol: 8 bits of padding.
        assert_eq!(decoded("1fff"), Err(HuffmanError::Padding));
        // EOS (30 ones) then padding.
        assert_eq!(decoded("ffffffff"), Err(HuffmanError::Eos));
    }
}
