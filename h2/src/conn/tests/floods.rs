//! Every flood defence of issue 15 trips at its limit, is answered as
//! documented and is counted.

use std::time::{Duration, Instant};

use super::{get_req, peer, Peer};
use crate::conn::Connection;
use crate::counters::Flood;
use crate::error::ErrorCode;
use crate::event::Event;
use crate::frame::{flags, kind};
use crate::limits::Limits;
use crate::settings::SettingId;
use crate::write;

#[test]
fn ping_acked_once_and_rate_limited() {
    let mut p = peer();
    for i in 0..5u8 {
        p.raw(kind::PING, 0, 0, &[i; 8]);
    }
    let acks: Vec<_> = p
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
        p.raw(kind::PING, 0, 0, &[0; 8]);
    }
    assert_eq!(p.goaway(), Some(ErrorCode::ENHANCE_YOUR_CALM));
    assert_eq!(p.conn.counters().floods(Flood::Ping), 1);
    p.now += Duration::from_secs(2);
}

#[test]
fn settings_flood_and_ack_timeout() {
    let mut p = peer();
    for _ in 0..11 {
        p.raw(kind::SETTINGS, 0, 0, &[]);
    }
    assert_eq!(p.goaway(), Some(ErrorCode::ENHANCE_YOUR_CALM));
    let now = Instant::now();
    let mut c = Connection::new(Limits::default(), now).unwrap();
    let mut b = Vec::new();
    write::client_preface(&mut b);
    write::settings(&mut b, &[]);
    c.recv(&b, now);
    let deadline = c.next_deadline().unwrap();
    assert_eq!(deadline, now + Duration::from_secs(5));
    c.on_timeout(deadline);
    assert!(
        matches!(c.poll_event(), Some(Event::Closed { error }) if error.code == ErrorCode::SETTINGS_TIMEOUT)
    );
}

#[test]
fn rapid_reset_budget_refills_with_completed_streams() {
    let limits = Limits {
        reset_budget: 5,
        ..Limits::default()
    };
    let mut p = Peer::new(limits);
    let mut id = 1;
    for _ in 0..50 {
        // A completed stream gives back what a reset spends.
        p.headers(id, &get_req(), true);
        p.raw(kind::RST_STREAM, 0, id, &[0, 0, 0, 8]);
        p.headers(id + 2, &get_req(), true);
        p.conn.send_headers(id + 2, 204, &[], true).unwrap();
        id += 4;
    }
    assert_eq!(p.goaway(), None);
    for _ in 0..5 {
        p.headers(id, &get_req(), true);
        p.raw(kind::RST_STREAM, 0, id, &[0, 0, 0, 8]);
        id += 2;
    }
    assert_eq!(p.goaway(), Some(ErrorCode::ENHANCE_YOUR_CALM));
    assert_eq!(p.conn.counters().floods(Flood::RapidReset), 1);
}

#[test]
fn concurrency_limit_and_per_read_cap() {
    let limits = Limits {
        max_concurrent_streams: 2,
        ..Limits::default()
    };
    let mut p = Peer::new(limits);
    for id in [1, 3, 5] {
        p.headers(id, &get_req(), true);
    }
    assert_eq!(p.rst(5), Some(ErrorCode::REFUSED_STREAM));
    assert_eq!(p.conn.counters().streams_refused, 1);
    let mut p = peer();
    let mut b = Vec::new();
    let block = p.block(&get_req());
    for i in 0..201u32 {
        write::headers(&mut b, 1 + 2 * i, &block, true, 16384);
        write::rst_stream(&mut b, 1 + 2 * i, ErrorCode::CANCEL);
    }
    p.send(&b);
    assert!(
        p.conn.counters().floods(Flood::NewStreamsPerRead) >= 1
            || p.conn.counters().floods(Flood::RapidReset) == 1
    );
}

#[test]
fn made_you_reset_budget() {
    let mut p = peer();
    let mut id = 1;
    for _ in 0..100 {
        p.headers(id, &get_req(), true);
        p.raw(kind::WINDOW_UPDATE, 0, id, &[0, 0, 0, 0]);
        id += 2;
    }
    assert_eq!(p.goaway(), Some(ErrorCode::ENHANCE_YOUR_CALM));
    assert_eq!(p.conn.counters().floods(Flood::MadeYouReset), 1);
}

#[test]
fn empty_data_flood() {
    let mut p = peer();
    p.headers(
        1,
        &[(b":method", b"POST"), (b":scheme", b"h"), (b":path", b"/")],
        false,
    );
    for _ in 0..101 {
        p.raw(kind::DATA, 0, 1, &[]);
    }
    assert_eq!(p.goaway(), Some(ErrorCode::ENHANCE_YOUR_CALM));
    assert_eq!(p.conn.counters().floods(Flood::EmptyData), 1);
}

#[test]
fn priority_flood_trips_control_rate_or_overhead() {
    let mut p = peer();
    let mut b = Vec::new();
    for i in 0..2000u32 {
        write::priority(&mut b, 1 + 2 * i, 0, 16);
    }
    p.send(&b);
    assert_eq!(p.goaway(), Some(ErrorCode::ENHANCE_YOUR_CALM));
    let c = p.conn.counters();
    assert_eq!(
        c.floods(Flood::ControlFrames) + c.floods(Flood::Overhead),
        1
    );
}

#[test]
fn overhead_ratio_trips_on_slow_control_drip() {
    let limits = Limits {
        overhead_allowance: 100,
        max_overhead_ratio: 2,
        ..Limits::default()
    };
    let mut p = Peer::new(limits);
    for i in 0..30u32 {
        p.now += Duration::from_millis(50);
        p.raw(kind::PRIORITY, 0, 1 + 2 * i, &[0, 0, 0, 0, 1]);
    }
    assert_eq!(p.goaway(), Some(ErrorCode::ENHANCE_YOUR_CALM));
    assert_eq!(p.conn.counters().floods(Flood::Overhead), 1);
}

#[test]
fn output_is_bounded_and_stalls_time_out() {
    let mut p = peer();
    p.headers(1, &get_req(), true);
    p.events();
    p.conn.send_headers(1, 200, &[], false).unwrap();
    let mut b = Vec::new();
    write::window_update(&mut b, 0, 1 << 30);
    write::window_update(&mut b, 1, 1 << 30);
    p.send(&b);
    let big = vec![0u8; 1 << 20];
    let n = p.conn.send_data(1, &big, true).unwrap();
    assert!(n < big.len());
    assert!(!p.conn.wants_read());
    assert!(p.conn.output().len() <= Limits::default().max_output_bytes);
    let deadline = p.conn.next_deadline().unwrap();
    p.conn.on_timeout(deadline + Duration::from_secs(30));
    assert!(p.conn.is_done());
    assert_eq!(p.conn.counters().floods(Flood::OutputStall), 1);
}

#[test]
fn zero_window_stream_is_reset_after_timeout() {
    let mut p = peer();
    let mut b = Vec::new();
    write::settings(&mut b, &[(SettingId::InitialWindowSize, 0)]);
    p.send(&b);
    p.headers(1, &get_req(), true);
    p.events();
    p.conn.send_headers(1, 200, &[], false).unwrap();
    assert_eq!(p.conn.send_data(1, b"x", true).unwrap(), 0);
    p.frames();
    let deadline = p.conn.next_deadline().unwrap();
    p.conn.on_timeout(deadline);
    assert_eq!(p.rst(1), Some(ErrorCode::CANCEL));
    assert_eq!(p.conn.counters().floods(Flood::SendWindowStall), 1);
}

#[test]
fn long_download_with_window_updates_is_not_overhead() {
    let mut p = peer();
    p.headers(1, &get_req(), true);
    p.events();
    p.conn.send_headers(1, 200, &[], false).unwrap();
    let chunk = vec![0u8; 16384];
    // 640 MiB answered by two WINDOW_UPDATEs per frame: 1 MiB of control
    // bytes against no request payload; the response body is payload.
    for _ in 0..40_000 {
        p.now += Duration::from_millis(10);
        assert_eq!(p.conn.send_data(1, &chunk, false).unwrap(), chunk.len());
        let n = p.conn.output().len();
        p.conn.advance_output(n);
        let mut b = Vec::new();
        write::window_update(&mut b, 0, 16384);
        write::window_update(&mut b, 1, 16384);
        p.send(&b);
    }
    assert_eq!(p.goaway(), None);
    assert!(p.events().is_empty());
}
