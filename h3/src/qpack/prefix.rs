//! QPACK's primitives (RFC 9204 §4.1): integers with an N-bit prefix (RFC 7541 §5.1) and
//! string literals with a Huffman flag just above the length's prefix (§4.1.2).

/// Why a primitive was not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bad {
    /// The buffer ends inside it: on a stream, wait for more bytes.
    Incomplete,
    /// It can never be valid.
    Invalid(&'static str),
}

/// Reads an integer whose prefix is the low `prefix` bits of `buf[*at]` (the byte's other
/// bits are the caller's); advances `at` only when the whole integer is there. Values above
/// 2^62 - 1 are refused: no QPACK quantity can be larger.
pub fn read_int(buf: &[u8], at: &mut usize, prefix: u8) -> Result<u64, Bad> {
    let mask = (1u64 << prefix) - 1;
    let first = u64::from(*buf.get(*at).ok_or(Bad::Incomplete)?) & mask;
    let mut i = *at + 1;
    let mut value = first;
    if first == mask {
        let mut shift = 0u32;
        loop {
            let b = *buf.get(i).ok_or(Bad::Incomplete)?;
            i += 1;
            if shift > 56 {
                return Err(Bad::Invalid("integer too large"));
            }
            value += u64::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
    }
    if value > crate::varint::MAX {
        return Err(Bad::Invalid("integer too large"));
    }
    *at = i;
    Ok(value)
}

/// Appends `value` with an N-bit prefix; `high` holds the bits above the prefix.
pub fn write_int(out: &mut Vec<u8>, high: u8, prefix: u8, value: u64) {
    let mask = (1u64 << prefix) - 1;
    if value < mask {
        out.push(high | value as u8);
        return;
    }
    out.push(high | mask as u8);
    let mut rest = value - mask;
    while rest >= 0x80 {
        out.push(0x80 | (rest & 0x7f) as u8);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// Reads a string literal whose length has a `prefix`-bit prefix and whose Huffman flag is
/// the bit above it; appends the decoded bytes to `out`. `at` moves only on success.
pub fn read_string(buf: &[u8], at: &mut usize, prefix: u8, out: &mut Vec<u8>) -> Result<(), Bad> {
    let first = *buf.get(*at).ok_or(Bad::Incomplete)?;
    let huffman = first & (1u8 << prefix) != 0;
    let mut i = *at;
    let len = read_int(buf, &mut i, prefix)?;
    let len = usize::try_from(len).map_err(|_| Bad::Incomplete)?;
    let end = i.checked_add(len).ok_or(Bad::Incomplete)?;
    let bytes = buf.get(i..end).ok_or(Bad::Incomplete)?;
    if huffman {
        h2::huffman_decode(bytes, out).map_err(|_| Bad::Invalid("bad Huffman string"))?;
    } else {
        out.extend_from_slice(bytes);
    }
    *at = end;
    Ok(())
}

/// Appends a string literal without Huffman coding (our encoder's choice, as h2's: the
/// bytes saved are few and the work is per response).
pub fn write_string(out: &mut Vec<u8>, high: u8, prefix: u8, s: &[u8]) {
    write_int(out, high, prefix, s.len() as u64);
    out.extend_from_slice(s);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7541 C.1, which QPACK's integers are (RFC 9204 §4.1.1).
    #[test]
    fn rfc7541_c1_integers() {
        for (bytes, prefix, value) in [
            (&[0x0a][..], 5, 10),
            (&[0x1f, 0x9a, 0x0a][..], 5, 1337),
            (&[0x2a][..], 8, 42),
        ] {
            let mut at = 0;
            assert_eq!(read_int(bytes, &mut at, prefix), Ok(value));
            assert_eq!(at, bytes.len());
            let mut out = Vec::new();
            write_int(&mut out, 0, prefix, value);
            assert_eq!(out, bytes);
            let mut at = 0;
            let short = &bytes[..bytes.len() - 1];
            if !short.is_empty() {
                assert_eq!(read_int(short, &mut at, prefix), Err(Bad::Incomplete));
                assert_eq!(at, 0);
            }
        }
    }

    #[test]
    fn oversized_integers_are_invalid_not_wrapped() {
        let mut long = vec![0xff];
        long.extend([0xff; 10]);
        long.push(0x01);
        assert!(matches!(read_int(&long, &mut 0, 8), Err(Bad::Invalid(_))));
        let mut out = Vec::new();
        write_int(&mut out, 0, 6, crate::varint::MAX);
        assert_eq!(read_int(&out, &mut 0, 6), Ok(crate::varint::MAX));
    }

    /// RFC 9204 §4.1.2: the H bit above the prefix; RFC 7541 C.4.1's "www.example.com".
    #[test]
    fn rfc9204_4_1_2_strings_plain_and_huffman() {
        let huff = [
            0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        let mut out = Vec::new();
        let mut at = 0;
        read_string(&huff, &mut at, 7, &mut out).unwrap();
        assert_eq!(out, b"www.example.com");
        let mut plain = Vec::new();
        write_string(&mut plain, 0x20, 3, b"custom-key");
        let mut out = Vec::new();
        read_string(&plain, &mut 0, 3, &mut out).unwrap();
        assert_eq!(out, b"custom-key");
        assert_eq!(
            read_string(&plain[..5], &mut 0, 3, &mut out),
            Err(Bad::Incomplete)
        );
    }
}
