//! HTTP/3 framing for the load client (RFC 9114 §7): QUIC variable-length integers, the
//! control stream's preface, a request's HEADERS frame, and an incremental reader of a
//! response stream that keeps the HEADERS it needs and only counts DATA.

use super::qpack::{self, QpackError};

/// Frame types (RFC 9114 §7.2).
const DATA: u64 = 0x0;
const HEADERS: u64 = 0x1;
/// The largest response field section read (a bigger one is an error, not a buffer).
const MAX_SECTION: u64 = 64 * 1024;

/// Appends `v` as a QUIC variable-length integer (RFC 9000 §16).
pub fn put_varint(out: &mut Vec<u8>, v: u64) {
    match v {
        0..=63 => out.push(v as u8),
        64..=16_383 => out.extend_from_slice(&(v as u16 | 0x4000).to_be_bytes()),
        16_384..=1_073_741_823 => out.extend_from_slice(&(v as u32 | 0x8000_0000).to_be_bytes()),
        _ => out.extend_from_slice(&(v | 0xc000_0000_0000_0000).to_be_bytes()),
    }
}

/// Reads a variable-length integer from the front of `buf`: (value, length), or None when
/// `buf` holds only part of it.
pub fn get_varint(buf: &[u8]) -> Option<(u64, usize)> {
    let first = *buf.first()?;
    let len = 1usize << (first >> 6);
    let bytes = buf.get(..len)?;
    let mut v = u64::from(first & 0x3f);
    for b in &bytes[1..] {
        v = (v << 8) | u64::from(*b);
    }
    Some((v, len))
}

/// What the client sends on its control stream: the stream type (0x00), then SETTINGS
/// (0x04) with no parameter: QPACK_MAX_TABLE_CAPACITY and QPACK_BLOCKED_STREAMS keep their
/// default of 0, so the server may not use a dynamic table.
pub const CONTROL_PREFACE: &[u8] = &[0x00, 0x04, 0x00];

/// A request stream's whole content: one HEADERS frame of `section`.
pub fn headers_frame(section: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(section.len() + 10);
    put_varint(&mut out, HEADERS);
    put_varint(&mut out, section.len() as u64);
    out.extend_from_slice(section);
    out
}

/// Why a response stream could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    Qpack(QpackError),
    /// DATA before the response's HEADERS (RFC 9114 §4.1: H3_FRAME_UNEXPECTED).
    DataFirst,
    TooLarge(u64),
    /// The stream ended without a final response, or inside a frame.
    Truncated,
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Qpack(e) => write!(f, "{e}"),
            FrameError::DataFirst => write!(f, "DATA frame before the response's HEADERS"),
            FrameError::TooLarge(n) => write!(f, "a {n}-byte HEADERS frame (over 64 KiB)"),
            FrameError::Truncated => {
                write!(f, "the response stream ended before a complete response")
            }
        }
    }
}

/// One response stream being read.
#[derive(Default)]
pub struct ResponseReader {
    /// A frame header (type and length) read in part.
    head: Vec<u8>,
    /// The current frame: its type and the payload bytes still to come.
    frame: Option<(u64, u64)>,
    /// The HEADERS payload read so far.
    section: Vec<u8>,
    /// The final status, once its HEADERS has been read.
    pub status: Option<u16>,
    /// DATA payload bytes: the body's length.
    pub body: u64,
}

impl ResponseReader {
    /// Takes the stream's next bytes.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<(), FrameError> {
        while !data.is_empty() {
            let Some((kind, left)) = self.frame else {
                data = self.read_head(data)?;
                continue;
            };
            let n = data.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            match kind {
                DATA => self.body += n as u64,
                HEADERS => self.section.extend_from_slice(&data[..n]),
                // Other frames (unknown, reserved) are skipped (RFC 9114 §9).
                _ => {}
            }
            data = &data[n..];
            let left = left - n as u64;
            self.frame = Some((kind, left));
            if left == 0 {
                self.frame = None;
                self.frame_done(kind)?;
            }
        }
        Ok(())
    }

    /// Reads a frame header from `data` (with any part kept from before); returns the rest.
    fn read_head<'a>(&mut self, data: &'a [u8]) -> Result<&'a [u8], FrameError> {
        let kept = self.head.len();
        let take = data.len().min(16 - kept);
        self.head.extend_from_slice(&data[..take]);
        let parsed = get_varint(&self.head).and_then(|(kind, a)| {
            let (len, b) = get_varint(&self.head[a..])?;
            Some((kind, len, a + b))
        });
        let Some((kind, len, used)) = parsed else {
            // Both integers together are 16 bytes at most: not there yet.
            return Ok(&data[take..]);
        };
        self.head.clear();
        let rest = &data[used - kept..];
        match kind {
            HEADERS if len > MAX_SECTION => return Err(FrameError::TooLarge(len)),
            DATA if self.status.is_none() => return Err(FrameError::DataFirst),
            _ => {}
        }
        self.frame = Some((kind, len));
        if len == 0 {
            self.frame = None;
            self.frame_done(kind)?;
        }
        Ok(rest)
    }

    fn frame_done(&mut self, kind: u64) -> Result<(), FrameError> {
        if kind != HEADERS {
            return Ok(());
        }
        let section = std::mem::take(&mut self.section);
        if self.status.is_some() {
            // Trailers: not needed.
            return Ok(());
        }
        let status = qpack::response_status(&section).map_err(FrameError::Qpack)?;
        // An interim (1xx) response is followed by the final one.
        if status >= 200 {
            self.status = Some(status);
        }
        Ok(())
    }

    /// The stream ended: the final status, if the response is complete.
    pub fn finish(&self) -> Result<u16, FrameError> {
        match (self.status, &self.frame, self.head.is_empty()) {
            (Some(s), None, true) => Ok(s),
            _ => Err(FrameError::Truncated),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints() {
        for v in [0, 63, 64, 16_383, 16_384, 1 << 30, (1 << 62) - 1] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(get_varint(&out), Some((v, out.len())));
            assert_eq!(get_varint(&out[..out.len() - 1]), None);
        }
    }

    fn response(body: &[u8]) -> Vec<u8> {
        let mut r = headers_frame(b"\0\0\xd9");
        // An unknown frame type (reserved 0x21) between.
        r.extend_from_slice(&[0x21, 0x02, 0xaa, 0xbb]);
        put_varint(&mut r, DATA);
        put_varint(&mut r, body.len() as u64);
        r.extend_from_slice(body);
        r
    }

    #[test]
    fn a_response_byte_by_byte_and_whole() {
        let wire = response(&[7u8; 300]);
        let mut whole = ResponseReader::default();
        whole.feed(&wire).unwrap();
        assert_eq!((whole.finish(), whole.body), (Ok(200), 300));
        let mut split = ResponseReader::default();
        for b in &wire {
            split.feed(std::slice::from_ref(b)).unwrap();
        }
        assert_eq!((split.finish(), split.body), (Ok(200), 300));
        let mut cut = ResponseReader::default();
        cut.feed(&wire[..wire.len() - 1]).unwrap();
        assert_eq!(cut.finish(), Err(FrameError::Truncated));
    }

    #[test]
    fn interim_trailers_and_errors() {
        // 103 (index 24), then 200, body, trailers with a dynamic reference (not decoded).
        let mut wire = headers_frame(b"\0\0\xd8");
        wire.extend(response(b"ab"));
        wire.extend(headers_frame(b"\x02\0\x81"));
        let mut r = ResponseReader::default();
        r.feed(&wire).unwrap();
        assert_eq!((r.finish(), r.body), (Ok(200), 2));
        let mut r = ResponseReader::default();
        assert_eq!(r.feed(&[0x00, 0x01, 0x61]), Err(FrameError::DataFirst));
        let mut r = ResponseReader::default();
        assert_eq!(
            r.feed(&headers_frame(b"\0\0\x81")),
            Err(FrameError::Qpack(QpackError::Dynamic))
        );
    }
}
