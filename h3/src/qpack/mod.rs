//! QPACK (RFC 9204): field compression for HTTP/3.
//!
//! - [`Decoder`]: the peer's encoder fills our decoder's dynamic table through its encoder
//!   stream; its capacity is capped by our SETTINGS_QPACK_MAX_TABLE_CAPACITY (a larger Set
//!   Dynamic Table Capacity is QPACK_ENCODER_STREAM_ERROR), and no more than
//!   SETTINGS_QPACK_BLOCKED_STREAMS sections wait for inserts (one more is
//!   QPACK_DECOMPRESSION_FAILED). Sections are counted as they decode (name + value + 32
//!   per field, and fields) and stop at the limits. The decoder writes the instructions
//!   of our decoder stream.
//! - [`encode`]: static table and literals, no dynamic table (see `encoder`).
//!
//! Huffman decoding is the h2 crate's (HPACK's code, RFC 7541 Appendix B, which QPACK
//! uses unchanged).

mod decoder;
mod encoder;
pub mod prefix;
mod section;
pub mod static_table;
mod table;

pub use decoder::{Decoder, Outcome};
pub use encoder::{encode, section_size};
pub use section::Decoded;
pub use table::{parse_instruction, Instruction};
