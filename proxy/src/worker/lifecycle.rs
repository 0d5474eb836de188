//! The facts an exchange's end is decided from, for its two connections. Whether the
//! upstream connection may serve another request is decided in one place,
//! `upstream/reuse.rs` `reusable`, from the exchange's facts (`UpstreamEnd`: the whole
//! request sent, the whole response read, and whether a body may still follow,
//! [`ResponseFraming::body_may_follow`]: a response that has no body by definition but
//! announced one) and the connection's own. Both follow from explicit facts, never from the
//! path that ended the exchange, so no way of ending an exchange can leave a peer out of step:
//!
//! - A response is complete when its framing says so ([`body_end`]): a close-delimited body
//!   only at an orderly close, never at a reset or a failed read (RFC 9112 §8).
//! - A client connection whose request body was not completely read when the response was
//!   queued first discards the rest of that body (a bounded amount), so that its remaining
//!   bytes are never parsed as requests; past the bound, or if it is closing anyway, it is
//!   closed after the response. That part is the codec's (`h1.rs`, `H1Codec::exchange_done`),
//!   called from the one end of every exchange (`finish.rs`).

use http1::{BodyDecoder, Method, ResponseHead};

/// The framing facts of one response head, for every status and request method: whether the
/// response has no body by definition, and whether its head announced one anyway. Decided
/// from the status and the method, never from a list of special cases elsewhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseFraming {
    /// No body by definition (RFC 9110 §6.4.1, §9.3.2, §9.3.6, §15.2, §15.3.5, §15.4.5;
    /// RFC 9112 §6.3): every 1xx, 204 and 304, every response to HEAD, and a 2xx to CONNECT
    /// (whose bytes after the head belong to a tunnel).
    pub bodiless: bool,
    /// The head announced a body: a Content-Length above 0, or any Transfer-Encoding.
    pub announces_body: bool,
}

impl ResponseFraming {
    /// The facts of a response with `status` to a `method` request whose head carried
    /// `content_length` and (or not) a Transfer-Encoding field.
    pub fn new(
        method: Method,
        status: u16,
        content_length: Option<u64>,
        transfer_encoding: bool,
    ) -> ResponseFraming {
        let bodiless = method == Method::Head
            || (100..200).contains(&status)
            || status == 204
            || status == 304
            || (method == Method::Connect && (200..300).contains(&status));
        ResponseFraming {
            bodiless,
            announces_body: content_length.is_some_and(|n| n > 0) || transfer_encoding,
        }
    }

    /// The facts of `head` (parsed from `input`) answering a `method` request.
    pub fn of(method: Method, head: &ResponseHead, input: &[u8]) -> ResponseFraming {
        ResponseFraming::new(
            method,
            head.status(),
            head.content_length(),
            head.header(input, "transfer-encoding").is_some(),
        )
    }

    /// A body may follow late: the response has none by definition, so the next bytes on the
    /// connection would be taken as the next response, yet the server announced one, so a
    /// faulty (or hostile) server may still send it. Such a connection is never reused.
    /// (RFC 9110 §8.6 lets a 304 or a HEAD response carry the representation's length;
    /// closing after it costs a connection, never a wrong answer.)
    pub fn body_may_follow(self) -> bool {
        self.bodiless && self.announces_body
    }
}

/// How the server's side of an upstream connection ended, as its reads and writes saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerEnd {
    Open,
    /// A read returned 0: the server closed its side in order (a FIN).
    Orderly,
    /// A read or a write failed (ECONNRESET and the like): the server's byte stream ended at
    /// a point nobody knows.
    Failed,
}

impl PeerEnd {
    /// From an upstream connection's `peer_closed` and `peer_failed` marks.
    pub fn of(closed: bool, failed: bool) -> PeerEnd {
        match (closed, failed) {
            (_, true) => PeerEnd::Failed,
            (true, false) => PeerEnd::Orderly,
            (false, false) => PeerEnd::Open,
        }
    }
}

/// Where a response body stands once every buffered byte of it is decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyEnd {
    /// More may come.
    Open,
    Complete,
    /// The connection ended before the body did: never stored, never ended cleanly for the
    /// client (RFC 9111 §3.3).
    Cut,
}

/// Whether a response body is complete when its buffered bytes are all decoded and the
/// server's side is `peer`: a framed body (Content-Length, chunked) when its framing is
/// done; a close-delimited one only at an orderly close. A reset ends a close-delimited
/// body incomplete (RFC 9112 §8: a connection closed by an error is an incomplete message).
pub fn body_end(decoder: &BodyDecoder, peer: PeerEnd) -> BodyEnd {
    if decoder.is_done() {
        return BodyEnd::Complete;
    }
    match peer {
        PeerEnd::Open => BodyEnd::Open,
        PeerEnd::Orderly if decoder.finish_at_eof().is_ok() => BodyEnd::Complete,
        PeerEnd::Orderly | PeerEnd::Failed => BodyEnd::Cut,
    }
}

#[cfg(test)]
mod tests {
    use super::super::upstream::reuse::{CLEAN_CONN, CLEAN_END};
    use super::super::upstream::{reusable, UpstreamEnd};
    use super::*;

    #[test]
    fn a_body_may_follow_only_a_bodiless_response_that_announced_one() {
        use Method::{Connect, Get, Head, Post};
        // (method, status, Content-Length, Transfer-Encoding, bodiless, may follow)
        let table = [
            (Get, 200, Some(87), false, false, false),
            (Get, 200, None, true, false, false),
            (Get, 200, None, false, false, false),
            (Get, 204, None, false, true, false),
            (Get, 204, Some(0), false, true, false),
            (Get, 204, Some(87), false, true, true),
            (Post, 204, None, true, true, true),
            (Get, 304, Some(87), false, true, true),
            (Get, 304, None, false, true, false),
            (Get, 100, Some(5), false, true, true),
            (Get, 103, None, false, true, false),
            (Head, 200, Some(87), false, true, true),
            (Head, 200, Some(0), false, true, false),
            (Head, 404, None, true, true, true),
            (Connect, 200, Some(1), false, true, true),
            (Connect, 407, Some(1), false, false, false),
            (Get, 205, Some(3), false, false, false),
            (Get, 500, None, false, false, false),
        ];
        for (method, status, length, te, bodiless, may_follow) in table {
            let facts = ResponseFraming::new(method, status, length, te);
            let what = format!("{method:?} {status} {length:?} te={te}");
            assert_eq!(facts.bodiless, bodiless, "{what}");
            assert_eq!(facts.body_may_follow(), may_follow, "{what}");
            let end = UpstreamEnd {
                body_may_follow: facts.body_may_follow(),
                ..CLEAN_END
            };
            assert_eq!(reusable(end, CLEAN_CONN), !may_follow, "{what}");
        }
    }

    #[test]
    fn a_close_delimited_body_is_complete_only_at_an_orderly_close() {
        use http1::BodyFraming::{Chunked, CloseDelimited, Length, None as NoBody};
        let limits = http1::Limits::default();
        let mut done_length = BodyDecoder::new(Length(2), &limits);
        let _ = done_length.decode(b"ab");
        // (framing decoder, peer end, verdict)
        let table = [
            (
                BodyDecoder::new(CloseDelimited, &limits),
                PeerEnd::Open,
                BodyEnd::Open,
            ),
            (
                BodyDecoder::new(CloseDelimited, &limits),
                PeerEnd::Orderly,
                BodyEnd::Complete,
            ),
            (
                BodyDecoder::new(CloseDelimited, &limits),
                PeerEnd::Failed,
                BodyEnd::Cut,
            ),
            (
                BodyDecoder::new(Length(5), &limits),
                PeerEnd::Open,
                BodyEnd::Open,
            ),
            (
                BodyDecoder::new(Length(5), &limits),
                PeerEnd::Orderly,
                BodyEnd::Cut,
            ),
            (
                BodyDecoder::new(Length(5), &limits),
                PeerEnd::Failed,
                BodyEnd::Cut,
            ),
            (
                BodyDecoder::new(Chunked, &limits),
                PeerEnd::Orderly,
                BodyEnd::Cut,
            ),
            (done_length.clone(), PeerEnd::Failed, BodyEnd::Complete),
            (done_length, PeerEnd::Orderly, BodyEnd::Complete),
            (
                BodyDecoder::new(NoBody, &limits),
                PeerEnd::Failed,
                BodyEnd::Complete,
            ),
        ];
        for (decoder, peer, verdict) in table {
            assert_eq!(body_end(&decoder, peer), verdict, "{decoder:?} at {peer:?}");
        }
        assert_eq!(PeerEnd::of(false, false), PeerEnd::Open);
        assert_eq!(PeerEnd::of(true, false), PeerEnd::Orderly);
        assert_eq!(PeerEnd::of(true, true), PeerEnd::Failed);
    }
}
