//! How a client connection ends: one state, owned by the connection ([`super::Client::end`]),
//! moved only by the transitions below. Every part of the worker that decides or learns
//! something about the end (a refusal, a frang block, a `block_action drop`, the peer's FIN
//! or reset, a failed write) calls one of them; `settle_client` asks [`End::finished`],
//! [`End::must_reset`] and [`End::reason`]. A state only moves forward: nothing returns a
//! connection that is closing or gone to open, and a reset wins over a graceful close.

use crate::close_reason::CloseReason;

/// How far the peer's sending got.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Input {
    Open,
    /// A readiness event reported the FIN (or an error); kept across the hand-over from the
    /// handshake to the transport, which must then read up to it.
    FinReported,
    /// The peer finished sending (EOF, close_notify, a reset, or a write that failed).
    Finished,
}

/// Where the connection's end stands, strongest last.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Ending {
    /// Serving requests.
    Open,
    /// Close once the current response is flushed and no request is in flight.
    AfterFlush,
    /// Nothing more can reach the client, and why: a write failed (`Error`), the client reset
    /// the connection or, on HTTP/2, sent its FIN (`Client`). Its exchanges end at once and
    /// the connection closes when the drive settles.
    Gone(CloseReason),
    /// `block_action ... drop`: gone, and the close is a reset (no close_notify, no FIN).
    Reset(CloseReason),
}

/// A client connection's end: the [`Ending`], how far the peer's sending got, and whether a
/// frang block decided it (the close is then frang's whatever happened next).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct End {
    ending: Ending,
    input: Input,
    blocked: bool,
}

impl Default for End {
    fn default() -> Self {
        End {
            ending: Ending::Open,
            input: Input::Open,
            blocked: false,
        }
    }
}

impl End {
    /// The proxy decided to close after the current response (refusal, `Connection: close`,
    /// a close-delimited body, GOAWAY done). No effect once gone.
    #[inline]
    pub fn close_after_flush(&mut self) {
        if self.ending == Ending::Open {
            self.ending = Ending::AfterFlush;
        }
    }

    /// [`End::close_after_flush`] when `close`.
    #[inline]
    pub fn close_after_flush_if(&mut self, close: bool) {
        if close {
            self.close_after_flush();
        }
    }

    /// Nothing more can reach the client, because of `why`; the first reason stays.
    fn gone(&mut self, why: CloseReason) {
        if matches!(self.ending, Ending::Open | Ending::AfterFlush) {
            self.ending = Ending::Gone(why);
        }
    }

    /// `block_action ... drop`: nothing more is sent, and the close is a reset. A reason the
    /// connection was already gone for stays.
    pub fn drop_with_reset(&mut self, why: CloseReason) {
        self.ending = match self.ending {
            Ending::Open | Ending::AfterFlush => Ending::Reset(why),
            Ending::Gone(first) => Ending::Reset(first),
            reset @ Ending::Reset(_) => reset,
        };
    }

    /// A frang limit blocked a request (or the connection's memory): the close that follows
    /// is frang's, and no request read after it is served.
    #[inline]
    pub fn block(&mut self) {
        self.blocked = true;
    }

    /// A readiness event reported the peer's FIN (or an error).
    #[inline]
    pub fn on_fin_event(&mut self) {
        self.input = self.input.max(Input::FinReported);
    }

    /// A read found the peer's end (EOF or close_notify). HTTP/1.1 may half-close (requests
    /// read before are still answered, RFC 9112 §9.6); HTTP/2 has no half-closed connection
    /// (RFC 9113 §5.1), so there the client is gone.
    pub fn on_peer_end(&mut self, h2: bool) {
        self.input = Input::Finished;
        if h2 {
            self.gone(CloseReason::Client);
        }
    }

    /// A read failed (a reset, a broken record): no answer can reach the client.
    pub fn on_read_error(&mut self) {
        self.input = Input::Finished;
        self.gone(CloseReason::Client);
    }

    /// A write failed: nothing more reaches the client, and the close is an error's (the
    /// reason replaces an earlier one; a reset stays a reset).
    pub fn on_write_error(&mut self) {
        self.input = Input::Finished;
        self.ending = match self.ending {
            Ending::Reset(_) => Ending::Reset(CloseReason::Error),
            _ => Ending::Gone(CloseReason::Error),
        };
    }

    /// The ending reached.
    #[cfg(test)]
    fn ending(&self) -> Ending {
        self.ending
    }

    /// The connection is to close: no new request is read or routed, no tunnel starts.
    #[inline]
    pub fn closing(&self) -> bool {
        self.ending != Ending::Open
    }

    /// Nothing more can reach the client.
    #[inline]
    pub fn is_gone(&self) -> bool {
        matches!(self.ending, Ending::Gone(_) | Ending::Reset(_))
    }

    /// The close is a reset.
    #[inline]
    pub fn must_reset(&self) -> bool {
        matches!(self.ending, Ending::Reset(_))
    }

    /// A write to the client failed.
    #[inline]
    pub fn write_failed(&self) -> bool {
        matches!(
            self.ending,
            Ending::Gone(CloseReason::Error) | Ending::Reset(CloseReason::Error)
        )
    }

    /// A frang limit blocked this connection.
    #[inline]
    pub fn blocked(&self) -> bool {
        self.blocked
    }

    /// The peer finished sending.
    #[inline]
    pub fn peer_closed(&self) -> bool {
        self.input == Input::Finished
    }

    /// A readiness event reported the peer's FIN (or the peer finished).
    #[inline]
    pub fn fin_reported(&self) -> bool {
        self.input >= Input::FinReported
    }

    /// Whether reading the socket can still bring a request.
    #[inline]
    pub fn reads(&self) -> bool {
        !self.peer_closed() && !self.closing()
    }

    /// Whether the connection is over: gone, or, between requests with nothing left to
    /// send, closing or closed by the peer (a close-delimited body still streams after its
    /// head was flushed, so `between_requests` waits for it).
    #[inline]
    pub fn finished(&self, between_requests: bool, flushed: bool) -> bool {
        self.is_gone() || (between_requests && flushed && (self.closing() || self.peer_closed()))
    }

    /// Why the connection closes when it is [`End::finished`].
    pub fn reason(&self) -> CloseReason {
        let gone = match self.ending {
            Ending::Gone(why) | Ending::Reset(why) => Some(why),
            Ending::Open | Ending::AfterFlush => None,
        };
        CloseReason::after_response(self.blocked, gone, self.closing())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CloseReason::{Client, Error, Frang, Server};

    #[derive(Clone, Copy, Debug)]
    enum Step {
        CloseAfterFlush,
        Drop(CloseReason),
        Block,
        FinEvent,
        PeerEnd { h2: bool },
        ReadError,
        WriteError,
    }
    use Step::*;

    fn apply(steps: &[Step]) -> End {
        let mut end = End::default();
        for step in steps {
            match *step {
                CloseAfterFlush => end.close_after_flush(),
                Drop(why) => end.drop_with_reset(why),
                Block => end.block(),
                FinEvent => end.on_fin_event(),
                PeerEnd { h2 } => end.on_peer_end(h2),
                ReadError => end.on_read_error(),
                WriteError => end.on_write_error(),
            }
        }
        end
    }

    /// Steps, then the ending reached, whether the peer closed, and the close's reason.
    const TABLE: &[(&[Step], Ending, bool, CloseReason)] = &[
        (&[], Ending::Open, false, Client),
        (&[CloseAfterFlush], Ending::AfterFlush, false, Server),
        (
            &[CloseAfterFlush, CloseAfterFlush],
            Ending::AfterFlush,
            false,
            Server,
        ),
        (&[FinEvent], Ending::Open, false, Client),
        // HTTP/1.1 half-closes; HTTP/2's FIN ends the connection.
        (&[PeerEnd { h2: false }], Ending::Open, true, Client),
        (&[PeerEnd { h2: true }], Ending::Gone(Client), true, Client),
        (&[ReadError], Ending::Gone(Client), true, Client),
        (
            &[CloseAfterFlush, ReadError],
            Ending::Gone(Client),
            true,
            Client,
        ),
        // Never from gone back to closing or open.
        (
            &[ReadError, CloseAfterFlush],
            Ending::Gone(Client),
            true,
            Client,
        ),
        (
            &[WriteError, PeerEnd { h2: false }],
            Ending::Gone(Error),
            true,
            Error,
        ),
        // A failed write's reason replaces the peer's.
        (&[ReadError, WriteError], Ending::Gone(Error), true, Error),
        (&[WriteError, ReadError], Ending::Gone(Error), true, Error),
        // A reset wins over a graceful close, keeps the first reason gone for, and
        // stays a reset.
        (&[Drop(Server)], Ending::Reset(Server), false, Server),
        (
            &[CloseAfterFlush, Drop(Frang)],
            Ending::Reset(Frang),
            false,
            Frang,
        ),
        (
            &[ReadError, Drop(Frang)],
            Ending::Reset(Client),
            true,
            Client,
        ),
        (
            &[Drop(Server), Drop(Frang)],
            Ending::Reset(Server),
            false,
            Server,
        ),
        (
            &[Drop(Server), CloseAfterFlush],
            Ending::Reset(Server),
            false,
            Server,
        ),
        (
            &[Drop(Server), ReadError],
            Ending::Reset(Server),
            true,
            Server,
        ),
        (
            &[Drop(Server), WriteError],
            Ending::Reset(Error),
            true,
            Error,
        ),
        // A frang block makes the close frang's whatever follows.
        (&[Block], Ending::Open, false, Frang),
        (&[Block, CloseAfterFlush], Ending::AfterFlush, false, Frang),
        (&[Block, WriteError], Ending::Gone(Error), true, Frang),
        (&[Block, Drop(Frang)], Ending::Reset(Frang), false, Frang),
    ];

    #[test]
    fn transitions() {
        for (steps, ending, peer_closed, reason) in TABLE {
            let end = apply(steps);
            assert_eq!(end.ending(), *ending, "{steps:?}");
            assert_eq!(end.peer_closed(), *peer_closed, "{steps:?}");
            assert_eq!(end.reason(), *reason, "{steps:?}");
            assert_eq!(end.closing(), *ending != Ending::Open, "{steps:?}");
            assert_eq!(
                end.must_reset(),
                matches!(ending, Ending::Reset(_)),
                "{steps:?}"
            );
            assert_eq!(end.reads(), !peer_closed && !end.closing(), "{steps:?}");
        }
    }

    #[test]
    fn fin_report_survives_until_the_peer_closes() {
        assert!(!apply(&[]).fin_reported());
        assert!(apply(&[FinEvent]).fin_reported());
        assert!(apply(&[FinEvent, PeerEnd { h2: false }]).fin_reported());
        assert!(apply(&[FinEvent, FinEvent]).fin_reported());
    }

    #[test]
    fn finished_waits_for_the_response_unless_gone() {
        let closing = apply(&[CloseAfterFlush]);
        assert!(!closing.finished(false, true));
        assert!(!closing.finished(true, false));
        assert!(closing.finished(true, true));
        let half = apply(&[PeerEnd { h2: false }]);
        assert!(!half.finished(false, true));
        assert!(half.finished(true, true));
        assert!(!apply(&[]).finished(true, true));
        assert!(!apply(&[Block]).finished(true, true));
        for gone in [
            apply(&[ReadError]),
            apply(&[Drop(Server)]),
            apply(&[WriteError]),
        ] {
            assert!(gone.finished(false, false));
        }
        assert!(apply(&[WriteError]).write_failed());
        assert!(!apply(&[ReadError]).write_failed());
    }
}
