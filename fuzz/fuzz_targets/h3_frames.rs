//! Fuzz the HTTP/3 frame reader, the QPACK decoder (encoder stream and field sections) and
//! the server connection with one input. The first byte picks the piece size the frame
//! reader sees; the rest is read as records `[stream, length, bytes...]` delivered to a
//! connection whose control, encoder and decoder streams are already open. Any panic is a
//! bug: everything here is peer-controlled.
#![no_main]
#![forbid(unsafe_code)]

use h3::frame::{FrameReader, StreamKind};
use h3::qpack::Decoder;
use h3::{Connection, Event, Limits};
use libfuzzer_sys::fuzz_target;

/// Stream IDs a record can name: the peer's control, encoder and decoder streams, one
/// more unidirectional stream, and four request streams.
const STREAMS: [u64; 8] = [2, 6, 10, 14, 0, 4, 8, 12];

fn frames_alone(input: &[u8], split: usize, limits: &Limits) {
    for kind in [StreamKind::Request, StreamKind::Control] {
        let mut r = FrameReader::new(kind);
        for chunk in input.chunks(split) {
            let mut rest = chunk;
            while let Ok(Some(_)) = r.next(&mut rest, limits) {}
        }
    }
}

fn qpack_alone(input: &[u8], limits: &Limits) {
    let mut d = Decoder::new(limits);
    let (enc, section) = input.split_at(input.len() / 2);
    let mut unblocked = Vec::new();
    let _ = d.feed_encoder(enc, &mut unblocked);
    let _ = d.decode_section(0, section.to_vec());
    assert!(d.blocked_streams() as u64 <= limits.qpack_blocked_streams);
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let limits = Limits {
        qpack_blocked_streams: 4,
        ..Limits::default()
    };
    frames_alone(rest, usize::from(control & 0x3f) + 1, &limits);
    qpack_alone(rest, &limits);
    let mut conn = Connection::new(limits.clone()).expect("valid limits");
    conn.recv(2, &[0x00, 0x04, 0x00], false);
    conn.recv(6, &[0x02], false);
    conn.recv(10, &[0x03], false);
    let mut at = rest;
    while let [selector, len, tail @ ..] = at {
        let (selector, n) = (*selector, usize::from(*len).min(tail.len()));
        let stream = STREAMS[usize::from(selector & 7)];
        let fin = selector & 0x80 != 0;
        conn.recv(stream, &tail[..n], fin);
        if selector & 0x40 != 0 {
            conn.stream_reset(stream);
        }
        at = &tail[n..];
        while let Some(ev) = conn.poll_event() {
            if matches!(ev, Event::Request { .. }) {
                let mut out = Vec::new();
                let _ = conn.send_headers(&mut out, 200, &[(b"x", b"y")]);
            }
            if let Event::Refuse { stream, .. } | Event::StreamError { stream, .. } = ev {
                conn.stream_done(stream);
            }
        }
        assert!(conn.blocked_streams() as u64 <= limits.qpack_blocked_streams);
        assert!(conn.open_streams() <= STREAMS.len());
    }
});
