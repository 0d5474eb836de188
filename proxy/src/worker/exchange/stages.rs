//! The upstream side of an exchange as stages reached, not flags: what is fixed when the
//! request goes upstream ([`Facts`]), how far the request got ([`Sending`]) and how far the
//! response got ([`Receiving`]). Each moves only through its transitions below, called where
//! the event happens (`request_body.rs`, `h2_serve.rs`, `forward.rs` for the request;
//! `response/head.rs` and `response/body.rs` for the response); the rest of the worker asks
//! questions (`all_queued`, `committed`, `body_may_follow`, ...).

use std::time::Instant;

use http1::{BodyDecoder, Method};

use super::super::request::Request;
use super::super::websocket::{self, Upgrade};
use crate::worker::lifecycle::ResponseFraming;

/// What is fixed when a request goes upstream, decided once from the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    method: Method,
    /// No body and idempotent: may be sent again on another connection.
    replayable: bool,
    /// An HTTP/1.0 client: no interim responses, no chunked framing.
    http10: bool,
    /// A WebSocket handshake: sent on a new connection of its own, which a `101` turns into a
    /// tunnel and any other answer closes after it.
    websocket: bool,
    /// The proxy sent `100 Continue` to the client itself.
    continue_sent: bool,
    /// A client waits for the response (false: a background revalidation, fill only).
    has_client: bool,
}

impl Facts {
    /// The facts of `request`, sent for a client (`has_client`) or the proxy itself, after
    /// the proxy did (or did not) answer its `Expect: 100-continue` (`continue_sent`).
    pub fn of(request: &Request, has_client: bool, continue_sent: bool) -> Facts {
        Facts {
            method: request.method(),
            replayable: !request.has_body() && request.method().is_idempotent(),
            http10: Facts::is_http10(request),
            websocket: websocket::classify(request) == Upgrade::WebSocket,
            continue_sent,
            has_client,
        }
    }

    fn is_http10(request: &Request) -> bool {
        request.version() == http1::Version::Http10
    }

    /// Whether the proxy answers `request`'s `Expect: 100-continue` itself (it has a body to
    /// wait for, and HTTP/1.0 has no interim responses).
    pub fn wants_continue(request: &Request) -> bool {
        request.expect_continue() && request.has_body() && !Facts::is_http10(request)
    }

    /// The request's method: what the response's framing depends on besides its status.
    pub fn method(&self) -> Method {
        self.method
    }

    pub fn replayable(&self) -> bool {
        self.replayable
    }

    pub fn http10(&self) -> bool {
        self.http10
    }

    pub fn websocket(&self) -> bool {
        self.websocket
    }

    pub fn has_client(&self) -> bool {
        self.has_client
    }

    /// Whether an interim response with `status` goes on to the client: never to an HTTP/1.0
    /// client, and not a `100` when the proxy sent its own.
    pub fn relays_interim(&self, status: u16) -> bool {
        !(self.http10 || status == 100 && self.continue_sent)
    }
}

/// How far the request got towards the server.
#[derive(Debug)]
pub enum Sending {
    /// The head is queued; the client's body is being passed on through its decoder.
    Body(BodyDecoder),
    /// Every byte of the request is queued for the server.
    Queued,
    /// Every byte was written, at this instant: the upstream time runs from here.
    Written(Instant),
}

impl Sending {
    /// The start: a request with a body (`body`: its decoder) passes it on, one without is
    /// queued whole with its head.
    pub fn new(body: Option<BodyDecoder>) -> Sending {
        body.map_or(Sending::Queued, Sending::Body)
    }

    /// The body's decoder while the body is being passed on.
    pub fn body_mut(&mut self) -> Option<&mut BodyDecoder> {
        match self {
            Sending::Body(decoder) => Some(decoder),
            Sending::Queued | Sending::Written(_) => None,
        }
    }

    /// The last byte of the body was queued.
    pub fn body_done(&mut self) {
        if let Sending::Body(_) = self {
            *self = Sending::Queued;
        }
    }

    /// The upstream's output drained at `now`: a request queued whole is written then (once).
    pub fn flushed(&mut self, now: Instant) {
        if let Sending::Queued = self {
            *self = Sending::Written(now);
        }
    }

    /// Sent again on another connection (a retry): the time runs from this sending.
    pub fn resend(&mut self) {
        if let Sending::Written(_) = self {
            *self = Sending::Queued;
        }
    }

    /// Every byte of the request was queued for the server.
    pub fn all_queued(&self) -> bool {
        !matches!(self, Sending::Body(_))
    }

    /// When the request's last byte was written.
    pub fn written_at(&self) -> Option<Instant> {
        match self {
            Sending::Written(at) => Some(*at),
            Sending::Body(_) | Sending::Queued => None,
        }
    }

    /// The body's decoder if the client has not sent all of it yet.
    pub fn unread_body(self) -> Option<BodyDecoder> {
        match self {
            Sending::Body(decoder) => Some(decoder),
            Sending::Queued | Sending::Written(_) => None,
        }
    }
}

/// How far the response got.
#[derive(Debug)]
pub enum Receiving {
    /// No final head yet: `interim` 1xx heads read, `relayed`: one of them reached the client.
    Head {
        interim: u32,
        relayed: bool,
        /// A head without a body by definition announced one (an interim one counts): a
        /// faulty server may still send it (`lifecycle::ResponseFraming`).
        body_may_follow: bool,
    },
    /// The final head with `status` went to the sink; its body is decoded by `decoder` and
    /// passed on (its data only, `dechunk`, when the client's codec frames it itself);
    /// `bytes`: the body bytes a client got.
    Body {
        status: u16,
        decoder: BodyDecoder,
        dechunk: bool,
        bytes: u64,
        body_may_follow: bool,
    },
    /// The origin's `101` accepted a WebSocket handshake and is queued for the client.
    Switched,
}

impl Receiving {
    pub const START: Receiving = Receiving::Head {
        interim: 0,
        relayed: false,
        body_may_follow: false,
    };

    /// A head (interim or final) with these framing facts was read.
    pub fn head_read(&mut self, framing: ResponseFraming) {
        if let Receiving::Head {
            body_may_follow, ..
        } = self
        {
            *body_may_follow |= framing.body_may_follow();
        }
    }

    /// An interim head was read: how many so far.
    pub fn interim_read(&mut self) -> u32 {
        match self {
            Receiving::Head { interim, .. } => {
                *interim += 1;
                *interim
            }
            Receiving::Body { .. } | Receiving::Switched => u32::MAX,
        }
    }

    /// An interim head was passed on: `to_client`, it reached the client.
    pub fn interim_relayed(&mut self, to_client: bool) {
        if let Receiving::Head { relayed, .. } = self {
            *relayed |= to_client;
        }
    }

    /// The final head with `status` went to the sink: its body follows.
    pub fn start_body(&mut self, status: u16, decoder: BodyDecoder, dechunk: bool) {
        if let Receiving::Head {
            body_may_follow, ..
        } = *self
        {
            *self = Receiving::Body {
                status,
                decoder,
                dechunk,
                bytes: 0,
                body_may_follow,
            };
        }
    }

    /// The origin's `101` was queued for the client.
    pub fn switch(&mut self) {
        *self = Receiving::Switched;
    }

    pub fn awaiting_head(&self) -> bool {
        matches!(self, Receiving::Head { .. })
    }

    /// The final status (0 before the final head).
    pub fn status(&self) -> u16 {
        match self {
            Receiving::Body { status, .. } => *status,
            Receiving::Switched => 101,
            Receiving::Head { .. } => 0,
        }
    }

    /// The body bytes a client got.
    pub fn body_bytes(&self) -> u64 {
        match self {
            Receiving::Body { bytes, .. } => *bytes,
            Receiving::Head { .. } | Receiving::Switched => 0,
        }
    }

    /// More bytes may follow the response on its connection (see [`Receiving::Head`]).
    pub fn body_may_follow(&self) -> bool {
        match self {
            Receiving::Head {
                body_may_follow, ..
            }
            | Receiving::Body {
                body_may_follow, ..
            } => *body_may_follow,
            Receiving::Switched => false,
        }
    }

    /// Response bytes were queued for a client (`has_client`: the exchange has one): nothing
    /// can be retried or answered otherwise after that.
    pub fn committed(&self, has_client: bool) -> bool {
        match self {
            Receiving::Head { relayed, .. } => *relayed,
            Receiving::Body { .. } => has_client,
            Receiving::Switched => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoder(length: u64) -> BodyDecoder {
        BodyDecoder::new(
            http1::BodyFraming::Length(length),
            &http1::Limits::default(),
        )
    }

    #[derive(Clone, Copy, Debug)]
    enum Req {
        BodyDone,
        Flushed,
        Resend,
    }

    /// Steps from a request with a body (or without), then whether all of it is queued and
    /// whether it was written.
    const SENDING: &[(bool, &[Req], bool, bool)] = &[
        (false, &[], true, false),
        (false, &[Req::Flushed], true, true),
        (false, &[Req::Flushed, Req::Flushed], true, true),
        (false, &[Req::Flushed, Req::Resend], true, false),
        (
            false,
            &[Req::Flushed, Req::Resend, Req::Flushed],
            true,
            true,
        ),
        (true, &[], false, false),
        // The head alone drained: not written until the body is queued.
        (true, &[Req::Flushed], false, false),
        (true, &[Req::Resend], false, false),
        (true, &[Req::BodyDone], true, false),
        (true, &[Req::BodyDone, Req::Flushed], true, true),
        (
            true,
            &[Req::BodyDone, Req::BodyDone, Req::Flushed],
            true,
            true,
        ),
    ];

    #[test]
    fn sending_transitions() {
        for &(body, steps, queued, written) in SENDING {
            let mut s = Sending::new(body.then(|| decoder(3)));
            for step in steps {
                match step {
                    Req::BodyDone => s.body_done(),
                    Req::Flushed => s.flushed(Instant::now()),
                    Req::Resend => s.resend(),
                }
            }
            assert_eq!(s.all_queued(), queued, "{body} {steps:?}");
            assert_eq!(s.body_mut().is_some(), !queued, "{body} {steps:?}");
            assert_eq!(s.written_at().is_some(), written, "{body} {steps:?}");
            assert_eq!(s.unread_body().is_some(), !queued, "{body} {steps:?}");
        }
    }

    #[derive(Clone, Copy, Debug)]
    enum Resp {
        /// A head read; true: a bodiless one that announced a body.
        Head(bool),
        Interim {
            to_client: bool,
        },
        Final(u16),
        Switch,
    }

    fn framing(may_follow: bool) -> ResponseFraming {
        ResponseFraming {
            bodiless: may_follow,
            announces_body: may_follow,
        }
    }

    /// Steps, then the status, whether a body may follow, whether the response is committed
    /// to a client (with one, and without) and whether a head is still awaited.
    type Row = (&'static [Resp], u16, bool, (bool, bool), bool);
    const RECEIVING: &[Row] = &[
        (&[], 0, false, (false, false), true),
        (&[Resp::Head(true)], 0, true, (false, false), true),
        (
            &[Resp::Head(true), Resp::Head(false)],
            0,
            true,
            (false, false),
            true,
        ),
        (
            &[Resp::Interim { to_client: false }],
            0,
            false,
            (false, false),
            true,
        ),
        (
            &[Resp::Interim { to_client: true }],
            0,
            false,
            (true, true),
            true,
        ),
        (
            &[
                Resp::Interim { to_client: true },
                Resp::Interim { to_client: false },
            ],
            0,
            false,
            (true, true),
            true,
        ),
        (&[Resp::Final(200)], 200, false, (true, false), false),
        // What an interim head announced stays with the final response.
        (
            &[Resp::Head(true), Resp::Final(204)],
            204,
            true,
            (true, false),
            false,
        ),
        // No head is read once the body started; a second final head changes nothing.
        (
            &[Resp::Final(200), Resp::Head(true), Resp::Final(500)],
            200,
            false,
            (true, false),
            false,
        ),
        (&[Resp::Switch], 101, false, (true, true), false),
    ];

    #[test]
    fn receiving_transitions() {
        for &(steps, status, may_follow, (with, without), awaiting) in RECEIVING {
            let mut r = Receiving::START;
            for step in steps {
                match *step {
                    Resp::Head(f) => r.head_read(framing(f)),
                    Resp::Interim { to_client } => {
                        r.interim_read();
                        r.interim_relayed(to_client);
                    }
                    Resp::Final(status) => r.start_body(status, decoder(1), false),
                    Resp::Switch => r.switch(),
                }
            }
            assert_eq!(r.status(), status, "{steps:?}");
            assert_eq!(r.body_may_follow(), may_follow, "{steps:?}");
            assert_eq!(r.committed(true), with, "{steps:?}");
            assert_eq!(r.committed(false), without, "{steps:?}");
            assert_eq!(r.awaiting_head(), awaiting, "{steps:?}");
        }
    }

    #[test]
    fn interim_heads_are_counted_until_the_final_one() {
        let mut r = Receiving::START;
        assert_eq!(r.interim_read(), 1);
        assert_eq!(r.interim_read(), 2);
        r.start_body(200, decoder(0), false);
        assert_eq!(r.interim_read(), u32::MAX);
    }
}
