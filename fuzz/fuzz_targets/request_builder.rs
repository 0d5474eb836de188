//! Differential target for `http1::RequestBuilder`, the entry of every request another codec
//! decoded (an HTTP/2 header block today, HTTP/3 next): the same pieces, assembled by the
//! builder and written out as HTTP/1.1 text for `parse_request`, must get the same verdict,
//! and when both accept, the same head (method, target, host, content type, framing, every
//! field in order). A request must not be judged by which protocol carried it (issue 31).
//!
//! Input: the first byte picks the limits; the rest is split at LF into the method, the
//! target, then name and value pairs. Pieces that the two forms cannot carry alike are
//! skipped rather than compared: a name with a colon (text reads it as the end of the name),
//! and the whitespace around a value (text trims it as OWS; the builder's callers give
//! values already trimmed).
#![no_main]
#![forbid(unsafe_code)]

use http1::{parse_request, Limits, RequestBuilder, RequestHead};
use libfuzzer_sys::fuzz_target;

/// Limits small enough that the fuzzer reaches every bound: head size, field count, target
/// length and field length.
fn limits(selector: u8) -> Limits {
    let mut limits = Limits::default();
    if selector & 1 != 0 {
        limits.max_head_bytes = 64 + usize::from(selector >> 2);
    }
    if selector & 2 != 0 {
        limits.max_headers = usize::from(selector >> 5);
        limits.max_uri_bytes = 8 + usize::from(selector >> 3);
        limits.max_field_bytes = 8 + usize::from(selector >> 4);
    }
    limits
}

/// What a head says, as owned values, for comparing two heads over different buffers.
#[derive(Debug, PartialEq)]
struct Said {
    method: Vec<u8>,
    target: Vec<u8>,
    host: Option<Vec<u8>>,
    content_type: Option<Vec<u8>>,
    framing: String,
    fields: Vec<(Vec<u8>, Vec<u8>)>,
}

fn said(head: &RequestHead, buf: &[u8]) -> Said {
    Said {
        method: head.method_bytes(buf).to_vec(),
        target: head.target(buf).to_vec(),
        host: head.host(buf).map(<[u8]>::to_vec),
        content_type: head.content_type(buf).map(<[u8]>::to_vec),
        framing: format!("{:?}", head.framing()),
        fields: head
            .headers()
            .fields(buf)
            .map(|(n, v)| (n.to_vec(), v.to_vec()))
            .collect(),
    }
}

fn built(method: &[u8], target: &[u8], fields: &[(&[u8], &[u8])], limits: &Limits) -> Option<Said> {
    let mut builder = RequestBuilder::new(method, target, 64).ok()?;
    for (name, value) in fields {
        builder.field(name, value).ok()?;
    }
    let (head, buf) = builder.finish(false, limits).ok()?;
    Some(said(&head, &buf))
}

fn parsed(
    method: &[u8],
    target: &[u8],
    fields: &[(&[u8], &[u8])],
    limits: &Limits,
) -> Option<Said> {
    let mut text = Vec::new();
    text.extend_from_slice(method);
    text.push(b' ');
    text.extend_from_slice(target);
    text.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in fields {
        text.extend_from_slice(name);
        text.extend_from_slice(b": ");
        text.extend_from_slice(value);
        text.extend_from_slice(b"\r\n");
    }
    text.extend_from_slice(b"\r\n");
    match parse_request(&text, limits) {
        Ok(Some((head, len))) => {
            assert_eq!(len, text.len(), "a whole head, nothing after it");
            Some(said(&head, &text))
        }
        _ => None,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let mut pieces = rest.split(|&b| b == b'\n');
    let (Some(method), Some(target)) = (pieces.next(), pieces.next()) else {
        return;
    };
    let mut fields = Vec::new();
    while let (Some(name), Some(value)) = (pieces.next(), pieces.next()) {
        if name.contains(&b':') {
            return;
        }
        fields.push((name, value.trim_ascii()));
    }
    let limits = limits(selector);
    let from_builder = built(method, target, &fields, &limits);
    let from_text = parsed(method, target, &fields, &limits);
    assert_eq!(from_builder, from_text, "one request, two verdicts");
});
