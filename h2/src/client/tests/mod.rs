//! The client role against a scripted origin built with `h2::write`:
//! responses, interim heads, trailers, resets, GOAWAY, SETTINGS, flow
//! control, validation. The flood defences are in `floods.rs`.

mod floods;
mod flow;

use std::time::Instant;

use super::{ClientConnection, ClientEvent};
use crate::error::{ErrorCode, SendError};
use crate::frame::{flags, kind, FrameHeader, HEADER_LEN, PREFACE};
use crate::hpack::{Field, HpackDecoder, HpackEncoder};
use crate::limits::Limits;
use crate::request::Request;
use crate::settings::SettingId;
use crate::write;

/// A frame the client wrote.
#[derive(Debug)]
struct Out {
    h: FrameHeader,
    p: Vec<u8>,
}

/// The scripted origin: it encodes its heads, decodes the client's.
struct Origin {
    c: ClientConnection,
    enc: HpackEncoder,
    dec: HpackDecoder,
    now: Instant,
}

fn get(path: &str) -> Request {
    request("GET", path, &[])
}

fn request(method: &str, path: &str, fields: &[(&str, &str)]) -> Request {
    Request {
        method: method.as_bytes().to_vec(),
        scheme: Some(b"http".to_vec()),
        authority: Some(b"origin.test".to_vec()),
        path: Some(path.as_bytes().to_vec()),
        fields: fields
            .iter()
            .map(|(n, v)| Field::new(n.as_bytes(), v.as_bytes()))
            .collect(),
        content_length: None,
        field_count: 0,
    }
}

impl Origin {
    /// A client whose preface was read, and the origin's SETTINGS (with
    /// `settings`) and its ack of ours sent.
    fn with(limits: Limits, settings: &[(SettingId, u32)]) -> Origin {
        let now = Instant::now();
        let mut o = Origin {
            c: ClientConnection::new(limits, now).unwrap(),
            enc: HpackEncoder::default(),
            dec: HpackDecoder::new(4096),
            now,
        };
        let out = o.c.output().to_vec();
        assert!(out.starts_with(PREFACE));
        o.c.advance_output(out.len());
        let mut b = Vec::new();
        write::settings(&mut b, settings);
        write::settings_ack(&mut b);
        o.send(&b);
        o.frames();
        o
    }

    fn new() -> Origin {
        Origin::with(Limits::default(), &[])
    }

    fn send(&mut self, bytes: &[u8]) {
        self.c.recv(bytes, self.now);
    }

    fn block(&mut self, fields: &[(&str, &str)]) -> Vec<u8> {
        let mut b = Vec::new();
        let pairs = fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes()));
        self.enc.encode(pairs, &mut b);
        b
    }

    fn headers(&mut self, stream: u32, fields: &[(&str, &str)], end: bool) {
        let block = self.block(fields);
        let mut b = Vec::new();
        write::headers(&mut b, stream, &block, end, 16384);
        self.send(&b);
    }

    fn data(&mut self, stream: u32, data: &[u8], end: bool) {
        let mut b = Vec::new();
        write::data(&mut b, stream, data, end);
        self.send(&b);
    }

    fn raw(&mut self, k: u8, f: u8, stream: u32, payload: &[u8]) {
        let mut b = Vec::new();
        write::raw(&mut b, k, f, stream, payload);
        self.send(&b);
    }

    fn frames(&mut self) -> Vec<Out> {
        let out = self.c.output().to_vec();
        self.c.advance_output(out.len());
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

    fn events(&mut self) -> Vec<ClientEvent> {
        std::iter::from_fn(|| self.c.poll_event()).collect()
    }

    fn goaway(&mut self) -> Option<ErrorCode> {
        self.frames()
            .iter()
            .find(|f| f.h.kind == kind::GOAWAY)
            .map(|f| ErrorCode(u32::from_be_bytes([f.p[4], f.p[5], f.p[6], f.p[7]])))
    }

    fn rst(&mut self, stream: u32) -> Option<ErrorCode> {
        self.frames()
            .iter()
            .find(|f| f.h.kind == kind::RST_STREAM && f.h.stream == stream)
            .map(|f| ErrorCode(u32::from_be_bytes([f.p[0], f.p[1], f.p[2], f.p[3]])))
    }

    fn open_get(&mut self) -> u32 {
        self.c.open(&get("/"), true).unwrap()
    }
}

fn closed_with(events: &[ClientEvent]) -> Option<ErrorCode> {
    events.iter().find_map(|e| match e {
        ClientEvent::Closed { error } => Some(error.code),
        _ => None,
    })
}

fn reset_of(events: &[ClientEvent], stream: u32) -> Option<(ErrorCode, bool)> {
    events.iter().find_map(|e| match e {
        ClientEvent::Reset {
            stream: s,
            code,
            retryable,
        } if *s == stream => Some((*code, *retryable)),
        _ => None,
    })
}

#[test]
fn preface_settings_without_push_and_window() {
    let c = ClientConnection::new(Limits::default(), Instant::now()).unwrap();
    let out = c.output();
    assert!(out.starts_with(PREFACE));
    let h = FrameHeader::parse(&out[PREFACE.len()..]).unwrap();
    assert_eq!((h.kind, h.flags, h.stream), (kind::SETTINGS, 0, 0));
    let p = &out[PREFACE.len() + HEADER_LEN..][..h.length as usize];
    assert_eq!(&p[..6], [0, 2, 0, 0, 0, 0], "ENABLE_PUSH 0 first");
    let w = FrameHeader::parse(&out[PREFACE.len() + HEADER_LEN + p.len()..]).unwrap();
    assert_eq!((w.kind, w.stream), (kind::WINDOW_UPDATE, 0));
}

#[test]
fn get_gives_head_then_body() {
    let mut o = Origin::new();
    let id = o.open_get();
    assert_eq!(id, 1);
    let f = o.frames();
    assert_eq!(f[0].h.kind, kind::HEADERS);
    assert!(f[0].h.has(flags::END_STREAM) && f[0].h.has(flags::END_HEADERS));
    let fields = o.dec.decode(&f[0].p, 16384, 100).unwrap();
    let names: Vec<&[u8]> = fields.iter().map(|f| &f.name[..]).collect();
    assert_eq!(
        names,
        [&b":method"[..], b":scheme", b":authority", b":path"]
    );
    o.headers(1, &[(":status", "200"), ("content-length", "5")], false);
    o.data(1, b"hello", true);
    let ev = o.events();
    let ClientEvent::Response {
        stream: 1,
        response,
        end_stream: false,
    } = &ev[0]
    else {
        panic!("{ev:?}")
    };
    assert_eq!((response.status, response.content_length), (200, Some(5)));
    assert_eq!(
        ev[1],
        ClientEvent::Data {
            stream: 1,
            data: b"hello".to_vec(),
            end_stream: true
        }
    );
    assert_eq!(o.c.open_streams(), 0);
    assert_eq!(o.c.open(&get("/b"), true), Ok(3));
}

#[test]
fn interim_heads_come_before_the_final_one() {
    let mut o = Origin::new();
    let id =
        o.c.open(&request("POST", "/", &[("expect", "100-continue")]), false);
    assert_eq!(id, Ok(1));
    o.headers(1, &[(":status", "100")], false);
    o.headers(1, &[(":status", "103"), ("link", "</s.css>")], false);
    o.headers(1, &[(":status", "204")], true);
    let ev = o.events();
    let statuses: Vec<(bool, u16)> = ev
        .iter()
        .map(|e| match e {
            ClientEvent::Interim { response, .. } => (true, response.status),
            ClientEvent::Response { response, .. } => (false, response.status),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(statuses, [(true, 100), (true, 103), (false, 204)]);
    // The request body may still go; the stream ends when it does.
    assert_eq!(o.c.send_data(1, b"x", true), Ok(1));
    assert_eq!(o.c.open_streams(), 0);
}

#[test]
fn trailers_end_the_response() {
    let mut o = Origin::new();
    let r = request("POST", "/pkg.Svc/Call", &[("te", "trailers")]);
    let id = o.c.open(&r, false).unwrap();
    assert_eq!(o.c.send_data(id, b"\0\0\0\0\0", true), Ok(5));
    o.headers(
        id,
        &[(":status", "200"), ("content-type", "application/grpc")],
        false,
    );
    o.data(id, b"\0\0\0\0\0", false);
    o.headers(id, &[("grpc-status", "0")], true);
    let ev = o.events();
    assert_eq!(
        ev.last(),
        Some(&ClientEvent::Trailers {
            stream: id,
            fields: vec![Field::new(b"grpc-status", b"0")]
        })
    );
    // Trailers without END_STREAM are malformed.
    let id = o.c.open(&get("/"), true).unwrap();
    o.headers(id, &[(":status", "200")], false);
    o.headers(id, &[("x", "y")], false);
    assert_eq!(
        reset_of(&o.events(), id),
        Some((ErrorCode::PROTOCOL_ERROR, false))
    );
    assert_eq!(o.rst(id), Some(ErrorCode::PROTOCOL_ERROR));
}

#[test]
fn refused_stream_is_retryable_other_resets_are_not() {
    let mut o = Origin::new();
    let a = o.open_get();
    let b = o.open_get();
    o.frames();
    o.raw(
        kind::RST_STREAM,
        0,
        a,
        &ErrorCode::REFUSED_STREAM.0.to_be_bytes(),
    );
    o.raw(
        kind::RST_STREAM,
        0,
        b,
        &ErrorCode::INTERNAL_ERROR.0.to_be_bytes(),
    );
    let ev = o.events();
    assert_eq!(reset_of(&ev, a), Some((ErrorCode::REFUSED_STREAM, true)));
    assert_eq!(reset_of(&ev, b), Some((ErrorCode::INTERNAL_ERROR, false)));
    assert_eq!(o.c.counters().resets_received(ErrorCode::REFUSED_STREAM), 1);
    // A late frame on a stream the origin reset is a STREAM_CLOSED error.
    o.headers(a, &[(":status", "200")], true);
    assert_eq!(closed_with(&o.events()), Some(ErrorCode::STREAM_CLOSED));
}

#[test]
fn goaway_keeps_streams_below_last_id_and_releases_the_rest() {
    let mut o = Origin::new();
    let ids: Vec<u32> = (0..3).map(|_| o.open_get()).collect();
    assert_eq!(ids, [1, 3, 5]);
    let mut b = Vec::new();
    write::goaway(&mut b, 3, ErrorCode::NO_ERROR, b"bye");
    o.send(&b);
    let ev = o.events();
    assert!(matches!(&ev[0], ClientEvent::GoAway { last_stream: 3, .. }));
    assert_eq!(reset_of(&ev, 5), Some((ErrorCode::REFUSED_STREAM, true)));
    assert_eq!(reset_of(&ev, 1), None);
    assert!(!o.c.can_open());
    assert_eq!(o.c.open(&get("/"), true), Err(SendError::NoStreamAvailable));
    assert!(!o.c.is_done());
    o.headers(1, &[(":status", "200")], true);
    o.headers(3, &[(":status", "200")], true);
    assert_eq!(o.events().len(), 2);
    assert!(o.c.is_done());
}

#[test]
fn max_concurrent_streams_is_honoured() {
    let mut o = Origin::with(Limits::default(), &[(SettingId::MaxConcurrentStreams, 2)]);
    assert_eq!(o.c.peer_max_concurrent_streams(), Some(2));
    assert_eq!(o.c.available_streams(), 2);
    o.open_get();
    o.open_get();
    assert!(!o.c.can_open());
    assert_eq!(o.c.open(&get("/"), true), Err(SendError::NoStreamAvailable));
    o.headers(1, &[(":status", "200")], true);
    assert!(o.c.can_open());
    // Lowered below the streams open: those go on, no new one.
    let mut b = Vec::new();
    write::settings(&mut b, &[(SettingId::MaxConcurrentStreams, 0)]);
    o.send(&b);
    assert_eq!(o.c.available_streams(), 0);
    assert_eq!(o.c.open_streams(), 1);
}

#[test]
fn ping_answered_and_close_is_graceful() {
    let mut o = Origin::new();
    o.raw(kind::PING, 0, 0, b"12345678");
    let f = o.frames();
    assert_eq!((f[0].h.kind, f[0].h.flags), (kind::PING, flags::ACK));
    assert_eq!(f[0].p, b"12345678");
    let id = o.open_get();
    o.c.close();
    assert_eq!(o.goaway(), Some(ErrorCode::NO_ERROR));
    assert!(!o.c.can_open() && !o.c.is_done());
    o.headers(id, &[(":status", "200")], true);
    assert!(o.c.is_done());
}

#[test]
fn malformed_responses_reset_the_stream() {
    let cases: &[&[(&str, &str)]] = &[
        &[("x", "y")],
        &[(":status", "200"), (":status", "204")],
        &[(":status", "200"), (":path", "/")],
        &[(":status", "200"), ("connection", "close")],
        &[(":status", "2x0")],
        &[(":status", "101")],
        &[(":status", "200"), ("content-length", "3")],
    ];
    for fields in cases {
        let mut o = Origin::new();
        let id = o.open_get();
        o.frames();
        o.headers(id, fields, true);
        assert_eq!(o.rst(id), Some(ErrorCode::PROTOCOL_ERROR), "{fields:?}");
        assert_eq!(
            reset_of(&o.events(), id),
            Some((ErrorCode::PROTOCOL_ERROR, false))
        );
    }
}

#[test]
fn content_length_checked_against_data_except_head_and_304() {
    let mut o = Origin::new();
    let id = o.open_get();
    o.headers(id, &[(":status", "200"), ("content-length", "3")], false);
    o.data(id, b"abcd", true);
    assert_eq!(o.rst(id), Some(ErrorCode::PROTOCOL_ERROR));
    let id = o.open_get();
    o.headers(id, &[(":status", "200"), ("content-length", "3")], false);
    o.data(id, b"ab", true);
    assert_eq!(o.rst(id), Some(ErrorCode::PROTOCOL_ERROR));
    let head = o.c.open(&request("HEAD", "/", &[]), true).unwrap();
    o.headers(head, &[(":status", "200"), ("content-length", "9")], true);
    let id = o.open_get();
    o.headers(id, &[(":status", "304"), ("content-length", "9")], true);
    o.events();
    assert_eq!(o.rst(head).or(o.rst(id)), None);
    // Content in a response that has none.
    let head = o.c.open(&request("HEAD", "/", &[]), true).unwrap();
    o.headers(head, &[(":status", "200"), ("content-length", "1")], false);
    o.data(head, b"x", true);
    assert_eq!(o.rst(head), Some(ErrorCode::PROTOCOL_ERROR));
    // DATA before the final head.
    let id = o.open_get();
    o.headers(id, &[(":status", "100")], false);
    o.data(id, b"x", true);
    assert_eq!(o.rst(id), Some(ErrorCode::PROTOCOL_ERROR));
}

#[test]
fn frames_on_streams_never_opened_end_the_connection() {
    for stream in [3u32, 2] {
        let mut o = Origin::new();
        o.open_get();
        o.headers(stream, &[(":status", "200")], true);
        assert_eq!(closed_with(&o.events()), Some(ErrorCode::PROTOCOL_ERROR));
        assert_eq!(o.goaway(), Some(ErrorCode::PROTOCOL_ERROR));
    }
    let mut o = Origin::new();
    o.data(1, b"x", true);
    assert_eq!(closed_with(&o.events()), Some(ErrorCode::PROTOCOL_ERROR));
}

#[test]
fn push_promise_and_enable_push_are_connection_errors() {
    let mut o = Origin::new();
    let id = o.open_get();
    o.raw(
        kind::PUSH_PROMISE,
        flags::END_HEADERS,
        id,
        &[0, 0, 0, 2, 0x82],
    );
    let ev = o.events();
    assert_eq!(reset_of(&ev, id), Some((ErrorCode::PROTOCOL_ERROR, false)));
    assert_eq!(closed_with(&ev), Some(ErrorCode::PROTOCOL_ERROR));
    let mut o = Origin::new();
    let mut b = Vec::new();
    write::settings(&mut b, &[(SettingId::EnablePush, 1)]);
    o.send(&b);
    assert_eq!(closed_with(&o.events()), Some(ErrorCode::PROTOCOL_ERROR));
}

#[test]
fn first_frame_must_be_settings() {
    let now = Instant::now();
    let mut c = ClientConnection::new(Limits::default(), now).unwrap();
    let mut b = Vec::new();
    write::ping(&mut b, false, [0; 8]);
    c.recv(&b, now);
    assert!(
        matches!(c.poll_event(), Some(ClientEvent::Closed { error }) if error.code == ErrorCode::PROTOCOL_ERROR)
    );
    assert!(c.is_done() && !c.wants_read());
}

#[test]
fn requests_the_protocol_cannot_carry_are_refused() {
    let mut o = Origin::new();
    let bad = [
        request("GET", "/", &[("connection", "close")]),
        request("GET", "/", &[("transfer-encoding", "chunked")]),
        request("GET", "/", &[("te", "gzip")]),
        request("GET", "/", &[("Upper", "x")]),
        request("GET", "/", &[(":path", "/")]),
        request("GET", "", &[]),
        request("", "/", &[]),
    ];
    for r in &bad {
        assert!(
            matches!(o.c.open(r, true), Err(SendError::InvalidRequest(_))),
            "{r:?}"
        );
    }
    assert!(o.frames().is_empty());
    let mut o = Origin::with(Limits::default(), &[(SettingId::MaxHeaderListSize, 100)]);
    let big = "v".repeat(100);
    let r = request("GET", "/", &[("x-big", &big)]);
    assert!(matches!(
        o.c.open(&r, true),
        Err(SendError::InvalidRequest(_))
    ));
    assert_eq!(
        o.c.send_data(1, b"x", true),
        Err(SendError::StreamNotWritable(1))
    );
}

#[test]
fn reset_by_us_ignores_late_frames() {
    let mut o = Origin::new();
    let id = o.open_get();
    o.c.reset(id, ErrorCode::CANCEL);
    assert_eq!(o.rst(id), Some(ErrorCode::CANCEL));
    o.headers(id, &[(":status", "200")], false);
    o.data(id, b"late", true);
    assert_eq!(o.events(), []);
    // The HPACK table stayed in step: the next head decodes.
    let id = o.open_get();
    o.headers(id, &[(":status", "200")], true);
    assert!(matches!(&o.events()[..], [ClientEvent::Response { .. }]));
}

/// The whole script of an origin, fed at once and one byte at a time,
/// gives the same events: no state depends on where reads split.
#[test]
fn split_at_every_byte_gives_the_same_events() {
    let script = |o: &mut Origin| -> Vec<u8> {
        let mut b = Vec::new();
        write::settings_ack(&mut b);
        write::ping(&mut b, false, [1; 8]);
        let h1 = o.block(&[(":status", "103"), ("link", "<a>")]);
        write::headers(&mut b, 1, &h1, false, 16384);
        let big = "v".repeat(20_000);
        let h2 = o.block(&[(":status", "200"), ("x-big", &big), ("content-length", "6")]);
        write::headers(&mut b, 1, &h2, false, 16384);
        write::data(&mut b, 1, b"abc", false);
        let mut padded = vec![2u8];
        padded.extend_from_slice(b"def\0\0");
        write::raw(
            &mut b,
            kind::DATA,
            flags::PADDED | flags::END_STREAM,
            1,
            &padded,
        );
        let h3 = o.block(&[(":status", "200")]);
        write::headers(&mut b, 3, &h3, false, 16384);
        let t = o.block(&[("grpc-status", "0")]);
        write::headers(&mut b, 3, &t, true, 16384);
        write::goaway(&mut b, 3, ErrorCode::NO_ERROR, b"");
        b
    };
    let limits = Limits {
        max_header_list_size: 64 * 1024,
        ..Limits::default()
    };
    let run = |split: usize| {
        let now = Instant::now();
        let mut o = Origin {
            c: ClientConnection::new(limits.clone(), now).unwrap(),
            enc: HpackEncoder::default(),
            dec: HpackDecoder::new(4096),
            now,
        };
        assert_eq!(o.c.available_streams(), 1, "one stream before SETTINGS");
        let mut b = Vec::new();
        write::settings(&mut b, &[(SettingId::MaxConcurrentStreams, 10)]);
        o.send(&b);
        for _ in 0..3 {
            o.c.open(&get("/"), true).unwrap();
        }
        let n = o.c.output().len();
        o.c.advance_output(n);
        let bytes = script(&mut o);
        for chunk in bytes.chunks(split) {
            o.send(chunk);
        }
        (o.events(), o.c.output().to_vec())
    };
    let (whole, out) = run(usize::MAX);
    assert_eq!(whole.len(), 8, "{whole:?}");
    assert_eq!(reset_of(&whole, 5), Some((ErrorCode::REFUSED_STREAM, true)));
    for split in [1, 2, 7, 9, 10] {
        assert_eq!(run(split), (whole.clone(), out.clone()), "split {split}");
    }
}

#[test]
fn request_trailers_end_the_request_and_eof_resets_the_rest() {
    let mut o = Origin::new();
    let id =
        o.c.open(&request("POST", "/", &[("te", "trailers")]), false)
            .unwrap();
    assert_eq!(o.c.send_data(id, b"abc", false), Ok(3));
    o.c.send_trailers(id, &[Field::new(b"x-sum", b"1")])
        .unwrap();
    let f = o.frames();
    let last = f.last().unwrap();
    assert_eq!(last.h.kind, kind::HEADERS);
    assert!(last.h.has(flags::END_STREAM) && last.h.has(flags::END_HEADERS));
    assert_eq!(
        o.c.send_data(id, b"more", true),
        Err(SendError::StreamNotWritable(id))
    );
    o.c.peer_closed();
    assert_eq!(reset_of(&o.events(), id), Some((ErrorCode::CANCEL, false)));
    assert!(o.c.is_done() && !o.c.can_open());
}
