//! Frame serialisation, role-neutral: the connection writes its frames
//! with these, and tests, fuzzers and a flood tool can write a client's.

use crate::error::ErrorCode;
use crate::frame::{flags, kind, HEADER_LEN, PREFACE};
use crate::settings::SettingId;

/// Appends a 9-byte frame header. `length` must fit in 24 bits.
pub fn frame_header(out: &mut Vec<u8>, length: usize, kind: u8, flags: u8, stream: u32) {
    debug_assert!(length < 1 << 24, "frame length over 24 bits");
    let len = (length as u32).to_be_bytes();
    out.extend_from_slice(&len[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
}

/// The client preface (the magic octets only; a SETTINGS frame follows).
pub fn client_preface(out: &mut Vec<u8>) {
    out.extend_from_slice(PREFACE);
}

/// SETTINGS with the given parameters.
pub fn settings(out: &mut Vec<u8>, params: &[(SettingId, u32)]) {
    frame_header(out, params.len() * 6, kind::SETTINGS, 0, 0);
    for (id, value) in params {
        out.extend_from_slice(&(*id as u16).to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

pub fn settings_ack(out: &mut Vec<u8>) {
    frame_header(out, 0, kind::SETTINGS, flags::ACK, 0);
}

pub fn ping(out: &mut Vec<u8>, ack: bool, payload: [u8; 8]) {
    frame_header(out, 8, kind::PING, if ack { flags::ACK } else { 0 }, 0);
    out.extend_from_slice(&payload);
}

pub fn goaway(out: &mut Vec<u8>, last_stream: u32, code: ErrorCode, debug: &[u8]) {
    frame_header(out, 8 + debug.len(), kind::GOAWAY, 0, 0);
    out.extend_from_slice(&(last_stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(&code.0.to_be_bytes());
    out.extend_from_slice(debug);
}

pub fn rst_stream(out: &mut Vec<u8>, stream: u32, code: ErrorCode) {
    frame_header(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&code.0.to_be_bytes());
}

pub fn window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    frame_header(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&(increment & 0x7fff_ffff).to_be_bytes());
}

pub fn priority(out: &mut Vec<u8>, stream: u32, depends_on: u32, weight: u8) {
    frame_header(out, 5, kind::PRIORITY, 0, stream);
    out.extend_from_slice(&(depends_on & 0x7fff_ffff).to_be_bytes());
    out.push(weight);
}

/// The header of a DATA frame of `len` payload bytes (the payload is the caller's to send).
pub fn data_header(stream: u32, len: usize, end_stream: bool) -> [u8; HEADER_LEN] {
    debug_assert!(len < 1 << 24, "frame length over 24 bits");
    let f = if end_stream { flags::END_STREAM } else { 0 };
    let l = (len as u32).to_be_bytes();
    let s = (stream & 0x7fff_ffff).to_be_bytes();
    [l[1], l[2], l[3], kind::DATA, f, s[0], s[1], s[2], s[3]]
}

/// One DATA frame; the caller keeps `data` within the peer's frame size.
pub fn data(out: &mut Vec<u8>, stream: u32, data: &[u8], end_stream: bool) {
    let f = if end_stream { flags::END_STREAM } else { 0 };
    frame_header(out, data.len(), kind::DATA, f, stream);
    out.extend_from_slice(data);
}

/// A header block as HEADERS plus as many CONTINUATION frames as
/// `max_frame_size` requires (§4.3: one contiguous sequence).
pub fn headers(out: &mut Vec<u8>, stream: u32, block: &[u8], end_stream: bool, max_frame: usize) {
    let max_frame = max_frame.max(1);
    let mut chunks = block.chunks(max_frame);
    let first = chunks.next().unwrap_or(&[]);
    let rest = block.len().saturating_sub(first.len());
    let mut f = if end_stream { flags::END_STREAM } else { 0 };
    if rest == 0 {
        f |= flags::END_HEADERS;
    }
    frame_header(out, first.len(), kind::HEADERS, f, stream);
    out.extend_from_slice(first);
    let mut left = rest;
    for chunk in chunks {
        left -= chunk.len();
        let f = if left == 0 { flags::END_HEADERS } else { 0 };
        frame_header(out, chunk.len(), kind::CONTINUATION, f, stream);
        out.extend_from_slice(chunk);
    }
}

/// A raw frame of any type with any flags: for tests and flood tools.
pub fn raw(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    frame_header(out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
}

/// Bytes a frame with `payload` bytes takes on the wire.
pub const fn frame_len(payload: usize) -> usize {
    HEADER_LEN + payload
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::FrameHeader;

    #[test]
    fn headers_split_into_continuations() {
        let mut out = Vec::new();
        headers(&mut out, 5, &[7u8; 25], true, 10);
        let mut at = 0;
        let mut seen = Vec::new();
        while at < out.len() {
            let h = FrameHeader::parse(&out[at..]).unwrap();
            seen.push((h.kind, h.flags, h.length));
            at += HEADER_LEN + h.length as usize;
        }
        assert_eq!(
            seen,
            vec![
                (kind::HEADERS, flags::END_STREAM, 10),
                (kind::CONTINUATION, 0, 10),
                (kind::CONTINUATION, flags::END_HEADERS, 5)
            ]
        );
    }

    #[test]
    fn empty_block_is_one_headers_frame() {
        let mut out = Vec::new();
        headers(&mut out, 1, &[], false, 16384);
        assert_eq!(
            out,
            [0, 0, 0, kind::HEADERS, flags::END_HEADERS, 0, 0, 0, 1]
        );
    }

    #[test]
    fn control_frames_layout() {
        let mut out = Vec::new();
        goaway(&mut out, 7, ErrorCode::ENHANCE_YOUR_CALM, b"x");
        assert_eq!(
            out,
            [0, 0, 9, 7, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0xb, b'x']
        );
        out.clear();
        window_update(&mut out, 3, 100);
        assert_eq!(out, [0, 0, 4, 8, 0, 0, 0, 0, 3, 0, 0, 0, 100]);
    }
}
