//! Raw HTTP/2 frames for tests that must send what a well-behaved client library would not
//! (or would not in that order): the connection preface, a frame of any kind, and a GET's
//! header block in the plainest HPACK.

/// The client's connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const HEADERS: u8 = 1;
pub const SETTINGS: u8 = 4;
pub const GOAWAY: u8 = 7;
pub const WINDOW_UPDATE: u8 = 8;
/// SETTINGS' and PING's flag.
pub const ACK: u8 = 1;
/// HEADERS' flags: END_STREAM | END_HEADERS.
pub const END_STREAM_AND_HEADERS: u8 = 0x5;

/// A frame: the 9-byte header, then `payload`.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("a test frame under 16 MiB");
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The header block of `GET path` over http to `authority`: `:method GET` and `:scheme
/// http` from the static table (2, 6), `:path` and `:authority` as literals without indexing
/// on static names 4 and 1, no Huffman. Both must be shorter than 128 bytes.
pub fn get_block(path: &str, authority: &str) -> Vec<u8> {
    let mut block = vec![0x82, 0x86];
    for (name, value) in [(0x04, path), (0x01, authority)] {
        let len = u8::try_from(value.len())
            .ok()
            .filter(|&l| l < 0x80)
            .expect("a short value");
        block.extend([name, len]);
        block.extend_from_slice(value.as_bytes());
    }
    block
}
