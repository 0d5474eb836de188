//! Property tests: random and mutated input never panics, results stay
//! inside their buffers, and what the writers produce parses again.

use http1::{
    parse_request, parse_response, write_request_head, write_response_head, BodyDecoder,
    BodyFraming, ChunkedDecoder, ConnectionOption, Forwarding, HeaderEdits, Limits,
};
use proptest::prelude::*;

const VALID: &[&[u8]] = &[
    b"GET /index.html HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nCookie: a=b\r\n\r\n",
    b"POST /u HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nConnection: keep-alive, x-a\r\nX-A: 1\r\n\r\nhello",
    b"PUT http://h:80/p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5;e=1\r\nhello\r\n0\r\nT: v\r\n\r\n",
    b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nVia: 1.1 a\r\n\r\nabc",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"HTTP/1.0 404 Not Found\r\n\r\nbody until close",
    b"3\r\nabc\r\n10;x=\"y\"\r\n0123456789abcdef\r\n0\r\nA: b\r\n\r\n",
];

/// Bytes that matter to the grammar, so mutations hit interesting cases.
const SPECIAL: &[u8] = b"\r\n \t:;,=\"\0\x7f\x80/?#@*0aFzH-";

#[derive(Clone, Debug)]
enum Mutation {
    Insert(usize, u8),
    Remove(usize),
    Replace(usize, u8),
}

fn byte() -> impl Strategy<Value = u8> {
    prop_oneof![any::<u8>(), proptest::sample::select(SPECIAL)]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), byte()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<usize>().prop_map(Mutation::Remove),
        (any::<usize>(), byte()).prop_map(|(i, b)| Mutation::Replace(i, b)),
    ]
}

fn mutated() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::sample::select(VALID),
        proptest::collection::vec(mutation(), 0..6),
    )
        .prop_map(|(base, mutations)| {
            let mut bytes = base.to_vec();
            for m in mutations {
                let len = bytes.len().max(1);
                match m {
                    Mutation::Insert(i, b) => bytes.insert(i % (bytes.len() + 1), b),
                    Mutation::Remove(i) if !bytes.is_empty() => {
                        bytes.remove(i % len);
                    }
                    Mutation::Replace(i, b) if !bytes.is_empty() => bytes[i % len] = b,
                    _ => {}
                }
            }
            bytes
        })
}

fn input() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![proptest::collection::vec(byte(), 0..400), mutated()]
}

fn small_limits() -> Limits {
    Limits {
        max_head_bytes: 300,
        max_headers: 8,
        max_uri_bytes: 64,
        max_field_bytes: 128,
        max_body_bytes: Some(1000),
        max_chunk_ext_bytes: 16,
        max_trailer_bytes: 64,
        ..Limits::default()
    }
}

fn check_body(framing: BodyFraming, input: &[u8], limits: &Limits) {
    let mut decoder = BodyDecoder::new(framing, limits);
    let mut offset = 0;
    while offset < input.len() {
        let rest = &input[offset..];
        let Ok(step) = decoder.decode(rest) else {
            return;
        };
        assert!(step.consumed <= rest.len());
        assert!(step.data.start <= step.data.end && step.data.end <= step.consumed);
        offset += step.consumed;
        if step.done || step.consumed == 0 {
            break;
        }
    }
    let _ = decoder.finish_at_eof();
}

fn check_request(buf: &[u8], limits: &Limits) {
    let Ok(Some((head, len))) = parse_request(buf, limits) else {
        return;
    };
    assert!(len <= buf.len());
    for field in head.headers().iter() {
        assert!(field.name.end() <= len && field.value.end() <= len);
    }
    check_body(head.framing(), &buf[len..], limits);
    // What the proxy writes upstream is itself acceptable, with the same
    // framing and host.
    let edits = HeaderEdits::new();
    let mut out = Vec::new();
    let fwd = Forwarding {
        forwarded_for: Some(b"192.0.2.1"),
        forwarded_proto: None,
        via: Some(b"p"),
        edits: &edits,
        framing: head.framing(),
        connection: ConnectionOption::Default,
        limits,
    };
    // A head that would not fit the limits once the proxy's fields are
    // added is refused (431) rather than sent; one that fits parses.
    if write_request_head(&mut out, &head, buf, &fwd).is_err() {
        assert!(out.is_empty());
        return;
    }
    let (again, again_len) = parse_request(&out, limits)
        .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&out)))
        .expect("complete");
    assert_eq!(again_len, out.len());
    assert_eq!(again.framing(), head.framing());
    assert_eq!(again.host(&out), head.host(buf).or(again.host(&out)));
}

fn check_response(buf: &[u8], limits: &Limits, is_head: bool) {
    let Ok(Some((head, len))) = parse_response(buf, limits, is_head) else {
        return;
    };
    assert!(len <= buf.len());
    check_body(head.framing(), &buf[len..], limits);
    let edits = HeaderEdits::new();
    let mut out = Vec::new();
    let fwd = Forwarding {
        forwarded_for: None,
        forwarded_proto: None,
        via: Some(b"p"),
        edits: &edits,
        framing: head.framing(),
        connection: ConnectionOption::Default,
        limits,
    };
    if write_response_head(&mut out, &head, buf, &fwd).is_err() {
        assert!(out.is_empty());
        return;
    }
    let (again, _) = parse_response(&out, limits, is_head)
        .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&out)))
        .expect("complete");
    assert_eq!(again.status(), head.status());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn requests_never_panic(buf in input(), cut in any::<usize>()) {
        for limits in [Limits::default(), small_limits()] {
            check_request(&buf, &limits);
            // A complete prefix means the same head in the whole buffer.
            let cut = cut % (buf.len() + 1);
            if let Ok(Some((_, len))) = parse_request(&buf[..cut], &limits) {
                let whole = parse_request(&buf, &limits).unwrap().unwrap();
                prop_assert_eq!(whole.1, len);
            }
        }
    }

    #[test]
    fn responses_never_panic(buf in input(), is_head in any::<bool>()) {
        for limits in [Limits::default(), small_limits()] {
            check_response(&buf, &limits, is_head);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn chunked_never_panics_and_splitting_changes_nothing(buf in input(), cut in any::<usize>()) {
        let limits = small_limits();
        let whole = {
            let mut data = Vec::new();
            let result = ChunkedDecoder::new(&limits).decode_all(&buf, |d| data.extend_from_slice(d));
            result.map(|r| (r, data))
        };
        let cut = cut % (buf.len() + 1);
        let mut decoder = ChunkedDecoder::new(&limits);
        let mut data = Vec::new();
        let split = decoder.decode_all(&buf[..cut], |d| data.extend_from_slice(d)).and_then(|(used, done)| {
            if done || used < cut {
                return Ok((used, done));
            }
            let (more, done) = decoder.decode_all(&buf[cut..], |d| data.extend_from_slice(d))?;
            Ok((used + more, done))
        });
        let split = split.map(|r| (r, data));
        prop_assert_eq!(whole, split);
    }
}
