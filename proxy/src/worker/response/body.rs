//! A response body, decoded from the upstream's buffer as far as the sink has room, passed
//! to the sink and to the exchange's cache fill; its end decided by its framing
//! (`lifecycle::body_end`). A body nobody takes any more (a background revalidation whose
//! fill gave up: too large to store) is not read to its end: what is buffered is passed
//! over, and unless that ends it the upstream connection is closed (`Step::Abandoned`).

use http1::BodyDecoder;

use super::super::exchange::{Forward, Receiving};
use super::super::lifecycle::{body_end, BodyEnd};
use super::super::upstream::Upstream;
use super::sink::Sink;
use super::Step;

/// Passes the body bytes buffered on `u` on to `sink` and `fwd`'s fill.
pub(super) fn step(sink: &mut Sink<'_>, u: &mut Upstream, fwd: &mut Forward) -> Step {
    let Receiving::Body {
        decoder,
        dechunk,
        bytes,
        ..
    } = &mut fwd.resp
    else {
        return Step::Wait;
    };
    if !sink.has_room() {
        return Step::Wait;
    }
    let input = u.rbuf.as_ref().map_or(&[][..], |b| b.bytes());
    if input.is_empty() && !decoder.is_done() {
        return match body_end(decoder, u.peer_end()) {
            BodyEnd::Open if sink.abandons() => Step::Abandoned,
            BodyEnd::Open => Step::Wait,
            BodyEnd::Complete => Step::Complete,
            BodyEnd::Cut => Step::Broken,
        };
    }
    let Ok(step) = decoder.decode(input) else {
        return Step::Broken;
    };
    let chunked = matches!(decoder, BodyDecoder::Chunked(_));
    let data = &input[step.data.clone()];
    *bytes += sink.body(&input[..step.consumed], data, chunked, *dechunk);
    if let (true, BodyDecoder::Chunked(chunked)) = (step.done, &*decoder) {
        sink.trailers(chunked.trailer_section());
    }
    if let Some(b) = u.rbuf.as_mut() {
        b.consume(step.consumed);
    }
    if step.done {
        Step::Complete
    } else if sink.abandons() {
        Step::Abandoned
    } else if step.consumed == 0 {
        Step::Wait
    } else {
        Step::Moved
    }
}
