//! Why a client connection ended, as counted in `ktls_proxy_connections_closed_total`.
//!
//! Every path that closes a client connection names one reason, so that a gate run (or an
//! operator) can tell a storm of handshake timeouts from clients leaving, keep-alive
//! expiry, frang blocks and errors without reading logs.

/// The reason a client connection was closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The client ended it: EOF, close_notify or a reset, between or during requests.
    Client,
    /// Idle between requests for `keepalive_timeout`.
    IdleTimeout,
    /// The TLS handshake did not finish in time (see `handshake_deadline`).
    HandshakeTimeout,
    /// The TLS handshake failed: a protocol error, an alert, or the client went away.
    HandshakeError,
    /// A frang limit: refused at accept or after the handshake, a head or body deadline, or a
    /// blocked request (answered with its status or dropped, per `block_action attack`).
    Frang,
    /// The proxy closed after a response: `Connection: close`, or an error answer (4xx/5xx)
    /// that ends the connection.
    Server,
    /// A write to the client failed, the upstream broke mid-response, a body being
    /// discarded stopped arriving, or serving the connection panicked.
    Error,
    /// A graceful stop closed it while idle.
    Shutdown,
}

impl CloseReason {
    /// Every reason, in the order of the counters.
    pub const ALL: [CloseReason; 8] = [
        CloseReason::Client,
        CloseReason::IdleTimeout,
        CloseReason::HandshakeTimeout,
        CloseReason::HandshakeError,
        CloseReason::Frang,
        CloseReason::Server,
        CloseReason::Error,
        CloseReason::Shutdown,
    ];

    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::Client => "client",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::HandshakeTimeout => "handshake_timeout",
            CloseReason::HandshakeError => "handshake_error",
            CloseReason::Frang => "frang",
            CloseReason::Server => "server",
            CloseReason::Error => "error",
            CloseReason::Shutdown => "shutdown",
        }
    }

    /// The index of this reason's counter.
    pub fn index(self) -> usize {
        self as usize
    }

    /// A connection that finished after its last response: a frang block ended it whatever
    /// happened to the answer, else the reason it became unreachable (`gone`: a failed
    /// write is an error, a reset or an HTTP/2 FIN the client's), else a close the proxy
    /// asked for (`close_after_flush`) is the server's, else the client left.
    pub fn after_response(
        frang_blocked: bool,
        gone: Option<CloseReason>,
        close_after_flush: bool,
    ) -> CloseReason {
        if frang_blocked {
            CloseReason::Frang
        } else if let Some(why) = gone {
            why
        } else if close_after_flush {
            CloseReason::Server
        } else {
            CloseReason::Client
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_index_and_label() {
        for (i, r) in CloseReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
        let mut labels: Vec<&str> = CloseReason::ALL.iter().map(|r| r.as_str()).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), CloseReason::ALL.len());
    }

    #[test]
    fn after_response_prefers_frang_then_gone_then_server() {
        let error = Some(CloseReason::Error);
        assert_eq!(
            CloseReason::after_response(true, error, true),
            CloseReason::Frang
        );
        assert_eq!(
            CloseReason::after_response(false, error, true),
            CloseReason::Error
        );
        assert_eq!(
            CloseReason::after_response(false, Some(CloseReason::Client), true),
            CloseReason::Client
        );
        assert_eq!(
            CloseReason::after_response(false, None, true),
            CloseReason::Server
        );
        assert_eq!(
            CloseReason::after_response(false, None, false),
            CloseReason::Client
        );
    }
}
