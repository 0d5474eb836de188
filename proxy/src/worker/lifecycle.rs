//! The one place that decides, when an exchange ends, what happens to its two connections:
//! whether the upstream connection may serve another request, and whether the client
//! connection may send another one. Both follow from explicit facts, never from the path
//! that ended the exchange, so no way of ending an exchange can leave a peer out of step:
//!
//! - An upstream connection is reused only if the whole request went out (head and body),
//!   the whole response came back, the server allowed persistence, no byte arrived beyond
//!   the response, and no body may still follow (a response to HEAD that announced one).
//!   Anything else closes it: a server still expecting body bytes would read the next
//!   client's request as the rest of this body.
//! - A client connection whose request body was not completely read when the response was
//!   queued first discards the rest of that body (a bounded amount), so that its remaining
//!   bytes are never parsed as requests; past the bound, or if it is closing anyway, it is
//!   closed after the response.

use http1::{BodyDecoder, RequestHead};

use super::exchange::ReqState;
use super::upstream::UpPhase;
use super::{client_token, Worker};
use crate::metrics::bump;

/// Most request-body bytes discarded after an early answer before the connection is closed
/// instead: a client that keeps sending is not worth a reused connection.
pub const DRAIN_MAX_BYTES: u64 = 1024 * 1024;

/// The rest of a request body being discarded after its exchange ended.
pub struct Drain {
    decoder: BodyDecoder,
    discarded: u64,
}

/// What is known about an upstream connection when its exchange ends.
#[derive(Clone, Copy)]
pub struct UpstreamEnd {
    /// Every byte of the request (head and body) was queued to the server.
    pub request_sent: bool,
    /// The response was read to the end of its framing.
    pub response_complete: bool,
    /// More bytes may follow the response: a response to HEAD that announced a body (a
    /// faulty server may send it anyway, late).
    pub body_may_follow: bool,
}

impl UpstreamEnd {
    /// An exchange abandoned mid-way: nothing about the connection's state is known.
    pub const ABANDONED: UpstreamEnd = UpstreamEnd {
        request_sent: false,
        response_complete: false,
        body_may_follow: true,
    };
}

impl Worker {
    /// Ends upstream connection `ui`'s part in an exchange: pooled when `end` and the
    /// connection's own state say it is in step with its server, closed otherwise.
    pub(super) fn end_upstream(&mut self, ui: usize, end: UpstreamEnd) {
        let Some(u) = self.upstreams.get(ui) else {
            return;
        };
        let reusable = end.request_sent
            && end.response_complete
            && !end.body_may_follow
            && u.keep_alive
            && !u.peer_closed
            && u.out.is_empty()
            && u.rbuf.as_ref().is_none_or(crate::buf::Buf::is_empty)
            && u.rt_gen == self.rt_gen
            && u.phase == UpPhase::Busy;
        if reusable {
            self.release_upstream(ui);
        } else {
            if !end.request_sent || end.body_may_follow {
                bump(&self.metrics().upstream_not_reused);
            }
            self.close_upstream(ui);
        }
    }

    /// The response to client `ci`'s current request is queued. `body` is the request
    /// body's decoder when the body was not completely read (None when it was, or when the
    /// request had none); `close` says the connection ends after this response anyway.
    pub(super) fn continue_client(&mut self, ci: usize, body: Option<BodyDecoder>, close: bool) {
        let idle = self.idle_timeout();
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        c.limits.reset_for_next_request();
        c.close_after_flush |= close;
        c.req = match body {
            Some(decoder) if !decoder.is_done() && !c.close_after_flush => ReqState::Drain(Drain {
                decoder,
                discarded: 0,
            }),
            Some(decoder) if !decoder.is_done() => {
                // Closing anyway: nothing more of this connection is read.
                c.close_after_flush = true;
                ReqState::Head
            }
            _ => ReqState::Head,
        };
        self.arm_client_timer(ci, idle);
        self.dirty.push_back(client_token(ci));
    }

    /// The proxy answered client `ci`'s request itself (PURGE, a cache hit, only-if-cached):
    /// a body the request announced is discarded before the next request is read.
    pub(super) fn answered_locally(&mut self, ci: usize, head: &RequestHead, keep_alive: bool) {
        let body = head
            .framing()
            .has_body()
            .then(|| BodyDecoder::new(head.framing(), &self.rt.limits));
        self.continue_client(ci, body, !keep_alive);
    }

    /// Discards what has arrived of a request body whose exchange already ended. True if
    /// anything changed.
    pub(super) fn discard_body(&mut self, ci: usize) -> bool {
        let Some(c) = self.clients.get_mut(ci) else {
            return false;
        };
        let ReqState::Drain(drain) = &mut c.req else {
            return false;
        };
        let Some(rbuf) = c.rbuf.as_mut() else {
            if c.peer_closed {
                c.req = ReqState::Head;
                c.close_after_flush = true;
                return true;
            }
            return false;
        };
        let mut moved = false;
        while !rbuf.is_empty() && !drain.decoder.is_done() {
            match drain.decoder.decode(rbuf.bytes()) {
                Ok(step) if step.consumed > 0 || step.done => {
                    drain.discarded += step.consumed as u64;
                    rbuf.consume(step.consumed);
                    moved = true;
                }
                Ok(_) => break,
                Err(_) => {
                    // A malformed rest of a body: the connection is out of step.
                    drain.discarded = u64::MAX;
                    break;
                }
            }
        }
        if drain.decoder.is_done() {
            c.req = ReqState::Head;
            return true;
        }
        if drain.discarded > DRAIN_MAX_BYTES || (c.peer_closed && rbuf.is_empty()) {
            c.req = ReqState::Head;
            c.close_after_flush = true;
            return true;
        }
        moved
    }
}
