//! Fuzz both parsers, the body decoders and the writers with one input.
//! The first byte picks limits and the split point; the rest is the
//! message. Any panic is a bug: everything here is peer-controlled.
#![no_main]

use http1::{
    parse_request, parse_response, write_request_head, write_response_head, BodyDecoder,
    BodyFraming, ChunkedDecoder, ConnectionOption, Forwarding, HeaderEdits, Limits,
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
    let edits = HeaderEdits::new();
    let mut out = Vec::new();

    if let Ok(Some((head, len))) = parse_request(message, &limits) {
        decode_body(head.framing(), &message[len..], &limits);
        let fwd = Forwarding {
            forwarded_for: Some(b"192.0.2.1"),
            via: Some(b"fuzz"),
            edits: &edits,
            framing: head.framing(),
            connection: ConnectionOption::Default,
        };
        write_request_head(&mut out, &head, message, &fwd);
        // The proxy's own output must always be acceptable to itself.
        assert!(matches!(parse_request(&out, &Limits::default()), Ok(Some(_))));
    }

    let is_head = control & 2 != 0;
    if let Ok(Some((head, len))) = parse_response(message, &limits, is_head) {
        decode_body(head.framing(), &message[len..], &limits);
        let fwd = Forwarding {
            forwarded_for: None,
            via: Some(b"fuzz"),
            edits: &edits,
            framing: head.framing(),
            connection: ConnectionOption::Default,
        };
        out.clear();
        write_response_head(&mut out, &head, message, &fwd);
        assert!(matches!(parse_response(&out, &Limits::default(), is_head), Ok(Some(_))));
    }

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
