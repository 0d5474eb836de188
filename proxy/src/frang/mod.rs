//! Tempesta's frang limits: per-client rate limits shared by all worker
//! threads ([`Frang`]), the head-reading counters and timeout of a connection
//! ([`ConnLimits`]), the body counters and timeout of a request
//! ([`RequestLimits`]) and per-request checks against a vhost's or location's
//! limits ([`check_request`], [`check_trailers`]).
//!
//! No sockets here: the worker calls these at the points of a connection's
//! life named in each function's documentation and closes the connection
//! (replying `Violation::status` where there is an HTTP exchange) on `Err`.
//!
//! `http_header_cnt` and `http_hdr_len` are enforced by the HTTP/1.1 parser
//! limits (see `runtime.rs`), not here.

mod body;
mod clients;
pub(crate) mod clock;
mod conn;
mod fleet;
mod request;
pub(crate) mod window;

#[cfg(test)]
mod clients_tests;
#[cfg(test)]
pub(crate) mod fleet_tests;
#[cfg(test)]
mod request_tests;

pub use body::RequestLimits;
pub use clients::{Frang, DEFAULT_CLIENT_LRU_SIZE};
pub use clock::FleetClock;
pub use conn::ConnLimits;
pub use fleet::{redis_up, set_redis_up, FleetDelta, FleetSlots, FleetTotal, OutgoingBlock};
pub use request::{check_request, check_trailers, method_allowed, RequestFacts};
pub use window::FRANG_FREQ;

use std::fmt;

/// HTTP status Tempesta replies with when frang blocks a request
/// (`block_action attack reply`).
pub const FRANG_BLOCK_STATUS: u16 = 403;

/// A frang limit was exceeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The directive that was exceeded, e.g. `"request_rate"`; `"ip_block"`
    /// when the client is already blocked.
    pub limit: &'static str,
    /// What happened, for the log (`"21 > 20"`).
    pub detail: String,
    /// Status for an HTTP reply: 403 for frang blocks, 400 for a request
    /// HTTP/1.1 itself forbids. Connection- and TLS-level violations have
    /// no HTTP exchange: close (reset) the connection without replying.
    pub status: u16,
}

impl Violation {
    pub(crate) fn block(limit: &'static str, detail: impl Into<String>) -> Violation {
        Violation {
            limit,
            detail: detail.into(),
            status: FRANG_BLOCK_STATUS,
        }
    }

    pub(crate) fn exceeded(
        limit: &'static str,
        value: impl fmt::Display,
        max: impl fmt::Display,
    ) -> Violation {
        Violation::block(limit, format!("{value} > {max}"))
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "frang: {} exceeded: {}", self.limit, self.detail)
    }
}

impl std::error::Error for Violation {}
