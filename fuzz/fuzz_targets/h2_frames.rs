//! Fuzz the HTTP/2 frame parser, the capped HPACK decoder and the server
//! connection with one input. The first byte picks the read split size
//! and whether the application answers; the rest follows a valid preface.
//! Any panic is a bug: everything here is peer-controlled.
#![no_main]
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use h2::frame::{parse_frame, FrameHeader, HEADER_LEN};
use h2::{write, Connection, Event, HpackDecoder, Limits};
use libfuzzer_sys::fuzz_target;

fn frames_alone(input: &[u8]) {
    let mut at = 0;
    while let Some(h) = FrameHeader::parse(&input[at..]) {
        let end = at + HEADER_LEN + h.length as usize;
        let Some(payload) = input.get(at + HEADER_LEN..end) else { return };
        let _ = parse_frame(&h, payload);
        at = end;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else { return };
    frames_alone(rest);
    let _ = HpackDecoder::new(4096).decode(rest, 16384, 100);
    let mut now = Instant::now();
    let limits = Limits::default();
    let mut conn = Connection::new(limits.clone(), now).expect("default limits are valid");
    let mut input = Vec::new();
    write::client_preface(&mut input);
    write::settings(&mut input, &[]);
    input.extend_from_slice(rest);
    let split = usize::from(control & 0x3f) + 1;
    for chunk in input.chunks(split) {
        conn.recv(chunk, now);
        while let Some(ev) = conn.poll_event() {
            match ev {
                Event::Request { stream, .. } if control & 0x40 != 0 => {
                    let _ = conn.send_headers(stream, 200, &[(b"x", b"y")], false);
                    let _ = conn.send_data(stream, &[0; 100], true);
                }
                Event::Data { stream, data, .. } => conn.consumed(stream, data.len()),
                _ => {}
            }
        }
        assert!(conn.open_streams() <= limits.max_concurrent_streams as usize);
        if control & 0x80 != 0 {
            let n = conn.output().len();
            conn.advance_output(n);
        }
        now += Duration::from_millis(10);
        conn.on_timeout(now);
    }
});
