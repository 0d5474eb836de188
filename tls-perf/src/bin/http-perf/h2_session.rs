//! `--h2` load: one HTTP/2 connection's client side, without I/O. The load thread hands it
//! the bytes it read and writes what it queued; the session opens a stream per request (the
//! same GET, one HEADERS frame with END_STREAM), and reports each response when its stream
//! ends, with the start time the thread gave it (the intended send time in rate mode).
//!
//! Flow control is opened wide once (a 2^31-1 window per stream, and for the connection
//! topped up after every GiB received), so the server never waits for the client's credit.

use std::collections::HashMap;

use crate::flood::wire::{self, kind, Header, ACK, END_HEADERS, END_STREAM, HEADER_LEN};
use crate::hpack_status::StatusReader;

const MAX_WINDOW: u32 = 0x7fff_ffff;
/// The connection window every connection starts with (RFC 9113 §6.9.2).
const DEFAULT_WINDOW: u32 = 65_535;
/// Received DATA bytes after which the connection's window is topped up again.
const REFILL_AFTER: u64 = 1 << 30;
/// SETTINGS_MAX_CONCURRENT_STREAMS (§6.5.2).
const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
/// Frames bigger than this (16 MiB, the protocol's limit) mean a broken peer.
const MAX_FRAME: usize = 1 << 24;

/// A response whose stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    pub start_ns: u64,
    /// The `:status` of the response head (0 if it had none the session could decode).
    pub status: u16,
}

/// Why the connection cannot go on (the thread replaces it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum H2Error {
    /// A frame or header block the session cannot read.
    Protocol,
    /// The server reset a stream or sent GOAWAY.
    Closed,
}

struct Stream {
    start_ns: u64,
    status: u16,
}

pub struct H2Session {
    /// The header block of the request (literals only: no HPACK state to keep in step).
    block: std::sync::Arc<Vec<u8>>,
    out: Vec<u8>,
    input: Vec<u8>,
    heads: StatusReader,
    next_stream: u32,
    open: HashMap<u32, Stream>,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS (unlimited until it says).
    max_streams: usize,
    /// A header block spread over HEADERS and CONTINUATION: (stream, END_STREAM, block).
    partial: Option<(u32, bool, Vec<u8>)>,
    received: u64,
}

impl H2Session {
    /// A new session with the connection preface and settings already queued.
    pub fn new(block: std::sync::Arc<Vec<u8>>) -> H2Session {
        let mut out = wire::PREFACE.to_vec();
        wire::settings(
            &mut out,
            &[
                (wire::SETTINGS_ENABLE_PUSH, 0),
                (wire::SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW),
            ],
        );
        wire::window_update(&mut out, 0, MAX_WINDOW - DEFAULT_WINDOW);
        H2Session {
            block,
            out,
            input: Vec::new(),
            heads: StatusReader::new(),
            next_stream: 1,
            open: HashMap::new(),
            max_streams: usize::MAX,
            partial: None,
            received: 0,
        }
    }

    /// Requests sent (or queued) whose response has not ended.
    pub fn in_flight(&self) -> usize {
        self.open.len()
    }

    /// Whether the server's stream limit allows one more request.
    pub fn can_open(&self) -> bool {
        self.open.len() < self.max_streams && self.next_stream < MAX_WINDOW
    }

    /// Queues one request; `start_ns` comes back in its `Done`.
    pub fn request(&mut self, start_ns: u64) {
        let id = self.next_stream;
        self.next_stream += 2;
        wire::frame(
            &mut self.out,
            kind::HEADERS,
            END_STREAM | END_HEADERS,
            id,
            &self.block,
        );
        self.open.insert(
            id,
            Stream {
                start_ns,
                status: 0,
            },
        );
    }

    /// Bytes to write.
    pub fn output(&self) -> &[u8] {
        &self.out
    }

    /// `n` bytes of the output were written.
    pub fn written(&mut self, n: usize) {
        self.out.drain(..n.min(self.out.len()));
    }

    /// Reads `data`, appending every response that ended to `done`.
    pub fn feed(&mut self, data: &[u8], done: &mut Vec<Done>) -> Result<(), H2Error> {
        self.input.extend_from_slice(data);
        let mut pos = 0;
        let result = loop {
            let Some(h) = self.input.get(pos..).and_then(Header::parse) else {
                break Ok(());
            };
            if h.length > MAX_FRAME {
                break Err(H2Error::Protocol);
            }
            let end = pos + HEADER_LEN + h.length;
            if self.input.len() < end {
                break Ok(());
            }
            let payload = self.input[pos + HEADER_LEN..end].to_vec();
            pos = end;
            if let Err(e) = self.frame(h, &payload, done) {
                break Err(e);
            }
        };
        self.input.drain(..pos);
        result
    }

    fn frame(&mut self, h: Header, payload: &[u8], done: &mut Vec<Done>) -> Result<(), H2Error> {
        if self.partial.is_some() && h.kind != kind::CONTINUATION {
            return Err(H2Error::Protocol);
        }
        match h.kind {
            kind::DATA => {
                self.received += payload.len() as u64;
                if self.received >= REFILL_AFTER {
                    wire::window_update(&mut self.out, 0, self.received as u32);
                    self.received = 0;
                }
                if h.flags & END_STREAM != 0 {
                    self.end(h.stream, done);
                }
            }
            kind::HEADERS => {
                let block = wire::headers_block(&h, payload).ok_or(H2Error::Protocol)?;
                self.partial = Some((h.stream, h.flags & END_STREAM != 0, block));
                if h.flags & END_HEADERS != 0 {
                    self.head_done(done)?;
                }
            }
            kind::CONTINUATION => {
                let Some((stream, _, block)) = self.partial.as_mut() else {
                    return Err(H2Error::Protocol);
                };
                if *stream != h.stream {
                    return Err(H2Error::Protocol);
                }
                block.extend_from_slice(payload);
                if h.flags & END_HEADERS != 0 {
                    self.head_done(done)?;
                }
            }
            kind::SETTINGS if h.flags & ACK == 0 => {
                for p in payload.chunks_exact(6) {
                    let id = u16::from_be_bytes([p[0], p[1]]);
                    let value = u32::from_be_bytes([p[2], p[3], p[4], p[5]]);
                    if id == SETTINGS_MAX_CONCURRENT_STREAMS {
                        self.max_streams = value as usize;
                    }
                }
                wire::frame(&mut self.out, kind::SETTINGS, ACK, 0, &[]);
            }
            kind::PING if h.flags & ACK == 0 => {
                wire::frame(&mut self.out, kind::PING, ACK, 0, payload);
            }
            kind::RST_STREAM | kind::GOAWAY => return Err(H2Error::Closed),
            _ => {}
        }
        Ok(())
    }

    /// A header block is complete: the response's status, and its end if END_STREAM.
    fn head_done(&mut self, done: &mut Vec<Done>) -> Result<(), H2Error> {
        let Some((id, end_stream, block)) = self.partial.take() else {
            return Ok(());
        };
        // Read whatever the stream, to keep the HPACK table in step with the server's.
        let status = self.heads.read(&block).map_err(|_| H2Error::Protocol)?;
        if let (Some(s), Some(status)) = (self.open.get_mut(&id), status) {
            // A trailer block has no :status; the first head's stays.
            if s.status == 0 {
                s.status = status;
            }
        }
        if end_stream {
            self.end(id, done);
        }
        Ok(())
    }

    fn end(&mut self, id: u32, done: &mut Vec<Done>) {
        if let Some(s) = self.open.remove(&id) {
            done.push(Done {
                start_ns: s.start_ns,
                status: s.status,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_head(out: &mut Vec<u8>, stream: u32, flags: u8) {
        // :status 200 from the static table (index 8), as an indexed field.
        wire::frame(out, kind::HEADERS, flags | END_HEADERS, stream, &[0x88]);
    }

    fn session() -> H2Session {
        let block = wire::request_block("GET", "https", "example.com", "/");
        H2Session::new(std::sync::Arc::new(block))
    }

    #[test]
    fn opens_with_the_preface_then_one_headers_frame_per_request() {
        let mut s = session();
        assert!(s.output().starts_with(wire::PREFACE));
        let opening = s.output().len();
        s.written(opening);
        s.request(7);
        s.request(9);
        let h = Header::parse(s.output()).unwrap();
        assert_eq!(
            (h.kind, h.flags, h.stream),
            (kind::HEADERS, END_STREAM | END_HEADERS, 1)
        );
        let second = Header::parse(&s.output()[HEADER_LEN + h.length..]).unwrap();
        assert_eq!(second.stream, 3);
        assert_eq!(s.in_flight(), 2);
    }

    #[test]
    fn a_response_ends_with_its_data_in_any_order_and_split_anywhere() {
        let mut s = session();
        s.request(100);
        s.request(200);
        let mut wire_in = Vec::new();
        server_head(&mut wire_in, 3, 0);
        server_head(&mut wire_in, 1, 0);
        wire::frame(&mut wire_in, kind::DATA, END_STREAM, 3, b"0123456789");
        wire::frame(&mut wire_in, kind::DATA, END_STREAM, 1, b"0123456789");
        let mut done = Vec::new();
        for b in wire_in.chunks(5) {
            s.feed(b, &mut done).unwrap();
        }
        let got: Vec<(u64, u16)> = done.iter().map(|d| (d.start_ns, d.status)).collect();
        assert_eq!(got, vec![(200, 200), (100, 200)]);
        assert_eq!(s.in_flight(), 0);
    }

    #[test]
    fn settings_cap_the_streams_and_are_acknowledged() {
        let mut s = session();
        let opening = s.output().len();
        s.written(opening);
        let mut wire_in = Vec::new();
        wire::settings(&mut wire_in, &[(SETTINGS_MAX_CONCURRENT_STREAMS, 1)]);
        let mut done = Vec::new();
        s.feed(&wire_in, &mut done).unwrap();
        let ack = Header::parse(s.output()).unwrap();
        assert_eq!((ack.kind, ack.flags, ack.length), (kind::SETTINGS, ACK, 0));
        assert!(s.can_open());
        s.request(1);
        assert!(!s.can_open());
    }

    #[test]
    fn a_reset_or_goaway_ends_the_connection() {
        let mut s = session();
        s.request(1);
        let mut wire_in = Vec::new();
        wire::rst_stream(&mut wire_in, 1, 7);
        assert_eq!(s.feed(&wire_in, &mut Vec::new()), Err(H2Error::Closed));
    }
}
