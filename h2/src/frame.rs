//! Frame layout (RFC 9113 §4.1) and the per-type checks of §6 that need
//! nothing but the frame itself: lengths, stream 0 or not, padding.

use crate::error::{ErrorCode, H2Error};

/// Length of the fixed frame header.
pub const HEADER_LEN: usize = 9;
/// The client connection preface (§3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame type octets (§6).
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

/// Flag bits (§6); each is meaningful only on the types the RFC names.
pub mod flags {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// The 9-byte frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    pub length: u32,
    pub kind: u8,
    pub flags: u8,
    /// Stream identifier with the reserved bit cleared (§4.1: ignored).
    pub stream: u32,
}

impl FrameHeader {
    /// Reads a header from the first 9 bytes, `None` when fewer are there.
    pub fn parse(buf: &[u8]) -> Option<FrameHeader> {
        let h = buf.get(..HEADER_LEN)?;
        Some(FrameHeader {
            length: u32::from_be_bytes([0, h[0], h[1], h[2]]),
            kind: h[3],
            flags: h[4],
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        })
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Stream dependency of HEADERS and PRIORITY: parsed, checked for
/// self-dependency (§5.3.1), otherwise ignored (RFC 9113 deprecates it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Priority {
    pub depends_on: u32,
    pub exclusive: bool,
    pub weight: u8,
}

/// A frame whose payload passed the checks of §6, borrowing the input.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    Data {
        stream: u32,
        data: &'a [u8],
        end_stream: bool,
        /// Payload length including padding: what flow control counts.
        flow_len: u32,
    },
    Headers {
        stream: u32,
        block: &'a [u8],
        end_stream: bool,
        end_headers: bool,
        priority: Option<Priority>,
    },
    Priority {
        stream: u32,
        priority: Priority,
    },
    RstStream {
        stream: u32,
        code: ErrorCode,
    },
    Settings {
        ack: bool,
        payload: &'a [u8],
    },
    PushPromise,
    Ping {
        ack: bool,
        payload: [u8; 8],
    },
    GoAway {
        last_stream: u32,
        code: ErrorCode,
        debug: &'a [u8],
    },
    WindowUpdate {
        stream: u32,
        increment: u32,
    },
    Continuation {
        stream: u32,
        block: &'a [u8],
        end_headers: bool,
    },
    /// A frame type this implementation does not know: ignored (§4.1).
    Unknown,
}

fn conn_err(code: ErrorCode, reason: &'static str) -> H2Error {
    H2Error::conn(code, reason)
}

/// Removes padding (§6.1): the pad length octet and that many trailing
/// bytes; padding as long as the payload is a PROTOCOL_ERROR.
fn unpad(h: &FrameHeader, payload: &[u8]) -> Result<(usize, usize), H2Error> {
    if !h.has(flags::PADDED) {
        return Ok((0, payload.len()));
    }
    let pad = *payload.first().ok_or(conn_err(
        ErrorCode::FRAME_SIZE_ERROR,
        "padded frame without pad length",
    ))? as usize;
    if pad >= payload.len() {
        return Err(conn_err(
            ErrorCode::PROTOCOL_ERROR,
            "padding as long as the frame",
        ));
    }
    Ok((1, payload.len() - pad))
}

fn parse_priority(stream: u32, b: &[u8]) -> Result<Priority, H2Error> {
    let word = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let priority = Priority {
        depends_on: word & 0x7fff_ffff,
        exclusive: word & 0x8000_0000 != 0,
        weight: b[4],
    };
    if priority.depends_on == stream {
        return Err(H2Error::stream(
            stream,
            ErrorCode::PROTOCOL_ERROR,
            "stream depends on itself",
        ));
    }
    Ok(priority)
}

fn need_stream(h: &FrameHeader, what: &'static str) -> Result<(), H2Error> {
    if h.stream == 0 {
        return Err(conn_err(ErrorCode::PROTOCOL_ERROR, what));
    }
    Ok(())
}

fn need_conn(h: &FrameHeader, what: &'static str) -> Result<(), H2Error> {
    if h.stream != 0 {
        return Err(conn_err(ErrorCode::PROTOCOL_ERROR, what));
    }
    Ok(())
}

/// Checks and splits one frame's payload (`payload.len() == h.length`).
pub fn parse_frame<'a>(h: &FrameHeader, payload: &'a [u8]) -> Result<Frame<'a>, H2Error> {
    match h.kind {
        kind::DATA => parse_data(h, payload),
        kind::HEADERS => parse_headers(h, payload),
        kind::PRIORITY => parse_priority_frame(h, payload),
        kind::RST_STREAM => {
            need_stream(h, "RST_STREAM on stream 0")?;
            let code = four_bytes(payload, "RST_STREAM length is not 4")?;
            Ok(Frame::RstStream {
                stream: h.stream,
                code: ErrorCode(code),
            })
        }
        kind::SETTINGS => parse_settings(h, payload),
        kind::PUSH_PROMISE => Ok(Frame::PushPromise),
        kind::PING => parse_ping(h, payload),
        kind::GOAWAY => parse_goaway(h, payload),
        kind::WINDOW_UPDATE => {
            let word = four_bytes(payload, "WINDOW_UPDATE length is not 4")?;
            Ok(Frame::WindowUpdate {
                stream: h.stream,
                increment: word & 0x7fff_ffff,
            })
        }
        kind::CONTINUATION => {
            need_stream(h, "CONTINUATION on stream 0")?;
            Ok(Frame::Continuation {
                stream: h.stream,
                block: payload,
                end_headers: h.has(flags::END_HEADERS),
            })
        }
        _ => Ok(Frame::Unknown),
    }
}

fn parse_data<'a>(h: &FrameHeader, payload: &'a [u8]) -> Result<Frame<'a>, H2Error> {
    need_stream(h, "DATA on stream 0")?;
    let (start, end) = unpad(h, payload)?;
    Ok(Frame::Data {
        stream: h.stream,
        data: &payload[start..end],
        end_stream: h.has(flags::END_STREAM),
        flow_len: h.length,
    })
}

fn parse_priority_frame<'a>(h: &FrameHeader, payload: &'a [u8]) -> Result<Frame<'a>, H2Error> {
    need_stream(h, "PRIORITY on stream 0")?;
    if payload.len() != 5 {
        return Err(H2Error::stream(
            h.stream,
            ErrorCode::FRAME_SIZE_ERROR,
            "PRIORITY length is not 5",
        ));
    }
    let priority = parse_priority(h.stream, payload)?;
    Ok(Frame::Priority {
        stream: h.stream,
        priority,
    })
}

fn parse_ping<'a>(h: &FrameHeader, payload: &'a [u8]) -> Result<Frame<'a>, H2Error> {
    need_conn(h, "PING on a stream")?;
    let payload: [u8; 8] = payload
        .try_into()
        .map_err(|_| conn_err(ErrorCode::FRAME_SIZE_ERROR, "PING length is not 8"))?;
    Ok(Frame::Ping {
        ack: h.has(flags::ACK),
        payload,
    })
}

fn parse_goaway<'a>(h: &FrameHeader, payload: &'a [u8]) -> Result<Frame<'a>, H2Error> {
    need_conn(h, "GOAWAY on a stream")?;
    if payload.len() < 8 {
        return Err(conn_err(
            ErrorCode::FRAME_SIZE_ERROR,
            "GOAWAY shorter than 8",
        ));
    }
    let last = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
    let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
    Ok(Frame::GoAway {
        last_stream: last & 0x7fff_ffff,
        code: ErrorCode(code),
        debug: &payload[8..],
    })
}

fn four_bytes(payload: &[u8], what: &'static str) -> Result<u32, H2Error> {
    let b: [u8; 4] = payload
        .try_into()
        .map_err(|_| conn_err(ErrorCode::FRAME_SIZE_ERROR, what))?;
    Ok(u32::from_be_bytes(b))
}

fn parse_headers<'a>(h: &FrameHeader, payload: &'a [u8]) -> Result<Frame<'a>, H2Error> {
    need_stream(h, "HEADERS on stream 0")?;
    let (mut start, end) = unpad(h, payload)?;
    let mut priority = None;
    if h.has(flags::PRIORITY) {
        if end < start + 5 {
            return Err(conn_err(
                ErrorCode::FRAME_SIZE_ERROR,
                "HEADERS too short for its priority",
            ));
        }
        priority = Some(parse_priority(h.stream, &payload[start..start + 5])?);
        start += 5;
    }
    Ok(Frame::Headers {
        stream: h.stream,
        block: &payload[start..end],
        end_stream: h.has(flags::END_STREAM),
        end_headers: h.has(flags::END_HEADERS),
        priority,
    })
}

fn parse_settings<'a>(h: &FrameHeader, payload: &'a [u8]) -> Result<Frame<'a>, H2Error> {
    need_conn(h, "SETTINGS on a stream")?;
    let ack = h.has(flags::ACK);
    if ack && !payload.is_empty() {
        return Err(conn_err(
            ErrorCode::FRAME_SIZE_ERROR,
            "SETTINGS ack with a payload",
        ));
    }
    if !payload.chunks_exact(6).remainder().is_empty() {
        return Err(conn_err(
            ErrorCode::FRAME_SIZE_ERROR,
            "SETTINGS length not a multiple of 6",
        ));
    }
    Ok(Frame::Settings { ack, payload })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(length: u32, kind: u8, flags: u8, stream: u32) -> FrameHeader {
        FrameHeader {
            length,
            kind,
            flags,
            stream,
        }
    }

    fn conn_code(r: Result<Frame<'_>, H2Error>) -> ErrorCode {
        match r {
            Err(H2Error::Connection(e)) => e.code,
            other => panic!("expected a connection error, got {other:?}"),
        }
    }

    #[test]
    fn header_parse_clears_reserved_bit() {
        let h = FrameHeader::parse(&[0, 0, 5, 2, 0, 0x80, 0, 0, 3]).unwrap();
        assert_eq!(h, hdr(5, kind::PRIORITY, 0, 3));
        assert!(FrameHeader::parse(&[0; 8]).is_none());
    }

    #[test]
    fn data_padding_removed_and_checked() {
        let h = hdr(6, kind::DATA, flags::PADDED | flags::END_STREAM, 1);
        let f = parse_frame(&h, &[2, b'a', b'b', b'c', 0, 0]).unwrap();
        assert_eq!(
            f,
            Frame::Data {
                stream: 1,
                data: b"abc",
                end_stream: true,
                flow_len: 6
            }
        );
        let h = hdr(3, kind::DATA, flags::PADDED, 1);
        assert_eq!(
            conn_code(parse_frame(&h, &[3, 0, 0])),
            ErrorCode::PROTOCOL_ERROR
        );
        assert_eq!(
            conn_code(parse_frame(&hdr(0, kind::DATA, 0, 0), &[])),
            ErrorCode::PROTOCOL_ERROR
        );
    }

    #[test]
    fn headers_priority_and_self_dependency() {
        let h = hdr(6, kind::HEADERS, flags::PRIORITY | flags::END_HEADERS, 3);
        let f = parse_frame(&h, &[0x80, 0, 0, 1, 15, 0x82]).unwrap();
        let Frame::Headers {
            block, priority, ..
        } = f
        else {
            panic!()
        };
        assert_eq!(block, &[0x82]);
        assert_eq!(
            priority,
            Some(Priority {
                depends_on: 1,
                exclusive: true,
                weight: 15
            })
        );
        let r = parse_frame(&h, &[0, 0, 0, 3, 15, 0x82]);
        assert!(matches!(r, Err(H2Error::Stream(e)) if e.code == ErrorCode::PROTOCOL_ERROR));
        let short = hdr(3, kind::HEADERS, flags::PRIORITY, 3);
        assert_eq!(
            conn_code(parse_frame(&short, &[0, 0, 0])),
            ErrorCode::FRAME_SIZE_ERROR
        );
    }

    #[test]
    fn fixed_lengths_give_frame_size_error() {
        let p = parse_frame(&hdr(4, kind::PRIORITY, 0, 1), &[0; 4]);
        assert!(matches!(p, Err(H2Error::Stream(e)) if e.code == ErrorCode::FRAME_SIZE_ERROR));
        for (k, len, stream) in [
            (kind::RST_STREAM, 3, 1),
            (kind::PING, 7, 0),
            (kind::WINDOW_UPDATE, 3, 1),
            (kind::SETTINGS, 5, 0),
            (kind::GOAWAY, 7, 0),
        ] {
            let payload = vec![0; len as usize];
            let r = parse_frame(&hdr(len, k, 0, stream), &payload);
            assert_eq!(conn_code(r), ErrorCode::FRAME_SIZE_ERROR, "type {k}");
        }
        let ack = parse_frame(&hdr(6, kind::SETTINGS, flags::ACK, 0), &[0; 6]);
        assert_eq!(conn_code(ack), ErrorCode::FRAME_SIZE_ERROR);
    }

    #[test]
    fn stream_zero_rules() {
        for (k, len, stream) in [
            (kind::PING, 8, 1),
            (kind::SETTINGS, 0, 1),
            (kind::GOAWAY, 8, 1),
            (kind::RST_STREAM, 4, 0),
            (kind::PRIORITY, 5, 0),
            (kind::HEADERS, 0, 0),
            (kind::CONTINUATION, 0, 0),
        ] {
            let payload = vec![0; len as usize];
            let r = parse_frame(&hdr(len, k, 0, stream), &payload);
            assert_eq!(conn_code(r), ErrorCode::PROTOCOL_ERROR, "type {k}");
        }
    }

    #[test]
    fn unknown_types_and_window_update() {
        assert_eq!(
            parse_frame(&hdr(3, 0xfa, 0xff, 7), &[1, 2, 3]).unwrap(),
            Frame::Unknown
        );
        let f = parse_frame(&hdr(4, kind::WINDOW_UPDATE, 0, 0), &[0x80, 0, 0, 9]).unwrap();
        assert_eq!(
            f,
            Frame::WindowUpdate {
                stream: 0,
                increment: 9
            }
        );
    }
}
