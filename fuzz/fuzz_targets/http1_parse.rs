//! Fuzz both parsers, the body decoders and the writers with one input.
//! The first byte picks limits and the split point; the rest is the
//! message. Any panic is a bug: everything here is peer-controlled.
//!
//! Round trip: whatever the writers produce from a parsed head either is
//! refused as a whole (it would not fit the limits) or parses again with
//! the same limits and says the same thing: method, target, host, status,
//! framing, and every end-to-end field in order.
#![no_main]
#![forbid(unsafe_code)]

use http1::{
    parse_request, parse_response, write_request_head, write_response_head, BodyDecoder,
    BodyFraming, ChunkedDecoder, ConnectionOption, Forwarding, HeaderEdits, HeaderSpans, Limits,
    METHOD_OVERRIDE_FIELDS,
};
use libfuzzer_sys::fuzz_target;

fn decode_body(framing: BodyFraming, input: &[u8], limits: &Limits) {
    let mut decoder = BodyDecoder::new(framing, limits);
    let mut rest = input;
    while !rest.is_empty() {
        let Ok(step) = decoder.decode(rest) else { return };
        assert!(step.data.end <= step.consumed && step.consumed <= rest.len());
        rest = &rest[step.consumed..];
        if step.done || step.consumed == 0 {
            break;
        }
    }
    let _ = decoder.finish_at_eof();
}

/// Fields the writers manage (drop, merge or re-create), by lower-case name.
const MANAGED: &[&[u8]] = &[
    b"host",
    b"x-forwarded-for",
    b"x-forwarded-proto",
    b"via",
    b"te",
    b"trailer",
    b"upgrade",
    b"connection",
    b"keep-alive",
    b"content-length",
    b"proxy-connection",
    b"transfer-encoding",
    b"proxy-authenticate",
    b"proxy-authorization",
];

/// The end-to-end fields of a head: not managed by the writers and not
/// named by a Connection option.
fn end_to_end<'b>(buf: &'b [u8], fields: &HeaderSpans) -> Vec<(&'b [u8], &'b [u8])> {
    let options: Vec<&[u8]> = fields
        .get_all(buf, "connection")
        .flat_map(|v| v.split(|&b| b == b','))
        .map(|o| o.trim_ascii())
        .collect();
    fields
        .fields(buf)
        .filter(|(name, _)| {
            !MANAGED.iter().any(|m| name.eq_ignore_ascii_case(m))
                && !options.iter().any(|o| name.eq_ignore_ascii_case(o))
        })
        .collect()
}

fn request_round_trip(message: &[u8], limits: &Limits, out: &mut Vec<u8>) {
    let Ok(Some((head, len))) = parse_request(message, limits) else { return };
    decode_body(head.framing(), &message[len..], limits);
    // The fields indexed during the parse are what a scan by name finds.
    assert_eq!(head.host_field(message), head.header(message, "host"));
    assert_eq!(head.content_type(message), head.header(message, "content-type"));
    assert_eq!(
        head.method_override(message),
        METHOD_OVERRIDE_FIELDS
            .iter()
            .find_map(|name| head.header(message, name))
    );
    let edits = HeaderEdits::new();
    let fwd = Forwarding {
        forwarded_for: Some(b"192.0.2.1"),
        forwarded_proto: Some(b"https"),
        via: Some(b"fuzz"),
        edits: &edits,
        framing: head.framing(),
        connection: ConnectionOption::Default,
        limits,
    };
    out.clear();
    if write_request_head(out, &head, message, &fwd).is_err() {
        assert!(out.is_empty(), "a refused head is taken back");
        return;
    }
    // The proxy's own output is acceptable to itself, at the same limits.
    let Ok(Some((again, again_len))) = parse_request(out, limits) else {
        panic!("forwarded request does not parse: {:?}", String::from_utf8_lossy(out));
    };
    assert_eq!(again_len, out.len());
    assert_eq!(again.method_bytes(out), head.method_bytes(message));
    assert_eq!(again.target(out), head.path(message));
    assert_eq!(again.host(out).unwrap_or(b""), head.host(message).unwrap_or(b""));
    assert_eq!(again.framing(), head.framing());
    assert_eq!(
        end_to_end(out, again.headers()),
        end_to_end(message, head.headers())
    );
    let forwarded_for = again.header(out, "x-forwarded-for").unwrap_or(b"");
    assert!(forwarded_for.ends_with(b"192.0.2.1"));
    // The scheme is the connection's, once, whatever the client claimed.
    let protos: Vec<&[u8]> = again.headers().get_all(out, "x-forwarded-proto").collect();
    assert_eq!(protos, [&b"https"[..]]);
}

fn response_round_trip(message: &[u8], limits: &Limits, is_head: bool, out: &mut Vec<u8>) {
    let Ok(Some((head, len))) = parse_response(message, limits, is_head) else { return };
    decode_body(head.framing(), &message[len..], limits);
    let edits = HeaderEdits::new();
    let fwd = Forwarding {
        forwarded_for: None,
        forwarded_proto: None,
        via: Some(b"fuzz"),
        edits: &edits,
        framing: head.framing(),
        connection: ConnectionOption::Default,
        limits,
    };
    out.clear();
    if write_response_head(out, &head, message, &fwd).is_err() {
        assert!(out.is_empty(), "a refused head is taken back");
        return;
    }
    let Ok(Some((again, again_len))) = parse_response(out, limits, is_head) else {
        panic!("forwarded response does not parse: {:?}", String::from_utf8_lossy(out));
    };
    assert_eq!(again_len, out.len());
    assert_eq!(again.status(), head.status());
    assert_eq!(again.framing(), head.framing());
    assert_eq!(
        end_to_end(out, again.headers()),
        end_to_end(message, head.headers())
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, message)) = data.split_first() else { return };
    let limits = if control & 1 == 0 {
        Limits::default()
    } else {
        Limits {
            max_head_bytes: 512,
            max_headers: 8,
            max_uri_bytes: 64,
            max_field_bytes: 128,
            max_body_bytes: Some(4096),
            max_chunk_ext_bytes: 16,
            max_trailer_bytes: 64,
            ..Limits::default()
        }
    };
    let mut out = Vec::new();
    request_round_trip(message, &limits, &mut out);
    response_round_trip(message, &limits, control & 2 != 0, &mut out);

    // The chunked decoder on raw input, split in two: same outcome.
    let cut = usize::from(control >> 2) % (message.len() + 1);
    let mut whole = Vec::new();
    let one = ChunkedDecoder::new(&limits).decode_all(message, |d| whole.extend_from_slice(d));
    let mut split = Vec::new();
    let mut decoder = ChunkedDecoder::new(&limits);
    let two = decoder
        .decode_all(&message[..cut], |d| split.extend_from_slice(d))
        .and_then(|(used, done)| {
            if done || used < cut {
                return Ok((used, done));
            }
            let (more, done) = decoder.decode_all(&message[cut..], |d| split.extend_from_slice(d))?;
            Ok((used + more, done))
        });
    assert_eq!(one, two);
    if one.is_ok() {
        assert_eq!(whole, split);
    }
});
