//! The HTTP/2 client frames the flood tool writes, and the frame headers it reads back
//! (RFC 9113 §4.1, §6). Written here rather than taken from the proxy's `h2` crate: the tool
//! measures nginx as it measures the proxy, and must not share the proxy's mistakes.

/// Frame types (RFC 9113 §6).
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
    /// A type no RFC defines: a receiver must ignore it (§4.1), so it only costs its bytes.
    pub const UNKNOWN: u8 = 0xfa;
}

pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;

/// The 24 octets a client opens every HTTP/2 connection with (§3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const HEADER_LEN: usize = 9;

/// SETTINGS parameters (§6.5.2) the tool sends.
pub const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;

/// Error codes by name (§7), for the report.
pub fn error_name(code: u32) -> String {
    const NAMES: [&str; 14] = [
        "NO_ERROR",
        "PROTOCOL_ERROR",
        "INTERNAL_ERROR",
        "FLOW_CONTROL_ERROR",
        "SETTINGS_TIMEOUT",
        "STREAM_CLOSED",
        "FRAME_SIZE_ERROR",
        "REFUSED_STREAM",
        "CANCEL",
        "COMPRESSION_ERROR",
        "CONNECT_ERROR",
        "ENHANCE_YOUR_CALM",
        "INADEQUATE_SECURITY",
        "HTTP_1_1_REQUIRED",
    ];
    NAMES
        .get(code as usize)
        .map_or_else(|| format!("0x{code:x}"), |n| (*n).to_string())
}

/// Appends one frame: the 9-byte header, then `payload`.
pub fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = (payload.len() as u32).to_be_bytes();
    out.extend_from_slice(&len[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
}

pub fn settings(out: &mut Vec<u8>, params: &[(u16, u32)]) {
    let mut payload = Vec::with_capacity(params.len() * 6);
    for (id, value) in params {
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&value.to_be_bytes());
    }
    frame(out, kind::SETTINGS, 0, 0, &payload);
}

pub fn window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    frame(
        out,
        kind::WINDOW_UPDATE,
        0,
        stream,
        &(increment & 0x7fff_ffff).to_be_bytes(),
    );
}

pub fn rst_stream(out: &mut Vec<u8>, stream: u32, code: u32) {
    frame(out, kind::RST_STREAM, 0, stream, &code.to_be_bytes());
}

/// PRIORITY (§6.3, deprecated by RFC 9113 but still parsed by every server).
pub fn priority(out: &mut Vec<u8>, stream: u32, depends_on: u32, weight: u8) {
    let mut payload = [0u8; 5];
    payload[..4].copy_from_slice(&(depends_on & 0x7fff_ffff).to_be_bytes());
    payload[4] = weight;
    frame(out, kind::PRIORITY, 0, stream, &payload);
}

/// HPACK integer with an N-bit prefix (RFC 7541 §5.1); `first` holds the bits above it.
pub fn hpack_int(out: &mut Vec<u8>, first: u8, prefix_bits: u8, value: usize) {
    let max = (1usize << prefix_bits) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
}

/// A string literal without Huffman coding (RFC 7541 §5.2).
fn hpack_str(out: &mut Vec<u8>, s: &[u8]) {
    hpack_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// "Literal Header Field without Indexing — New Name" (§6.2.2): the table is untouched, so
/// every block stands alone whatever the server's table holds.
pub fn hpack_literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0x00);
    hpack_str(out, name);
    hpack_str(out, value);
}

/// "Literal Header Field with Incremental Indexing — New Name" (§6.2.1): the field enters
/// the server's dynamic table at index 62.
pub fn hpack_indexed_literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0x40);
    hpack_str(out, name);
    hpack_str(out, value);
}

/// A request's header block: the four pseudo-header fields, each a plain literal.
pub fn request_block(method: &str, scheme: &str, authority: &str, path: &str) -> Vec<u8> {
    let mut block = Vec::with_capacity(64 + authority.len() + path.len());
    hpack_literal(&mut block, b":method", method.as_bytes());
    hpack_literal(&mut block, b":scheme", scheme.as_bytes());
    hpack_literal(&mut block, b":authority", authority.as_bytes());
    hpack_literal(&mut block, b":path", path.as_bytes());
    block
}

/// A frame header as read from the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub length: usize,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

impl Header {
    pub fn parse(buf: &[u8]) -> Option<Header> {
        let b = buf.get(..HEADER_LEN)?;
        Some(Header {
            length: (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        })
    }
}

/// The error code of a GOAWAY (after the last stream id) or RST_STREAM payload.
pub fn code_at(payload: &[u8], at: usize) -> Option<u32> {
    let b = payload.get(at..at + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Strips the padding of a HEADERS payload and its priority fields (§6.2): the block.
pub fn headers_block(h: &Header, payload: &[u8]) -> Option<Vec<u8>> {
    const PADDED: u8 = 0x8;
    const PRIORITY: u8 = 0x20;
    let mut p = payload;
    let mut pad = 0;
    if h.flags & PADDED != 0 {
        pad = usize::from(*p.first()?);
        p = p.get(1..)?;
    }
    if h.flags & PRIORITY != 0 {
        p = p.get(5..)?;
    }
    Some(p.get(..p.len().checked_sub(pad)?)?.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_layout() {
        let mut out = Vec::new();
        window_update(&mut out, 3, 100);
        assert_eq!(out, [0, 0, 4, 8, 0, 0, 0, 0, 3, 0, 0, 0, 100]);
        let h = Header::parse(&out).unwrap();
        assert_eq!((h.length, h.kind, h.stream), (4, kind::WINDOW_UPDATE, 3));
        out.clear();
        rst_stream(&mut out, 5, 8);
        assert_eq!(code_at(&out[HEADER_LEN..], 0), Some(8));
    }

    #[test]
    fn hpack_integers_follow_rfc7541_examples() {
        // C.1.1: 10 with a 5-bit prefix; C.1.2: 1337 with a 5-bit prefix.
        let mut out = Vec::new();
        hpack_int(&mut out, 0, 5, 10);
        assert_eq!(out, [10]);
        out.clear();
        hpack_int(&mut out, 0, 5, 1337);
        assert_eq!(out, [31, 154, 10]);
    }

    #[test]
    fn request_block_decodes() {
        let block = request_block("GET", "https", "a.test", "/x");
        let mut d = loona_hpack::Decoder::new();
        let fields = d.decode(&block).unwrap();
        assert_eq!(fields[0], (b":method".to_vec(), b"GET".to_vec()));
        assert_eq!(fields[3], (b":path".to_vec(), b"/x".to_vec()));
    }

    #[test]
    fn padded_headers_block() {
        let h = Header {
            length: 8,
            kind: kind::HEADERS,
            flags: 0x8 | END_HEADERS,
            stream: 1,
        };
        assert_eq!(headers_block(&h, &[2, 0x88, 7, 0, 0]), Some(vec![0x88, 7]));
        assert_eq!(headers_block(&h, &[9, 0x88]), None);
    }
}
