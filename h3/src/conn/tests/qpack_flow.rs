//! QPACK through the connection (blocked requests, the encoder and decoder streams), the
//! limits, and one conversation read at every split.

use std::collections::BTreeMap;

use super::*;
use crate::qpack::prefix::write_string;
use crate::Flood;

/// RFC 9204 §4.4: the peer's decoder stream may cancel streams but never acknowledge or
/// increment: our encoder inserts nothing.
#[test]
fn rfc9204_4_4_peer_decoder_stream() {
    let mut c = new_conn(Limits::default());
    c.recv(DECODER, &[0x03, 0x44, 0x48], false);
    assert!(events(&mut c).is_empty());
    c.recv(DECODER, &[0x80], false);
    assert_eq!(
        closed(&events(&mut c)),
        Some(ErrorCode::QpackDecoderStreamError)
    );
    let mut c = new_conn(Limits::default());
    c.recv(DECODER, &[0x03, 0x01], false);
    assert_eq!(
        closed(&events(&mut c)),
        Some(ErrorCode::QpackDecoderStreamError)
    );
}

/// The encoder stream: capacity 4096, insert `:authority: a.test` (static name 0).
fn encoder_insert() -> Vec<u8> {
    let mut b = vec![0x02, 0x3f, 0xe1, 0x1f, 0xc0];
    write_string(&mut b, 0, 7, b"a.test");
    b
}

/// A HEADERS frame whose section names the inserted entry (RIC 1, Base 1, relative 0).
fn headers_with_dynamic_ref() -> Vec<u8> {
    let section = [0x02, 0x00, 0xd1, 0xd7, 0xc1, 0x80, 0x54, 0x02, b'1', b'0'];
    let mut out = Vec::new();
    frame::write(&mut out, frame::HEADERS, &section);
    out
}

/// RFC 9204 §2.1.2: a request blocked on an insert waits, its body held, and goes on when
/// the encoder stream delivers; the acknowledgment goes on our decoder stream.
#[test]
fn rfc9204_2_1_2_blocked_request_resumes() {
    let mut c = new_conn(Limits::default());
    c.recv(
        0,
        &concat(&[headers_with_dynamic_ref(), data(b"hello")]),
        false,
    );
    assert!(events(&mut c).is_empty());
    assert_eq!(c.blocked_streams(), 1);
    c.recv(0, &data(b"world"), true);
    c.recv(ENCODER, &encoder_insert(), false);
    let ev = events(&mut c);
    assert!(matches!(&ev[0], Event::Request { request, .. }
        if request.authority.as_deref() == Some(&b"a.test"[..])));
    assert!(matches!(&ev[2], Event::Data { data, end_stream: true, .. } if data == b"world"));
    assert_eq!(
        ev[3],
        Event::Send {
            on: LocalStream::Decoder,
            bytes: vec![0x80]
        }
    );
    assert_eq!(c.blocked_streams(), 0);
    assert_eq!(c.open_streams(), 0);
}

/// What the proxy's slow-head deadline reads: a request stream awaits its request from its
/// first byte until its head is decoded, through a QPACK block too (the client's encoder
/// controls when it ends); and what the connection holds meanwhile.
#[test]
fn a_stream_awaits_its_request_until_the_head_is_decoded() {
    let mut c = new_conn(Limits::default());
    c.recv(CONTROL, &control(&[]), false);
    assert!(!c.awaiting_request(0), "no byte yet");
    let head = headers_with_dynamic_ref();
    let (first, rest) = head.split_at(head.len() - 1);
    c.recv(0, first, false);
    assert!(c.awaiting_request(0));
    // The frame's type and length (a byte each) are parsed; its payload so far is held.
    assert_eq!(c.held_bytes(), first.len() - 2, "the frame read so far");
    c.recv(0, rest, false);
    assert!(
        c.awaiting_request(0),
        "blocked on an insert: still no request"
    );
    assert!(c.held_bytes() > 0, "the blocked section");
    c.recv(ENCODER, &encoder_insert(), false);
    assert!(matches!(&events(&mut c)[..], [Event::Request { .. }, ..]));
    assert!(
        !c.awaiting_request(0),
        "the head is decoded; the body is not a head"
    );
    let table = c.held_bytes();
    assert!(
        table > 32,
        "the inserted entry stays in the dynamic table: {table}"
    );
    c.recv(0, &data(b"body"), false);
    assert!(!c.awaiting_request(0));
    // A stream that ends before its head is an error, no longer awaited.
    c.recv(4, &[], true);
    assert!(!c.awaiting_request(4));
}

/// RFC 9204 §2.1.2: more blocked streams than QPACK_BLOCKED_STREAMS:
/// QPACK_DECOMPRESSION_FAILED, counted.
#[test]
fn rfc9204_2_1_2_blocked_stream_limit() {
    let mut c = new_conn(Limits {
        qpack_blocked_streams: 2,
        ..Limits::default()
    });
    for id in [0, 4, 8] {
        c.recv(id, &headers_with_dynamic_ref(), false);
    }
    assert_eq!(
        closed(&events(&mut c)),
        Some(ErrorCode::QpackDecompressionFailed)
    );
    assert_eq!(c.counters().flood(Flood::BlockedStreams), 1);
}

/// A blocked stream's held input is bounded by `max_blocked_input`.
#[test]
fn blocked_input_is_bounded() {
    let mut c = new_conn(Limits {
        max_blocked_input: 100,
        ..Limits::default()
    });
    c.recv(0, &headers_with_dynamic_ref(), false);
    c.recv(0, &data(&[b'x'; 101]), false);
    assert_eq!(
        stream_error(&events(&mut c)),
        Some((0, ErrorCode::ExcessiveLoad))
    );
    assert_eq!(c.counters().flood(Flood::BlockedInput), 1);
    assert_eq!(c.blocked_streams(), 0, "the held section is dropped");
    let ev = events(&mut c);
    assert!(ev.is_empty());
}

/// RFC 9204 §4.3.1: a capacity above our SETTINGS closes the connection.
#[test]
fn rfc9204_4_3_1_capacity_above_settings() {
    let mut c = new_conn(Limits::default());
    c.recv(ENCODER, &[0x02, 0x3f, 0xe2, 0x1f], false); // 4097
    assert_eq!(
        closed(&events(&mut c)),
        Some(ErrorCode::QpackEncoderStreamError)
    );
    assert_eq!(c.counters().flood(Flood::TableCapacity), 1);
}

/// §4.2.2: a field section over our limits is answered 431, the connection goes on.
#[test]
fn rfc9114_4_2_2_oversized_sections_are_refused_431() {
    let long = "v".repeat(20_000);
    let many: Vec<(&str, &str)> = GET.iter().copied().chain([("x", "1"); 100]).collect();
    let big: Vec<(&str, &str)> = GET
        .iter()
        .copied()
        .chain([("x", &long[..16_300])])
        .collect();
    for (fields, kind) in [
        (vec![("x", &long[..])], Flood::HeadersFrameSize),
        (many, Flood::HeaderFields),
        (big, Flood::FieldSectionSize),
    ] {
        let (mut c, ev) = request_events(&concat(&[headers(&fields), data(b"body")]), true);
        // (A skipped section also gets a Stream Cancellation on our decoder stream.)
        let ev: Vec<Event> = ev
            .into_iter()
            .filter(|e| !matches!(e, Event::Send { .. }))
            .collect();
        assert_eq!(
            ev,
            [Event::Refuse {
                stream: 0,
                status: 431
            }],
            "{kind:?}"
        );
        assert_eq!(c.counters().flood(kind), 1);
        assert_eq!(c.open_streams(), 0);
        c.recv(4, &headers(&GET), true);
        assert!(matches!(
            events(&mut c)[..],
            [Event::Request { stream: 4, .. }]
        ));
    }
}

/// §7.2.8: unknown frames are skipped, up to `max_skipped_frames` per stream; empty DATA
/// frames up to `max_empty_frames`.
#[test]
fn skipped_and_empty_frame_floods() {
    let mut b = headers(&GET);
    for _ in 0..33 {
        frame::write(&mut b, 0x21, b"");
    }
    let (c, ev) = request_events(&b, false);
    assert_eq!(stream_error(&ev), Some((0, ErrorCode::ExcessiveLoad)));
    assert_eq!(c.counters().flood(Flood::SkippedFrames), 1);
    let mut b = headers(&post("0"));
    for _ in 0..33 {
        b.extend(data(b""));
    }
    let (c, ev) = request_events(&b, false);
    assert_eq!(stream_error(&ev), Some((0, ErrorCode::ExcessiveLoad)));
    assert_eq!(c.counters().flood(Flood::EmptyFrames), 1);
    let mut more = Vec::new();
    for _ in 0..33 {
        frame::write(&mut more, 0x21, b"");
    }
    let mut c = new_conn(Limits::default());
    c.recv(CONTROL, &control(&more), false);
    assert_eq!(closed(&events(&mut c)), Some(ErrorCode::ExcessiveLoad));
    assert_eq!(c.counters().flood(Flood::SkippedFrames), 1);
}

/// A stream the caller is done with before its head decoded gets a Stream Cancellation.
#[test]
fn rfc9204_4_4_2_cancellation_when_the_caller_drops_a_blocked_stream() {
    let mut c = new_conn(Limits::default());
    c.recv(8, &headers_with_dynamic_ref(), false);
    c.stream_reset(8);
    let ev = events(&mut c);
    assert_eq!(
        ev,
        [Event::Send {
            on: LocalStream::Decoder,
            bytes: vec![0x48]
        }]
    );
    assert_eq!(c.blocked_streams(), 0);
}

/// One whole conversation, its streams interleaved in pieces of every size: the same
/// events per stream (body bytes joined), blocked or not.
#[test]
fn rfc9114_every_split_of_every_stream_gives_the_same_requests() {
    let mut control_bytes = control(&[]);
    frame::write(&mut control_bytes, 0x21, b"grease");
    let streams: Vec<(u64, Vec<u8>)> = vec![
        (CONTROL, control_bytes),
        (
            0,
            concat(&[
                headers_with_dynamic_ref(),
                data(b"hello"),
                data(b"world"),
                headers(&[("x-sum", "1")]),
            ]),
        ),
        (ENCODER, encoder_insert()),
        (4, headers(&GET)),
    ];
    let whole = by_stream(&streams, usize::MAX);
    assert_eq!(whole[&0], ["request", "data helloworld", "trailers"]);
    assert_eq!(whole[&4], ["request end"]);
    for split in 1..40 {
        assert_eq!(by_stream(&streams, split), whole, "split {split}");
    }
}

fn by_stream(streams: &[(u64, Vec<u8>)], split: usize) -> BTreeMap<u64, Vec<String>> {
    let mut c = new_conn(Limits::default());
    let longest = streams.iter().map(|(_, b)| b.len()).max().unwrap_or(0);
    let mut at = 0;
    while at < longest {
        for (id, b) in streams {
            let end = at.saturating_add(split).min(b.len());
            if at < b.len() {
                let fin = end == b.len() && *id % 4 == 0;
                c.recv(*id, &b[at..end], fin);
            }
        }
        at = at.saturating_add(split);
    }
    let mut out: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut bodies: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    for e in events(&mut c) {
        let (stream, what) = match e {
            Event::Request {
                stream, end_stream, ..
            } => (
                stream,
                if end_stream { "request end" } else { "request" }.to_string(),
            ),
            Event::Data { stream, data, .. } => {
                bodies.entry(stream).or_default().extend(data);
                continue;
            }
            Event::Trailers { stream, .. } => {
                let body = bodies.remove(&stream).unwrap_or_default();
                let list = out.entry(stream).or_default();
                list.push(format!("data {}", String::from_utf8_lossy(&body)));
                (stream, "trailers".to_string())
            }
            Event::Send { .. } => continue,
            other => panic!("{other:?}"),
        };
        out.entry(stream).or_default().push(what);
    }
    out
}
