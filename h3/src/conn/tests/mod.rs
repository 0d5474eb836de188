//! The connection's rules, each test named for the RFC section it checks.

mod qpack_flow;

use super::*;
use crate::frame;
use crate::qpack;

const CONTROL: u64 = 2;
const ENCODER: u64 = 6;
const DECODER: u64 = 10;

fn new_conn(limits: Limits) -> Connection {
    let mut c = Connection::new(limits).unwrap();
    while c.poll_event().is_some() {}
    c
}

fn events(c: &mut Connection) -> Vec<Event> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

fn settings(pairs: &[(u64, u64)]) -> Vec<u8> {
    let mut p = Vec::new();
    for &(id, v) in pairs {
        varint::write(&mut p, id);
        varint::write(&mut p, v);
    }
    let mut out = Vec::new();
    frame::write(&mut out, frame::SETTINGS, &p);
    out
}

/// A client's control stream: the type, SETTINGS, then `more`.
fn control(more: &[u8]) -> Vec<u8> {
    let mut b = vec![0x00];
    b.extend(settings(&[]));
    b.extend_from_slice(more);
    b
}

fn headers(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut section = Vec::new();
    qpack::encode(
        fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
        &mut section,
    );
    let mut out = Vec::new();
    frame::write(&mut out, frame::HEADERS, &section);
    out
}

fn data(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write(&mut out, frame::DATA, b);
    out
}

const GET: [(&str, &str); 4] = [
    (":method", "GET"),
    (":scheme", "https"),
    (":authority", "a.test"),
    (":path", "/"),
];

fn post(len: &'static str) -> Vec<(&'static str, &'static str)> {
    let mut l = GET.to_vec();
    l[0] = (":method", "POST");
    l.push(("content-length", len));
    l
}

fn closed(ev: &[Event]) -> Option<ErrorCode> {
    ev.iter().find_map(|e| match e {
        Event::Closed { error } => Some(error.code),
        _ => None,
    })
}

fn stream_error(ev: &[Event]) -> Option<(u64, ErrorCode)> {
    ev.iter().find_map(|e| match e {
        Event::StreamError { stream, code, .. } => Some((*stream, *code)),
        _ => None,
    })
}

/// Feeds the client's control stream, then `bytes` on request stream 0.
fn request_events(bytes: &[u8], fin: bool) -> (Connection, Vec<Event>) {
    let mut c = new_conn(Limits::default());
    c.recv(CONTROL, &control(&[]), false);
    c.recv(0, bytes, fin);
    let ev = events(&mut c);
    (c, ev)
}

fn concat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn rfc9114_4_1_request_body_and_trailers() {
    let b = concat(&[
        headers(&post("10")),
        data(b"hello"),
        data(b"world"),
        headers(&[("x-sum", "1")]),
    ]);
    let (c, ev) = request_events(&b, true);
    assert!(
        matches!(&ev[0], Event::Request { stream: 0, end_stream: false, request }
        if request.method == b"POST" && request.content_length == Some(10))
    );
    assert!(matches!(&ev[1], Event::Data { data, end_stream: false, .. } if data == b"hello"));
    assert!(matches!(&ev[2], Event::Data { data, .. } if data == b"world"));
    assert!(matches!(&ev[3], Event::Trailers { fields, .. } if fields[0].name == b"x-sum"));
    assert_eq!(ev.len(), 4, "{ev:?}");
    assert_eq!(c.open_streams(), 0, "an ended stream keeps no state");
    assert_eq!(c.counters().requests, 1);
}

#[test]
fn rfc9114_4_1_end_stream_marks_the_last_event() {
    let (_, ev) = request_events(&headers(&GET), true);
    assert!(
        matches!(
            ev[..],
            [Event::Request {
                end_stream: true,
                ..
            }]
        ),
        "{ev:?}"
    );
    let (mut c, ev) = request_events(&concat(&[headers(&post("2")), data(b"ab")]), false);
    assert_eq!(ev.len(), 2);
    c.recv(0, &[], true);
    let ev = events(&mut c);
    assert!(matches!(&ev[..], [Event::Data { data, end_stream: true, .. }] if data.is_empty()));
}

/// §4.1: DATA before HEADERS, DATA or HEADERS after trailers: H3_FRAME_UNEXPECTED.
#[test]
fn rfc9114_4_1_frame_order_on_request_streams() {
    let (_, ev) = request_events(&data(b"x"), false);
    assert_eq!(closed(&ev), Some(ErrorCode::FrameUnexpected));
    let after = concat(&[headers(&GET), headers(&[("x", "1")]), data(b"x")]);
    let (_, ev) = request_events(&after, false);
    assert_eq!(closed(&ev), Some(ErrorCode::FrameUnexpected));
    let twice = concat(&[
        headers(&GET),
        headers(&[("x", "1")]),
        headers(&[("y", "1")]),
    ]);
    let (_, ev) = request_events(&twice, false);
    assert_eq!(closed(&ev), Some(ErrorCode::FrameUnexpected));
}

/// §7.2.5: PUSH_PROMISE from a client; §7.2.8: an HTTP/2 frame type.
#[test]
fn rfc9114_7_2_5_push_promise_and_http2_frames_on_requests() {
    for ty in [frame::PUSH_PROMISE, 0x06, frame::SETTINGS] {
        let mut b = headers(&GET);
        frame::write(&mut b, ty, &[0, 0]);
        let (_, ev) = request_events(&b, false);
        assert_eq!(closed(&ev), Some(ErrorCode::FrameUnexpected), "{ty:#x}");
    }
}

/// §4.1: a stream ending before HEADERS is H3_REQUEST_INCOMPLETE; §7.1: one ending inside
/// a frame is H3_FRAME_ERROR.
#[test]
fn rfc9114_4_1_and_7_1_early_ends() {
    let (_, ev) = request_events(&[], true);
    assert_eq!(stream_error(&ev), Some((0, ErrorCode::RequestIncomplete)));
    let mut b = headers(&post("5"));
    b.extend(&data(b"hello")[..4]);
    let (_, ev) = request_events(&b, true);
    assert_eq!(closed(&ev), Some(ErrorCode::FrameError));
}

/// §4.1.2: Content-Length unlike the body, malformed heads: H3_MESSAGE_ERROR on the
/// stream; the connection goes on.
#[test]
fn rfc9114_4_1_2_malformed_requests_are_stream_errors() {
    let cases = [
        concat(&[headers(&post("3")), data(b"ab")]),
        concat(&[headers(&post("1")), data(b"ab")]),
        concat(&[headers(&post("2")), data(b"ab"), data(b"c")]),
        headers(&[GET[0], GET[1], GET[2], GET[3], ("Upper", "x")]),
        headers(&[GET[0], GET[1], GET[2], GET[3], ("connection", "close")]),
        headers(&[GET[0], GET[1], GET[3]]),
    ];
    for b in cases {
        let (mut c, ev) = request_events(&b, true);
        assert_eq!(
            stream_error(&ev),
            Some((0, ErrorCode::MessageError)),
            "{ev:?}"
        );
        assert_eq!(closed(&ev), None);
        c.recv(4, &headers(&GET), true);
        assert!(matches!(
            events(&mut c)[..],
            [Event::Request { stream: 4, .. }]
        ));
        assert_eq!(c.counters().stream_errors(ErrorCode::MessageError), 1);
    }
}

/// §6.2.1: SETTINGS first and once, a control stream that closes or is reset, and only
/// one of each critical stream (RFC 9204 §4.2 for the QPACK ones).
#[test]
fn rfc9114_6_2_1_control_stream_rules() {
    fn codes(feeds: &[(u64, Vec<u8>, bool)]) -> Option<ErrorCode> {
        let mut c = new_conn(Limits::default());
        for (id, b, fin) in feeds {
            c.recv(*id, b, *fin);
        }
        closed(&events(&mut c))
    }
    let mut goaway_first = vec![0x00];
    frame::write_varint_frame(&mut goaway_first, frame::GOAWAY, 0);
    assert_eq!(
        codes(&[(CONTROL, goaway_first, false)]),
        Some(ErrorCode::MissingSettings)
    );
    let mut grease_first = vec![0x00];
    frame::write(&mut grease_first, 0x21, b"");
    assert_eq!(
        codes(&[(CONTROL, grease_first, false)]),
        Some(ErrorCode::MissingSettings)
    );
    let mut data_first = vec![0x00];
    frame::write(&mut data_first, frame::DATA, b"");
    assert_eq!(
        codes(&[(CONTROL, data_first, false)]),
        Some(ErrorCode::MissingSettings)
    );
    let twice = control(&settings(&[]));
    assert_eq!(
        codes(&[(CONTROL, twice, false)]),
        Some(ErrorCode::FrameUnexpected)
    );
    let closing = control(&[]);
    assert_eq!(
        codes(&[(CONTROL, closing, true)]),
        Some(ErrorCode::ClosedCriticalStream)
    );
    assert_eq!(
        codes(&[(CONTROL, control(&[]), false), (14, control(&[]), false)]),
        Some(ErrorCode::StreamCreationError)
    );
    for ty in [0x02u8, 0x03] {
        assert_eq!(
            codes(&[(ENCODER, vec![ty], false), (14, vec![ty], false)]),
            Some(ErrorCode::StreamCreationError)
        );
        assert_eq!(
            codes(&[(ENCODER, vec![ty], true)]),
            Some(ErrorCode::ClosedCriticalStream)
        );
    }
    let mut c = new_conn(Limits::default());
    c.recv(CONTROL, &control(&[]), false);
    c.stream_reset(CONTROL);
    assert_eq!(
        closed(&events(&mut c)),
        Some(ErrorCode::ClosedCriticalStream)
    );
}

/// §6.2.2: a client may not open a push stream; §6.2: reserved and unknown types are
/// read and dropped; a server-initiated stream ID never carries peer data.
#[test]
fn rfc9114_6_2_stream_types() {
    let mut c = new_conn(Limits::default());
    c.recv(CONTROL, &[0x01], false);
    assert_eq!(
        closed(&events(&mut c)),
        Some(ErrorCode::StreamCreationError)
    );
    let mut c = new_conn(Limits::default());
    let mut reserved = Vec::new();
    varint::write(&mut reserved, 0x21 + 0x1f * 7);
    reserved.extend(b"anything at all");
    for b in reserved.chunks(1) {
        c.recv(14, b, false);
    }
    c.recv(14, b"more", true);
    c.recv(18, &[0x40], true); // ends inside its type: ignored
    assert!(events(&mut c).is_empty());
    c.recv(3, b"x", false);
    assert_eq!(
        closed(&events(&mut c)),
        Some(ErrorCode::StreamCreationError)
    );
}

/// §7.2.4.1: HTTP/2 settings are H3_SETTINGS_ERROR; the peer's values are kept.
#[test]
fn rfc9114_7_2_4_settings_values() {
    let mut c = new_conn(Limits::default());
    let mut b = vec![0x00];
    b.extend(settings(&[(0x06, 100), (0x01, 0), (0x07, 0)]));
    c.recv(CONTROL, &b, false);
    assert!(events(&mut c).is_empty());
    assert_eq!(c.peer_settings().unwrap().max_field_section_size, Some(100));
    let mut c = new_conn(Limits::default());
    let mut b = vec![0x00];
    b.extend(settings(&[(0x04, 100)]));
    c.recv(CONTROL, &b, false);
    assert_eq!(closed(&events(&mut c)), Some(ErrorCode::SettingsError));
}

/// §5.2: a client's GOAWAY IDs may not increase; §7.2.7 MAX_PUSH_ID may not decrease;
/// §7.2.3 CANCEL_PUSH above MAX_PUSH_ID is H3_ID_ERROR.
#[test]
fn rfc9114_5_2_and_7_2_id_rules() {
    fn run(frames: &[(u64, u64)]) -> Vec<Event> {
        let mut more = Vec::new();
        for &(ty, v) in frames {
            frame::write_varint_frame(&mut more, ty, v);
        }
        let mut c = new_conn(Limits::default());
        c.recv(CONTROL, &control(&more), false);
        events(&mut c)
    }
    let ev = run(&[(frame::GOAWAY, 8), (frame::GOAWAY, 4)]);
    assert_eq!(ev.len(), 2);
    assert_eq!(ev[0], Event::GoAway { push_id: 8 });
    let ev = run(&[(frame::GOAWAY, 4), (frame::GOAWAY, 8)]);
    assert_eq!(closed(&ev), Some(ErrorCode::IdError));
    let ev = run(&[(frame::MAX_PUSH_ID, 4), (frame::MAX_PUSH_ID, 3)]);
    assert_eq!(closed(&ev), Some(ErrorCode::IdError));
    let ev = run(&[(frame::CANCEL_PUSH, 0)]);
    assert_eq!(closed(&ev), Some(ErrorCode::IdError));
    assert!(run(&[(frame::MAX_PUSH_ID, 4), (frame::CANCEL_PUSH, 4)]).is_empty());
}

/// §5.2: after our GOAWAY, streams at or above its ID are rejected, those below served.
#[test]
fn rfc9114_5_2_our_goaway() {
    let mut c = new_conn(Limits::default());
    c.recv(4, &headers(&GET), true);
    c.send_goaway();
    let ev = events(&mut c);
    let mut expected = Vec::new();
    frame::write_varint_frame(&mut expected, frame::GOAWAY, 8);
    assert!(ev.contains(&Event::Send {
        on: LocalStream::Control,
        bytes: expected
    }));
    c.recv(0, &headers(&GET), true);
    c.recv(8, &headers(&GET), true);
    let ev = events(&mut c);
    assert!(matches!(ev[0], Event::Request { stream: 0, .. }));
    assert_eq!(stream_error(&ev), Some((8, ErrorCode::RequestRejected)));
}

/// Responses: HEADERS with `:status` first, the peer's MAX_FIELD_SECTION_SIZE honoured.
#[test]
fn rfc9114_4_2_2_responses_respect_the_peer_limit() {
    let mut c = new_conn(Limits::default());
    let mut out = Vec::new();
    c.send_headers(&mut out, 200, &[(b"x-a", b"1")]).unwrap();
    assert_eq!(out[..5], [0x01, 0x09, 0x00, 0x00, 0xd9]);
    assert_eq!(
        c.send_headers(&mut out, 1000, &[]),
        Err(SendError::InvalidStatus)
    );
    let mut b = vec![0x00];
    b.extend(settings(&[(0x06, 60)]));
    c.recv(CONTROL, &b, false);
    assert_eq!(
        c.send_headers(&mut out, 200, &[(b"x-a", b"1")]),
        Err(SendError::TooLarge)
    );
    out.clear();
    c.send_headers(&mut out, 200, &[]).unwrap();
    crate::write::data(&mut out, b"hi");
    c.send_trailers(&mut out, &[(b"x-t", b"1")]).unwrap();
    let mut r = frame::FrameReader::new(frame::StreamKind::Request);
    let mut input = &out[..];
    let mut n = 0;
    while let Ok(Some(_)) = r.next(&mut input, &Limits::default()) {
        n += 1;
    }
    assert_eq!(n, 3);
}

/// An idle connection that gave back its queues and tables serves the next request as the
/// first: a request split over two reads (the request table used again), a body.
#[test]
fn release_idle_keeps_the_connection_working() {
    let (mut c, ev) = request_events(&headers(&GET), true);
    assert_eq!(ev.len(), 1, "{ev:?}");
    c.stream_done(0);
    c.release_idle();
    let b = concat(&[headers(&post("5")), data(b"hello")]);
    let (first, rest) = b.split_at(3);
    c.recv(4, first, false);
    c.release_idle();
    c.recv(4, rest, true);
    let ev = events(&mut c);
    assert!(
        matches!(&ev[0], Event::Request { stream: 4, request, .. } if request.method == b"POST"),
        "{ev:?}"
    );
    assert!(matches!(&ev[1], Event::Data { data, end_stream: true, .. } if data == b"hello"));
    assert_eq!(c.counters().requests, 2);
    assert!(!c.is_closed());
}
