//! A response body, decoded from the upstream's buffer as far as the sink has room, passed
//! to the sink and to the exchange's cache fill; its end decided by its framing
//! (`lifecycle::body_end`). A body nobody takes any more (a background revalidation whose
//! fill gave up: too large to store) is not read to its end: what is buffered is passed
//! over, and unless that ends it the upstream connection is closed (`Step::Abandoned`).
//! An HTTP/2 origin's body comes decoded ([`step_decoded`]): its DATA as the stream gave
//! it, its end and trailers from the stream, nothing to de-frame.

use http1::BodyDecoder;

use super::super::exchange::{Forward, Receiving};
use super::super::lifecycle::{body_end, BodyEnd};
use super::super::upstream::h2_pieces::{self, Piece};
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

/// [`step`] for an HTTP/2 origin's stream entry `u`: its next body piece passed on to
/// `sink` and `fwd`'s fill. Under a Content-Length the decoder counts the data (the body
/// ends with its last byte, as from an HTTP/1.1 server); else the stream's end ends it, with
/// its trailers.
pub(super) fn step_decoded(sink: &mut Sink<'_>, u: &mut Upstream, fwd: &mut Forward) -> Step {
    let Receiving::Body {
        decoder,
        dechunk,
        bytes,
        ..
    } = &mut fwd.resp
    else {
        return Step::Wait;
    };
    if decoder.is_done() {
        // No body by definition (HEAD, 204, 304), or all its Content-Length arrived.
        return Step::Complete;
    }
    if !sink.has_room() {
        return Step::Wait;
    }
    let chunked = matches!(decoder, BodyDecoder::Chunked(_));
    let Some(piece) = h2_pieces::take(u).flatten() else {
        return match body_end(decoder, u.peer_end()) {
            BodyEnd::Open if sink.abandons() => Step::Abandoned,
            BodyEnd::Open => Step::Wait,
            BodyEnd::Complete => Step::Complete,
            BodyEnd::Cut => Step::Broken,
        };
    };
    match piece {
        Piece::Data(data) => {
            let data = if chunked {
                &data[..]
            } else {
                let Ok(step) = decoder.decode(&data) else {
                    return Step::Broken;
                };
                data.get(step.data).unwrap_or(&[])
            };
            *bytes += sink.decoded_body(data, chunked && !*dechunk);
            if decoder.is_done() {
                Step::Complete
            } else if sink.abandons() {
                Step::Abandoned
            } else {
                Step::Moved
            }
        }
        // Under a Content-Length the body ended with its last byte: trailers after it have
        // no place in the HTTP/1.1 form the length is relayed in.
        Piece::End(trailers) if chunked => {
            *bytes += sink.decoded_end(&trailers, !*dechunk);
            Step::Complete
        }
        // The stream ended short of its Content-Length (the codec resets such a stream
        // first), or a second head: not the body announced.
        Piece::End(_) | Piece::Head(_) => Step::Broken,
    }
}
