//! Fuzz the client role of HTTP/2 (`h2::ClientConnection`) with an origin's bytes: after
//! opening a few streams (GETs, and POSTs whose bodies are sent as windows allow), the input
//! is fed as what the origin sent. The first byte picks the read split size and whether the
//! output is taken; the second how many streams are opened and how; unless its top bit is
//! set, a valid SETTINGS frame comes first (otherwise the input must supply its own).
//! Any panic is a bug: everything here is origin-controlled. Memory stays bounded: streams
//! by what we opened, output by `max_output_bytes` (a caller stops reading at `wants_read`).
#![no_main]
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use h2::{write, ClientConnection, ClientEvent, ErrorCode, Limits, Request};
use libfuzzer_sys::fuzz_target;

fn request(post: bool) -> Request {
    Request {
        method: if post {
            b"POST".to_vec()
        } else {
            b"GET".to_vec()
        },
        scheme: Some(b"http".to_vec()),
        authority: Some(b"origin.test".to_vec()),
        path: Some(b"/".to_vec()),
        fields: Vec::new(),
        content_length: None,
        field_count: 0,
    }
}

fn on_event(conn: &mut ClientConnection, ev: ClientEvent, control: u8) {
    match ev {
        ClientEvent::Data { stream, data, .. } if control & 0x40 != 0 => {
            conn.consumed(stream, data.len())
        }
        ClientEvent::WindowOpened { stream } => {
            let _ = conn.send_data(stream, &[1; 3000], true);
        }
        ClientEvent::Response { stream, .. } if control & 0x80 != 0 => {
            conn.reset(stream, ErrorCode::CANCEL)
        }
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let Some((&opens, rest)) = rest.split_first() else {
        return;
    };
    let mut now = Instant::now();
    let limits = Limits::default();
    let mut conn = ClientConnection::new(limits.clone(), now).expect("default limits are valid");
    let mut input = Vec::new();
    if opens & 0x80 == 0 {
        write::settings(&mut input, &[]);
        write::settings_ack(&mut input);
        conn.recv(&input, now);
        input.clear();
    }
    let count = usize::from(opens & 0x7) + 1;
    let mut opened = 0;
    for i in 0..count {
        let post = opens & (0x8 << (i % 4)) != 0;
        if let Ok(id) = conn.open(&request(post), !post) {
            opened += 1;
            if post {
                let _ = conn.send_data(id, &[0; 70_000], true);
            }
        }
    }
    input.extend_from_slice(rest);
    let split = usize::from(control & 0x3f) + 1;
    for chunk in input.chunks(split) {
        if conn.wants_read() {
            conn.recv(chunk, now);
        }
        while let Some(ev) = conn.poll_event() {
            on_event(&mut conn, ev, control);
        }
        assert!(conn.open_streams() <= opened);
        assert!(conn.output().len() <= limits.max_output_bytes + 256 * 1024);
        if !conn.wants_read() || control & 0x40 == 0 {
            let n = conn.output().len();
            conn.advance_output(n);
        }
        now += Duration::from_millis(10);
        conn.on_timeout(now);
    }
    conn.peer_closed();
    while conn.poll_event().is_some() {}
});
