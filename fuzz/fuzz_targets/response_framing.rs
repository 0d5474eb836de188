//! Fuzz the upstream response framing decision (issue 30 items 3 and 5) with the proxy's own
//! parts: `http1::parse_response`, `http1::BodyDecoder`, and `proxy::worker::lifecycle`'s
//! `ResponseFraming`, `body_end` and `reusable`, fed the way the worker feeds them.
//!
//! Input: byte 0 picks the request method, byte 1 how the connection ends (bits 0-1: open,
//! orderly close, reset) and whether the head is forced onto a bodiless status, byte 2 where the
//! body is split; the rest is the response (status line, fields, body bytes).
//!
//! Invariants, besides never panicking:
//! - a head that announces a body on a status with none by definition never leaves a
//!   reusable connection, however the rest of the exchange went;
//! - a response the parser frames as bodiless is one the facts call bodiless (they never
//!   disagree about where the next response starts);
//! - a close-delimited body ended by a reset is never complete; nor is any body whose framing
//!   is not done when the connection ends.
#![no_main]
#![forbid(unsafe_code)]

use http1::{parse_response, BodyDecoder, BodyFraming, Limits, Method};
use libfuzzer_sys::fuzz_target;
use proxy::worker::lifecycle::{body_end, BodyEnd, PeerEnd, ResponseFraming};
use proxy::worker::reuse::{reusable, ConnFacts, UpstreamEnd};

const METHODS: [Method; 5] = [
    Method::Get,
    Method::Head,
    Method::Post,
    Method::Connect,
    Method::Options,
];
const BODILESS: [&[u8]; 4] = [
    b"HTTP/1.1 204 X\r\n",
    b"HTTP/1.1 304 X\r\n",
    b"HTTP/1.1 100 X\r\n",
    b"HTTP/1.0 204 X\r\n",
];

/// Decodes `body` in two pieces (split at `split`), as two reads would deliver it; then the
/// verdict at `peer` (a body the decoder refuses is cut).
fn read_body(decoder: &mut BodyDecoder, body: &[u8], split: usize, peer: PeerEnd) -> BodyEnd {
    let (first, second) = body.split_at(split.min(body.len()));
    for piece in [first, second] {
        let mut rest = piece;
        while !rest.is_empty() {
            let Ok(step) = decoder.decode(rest) else {
                return BodyEnd::Cut;
            };
            assert!(step.data.end <= step.consumed && step.consumed <= rest.len());
            rest = &rest[step.consumed..];
            if step.done {
                return BodyEnd::Complete;
            }
            if step.consumed == 0 {
                break;
            }
        }
    }
    body_end(decoder, peer)
}

fuzz_target!(|data: &[u8]| {
    let [m, how, split, rest @ ..] = data else {
        return;
    };
    let method = METHODS[usize::from(*m) % METHODS.len()];
    let peer = match how & 3 {
        0 => PeerEnd::Open,
        1 => PeerEnd::Orderly,
        _ => PeerEnd::Failed,
    };
    // Half the inputs get a bodiless status line in front, so that the fields the fuzzer
    // finds are tried on 1xx/204/304 too.
    let mut message = Vec::new();
    if how & 0x80 != 0 {
        message.extend_from_slice(BODILESS[usize::from(how >> 4 & 3)]);
    }
    message.extend_from_slice(rest);
    let limits = Limits::default();
    let Ok(Some((head, len))) = parse_response(&message, &limits, method == Method::Head) else {
        return;
    };
    let facts = ResponseFraming::of(method, &head, &message);
    if head.framing() != BodyFraming::None && method != Method::Connect {
        assert!(
            !facts.bodiless,
            "{} framed {:?} but bodiless",
            head.status(),
            head.framing()
        );
    }
    if facts.bodiless && method != Method::Connect {
        assert_eq!(
            head.framing(),
            BodyFraming::None,
            "bodiless {}",
            head.status()
        );
    }
    let body = message.get(len..).unwrap_or(&[]);
    let mut decoder = BodyDecoder::new(head.framing(), &limits);
    let verdict = read_body(&mut decoder, body, usize::from(*split), peer);
    if peer == PeerEnd::Failed && head.framing() == BodyFraming::CloseDelimited {
        assert_ne!(
            verdict,
            BodyEnd::Complete,
            "a reset ended a close-delimited body"
        );
    }
    if verdict == BodyEnd::Complete {
        assert!(
            decoder.is_done()
                || (peer == PeerEnd::Orderly && head.framing() == BodyFraming::CloseDelimited)
        );
    }
    // The best case for reuse in every other respect: only the framing facts may refuse it.
    let end = UpstreamEnd {
        request_sent: true,
        response_complete: verdict == BodyEnd::Complete,
        body_may_follow: facts.body_may_follow(),
    };
    let conn = ConnFacts {
        keep_alive: head.keep_alive(),
        peer_closed: peer != PeerEnd::Open,
        unsent_bytes: false,
        unread_bytes: false,
        current_config: true,
        ready: true,
    };
    let announces = head.content_length().is_some_and(|n| n > 0)
        || head.header(&message, "transfer-encoding").is_some();
    if facts.bodiless && announces {
        assert!(
            !reusable(end, conn),
            "{} announced a body and was pooled",
            head.status()
        );
    }
});
