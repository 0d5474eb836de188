//! A misbehaving origin meets the server side's defences: the same
//! `Limits`, tripped at the same values, counted in the same `Counters`.

use std::time::{Duration, Instant};

use super::{closed_with, get, request, reset_of, Origin};
use crate::client::{ClientConnection, ClientEvent};
use crate::counters::Flood;
use crate::error::ErrorCode;
use crate::frame::{flags, kind};
use crate::limits::Limits;
use crate::settings::SettingId;

fn calm(o: &mut Origin, flood: Flood) {
    assert_eq!(o.goaway(), Some(ErrorCode::ENHANCE_YOUR_CALM), "{flood:?}");
    assert_eq!(o.c.counters().floods(flood), 1, "{flood:?}");
    assert!(o.c.is_done());
}

#[test]
fn ping_acked_once_and_rate_limited() {
    let mut o = Origin::new();
    for i in 0..5u8 {
        o.raw(kind::PING, 0, 0, &[i; 8]);
    }
    let acks: Vec<_> = o
        .frames()
        .into_iter()
        .filter(|f| f.h.kind == kind::PING)
        .collect();
    assert_eq!(acks.len(), 1, "one pending ack, overwritten");
    assert_eq!(
        (acks[0].h.flags, &acks[0].p[..]),
        (flags::ACK, &[4u8; 8][..])
    );
    for _ in 0..100 {
        o.raw(kind::PING, 0, 0, &[0; 8]);
    }
    calm(&mut o, Flood::Ping);
}

#[test]
fn settings_flood() {
    let mut o = Origin::new();
    for _ in 0..10 {
        o.raw(kind::SETTINGS, 0, 0, &[]);
    }
    calm(&mut o, Flood::Settings);
}

#[test]
fn settings_ack_timeout_and_output_stall() {
    let now = Instant::now();
    let mut c = ClientConnection::new(Limits::default(), now).unwrap();
    let n = c.output().len();
    c.advance_output(n);
    let deadline = c.next_deadline().unwrap();
    assert_eq!(deadline, now + Duration::from_secs(5));
    c.on_timeout(deadline);
    assert!(
        matches!(c.poll_event(), Some(ClientEvent::Closed { error }) if error.code == ErrorCode::SETTINGS_TIMEOUT)
    );
    let mut c = ClientConnection::new(Limits::default(), now).unwrap();
    c.on_timeout(now + Duration::from_secs(31));
    assert_eq!(c.counters().floods(Flood::OutputStall), 1);
}

#[test]
fn empty_data_flood() {
    let mut o = Origin::new();
    let id = o.open_get();
    o.headers(id, &[(":status", "200")], false);
    for _ in 0..101 {
        o.data(id, b"", false);
    }
    calm(&mut o, Flood::EmptyData);
}

#[test]
fn window_update_flood() {
    let mut o = Origin::new();
    for _ in 0..401 {
        o.raw(kind::WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes());
    }
    calm(&mut o, Flood::WindowUpdate);
}

#[test]
fn control_frame_flood_of_priority_frames() {
    let mut o = Origin::new();
    o.open_get();
    for _ in 0..1601 {
        o.raw(kind::PRIORITY, 0, 1, &[0, 0, 0, 0, 16]);
    }
    calm(&mut o, Flood::ControlFrames);
}

#[test]
fn continuation_flood_and_header_block_size() {
    let mut o = Origin::new();
    let id = o.open_get();
    o.raw(kind::HEADERS, 0, id, &[0x88]);
    for _ in 0..17 {
        o.raw(kind::CONTINUATION, 0, id, &[]);
    }
    calm(&mut o, Flood::Continuation);
    let mut o = Origin::new();
    let id = o.open_get();
    o.raw(kind::HEADERS, 0, id, &[0; 10_000]);
    o.raw(kind::CONTINUATION, 0, id, &[0; 10_000]);
    calm(&mut o, Flood::Continuation);
}

#[test]
fn frame_over_max_frame_size() {
    let mut o = Origin::new();
    o.raw(kind::DATA, 0, 1, &[0; 16_385]);
    assert_eq!(closed_with(&o.events()), Some(ErrorCode::FRAME_SIZE_ERROR));
}

#[test]
fn hpack_table_update_above_ours_is_a_compression_error() {
    let limits = Limits {
        header_table_size: 256,
        ..Limits::default()
    };
    let mut o = Origin::with(limits, &[]);
    let id = o.open_get();
    // Dynamic table size update to 4096 (0x3f 0xe1 0x1f), then :status 200.
    o.raw(
        kind::HEADERS,
        flags::END_HEADERS,
        id,
        &[0x3f, 0xe1, 0x1f, 0x88],
    );
    assert_eq!(closed_with(&o.events()), Some(ErrorCode::COMPRESSION_ERROR));
}

#[test]
fn header_list_over_the_limit_resets_only_its_stream() {
    let mut o = Origin::new();
    let id = o.open_get();
    // More fields than `max_header_fields` (100) in a small block.
    let names: Vec<String> = (0..100).map(|i| format!("x-{i}")).collect();
    let mut fields = vec![(":status", "200")];
    fields.extend(names.iter().map(|n| (n.as_str(), "1")));
    o.headers(id, &fields, true);
    let ev = o.events();
    assert_eq!(reset_of(&ev, id), Some((ErrorCode::CANCEL, false)));
    assert_eq!(o.c.counters().floods(Flood::HeaderList), 1);
    let id = o.open_get();
    o.headers(id, &[(":status", "200")], true);
    assert!(matches!(&o.events()[..], [ClientEvent::Response { .. }]));
}

#[test]
fn provoked_resets_are_bounded() {
    let limits = Limits {
        provoked_reset_budget: 3,
        ..Limits::default()
    };
    let mut o = Origin::with(limits, &[]);
    for _ in 0..3 {
        let id = o.open_get();
        o.headers(id, &[("no", "status")], true);
    }
    calm(&mut o, Flood::MadeYouReset);
}

#[test]
fn stalled_request_body_is_cancelled() {
    let mut o = Origin::with(Limits::default(), &[(SettingId::InitialWindowSize, 0)]);
    let id = o.c.open(&request("POST", "/", &[]), false).unwrap();
    assert_eq!(o.c.send_data(id, b"body", true), Ok(0));
    o.frames();
    let deadline = o.c.next_deadline().unwrap();
    assert_eq!(deadline, o.now + Duration::from_secs(30));
    o.c.on_timeout(deadline);
    assert_eq!(reset_of(&o.events(), id), Some((ErrorCode::CANCEL, false)));
    assert_eq!(o.rst(id), Some(ErrorCode::CANCEL));
    assert_eq!(o.c.counters().floods(Flood::SendWindowStall), 1);
    assert!(o.c.open(&get("/"), true).is_ok());
}
