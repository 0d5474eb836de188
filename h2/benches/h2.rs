//! Micro-benchmarks of the per-request work of the protocol core: a
//! browser-like request's HEADERS through `recv` to the Request event
//! (frame parsing, HPACK decoding with the caps, request mapping), and a
//! response (HEADERS encoding plus a 10-byte or 26 KB body in DATA frames).

use std::time::Instant;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use h2::{write, Connection, Event, HpackEncoder, Limits};

const FIELDS: [(&[u8], &[u8]); 11] = [
    (b":method", b"GET"),
    (b":scheme", b"https"),
    (b":authority", b"www.example.com"),
    (
        b":path",
        b"/articles/2024/http-request-smuggling.html?ref=home",
    ),
    (
        b"user-agent",
        b"Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    ),
    (
        b"accept",
        b"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    ),
    (b"accept-language", b"en-US,en;q=0.5"),
    (b"accept-encoding", b"gzip, deflate, br, zstd"),
    (b"cookie", b"session=4f7c2a9e1b3d5f60"),
    (b"cookie", b"theme=dark; consent=yes"),
    (b"sec-fetch-dest", b"document"),
];

/// A connection past the handshake, plus an encoder in the client's state.
fn setup() -> (Connection, HpackEncoder, Instant) {
    let now = Instant::now();
    let mut conn = Connection::new(Limits::default(), now).unwrap();
    let mut b = Vec::new();
    write::client_preface(&mut b);
    write::settings(&mut b, &[]);
    write::settings_ack(&mut b);
    write::window_update(&mut b, 0, 1 << 30);
    conn.recv(&b, now);
    let n = conn.output().len();
    conn.advance_output(n);
    (conn, HpackEncoder::default(), now)
}

fn request_and_response(c: &mut Criterion, name: &str, body: &[u8]) {
    c.bench_function(name, |bench| {
        let (mut conn, mut enc, now) = setup();
        let mut stream = 1u32;
        let mut wire = Vec::new();
        let mut block = Vec::new();
        bench.iter(|| {
            wire.clear();
            block.clear();
            enc.encode(FIELDS.iter().copied(), &mut block);
            write::headers(&mut wire, stream, &block, true, 16384);
            conn.recv(&wire, now);
            let Some(Event::Request { stream: id, .. }) = conn.poll_event() else {
                panic!("no request")
            };
            let fields: [(&[u8], &[u8]); 2] = [
                (b"content-type", b"text/html"),
                (b"cache-control", b"max-age=3600"),
            ];
            conn.send_headers(id, 200, &fields, false).unwrap();
            assert_eq!(conn.send_data(id, body, true).unwrap(), body.len());
            let n = conn.output().len();
            black_box(conn.output());
            conn.advance_output(n);
            stream += 2;
        });
    });
}

fn benches(c: &mut Criterion) {
    request_and_response(c, "h2 request headers + 10 B response", &[b'x'; 10]);
    request_and_response(c, "h2 request headers + 26 KB response", &[b'x'; 26_000]);
    c.bench_function("h2 request headers decode only", |bench| {
        let (mut conn, mut enc, now) = setup();
        let mut stream = 1u32;
        let mut wire = Vec::new();
        let mut block = Vec::new();
        bench.iter(|| {
            wire.clear();
            block.clear();
            enc.encode(FIELDS.iter().copied(), &mut block);
            write::headers(&mut wire, stream, &block, true, 16384);
            conn.recv(&wire, now);
            black_box(conn.poll_event());
            // Refuse it so the stream count stays flat.
            conn.reset(stream, h2::ErrorCode::NO_ERROR);
            let n = conn.output().len();
            conn.advance_output(n);
            stream += 2;
        });
    });
}

criterion_group!(h2_benches, benches);
criterion_main!(h2_benches);
