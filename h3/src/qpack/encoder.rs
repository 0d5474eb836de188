//! Our QPACK encoder (RFC 9204 §4.5): the static table and literals only. It never inserts
//! into the peer's dynamic table, so every section has Required Insert Count 0, never
//! blocks the peer, needs no encoder-stream instruction and no acknowledgment, and the
//! peer's decoder stream has nothing to tell it. A common choice for a server's responses
//! (their fields are mostly static-table names); the dynamic table would save bytes on
//! repeated custom fields at the cost of per-connection state.

use super::prefix::{write_int, write_string};
use super::static_table;

/// Appends the encoded field section of `fields` (names lowercase, as HTTP/3 requires).
pub fn encode<'a>(fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>, out: &mut Vec<u8>) {
    // Required Insert Count 0, Base 0 (§4.5.1).
    out.extend_from_slice(&[0, 0]);
    for (name, value) in fields {
        match static_table::find(name, value) {
            // 11xxxxxx: Indexed Field Line, static.
            Some((index, true)) => write_int(out, 0xc0, 6, index),
            // 0101xxxx: Literal Field Line with static Name Reference, N = 0.
            Some((index, false)) => {
                write_int(out, 0x50, 4, index);
                write_string(out, 0, 7, value);
            }
            // 0010 0xxx: Literal Field Line with Literal Name, N = 0, H = 0.
            None => {
                write_string(out, 0x20, 3, name);
                write_string(out, 0, 7, value);
            }
        }
    }
}

/// The size of `fields` as SETTINGS_MAX_FIELD_SECTION_SIZE counts it (RFC 9114 §4.2.2).
pub fn section_size<'a>(fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> u64 {
    fields
        .into_iter()
        .map(|(n, v)| n.len() as u64 + v.len() as u64 + 32)
        .sum()
}
