//! Connection behaviour: state transitions and error codes; the flood
//! defences are in `floods.rs`.

mod floods;

use std::time::Instant;

use super::Connection;
use crate::counters::Flood;
use crate::error::ErrorCode;
use crate::event::Event;
use crate::frame::{flags, kind, FrameHeader, HEADER_LEN};
use crate::hpack::{HpackDecoder, HpackEncoder};
use crate::limits::Limits;
use crate::settings::SettingId;
use crate::write;

/// A frame the server wrote: header and payload.
#[derive(Debug)]
struct Out {
    h: FrameHeader,
    p: Vec<u8>,
}

struct Peer {
    conn: Connection,
    enc: HpackEncoder,
    now: Instant,
}

fn get_req() -> Vec<(&'static [u8], &'static [u8])> {
    vec![
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":authority", b"a.test"),
        (b":path", b"/"),
    ]
}

impl Peer {
    fn new(limits: Limits) -> Peer {
        let now = Instant::now();
        let mut p = Peer {
            conn: Connection::new(limits, now).unwrap(),
            enc: HpackEncoder::default(),
            now,
        };
        let mut b = Vec::new();
        write::client_preface(&mut b);
        write::settings(&mut b, &[]);
        write::settings_ack(&mut b);
        p.send(&b);
        p.frames();
        p
    }

    fn send(&mut self, bytes: &[u8]) {
        self.conn.recv(bytes, self.now);
    }

    fn block(&mut self, fields: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut b = Vec::new();
        self.enc.encode(fields.iter().copied(), &mut b);
        b
    }

    fn headers(&mut self, stream: u32, fields: &[(&[u8], &[u8])], end: bool) {
        let block = self.block(fields);
        let mut b = Vec::new();
        write::headers(&mut b, stream, &block, end, 16384);
        self.send(&b);
    }

    fn raw(&mut self, k: u8, f: u8, stream: u32, payload: &[u8]) {
        let mut b = Vec::new();
        write::raw(&mut b, k, f, stream, payload);
        self.send(&b);
    }

    fn frames(&mut self) -> Vec<Out> {
        let out = self.conn.output().to_vec();
        self.conn.advance_output(out.len());
        let mut v = Vec::new();
        let mut at = 0;
        while let Some(h) = FrameHeader::parse(&out[at..]) {
            let end = at + HEADER_LEN + h.length as usize;
            v.push(Out {
                h,
                p: out[at + HEADER_LEN..end].to_vec(),
            });
            at = end;
        }
        v
    }

    fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.conn.poll_event()).collect()
    }

    /// The code of the GOAWAY written, if any.
    fn goaway(&mut self) -> Option<ErrorCode> {
        self.frames()
            .iter()
            .find(|f| f.h.kind == kind::GOAWAY)
            .map(|f| ErrorCode(u32::from_be_bytes([f.p[4], f.p[5], f.p[6], f.p[7]])))
    }

    /// The code of an RST_STREAM written for `stream`, if any.
    fn rst(&mut self, stream: u32) -> Option<ErrorCode> {
        self.frames()
            .iter()
            .find(|f| f.h.kind == kind::RST_STREAM && f.h.stream == stream)
            .map(|f| ErrorCode(u32::from_be_bytes([f.p[0], f.p[1], f.p[2], f.p[3]])))
    }
}

fn peer() -> Peer {
    Peer::new(Limits::default())
}

#[test]
fn settings_then_window_update_then_ack() {
    let now = Instant::now();
    let mut c = Connection::new(Limits::default(), now).unwrap();
    let first = FrameHeader::parse(c.output()).unwrap();
    assert_eq!((first.kind, first.flags), (kind::SETTINGS, 0));
    let mut b = Vec::new();
    write::client_preface(&mut b);
    write::settings(&mut b, &[(SettingId::MaxFrameSize, 20_000)]);
    c.recv(&b, now);
    assert_eq!(c.peer_settings().max_frame_size, 20_000);
    let out = c.output().to_vec();
    let ack = &out[out.len() - 9..];
    assert_eq!(ack, [0, 0, 0, kind::SETTINGS, flags::ACK, 0, 0, 0, 0]);
}

#[test]
fn bad_preface_and_first_frame() {
    let now = Instant::now();
    let mut c = Connection::new(Limits::default(), now).unwrap();
    c.recv(b"GET / HTTP/1.1\r\n", now);
    assert!(
        matches!(c.poll_event(), Some(Event::Closed { error }) if error.code == ErrorCode::PROTOCOL_ERROR)
    );
    let mut c = Connection::new(Limits::default(), now).unwrap();
    let mut b = Vec::new();
    write::client_preface(&mut b);
    write::ping(&mut b, false, [0; 8]);
    c.recv(&b, now);
    assert!(c.is_done());
}

#[test]
fn preface_may_arrive_byte_by_byte() {
    let now = Instant::now();
    let mut c = Connection::new(Limits::default(), now).unwrap();
    let mut b = Vec::new();
    write::client_preface(&mut b);
    write::settings(&mut b, &[]);
    for byte in b {
        c.recv(&[byte], now);
    }
    assert!(!c.is_done());
    assert!(c
        .output()
        .ends_with(&[0, 0, 0, kind::SETTINGS, flags::ACK, 0, 0, 0, 0]));
}

#[test]
fn request_response_roundtrip_closes_stream() {
    let mut p = peer();
    p.headers(1, &get_req(), true);
    let ev = p.events();
    assert!(matches!(
        &ev[..],
        [Event::Request {
            stream: 1,
            end_stream: true,
            ..
        }]
    ));
    p.conn
        .send_headers(1, 200, &[(b"x-a", b"1")], false)
        .unwrap();
    assert_eq!(p.conn.send_data(1, b"body", true).unwrap(), 4);
    let frames = p.frames();
    assert_eq!(frames[0].h.kind, kind::HEADERS);
    let mut dec = HpackDecoder::new(4096);
    let fields = dec.decode(&frames[0].p, 1 << 16, 100).unwrap();
    assert_eq!(fields[0].value, b"200");
    assert_eq!(
        (frames[1].h.kind, frames[1].h.flags, &frames[1].p[..]),
        (kind::DATA, flags::END_STREAM, &b"body"[..])
    );
    assert_eq!(p.conn.open_streams(), 0);
    assert!(p.conn.send_data(1, b"x", true).is_err());
}

#[test]
fn frames_on_idle_streams_are_protocol_errors() {
    for (k, payload) in [
        (kind::DATA, vec![1]),
        (kind::RST_STREAM, vec![0, 0, 0, 8]),
        (kind::WINDOW_UPDATE, vec![0, 0, 0, 1]),
    ] {
        let mut p = peer();
        p.raw(k, 0, 1, &payload);
        assert_eq!(p.goaway(), Some(ErrorCode::PROTOCOL_ERROR), "type {k}");
    }
    let mut p = peer();
    p.raw(kind::PRIORITY, 0, 9, &[0, 0, 0, 0, 1]);
    assert_eq!(p.goaway(), None);
}

#[test]
fn stream_id_rules() {
    let mut p = peer();
    p.headers(2, &get_req(), true);
    assert_eq!(p.goaway(), Some(ErrorCode::PROTOCOL_ERROR));
    let mut p = peer();
    p.headers(5, &get_req(), true);
    p.headers(3, &get_req(), true);
    assert_eq!(p.goaway(), Some(ErrorCode::PROTOCOL_ERROR));
}

#[test]
fn half_closed_remote_refuses_data_and_headers() {
    let mut p = peer();
    p.headers(1, &get_req(), true);
    p.raw(kind::DATA, 0, 1, b"x");
    assert_eq!(p.rst(1), Some(ErrorCode::STREAM_CLOSED));
    let mut p = peer();
    p.headers(1, &get_req(), true);
    p.headers(1, &[(b"x-t", b"1")], true);
    assert_eq!(p.rst(1), Some(ErrorCode::STREAM_CLOSED));
}

#[test]
fn closed_streams_after_peer_reset_and_after_our_reset() {
    let mut p = peer();
    p.headers(1, &get_req(), false);
    p.raw(kind::RST_STREAM, 0, 1, &[0, 0, 0, 8]);
    assert!(p
        .events()
        .iter()
        .any(|e| matches!(e, Event::Reset { stream: 1, code } if *code == ErrorCode::CANCEL)));
    p.raw(kind::DATA, 0, 1, b"x");
    assert_eq!(p.goaway(), Some(ErrorCode::STREAM_CLOSED));
    // Frames in flight after our own reset are ignored.
    let mut p = peer();
    p.headers(1, &get_req(), false);
    p.conn.reset(1, ErrorCode::CANCEL);
    p.raw(kind::DATA, 0, 1, b"x");
    p.raw(kind::WINDOW_UPDATE, 0, 1, &[0, 0, 0, 1]);
    assert_eq!(p.goaway(), None);
}

#[test]
fn continuation_rules() {
    let mut p = peer();
    let block = p.block(&get_req());
    p.raw(kind::HEADERS, flags::END_STREAM, 1, &block[..3]);
    p.raw(kind::PING, 0, 0, &[0; 8]);
    assert_eq!(p.goaway(), Some(ErrorCode::PROTOCOL_ERROR));
    let mut p = peer();
    p.raw(kind::CONTINUATION, flags::END_HEADERS, 1, &[0x82]);
    assert_eq!(p.goaway(), Some(ErrorCode::PROTOCOL_ERROR));
    let mut p = peer();
    let block = p.block(&get_req());
    p.raw(kind::HEADERS, flags::END_STREAM, 1, &block[..3]);
    p.raw(kind::CONTINUATION, flags::END_HEADERS, 1, &block[3..]);
    assert!(matches!(
        &p.events()[..],
        [Event::Request { stream: 1, .. }]
    ));
}

#[test]
fn continuation_flood_trips_before_decoding() {
    let mut p = peer();
    p.raw(kind::HEADERS, 0, 1, &[]);
    for _ in 0..17 {
        p.raw(kind::CONTINUATION, 0, 1, &[0x82]);
    }
    assert_eq!(p.goaway(), Some(ErrorCode::ENHANCE_YOUR_CALM));
    assert_eq!(p.conn.counters().floods(Flood::Continuation), 1);
    let mut p = peer();
    p.raw(kind::HEADERS, 0, 1, &[0; 16000]);
    p.raw(kind::CONTINUATION, 0, 1, &[0; 1000]);
    assert_eq!(p.goaway(), Some(ErrorCode::ENHANCE_YOUR_CALM));
}

#[test]
fn hpack_errors_are_compression_errors() {
    let mut p = peer();
    p.raw(
        kind::HEADERS,
        flags::END_HEADERS | flags::END_STREAM,
        1,
        &[0x3f, 0xe2, 0x1f, 0x82],
    );
    assert_eq!(p.goaway(), Some(ErrorCode::COMPRESSION_ERROR));
}

#[test]
fn oversized_header_list_gets_431_and_connection_survives() {
    let mut p = peer();
    // Small on the wire, large decoded: the dynamic table repeats it.
    let big = vec![b'v'; 3000];
    let mut fields = get_req();
    fields.extend(vec![(&b"x-a"[..], &big[..]); 6]);
    p.headers(1, &fields, true);
    assert!(p.events().is_empty());
    let frames = p.frames();
    let mut dec = HpackDecoder::new(4096);
    let status = dec.decode(&frames[0].p, 1 << 16, 100).unwrap();
    assert_eq!(status[0].value, b"431");
    assert_eq!(p.conn.counters().floods(Flood::HeaderList), 1);
    p.headers(3, &get_req(), true);
    assert!(matches!(
        &p.events()[..],
        [Event::Request { stream: 3, .. }]
    ));
}

#[test]
fn malformed_request_resets_stream_only() {
    let mut p = peer();
    p.headers(1, &[(b":method", b"GET"), (b":path", b"/")], true);
    assert_eq!(p.rst(1), Some(ErrorCode::PROTOCOL_ERROR));
    assert!(p.events().is_empty());
    let mut req = get_req();
    req.push((b"content-length", b"3"));
    p.headers(3, &req, false);
    p.raw(kind::DATA, flags::END_STREAM, 3, b"ab");
    assert_eq!(p.rst(3), Some(ErrorCode::PROTOCOL_ERROR));
}

#[test]
fn body_flow_control_and_replenishment() {
    let limits = Limits {
        initial_window_size: 100,
        ..Limits::default()
    };
    let mut p = Peer::new(limits);
    p.headers(
        1,
        &[(b":method", b"POST"), (b":scheme", b"h"), (b":path", b"/")],
        false,
    );
    p.raw(kind::DATA, 0, 1, &[1; 60]);
    p.conn.consumed(1, 60);
    let wu: Vec<_> = p
        .frames()
        .into_iter()
        .filter(|f| f.h.kind == kind::WINDOW_UPDATE)
        .collect();
    assert_eq!((wu[0].h.stream, &wu[0].p[..]), (1, &[0, 0, 0, 60][..]));
    p.raw(kind::DATA, 0, 1, &[1; 100]);
    assert!(p
        .events()
        .iter()
        .any(|e| matches!(e, Event::Data { data, .. } if data.len() == 100)));
    p.raw(kind::DATA, 0, 1, &[1; 1]);
    assert_eq!(p.rst(1), Some(ErrorCode::FLOW_CONTROL_ERROR));
}

#[test]
fn send_window_limits_data_and_window_update_reopens() {
    let mut p = peer();
    let mut b = Vec::new();
    write::settings(&mut b, &[(SettingId::InitialWindowSize, 3)]);
    p.send(&b);
    p.headers(1, &get_req(), true);
    p.events();
    p.conn.send_headers(1, 200, &[], false).unwrap();
    assert_eq!(p.conn.send_data(1, b"hello", true).unwrap(), 3);
    assert!(p.conn.next_deadline().is_some());
    p.raw(kind::WINDOW_UPDATE, 0, 1, &[0, 0, 0, 10]);
    assert!(p.events().contains(&Event::WindowOpened { stream: 1 }));
    assert_eq!(p.conn.send_data(1, b"lo", true).unwrap(), 2);
    assert_eq!(p.conn.open_streams(), 0);
}

#[test]
fn window_overflow_and_zero_increment() {
    let mut p = peer();
    p.raw(kind::WINDOW_UPDATE, 0, 0, &[0x7f, 0xff, 0xff, 0xff]);
    assert_eq!(p.goaway(), Some(ErrorCode::FLOW_CONTROL_ERROR));
    let mut p = peer();
    p.raw(kind::WINDOW_UPDATE, 0, 0, &[0, 0, 0, 0]);
    assert_eq!(p.goaway(), Some(ErrorCode::PROTOCOL_ERROR));
    let mut p = peer();
    p.headers(1, &get_req(), true);
    p.raw(kind::WINDOW_UPDATE, 0, 1, &[0, 0, 0, 0]);
    assert_eq!(p.rst(1), Some(ErrorCode::PROTOCOL_ERROR));
    p.headers(3, &get_req(), true);
    p.raw(kind::WINDOW_UPDATE, 0, 3, &[0x7f, 0xff, 0xff, 0xff]);
    assert_eq!(p.rst(3), Some(ErrorCode::FLOW_CONTROL_ERROR));
}

#[test]
fn push_promise_is_refused() {
    let mut p = peer();
    p.raw(
        kind::PUSH_PROMISE,
        flags::END_HEADERS,
        1,
        &[0, 0, 0, 2, 0x82],
    );
    assert_eq!(p.goaway(), Some(ErrorCode::PROTOCOL_ERROR));
}

#[test]
fn graceful_goaway_finishes_streams_in_flight() {
    let mut p = peer();
    p.headers(1, &get_req(), true);
    p.conn.go_away();
    p.headers(3, &get_req(), true);
    let ev = p.events();
    assert_eq!(ev.len(), 1);
    let frames = p.frames();
    let g = frames.iter().find(|f| f.h.kind == kind::GOAWAY).unwrap();
    assert_eq!(&g.p[..8], &[0, 0, 0, 1, 0, 0, 0, 0]);
    assert!(!p.conn.is_done());
    p.conn.send_headers(1, 200, &[], true).unwrap();
    assert!(p.conn.is_done());
}

#[test]
fn trailers_both_ways() {
    let mut p = peer();
    p.headers(
        1,
        &[(b":method", b"POST"), (b":scheme", b"h"), (b":path", b"/")],
        false,
    );
    p.raw(kind::DATA, 0, 1, b"abc");
    p.headers(1, &[(b"x-sum", b"1")], true);
    let ev = p.events();
    assert!(matches!(&ev[2], Event::Trailers { stream: 1, fields } if fields[0].name == b"x-sum"));
    p.conn.send_headers(1, 200, &[], false).unwrap();
    p.conn.send_data(1, b"ok", false).unwrap();
    p.conn.send_trailers(1, &[(b"x-done", b"yes")]).unwrap();
    let frames = p.frames();
    let last = frames.last().unwrap();
    assert_eq!(
        (last.h.kind, last.h.flags & flags::END_STREAM),
        (kind::HEADERS, flags::END_STREAM)
    );
    assert_eq!(p.conn.open_streams(), 0);
}

#[test]
fn interim_responses_come_before_the_final_one() {
    let mut p = peer();
    p.headers(
        1,
        &[(b":method", b"POST"), (b":scheme", b"h"), (b":path", b"/")],
        false,
    );
    p.events();
    p.conn.send_interim(1, 100, &[]).unwrap();
    p.conn
        .send_interim(1, 103, &[(b"link", b"</a.css>; rel=preload")])
        .unwrap();
    assert!(
        p.conn.send_interim(1, 101, &[]).is_err(),
        "101 is not HTTP/2"
    );
    assert!(p.conn.send_interim(1, 200, &[]).is_err(), "not interim");
    assert!(
        p.conn.send_headers(1, 103, &[], false).is_err(),
        "not final"
    );
    p.conn.send_headers(1, 200, &[], true).unwrap();
    assert!(
        p.conn.send_interim(1, 100, &[]).is_err(),
        "no interim after the final response"
    );
    let frames = p.frames();
    let heads: Vec<(u8, u8)> = frames
        .iter()
        .map(|f| (f.h.kind, f.h.flags & flags::END_STREAM))
        .collect();
    assert_eq!(
        heads,
        vec![
            (kind::HEADERS, 0),
            (kind::HEADERS, 0),
            (kind::HEADERS, flags::END_STREAM)
        ]
    );
    let mut dec = HpackDecoder::new(4096);
    let statuses: Vec<Vec<u8>> = frames
        .iter()
        .map(|f| dec.decode(&f.p, 1 << 16, 100).unwrap()[0].value.clone())
        .collect();
    assert_eq!(
        statuses,
        vec![b"100".to_vec(), b"103".to_vec(), b"200".to_vec()]
    );
}

#[test]
fn response_headers_split_by_peer_frame_size() {
    let mut p = peer();
    p.headers(1, &get_req(), true);
    let big = vec![b'v'; 40_000];
    p.conn
        .send_headers(1, 200, &[(b"x-big", &big)], true)
        .unwrap();
    let kinds: Vec<u8> = p.frames().iter().map(|f| f.h.kind).collect();
    assert_eq!(
        kinds,
        vec![kind::HEADERS, kind::CONTINUATION, kind::CONTINUATION]
    );
}
