//! The one entry of a request, whatever protocol carried it: the HTTP/1.1 codec's requests
//! (drive.rs `try_request`) and the streams' of HTTP/2 and HTTP/3 (`route.rs`
//! `stream_request`) come here as the neutral `Request`. What differs by protocol comes as
//! data ([`Arrival`]: the stream, the keep-alive decision, the codec's `begin`), not as a
//! second copy of the steps.
//!
//! The order is one for every protocol: the cache tier's hop rule, then frang's request
//! count, and only a counted request becomes an exchange. Counting first means a request
//! over `request_rate` costs nothing but its refusal (no exchange, no access-log record, no
//! body deadline), and a request that can never become an exchange (a stream the codec could
//! not convert, `h2_serve.rs` `unservable`) is counted at the same point as one that can: one
//! verdict per request, whatever the protocol (issue 30, item 7).

use std::net::SocketAddr;
use std::time::Instant;

use super::super::client::ClientId;
use super::super::request::Request;
use super::super::tier_hop::honour_hop;
use super::{ExchangeId, Exchanges, NewExchange};
use crate::access_log::RequestRecord as AccessRecord;
use crate::fingerprint::{Ja4, Tft};
use crate::frang::{RequestLimits, Violation};
use crate::runtime::Runtime;
use crate::timers::Timers;

/// Who sent a request and how its protocol carries it.
pub struct Arrival {
    pub client: ClientId,
    /// The client connection's serial (`Client::id`): a reused slot is another client.
    pub client_id: u64,
    pub peer: SocketAddr,
    /// The connection's TLS fingerprints, for the access log.
    pub tls: (Option<Tft>, Option<Ja4>),
    /// The request carries the cache tier's hop field and its connection is a tier peer's
    /// (`tier_hop::from_peer`).
    pub from_peer: bool,
    /// The stream the request came on (HTTP/1.1: 0, its connection carries one at a time).
    pub stream: u32,
    /// Whether the connection stays open after the answer, as the protocol decides it:
    /// HTTP/1.1 from the request, `keepalive_timeout` and a graceful stop; a stream's
    /// connection outlives the stream (its close is the codec's GOAWAY).
    pub keep_alive: bool,
}

/// Admits `request` as an exchange, or refuses it for frang's request count (the caller
/// refuses it where a request without an exchange is refused on its protocol). On
/// admission the codec's `begin` learns the exchange and the body's deadline is armed; the
/// caller routes it. Inlined into its one caller: the request moves by value, and each call
/// it crosses is a copy of it (`benches/ab/request_cost.sh`, "copies").
#[inline]
pub fn admit(
    (rt, exchanges, timers): (&Runtime, &mut Exchanges, &mut Timers),
    arrival: Arrival,
    mut request: Request,
    now: Instant,
    begin: impl FnOnce(ExchangeId),
) -> Result<ExchangeId, Violation> {
    // A cache tier peer's request was counted by the node its client reached; counted
    // again here, every peer's misses would add up to one client's rate. The rule is the
    // connection's (a peer's address on this node's `self` listener), not the protocol's.
    let hop = honour_hop(arrival.from_peer, &mut request);
    if !hop {
        rt.frang.on_request(arrival.peer.ip(), now)?;
    }
    let log = rt
        .config
        .access_log
        .enabled()
        .then(|| access_record(arrival.peer, arrival.tls, &request));
    let has_body = request.has_body();
    let id = exchanges.insert(NewExchange {
        client: arrival.client,
        client_id: arrival.client_id,
        stream: arrival.stream,
        limits: RequestLimits::new(&rt.config.frang, has_body, now),
        request,
        keep_alive: arrival.keep_alive,
        log,
    });
    if let Some(ex) = exchanges.get_mut(id).filter(|_| hop) {
        ex.tier_hop = true;
    }
    begin(id);
    // The body's first piece may never come: its deadline runs from now.
    if has_body {
        exchanges.arm_body_deadline(timers, id, now);
    }
    Ok(id)
}

/// What the access log needs of a request, taken while its head is at hand.
fn access_record(
    peer: SocketAddr,
    (tft, ja4): (Option<Tft>, Option<Ja4>),
    request: &Request,
) -> Box<AccessRecord> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Box::new(AccessRecord {
        client: peer.ip(),
        tft,
        ja4,
        tfh: super::super::fingerprint_hook::tfh_of(request),
        method: text(request.method_bytes()),
        uri: text(request.target()),
        version: request.version_label(),
        referer: request.header("referer").map(text),
        user_agent: request.header("user-agent").map(text),
        started: Instant::now(),
        upstream: None,
        cache: None,
    })
}
