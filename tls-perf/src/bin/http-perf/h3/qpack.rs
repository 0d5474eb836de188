//! The tool's own minimal QPACK (RFC 9204): the request's field section from the static
//! table and literals, and the response's field section read for its `:status`. http-perf
//! advertises a dynamic table capacity of 0 (no SETTINGS_QPACK_MAX_TABLE_CAPACITY), so a
//! server may not refer to a dynamic table: a section that does is refused with an error
//! that says so. Written here, not taken from the proxy's `h3` crate, so that the tool does
//! not share the proxy's mistakes.

use std::fmt;

/// QPACK static table indexes (RFC 9204 Appendix A) the request uses.
const AUTHORITY: u64 = 0;
const PATH_SLASH: u64 = 1;
const METHOD_GET: u64 = 17;
const SCHEME_HTTP: u64 = 22;
const SCHEME_HTTPS: u64 = 23;
/// The last index of the static table.
const STATIC_LAST: u64 = 98;

/// The static entries named `:status`, with their value.
const STATUS_ENTRIES: [(u64, u16); 14] = [
    (24, 103),
    (25, 200),
    (26, 304),
    (27, 404),
    (28, 503),
    (63, 100),
    (64, 204),
    (65, 206),
    (66, 302),
    (67, 400),
    (68, 403),
    (69, 421),
    (70, 425),
    (71, 500),
];

/// Why a response's field section could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QpackError {
    /// A reference to the dynamic table, which http-perf gave no capacity.
    Dynamic,
    /// A static index past the table's end, a cut integer or string, bad Huffman code.
    Malformed(&'static str),
    /// No `:status`, or one that is not three digits.
    NoStatus,
}

impl fmt::Display for QpackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QpackError::Dynamic => write!(
                f,
                "the server's QPACK field section refers to a dynamic table, though http-perf advertised a capacity of 0 (RFC 9204 §3.2.3): QPACK_DECOMPRESSION_FAILED"
            ),
            QpackError::Malformed(what) => write!(f, "malformed QPACK field section: {what}"),
            QpackError::NoStatus => write!(f, "response field section without a valid :status"),
        }
    }
}

/// Appends `v` as a QPACK/HPACK prefixed integer (RFC 7541 §5.1): `first` holds the bits
/// above the `prefix` low bits of the first byte.
pub fn put_int(out: &mut Vec<u8>, first: u8, prefix: u32, v: u64) {
    let max = (1u64 << prefix) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    let mut rest = v - max;
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
}

/// Reads a prefixed integer at `*pos` (the first byte's low `prefix` bits onward).
fn get_int(buf: &[u8], pos: &mut usize, prefix: u32) -> Result<u64, QpackError> {
    let cut = QpackError::Malformed("integer cut short");
    let max = (1u64 << prefix) - 1;
    let first = *buf.get(*pos).ok_or(cut.clone())?;
    *pos += 1;
    let mut v = u64::from(first) & max;
    if v < max {
        return Ok(v);
    }
    for shift in (0..63).step_by(7) {
        let b = *buf.get(*pos).ok_or(cut.clone())?;
        *pos += 1;
        v = v
            .checked_add(u64::from(b & 0x7f) << shift)
            .ok_or(QpackError::Malformed("integer too large"))?;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(QpackError::Malformed("integer too large"))
}

/// A string literal whose length has a `prefix`-bit prefix, its Huffman flag the bit just
/// above: returns (huffman, bytes).
fn get_str<'a>(
    buf: &'a [u8],
    pos: &mut usize,
    prefix: u32,
) -> Result<(bool, &'a [u8]), QpackError> {
    let huffman = buf.get(*pos).is_some_and(|b| b & (1 << prefix) != 0);
    let len = get_int(buf, pos, prefix)?;
    let len = usize::try_from(len).map_err(|_| QpackError::Malformed("string too long"))?;
    let end = pos
        .checked_add(len)
        .filter(|&e| e <= buf.len())
        .ok_or(QpackError::Malformed("string cut short"))?;
    let s = &buf[*pos..end];
    *pos = end;
    Ok((huffman, s))
}

fn put_literal_value(out: &mut Vec<u8>, value: &[u8]) {
    put_int(out, 0x00, 7, value.len() as u64);
    out.extend_from_slice(value);
}

/// The request's field section: `:method GET`, `:scheme`, `:authority`, `:path` from the
/// static table where it has them, then `extra` (lower-case names) as literals.
pub fn request_section(
    https: bool,
    authority: &str,
    path: &str,
    extra: &[(String, String)],
) -> Vec<u8> {
    // Required Insert Count 0, Delta Base 0: no dynamic table (§4.5.1).
    let mut out = vec![0x00, 0x00];
    // Indexed field lines, static (T=1): 11xxxxxx.
    put_int(&mut out, 0xc0, 6, METHOD_GET);
    put_int(
        &mut out,
        0xc0,
        6,
        if https { SCHEME_HTTPS } else { SCHEME_HTTP },
    );
    if path == "/" {
        put_int(&mut out, 0xc0, 6, PATH_SLASH);
    } else {
        // Literal with a static name reference (01NT, T=1): 0101xxxx.
        put_int(&mut out, 0x50, 4, PATH_SLASH);
        put_literal_value(&mut out, path.as_bytes());
    }
    put_int(&mut out, 0x50, 4, AUTHORITY);
    put_literal_value(&mut out, authority.as_bytes());
    for (name, value) in extra {
        // Literal with a literal name (001NH, H=0): 0010xxxx, a 3-bit length prefix.
        put_int(&mut out, 0x20, 3, name.len() as u64);
        out.extend_from_slice(name.as_bytes());
        put_literal_value(&mut out, value.as_bytes());
    }
    out
}

/// The status of a response field section (static references and literals only).
pub fn response_status(section: &[u8]) -> Result<u16, QpackError> {
    let mut pos = 0;
    // Required Insert Count (8-bit prefix) must be 0; Delta Base (7-bit) is then unused.
    if get_int(section, &mut pos, 8)? != 0 {
        return Err(QpackError::Dynamic);
    }
    get_int(section, &mut pos, 7)?;
    let mut status = None;
    while pos < section.len() {
        let b = section[pos];
        if b & 0x80 != 0 {
            // Indexed field line: T (0x40) set for the static table.
            if b & 0x40 == 0 {
                return Err(QpackError::Dynamic);
            }
            let index = static_index(get_int(section, &mut pos, 6)?)?;
            if let Some(&(_, code)) = STATUS_ENTRIES.iter().find(|(i, _)| *i == index) {
                status = Some(code);
            }
        } else if b & 0x40 != 0 {
            // Literal with a name reference: T (0x10) set for the static table.
            if b & 0x10 == 0 {
                return Err(QpackError::Dynamic);
            }
            let index = static_index(get_int(section, &mut pos, 4)?)?;
            let (huffman, value) = get_str(section, &mut pos, 7)?;
            if STATUS_ENTRIES.iter().any(|(i, _)| *i == index) {
                status = Some(parse_status(huffman, value)?);
            }
        } else if b & 0x20 != 0 {
            // Literal with a literal name: 001NHxxx.
            let (name_huffman, name) = get_str(section, &mut pos, 3)?;
            let (huffman, value) = get_str(section, &mut pos, 7)?;
            if is_status_name(name_huffman, name)? {
                status = Some(parse_status(huffman, value)?);
            }
        } else {
            // 0001xxxx and 0000xxxx: post-base references, dynamic by definition.
            return Err(QpackError::Dynamic);
        }
    }
    status.ok_or(QpackError::NoStatus)
}

fn static_index(index: u64) -> Result<u64, QpackError> {
    if index > STATIC_LAST {
        return Err(QpackError::Malformed("static table index out of range"));
    }
    Ok(index)
}

fn decoded(huffman: bool, s: &[u8]) -> Result<Vec<u8>, QpackError> {
    if !huffman {
        return Ok(s.to_vec());
    }
    loona_hpack::huffman::HuffmanDecoder::new()
        .decode(s)
        .map_err(|_| QpackError::Malformed("bad Huffman code"))
}

fn is_status_name(huffman: bool, name: &[u8]) -> Result<bool, QpackError> {
    // Only a name starting with ':' can be ":status"; others are not decoded.
    if !huffman && name.first() != Some(&b':') {
        return Ok(false);
    }
    Ok(decoded(huffman, name)? == b":status")
}

fn parse_status(huffman: bool, value: &[u8]) -> Result<u16, QpackError> {
    let v = decoded(huffman, value)?;
    if v.len() != 3 || !v.iter().all(u8::is_ascii_digit) {
        return Err(QpackError::NoStatus);
    }
    std::str::from_utf8(&v)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(QpackError::NoStatus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_round_trip() {
        for (prefix, v) in [(6, 0), (6, 62), (6, 63), (6, 64), (4, 1000), (7, 1 << 40)] {
            let mut out = Vec::new();
            put_int(&mut out, 0, prefix, v);
            let mut pos = 0;
            assert_eq!(get_int(&out, &mut pos, prefix), Ok(v));
            assert_eq!(pos, out.len());
        }
    }

    #[test]
    fn request_uses_the_static_table() {
        let s = request_section(true, "a.test", "/", &[]);
        // RIC 0, base 0, GET (17), https (23), path / (1), :authority (0) literal.
        assert_eq!(&s[..5], &[0, 0, 0xc0 | 17, 0xc0 | 23, 0xc0 | 1]);
        assert_eq!(&s[5..], b"\x50\x06a.test");
        let s = request_section(false, "h", "/x", &[("x-a".into(), "b".into())]);
        assert_eq!(s, b"\0\0\xd1\xd6\x51\x02/x\x50\x01h\x23x-a\x01b");
    }

    #[test]
    fn statuses_static_literal_and_huffman() {
        // Indexed :status 200 (25), then other fields: content-length literal name ref (4).
        assert_eq!(response_status(b"\0\0\xd9\x54\x0210"), Ok(200));
        // Name reference to :status 200 (25), value "418".
        assert_eq!(response_status(b"\0\0\x5f\x0a\x03418"), Ok(418));
        // Literal name ":status", value "404".
        assert_eq!(response_status(b"\0\0\x27\x00:status\x03404"), Ok(404));
        // A Huffman-coded value: "302" is 0x64 0x02 ('3' 011001, '0' 00000, '2' 00010:
        // 16 bits, no padding).
        assert_eq!(response_status(b"\0\0\x5f\x0a\x82\x64\x02"), Ok(302));
    }

    #[test]
    fn dynamic_references_are_refused() {
        // Required Insert Count 1.
        assert_eq!(response_status(b"\x02\0\xd9"), Err(QpackError::Dynamic));
        // Indexed, dynamic (T=0).
        assert_eq!(response_status(b"\0\0\x81"), Err(QpackError::Dynamic));
        // Name reference, dynamic.
        assert_eq!(response_status(b"\0\0\x41\x01a"), Err(QpackError::Dynamic));
        // Post-base indexed.
        assert_eq!(response_status(b"\0\0\x10"), Err(QpackError::Dynamic));
        assert!(response_status(b"\0\0\xff\x7f").is_err());
        assert_eq!(
            response_status(b"\0\0\x54\x0210"),
            Err(QpackError::NoStatus)
        );
    }
}
