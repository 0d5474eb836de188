//! QUIC variable-length integers (RFC 9000 §16), which HTTP/3 frames and stream types use:
//! the two high bits of the first byte give the length (1, 2, 4 or 8 bytes), the rest is
//! the value, big-endian, up to 2^62 - 1.

/// The largest value a varint carries.
pub const MAX: u64 = (1 << 62) - 1;

/// Reads the varint at the start of `buf`: its value and length, or `None` when `buf`
/// holds only part of it (a stream's bytes arrive in pieces).
pub fn read(buf: &[u8]) -> Option<(u64, usize)> {
    let first = *buf.first()?;
    let len = 1usize << (first >> 6);
    let bytes = buf.get(..len)?;
    let value = bytes[1..]
        .iter()
        .fold(u64::from(first & 0x3f), |v, &b| (v << 8) | u64::from(b));
    Some((value, len))
}

/// The encoded length of `v` (values above [`MAX`] are written as [`MAX`]).
pub fn len(v: u64) -> usize {
    match v {
        0..=63 => 1,
        64..=16_383 => 2,
        16_384..=1_073_741_823 => 4,
        _ => 8,
    }
}

/// Appends `v` in its shortest form. Values above [`MAX`] cannot be encoded; they are
/// clamped (every caller writes lengths and stream ids, far below it).
pub fn write(out: &mut Vec<u8>, v: u64) {
    let v = v.min(MAX);
    let n = len(v);
    let tag = u64::from(n.trailing_zeros()) << (8 * n - 2);
    out.extend_from_slice(&(v | tag).to_be_bytes()[8 - n..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9000 Appendix A.1's examples.
    #[test]
    fn rfc9000_a1_sample_varints() {
        for (hex, value) in [
            (
                &[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c][..],
                151_288_809_941_952_652,
            ),
            (&[0x9d, 0x7f, 0x3e, 0x7d][..], 494_878_333),
            (&[0x7b, 0xbd][..], 15_293),
            (&[0x25][..], 37),
            (&[0x40, 0x25][..], 37),
        ] {
            assert_eq!(read(hex), Some((value, hex.len())));
            assert_eq!(read(&hex[..hex.len() - 1]), None, "a part of {hex:?}");
        }
        let mut out = Vec::new();
        write(&mut out, 494_878_333);
        assert_eq!(out, [0x9d, 0x7f, 0x3e, 0x7d]);
    }

    #[test]
    fn every_length_boundary_round_trips() {
        for v in [0, 63, 64, 16_383, 16_384, 1_073_741_823, 1_073_741_824, MAX] {
            let mut out = Vec::new();
            write(&mut out, v);
            assert_eq!(out.len(), len(v));
            assert_eq!(read(&out), Some((v, out.len())));
        }
    }
}
