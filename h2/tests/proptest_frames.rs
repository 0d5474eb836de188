//! Random frame sequences against a connection: no panic, and memory
//! (input buffer, output queue, streams, events per pass) stays within
//! what the limits allow whatever the peer sends.

use std::time::{Duration, Instant};

use h2::{write, Connection, Event, HpackEncoder, Limits};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Frame {
        kind: u8,
        flags: u8,
        stream: u32,
        payload: Vec<u8>,
    },
    Request {
        stream: u32,
        end: bool,
    },
    Respond {
        stream: u32,
        body: usize,
    },
    Consume {
        stream: u32,
        n: usize,
    },
    Drain,
    Tick(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let stream = prop_oneof![Just(0u32), 1u32..12, any::<u32>()];
    prop_oneof![
        4 => (0u8..11, any::<u8>(), stream.clone(), proptest::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(kind, flags, stream, payload)| Op::Frame { kind, flags, stream, payload }),
        2 => (1u32..12, any::<bool>()).prop_map(|(stream, end)| Op::Request { stream, end }),
        1 => (1u32..12, 0usize..70_000).prop_map(|(stream, body)| Op::Respond { stream, body }),
        1 => (1u32..12, 0usize..100_000).prop_map(|(stream, n)| Op::Consume { stream, n }),
        1 => Just(Op::Drain),
        1 => (0u64..3000).prop_map(Op::Tick),
    ]
}

fn preface() -> Vec<u8> {
    let mut b = Vec::new();
    write::client_preface(&mut b);
    write::settings(&mut b, &[]);
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_frames_never_panic_and_stay_bounded(ops in proptest::collection::vec(op(), 1..80)) {
        let limits = Limits::default();
        let mut now = Instant::now();
        let mut conn = Connection::new(limits.clone(), now).unwrap();
        let mut enc = HpackEncoder::default();
        conn.recv(&preface(), now);
        for op in ops {
            let mut b = Vec::new();
            match op {
                Op::Frame { kind, flags, stream, payload } => write::raw(&mut b, kind, flags, stream, &payload),
                Op::Request { stream, end } => {
                    let mut block = Vec::new();
                    enc.encode([(&b":method"[..], &b"POST"[..]), (b":scheme", b"http"), (b":path", b"/")], &mut block);
                    write::headers(&mut b, stream, &block, end, 16384);
                    write::data(&mut b, stream, b"body", end);
                }
                Op::Respond { stream, body } => {
                    let _ = conn.send_headers(stream, 200, &[(b"x", b"y")], false);
                    let _ = conn.send_data(stream, &vec![0; body], true);
                }
                Op::Consume { stream, n } => conn.consumed(stream, n),
                Op::Drain => {
                    let n = conn.output().len();
                    conn.advance_output(n);
                }
                Op::Tick(ms) => {
                    now += Duration::from_millis(ms);
                    conn.on_timeout(now);
                }
            }
            if !b.is_empty() {
                conn.recv(&b, now);
            }
            let mut events = 0;
            while let Some(ev) = conn.poll_event() {
                events += 1;
                if let Event::Data { stream, data, .. } = ev {
                    conn.consumed(stream, data.len());
                }
            }
            prop_assert!(events <= 1 + b.len() / 9);
            prop_assert!(conn.open_streams() <= limits.max_concurrent_streams as usize);
            // The queue may exceed max_output_bytes only by what one pass of
            // input provoked (acks, resets) plus one response head.
            prop_assert!(conn.output().len() <= limits.max_output_bytes + 4 * b.len() + 1024);
        }
    }

    #[test]
    fn random_bytes_after_preface_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let now = Instant::now();
        let mut conn = Connection::new(Limits::default(), now).unwrap();
        conn.recv(&preface(), now);
        for chunk in bytes.chunks(97) {
            conn.recv(chunk, now);
        }
        while conn.poll_event().is_some() {}
    }
}
