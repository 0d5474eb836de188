//! The one decision whether an upstream connection may serve another request
//! ([`reusable`]): only when it is known to be in step with its server. The whole request
//! went out (head and body), the whole response came back, the server allowed persistence,
//! no byte arrived beyond the response, and no body may still follow (a response that has
//! no body by definition but announced one: `lifecycle::ResponseFraming`). Anything else
//! closes it: a server still expecting body bytes would read the next client's request as
//! the rest of this body, and late body bytes would be read as the next client's response.
//! Every way a connection leaves its use goes through it: an exchange's end
//! (`UpstreamEnd` from the exchange), a connection given back unused, a probe that
//! connected ([`UpstreamEnd::UNUSED`]).

use super::{UpPhase, Upstream};

/// What is known about an upstream connection when its exchange ends.
#[derive(Clone, Copy)]
pub struct UpstreamEnd {
    /// Every byte of the request (head and body) was queued to the server.
    pub request_sent: bool,
    /// The response was read to the end of its framing.
    pub response_complete: bool,
    /// More bytes may follow the response: one without a body by definition announced one
    /// (`lifecycle::ResponseFraming::body_may_follow`; a faulty server may send it anyway,
    /// late).
    pub body_may_follow: bool,
}

impl UpstreamEnd {
    /// An exchange abandoned mid-way: nothing about the connection's state is known.
    pub const ABANDONED: UpstreamEnd = UpstreamEnd {
        request_sent: false,
        response_complete: false,
        body_may_follow: true,
    };

    /// No request was sent on the connection (an exchange whose client left before, or a
    /// probe): no request is owed to the server and no response to the proxy.
    pub const UNUSED: UpstreamEnd = UpstreamEnd {
        request_sent: true,
        response_complete: true,
        body_may_follow: false,
    };
}

/// What the upstream connection itself says when its use ends.
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
    /// Connected, and serving or free to serve: its exchange's (`Busy`), pooled (`Idle`), or
    /// a probe whose connect completed (`Probe`, which only a completed connect gives back);
    /// not still connecting, checking health or tunnelling.
    pub ready: bool,
}

impl ConnFacts {
    /// The facts of `u` under the configuration of generation `rt_gen`.
    pub fn of(u: &Upstream, rt_gen: u64) -> ConnFacts {
        ConnFacts {
            keep_alive: u.keep_alive,
            peer_closed: u.peer_closed,
            unsent_bytes: !u.out.is_empty(),
            unread_bytes: u.rbuf.as_ref().is_some_and(|b| !b.is_empty()),
            current_config: u.rt_gen == rt_gen,
            ready: matches!(u.phase, UpPhase::Busy | UpPhase::Idle | UpPhase::Probe),
        }
    }
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
        && conn.ready
}

/// An exchange that ended in step with its server, for tests here and in `lifecycle.rs`.
#[cfg(test)]
pub(in crate::worker) const CLEAN_END: UpstreamEnd = UpstreamEnd {
    request_sent: true,
    response_complete: true,
    body_may_follow: false,
};

/// A connection that may carry another request, for the same tests.
#[cfg(test)]
pub(in crate::worker) const CLEAN_CONN: ConnFacts = ConnFacts {
    keep_alive: true,
    peer_closed: false,
    unsent_bytes: false,
    unread_bytes: false,
    current_config: true,
    ready: true,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_connection_in_step_with_its_server_is_reused() {
        assert!(reusable(CLEAN_END, CLEAN_CONN));
        // A connection given back unused (its client left before the request went out, or a
        // probe that connected) is in step by the same rule.
        assert!(reusable(UpstreamEnd::UNUSED, CLEAN_CONN));
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
                "a bodiless response announced a body",
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
                "still connecting, checking health or tunnelling",
                ConnFacts {
                    ready: false,
                    ..CLEAN_CONN
                },
            ),
        ];
        for (what, conn) in conns {
            assert!(!reusable(CLEAN_END, conn), "{what}");
        }
    }
}
