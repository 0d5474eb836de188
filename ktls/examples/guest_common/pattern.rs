//! The body pattern shared by `guest_origin` (which serves it) and `guest_client` (which
//! checks every byte the proxy hands back against it).

/// Byte `i` of every `/bytes/N` body: a mix of the offset (splitmix64's finaliser), so
/// shifted, repeated or reordered ranges do not match.
pub fn body_byte(i: u64) -> u8 {
    let x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (x ^ (x >> 31)) as u8
}

/// Offset of the first byte of `got` (which starts at body offset `start`) that differs from
/// the pattern.
pub fn first_mismatch(got: &[u8], start: u64) -> Option<u64> {
    got.iter()
        .enumerate()
        .find(|&(i, &b)| b != body_byte(start + i as u64))
        .map(|(i, _)| start + i as u64)
}
