//! Flow control both ways and the origin's SETTINGS that shape what we
//! send: windows, frame size, HPACK table size.

use super::{request, reset_of, Origin};
use crate::client::ClientEvent;
use crate::error::ErrorCode;
use crate::frame::{flags, kind};
use crate::limits::Limits;
use crate::settings::SettingId;
use crate::write;

#[test]
fn initial_window_changes_apply_to_open_streams() {
    let mut o = Origin::with(Limits::default(), &[(SettingId::InitialWindowSize, 10)]);
    let id = o.c.open(&request("POST", "/", &[]), false).unwrap();
    assert_eq!(o.c.send_data(id, &[7; 100], false), Ok(10));
    assert_eq!(o.c.send_capacity(id), 0);
    let mut b = Vec::new();
    write::settings(&mut b, &[(SettingId::InitialWindowSize, 100)]);
    o.send(&b);
    assert_eq!(o.events(), [ClientEvent::WindowOpened { stream: id }]);
    assert_eq!(o.c.send_capacity(id), 90);
    // Lowered: the window goes negative and nothing may be sent.
    let mut b = Vec::new();
    write::settings(&mut b, &[(SettingId::InitialWindowSize, 0)]);
    o.send(&b);
    assert_eq!(o.c.send_data(id, &[7; 5], false), Ok(0));
    o.raw(kind::WINDOW_UPDATE, 0, id, &100u32.to_be_bytes());
    assert_eq!(o.events(), [ClientEvent::WindowOpened { stream: id }]);
    assert_eq!(o.c.send_capacity(id), 90);
}

#[test]
fn frames_follow_the_origins_max_frame_size_and_table_size() {
    let s = [
        (SettingId::MaxFrameSize, 20_000),
        (SettingId::HeaderTableSize, 0),
    ];
    let mut o = Origin::with(Limits::default(), &s);
    let id =
        o.c.open(&request("POST", "/", &[("x-a", "b")]), false)
            .unwrap();
    assert_eq!(o.c.send_data(id, &[1; 30_000], true), Ok(30_000));
    let f = o.frames();
    // Table size 0: the block starts with a size update to 0.
    assert_eq!(f[0].p[0], 0x20);
    let lens: Vec<u32> = f[1..].iter().map(|f| f.h.length).collect();
    assert_eq!(lens, [20_000, 10_000]);
    assert!(f[2].h.has(flags::END_STREAM));
}

#[test]
fn request_body_waits_for_the_connection_window() {
    let mut o = Origin::new();
    let id = o.c.open(&request("POST", "/", &[]), false).unwrap();
    assert_eq!(o.c.send_data(id, &[0; 70_000], false), Ok(65_535));
    o.raw(kind::WINDOW_UPDATE, 0, 0, &1000u32.to_be_bytes());
    // The stream window (65 535 too) is the bound now.
    assert_eq!(o.c.send_capacity(id), 0);
    o.raw(kind::WINDOW_UPDATE, 0, id, &5000u32.to_be_bytes());
    assert_eq!(o.c.send_capacity(id), 1000);
}

#[test]
fn window_updates_follow_what_the_caller_consumed() {
    let mut o = Origin::new();
    let id = o.open_get();
    o.frames();
    o.headers(id, &[(":status", "200")], false);
    for _ in 0..4 {
        o.data(id, &[b'x'; 16_000], false);
    }
    let updates = |o: &mut Origin| -> Vec<(u32, u32)> {
        o.frames()
            .iter()
            .filter(|f| f.h.kind == kind::WINDOW_UPDATE)
            .map(|f| (f.h.stream, u32::from_be_bytes(f.p[..4].try_into().unwrap())))
            .collect()
    };
    assert_eq!(
        updates(&mut o),
        [],
        "nothing consumed: no window given back"
    );
    o.c.consumed(id, 40_000);
    assert_eq!(updates(&mut o), [(id, 40_000)]);
    // Past the stream window (64 KiB advertised): a stream error.
    o.data(id, &[b'x'; 16_384], false);
    o.data(id, &[b'x'; 16_384], false);
    assert_eq!(o.rst(id), None);
    o.data(id, &[b'x'; 16_384], false);
    assert_eq!(
        reset_of(&o.events(), id),
        Some((ErrorCode::FLOW_CONTROL_ERROR, false))
    );
}

#[test]
fn connection_window_given_back_past_half() {
    let mut o = Origin::new();
    let ids: Vec<u32> = (0..10).map(|_| o.open_get()).collect();
    o.frames();
    for &id in &ids {
        o.headers(id, &[(":status", "200")], false);
        for _ in 0..4 {
            o.data(id, &[1; 15_000], false);
        }
        o.c.consumed(id, 60_000);
    }
    let conn_updates: u32 = o
        .frames()
        .iter()
        .filter(|f| f.h.kind == kind::WINDOW_UPDATE && f.h.stream == 0)
        .map(|f| u32::from_be_bytes(f.p[..4].try_into().unwrap()))
        .sum();
    assert!(conn_updates >= 540_000, "{conn_updates}");
}

/// gRPC bidirectional streaming: request and response bodies interleave on
/// one stream, neither waits for the other to end.
#[test]
fn request_and_response_bodies_interleave() {
    let mut o = Origin::new();
    let r = request("POST", "/pkg.Chat/Talk", &[("te", "trailers")]);
    let id = o.c.open(&r, false).unwrap();
    assert_eq!(o.c.send_data(id, b"ping1", false), Ok(5));
    o.headers(id, &[(":status", "200")], false);
    o.data(id, b"pong1", false);
    assert_eq!(o.c.send_data(id, b"ping2", false), Ok(5));
    o.data(id, b"pong2", false);
    assert_eq!(o.c.send_data(id, b"", true), Ok(0));
    let sent: Vec<(u8, Vec<u8>)> = o
        .frames()
        .into_iter()
        .filter(|f| f.h.kind == kind::DATA)
        .map(|f| (f.h.flags, f.p))
        .collect();
    let want = [(0, &b"ping1"[..]), (0, b"ping2"), (flags::END_STREAM, b"")];
    assert_eq!(sent, want.map(|(f, p)| (f, p.to_vec())));
    assert_eq!(o.c.open_streams(), 1, "the response goes on");
    let mut b = Vec::new();
    let t = {
        let mut blk = Vec::new();
        o.enc.encode([(&b"grpc-status"[..], &b"0"[..])], &mut blk);
        blk
    };
    write::headers(&mut b, id, &t, true, 16384);
    o.send(&b);
    let ev = o.events();
    let data: Vec<&[u8]> = ev
        .iter()
        .filter_map(|e| match e {
            ClientEvent::Data { data, .. } => Some(&data[..]),
            _ => None,
        })
        .collect();
    assert_eq!(data, [&b"pong1"[..], b"pong2"]);
    assert!(matches!(ev.last(), Some(ClientEvent::Trailers { .. })));
    assert_eq!(o.c.open_streams(), 0);
}
