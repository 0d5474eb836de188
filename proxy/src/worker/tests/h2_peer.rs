//! The test's side of an HTTP/2 client connection, written with the `h2` crate's frame
//! writers and HPACK: requests go out as frames, and what the worker sends back is read
//! frame by frame into per-stream responses (head, body, trailers, reset), connection-level
//! frames (GOAWAY, PING acks) kept apart.

use std::collections::HashMap;

use h2::frame::{parse_frame, Frame, FrameHeader};
use h2::{write, ErrorCode, HpackDecoder, HpackEncoder};

use super::harness::Peer;

/// What arrived on one stream.
#[derive(Debug, Default)]
pub struct H2Response {
    /// The final response's fields, pseudo-header `:status` first.
    pub fields: Vec<(String, String)>,
    /// Interim (1xx) heads, in order.
    pub interim: Vec<Vec<(String, String)>>,
    pub body: Vec<u8>,
    pub trailers: Vec<(String, String)>,
    /// The stream ended (END_STREAM) or was reset.
    pub ended: bool,
    pub reset: Option<ErrorCode>,
}

impl H2Response {
    pub fn status(&self) -> u16 {
        self.field(":status")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    /// A field's value (first of that name).
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

pub struct H2Peer {
    pub peer: Peer,
    encoder: HpackEncoder,
    decoder: HpackDecoder,
    streams: HashMap<u32, H2Response>,
    /// A header block being received (HEADERS without END_HEADERS): its stream, bytes and
    /// whether END_STREAM was on the HEADERS frame.
    block: Option<(u32, Vec<u8>, bool)>,
    /// GOAWAY frames received: (last stream, code).
    pub goaways: Vec<(u32, ErrorCode)>,
    pub ping_acks: Vec<[u8; 8]>,
    /// SETTINGS frames (not acks) received from the worker.
    pub settings: usize,
    /// Bytes taken off `peer.got` and not yet a whole frame.
    pending: Vec<u8>,
}

impl H2Peer {
    pub fn new(mut peer: Peer) -> H2Peer {
        let mut hello = Vec::new();
        write::client_preface(&mut hello);
        write::settings(&mut hello, &[]);
        peer.send(&hello);
        H2Peer {
            peer,
            encoder: HpackEncoder::default(),
            decoder: HpackDecoder::new(4096),
            streams: HashMap::new(),
            block: None,
            goaways: Vec::new(),
            ping_acks: Vec::new(),
            settings: 0,
            pending: Vec::new(),
        }
    }

    /// Sends a request head on `stream`: `method` and `path` on the test's vhost, plus
    /// `fields`; `end_stream` when there is no body.
    pub fn request(
        &mut self,
        stream: u32,
        method: &str,
        path: &str,
        fields: &[(&str, &str)],
        end_stream: bool,
    ) {
        let mut all: Vec<(&[u8], &[u8])> = vec![
            (b":method", method.as_bytes()),
            (b":scheme", b"http"),
            (b":authority", b"site"),
            (b":path", path.as_bytes()),
        ];
        all.extend(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
        let mut block = Vec::new();
        self.encoder.encode(all, &mut block);
        let mut out = Vec::new();
        write::headers(&mut out, stream, &block, end_stream, 16384);
        self.peer.send(&out);
    }

    /// A GET of `path` on `stream`, no body.
    pub fn get(&mut self, stream: u32, path: &str) {
        self.request(stream, "GET", path, &[], true);
    }

    /// Ends `stream`'s request with a trailer section of `fields`.
    pub fn trailers(&mut self, stream: u32, fields: &[(&str, &str)]) {
        let all = fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes()));
        let mut block = Vec::new();
        self.encoder.encode(all, &mut block);
        let mut out = Vec::new();
        write::headers(&mut out, stream, &block, true, 16384);
        self.peer.send(&out);
    }

    pub fn data(&mut self, stream: u32, bytes: &[u8], end_stream: bool) {
        let mut out = Vec::new();
        write::data(&mut out, stream, bytes, end_stream);
        self.peer.send(&out);
    }

    pub fn rst_stream(&mut self, stream: u32, code: ErrorCode) {
        let mut out = Vec::new();
        write::rst_stream(&mut out, stream, code);
        self.peer.send(&out);
    }

    pub fn ping(&mut self, payload: [u8; 8]) {
        let mut out = Vec::new();
        write::ping(&mut out, false, payload);
        self.peer.send(&out);
    }

    /// Reads every whole frame that has arrived; acks the worker's SETTINGS.
    pub fn pump(&mut self) {
        self.peer.pump();
        self.pending.append(&mut self.peer.got);
        let mut acks = Vec::new();
        while let Some(h) = FrameHeader::parse(&self.pending) {
            let total = 9 + h.length as usize;
            if self.pending.len() < total {
                break;
            }
            let payload = self.pending[9..total].to_vec();
            self.pending.drain(..total);
            let frame = parse_frame(&h, &payload).expect("the worker sent a valid frame");
            if let Frame::Settings { ack: false, .. } = frame {
                write::settings_ack(&mut acks);
                self.settings += 1;
            }
            self.on_frame(frame);
        }
        if !acks.is_empty() {
            self.peer.send(&acks);
        }
    }

    fn on_frame(&mut self, frame: Frame<'_>) {
        match frame {
            Frame::Headers {
                stream,
                block,
                end_stream,
                end_headers,
                ..
            } => {
                self.block = Some((stream, block.to_vec(), end_stream));
                if end_headers {
                    self.end_block();
                }
            }
            Frame::Continuation {
                block, end_headers, ..
            } => {
                let (_, bytes, _) = self.block.as_mut().expect("CONTINUATION after HEADERS");
                bytes.extend_from_slice(block);
                if end_headers {
                    self.end_block();
                }
            }
            Frame::Data {
                stream,
                data,
                end_stream,
                ..
            } => {
                let r = self.streams.entry(stream).or_default();
                r.body.extend_from_slice(data);
                r.ended |= end_stream;
            }
            Frame::RstStream { stream, code } => {
                let r = self.streams.entry(stream).or_default();
                r.reset = Some(code);
                r.ended = true;
            }
            Frame::GoAway {
                last_stream, code, ..
            } => self.goaways.push((last_stream, code)),
            Frame::Ping { ack: true, payload } => self.ping_acks.push(payload),
            _ => {}
        }
    }

    /// A whole header block: the final head, an interim one, or trailers.
    fn end_block(&mut self) {
        let (stream, block, end_stream) = self.block.take().expect("a header block");
        let fields: Vec<(String, String)> = self
            .decoder
            .decode(&block, 1 << 20, 1000)
            .expect("the worker's header block decodes")
            .iter()
            .map(|f| {
                (
                    String::from_utf8_lossy(&f.name).into_owned(),
                    String::from_utf8_lossy(&f.value).into_owned(),
                )
            })
            .collect();
        let r = self.streams.entry(stream).or_default();
        let interim = fields
            .iter()
            .any(|(n, v)| n == ":status" && v.starts_with('1'));
        if r.fields.is_empty() && interim {
            r.interim.push(fields);
        } else if r.fields.is_empty() {
            r.fields = fields;
        } else {
            r.trailers = fields;
        }
        r.ended |= end_stream;
    }

    /// The response on `stream` once it ended, taken out.
    pub fn take_response(&mut self, stream: u32) -> Option<H2Response> {
        self.pump();
        if self.streams.get(&stream).is_some_and(|r| r.ended) {
            return self.streams.remove(&stream);
        }
        None
    }
}
