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
//!   closed after the response. That part is the codec's (`h1.rs`, `H1Codec::exchange_done`),
//!   called from the one end of every exchange (`finish.rs`).

use super::exchange::ExchangeId;
use super::upstream::UpPhase;
use super::Worker;
use crate::metrics::bump;

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

/// What the upstream connection itself says when its exchange ends.
#[derive(Clone, Copy)]
pub struct ConnFacts {
    /// The last response allowed the connection to persist.
    pub keep_alive: bool,
    pub peer_closed: bool,
    /// Request bytes still queued for the server.
    pub unsent_bytes: bool,
    /// Bytes arrived beyond the response.
    pub unread_bytes: bool,
    /// The connection belongs to the current configuration's server list.
    pub current_config: bool,
    /// It was serving a request (not connecting, probing or idle).
    pub busy: bool,
}

/// Whether an upstream connection may serve another request: only when it is known to be in
/// step with its server.
pub fn reusable(end: UpstreamEnd, conn: ConnFacts) -> bool {
    end.request_sent
        && end.response_complete
        && !end.body_may_follow
        && conn.keep_alive
        && !conn.peer_closed
        && !conn.unsent_bytes
        && !conn.unread_bytes
        && conn.current_config
        && conn.busy
}

impl Worker {
    /// Ends exchange `id`'s use of upstream connection `ui`, if the connection is still
    /// its own (a failed connection may already be closed and its slot reused).
    pub(super) fn end_upstream_of(&mut self, id: ExchangeId, ui: usize, end: UpstreamEnd) {
        if self
            .upstreams
            .get(ui)
            .is_some_and(|u| u.exchange == Some(id))
        {
            self.end_upstream(ui, end);
        }
    }

    /// Ends upstream connection `ui`'s part in an exchange: pooled when `end` and the
    /// connection's own state say it is in step with its server, closed otherwise.
    pub(super) fn end_upstream(&mut self, ui: usize, end: UpstreamEnd) {
        let Some(u) = self.upstreams.get(ui) else {
            return;
        };
        let conn = ConnFacts {
            keep_alive: u.keep_alive,
            peer_closed: u.peer_closed,
            unsent_bytes: !u.out.is_empty(),
            unread_bytes: u.rbuf.as_ref().is_some_and(|b| !b.is_empty()),
            current_config: u.rt_gen == self.rt_gen,
            busy: u.phase == UpPhase::Busy,
        };
        if reusable(end, conn) {
            self.release_upstream(ui);
        } else {
            if !end.request_sent || end.body_may_follow {
                bump(&self.metrics().upstream_not_reused);
            }
            self.close_upstream(ui);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLEAN_END: UpstreamEnd = UpstreamEnd {
        request_sent: true,
        response_complete: true,
        body_may_follow: false,
    };
    const CLEAN_CONN: ConnFacts = ConnFacts {
        keep_alive: true,
        peer_closed: false,
        unsent_bytes: false,
        unread_bytes: false,
        current_config: true,
        busy: true,
    };

    #[test]
    fn only_a_connection_in_step_with_its_server_is_reused() {
        assert!(reusable(CLEAN_END, CLEAN_CONN));
        let ends = [
            (
                "body not all sent",
                UpstreamEnd {
                    request_sent: false,
                    ..CLEAN_END
                },
            ),
            (
                "response cut",
                UpstreamEnd {
                    response_complete: false,
                    ..CLEAN_END
                },
            ),
            (
                "HEAD announced a body",
                UpstreamEnd {
                    body_may_follow: true,
                    ..CLEAN_END
                },
            ),
            ("abandoned", UpstreamEnd::ABANDONED),
        ];
        for (what, end) in ends {
            assert!(!reusable(end, CLEAN_CONN), "{what}");
        }
        let conns = [
            (
                "Connection: close",
                ConnFacts {
                    keep_alive: false,
                    ..CLEAN_CONN
                },
            ),
            (
                "server closed",
                ConnFacts {
                    peer_closed: true,
                    ..CLEAN_CONN
                },
            ),
            (
                "request bytes unsent",
                ConnFacts {
                    unsent_bytes: true,
                    ..CLEAN_CONN
                },
            ),
            (
                "bytes past the response",
                ConnFacts {
                    unread_bytes: true,
                    ..CLEAN_CONN
                },
            ),
            (
                "old configuration",
                ConnFacts {
                    current_config: false,
                    ..CLEAN_CONN
                },
            ),
            (
                "not serving",
                ConnFacts {
                    busy: false,
                    ..CLEAN_CONN
                },
            ),
        ];
        for (what, conn) in conns {
            assert!(!reusable(CLEAN_END, conn), "{what}");
        }
    }
}
