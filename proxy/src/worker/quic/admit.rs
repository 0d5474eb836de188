//! What becomes of a new QUIC connection (RFC 9000 §8, issue 33 "Under attack"): with more
//! than `h3_retry_above` handshakes in progress on the worker, a client whose address is not
//! validated is sent a Retry (stateless: its token, sealed with the process's key, comes back
//! in the next Initial, from whichever worker gets it); frang's per-address limits; with
//! `h3_max_handshakes` in progress, a refusal (CONNECTION_REFUSED); else a client entry with
//! its HTTP/3 codec. Before validation quinn-proto sends at most three times what the client
//! sent (§8.1): a spoofed source gets no more than that reflected at it.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{send_to, Endpoint, H3Codec};
use crate::metrics::bump;
use crate::metrics_quic::{QuicMetrics, Refusal};
use crate::worker::client::codec::Codec;
use crate::worker::client::{self, ClientId};

/// Decides on `incoming` (socket `i`, with `busy` handshakes in progress on the worker).
pub fn admit(
    ep: &mut Endpoint,
    (c, send): (&mut client::Conns, &mut Vec<u8>),
    incoming: quinn_proto::Incoming,
    (i, (busy, m)): (usize, (usize, &QuicMetrics)),
) -> Option<ClientId> {
    let limits = &c.rt.config.h3;
    let validated = incoming.remote_address_validated();
    if validated {
        bump(&m.validated);
    } else if busy >= limits.retry_above as usize && incoming.may_retry() {
        match ep.endpoint.retry(incoming, send) {
            Ok(t) => {
                bump(&m.retries);
                send_to(&ep.socket, send.get(..t.size).unwrap_or_default(), &t);
            }
            Err(e) => ep.endpoint.ignore(e.into_incoming()),
        }
        return None;
    }
    let peer = incoming.remote_address();
    let refusal = if busy >= limits.max_handshakes as usize {
        Some(Refusal::Handshakes)
    } else if c.rt.frang.on_connect(peer.ip(), Instant::now()).is_err() {
        c.metrics
            .count_close(crate::close_reason::CloseReason::Frang);
        Some(Refusal::Frang)
    } else {
        None
    };
    if let Some(why) = refusal {
        m.refused(why);
        let t = ep.endpoint.refuse(incoming, send);
        send_to(&ep.socket, send.get(..t.size).unwrap_or_default(), &t);
        return None;
    }
    let accepted = ep.endpoint.accept(incoming, Instant::now(), send, None);
    let (handle, conn) = match accepted {
        Ok(pair) => pair,
        Err(e) => {
            c.rt.frang.on_close(peer.ip());
            m.refused(Refusal::Quic);
            if let Some(t) = e.response {
                send_to(&ep.socket, send.get(..t.size).unwrap_or_default(), &t);
            }
            return None;
        }
    };
    let h3_limits = h3::Limits {
        qpack_max_table_capacity: u64::from(limits.qpack_table),
        qpack_blocked_streams: u64::from(limits.qpack_blocked_streams),
        ..h3::Limits::default()
    };
    let most = c.rt.config.max_concurrent_streams;
    let Ok(mut codec) = H3Codec::new(conn, (handle, i, most), h3_limits) else {
        c.rt.frang.on_close(peer.ip());
        return None;
    };
    codec.handshake_deadline = Some(super::budget::handshake_deadline(Instant::now()));
    codec.heads = super::heads::Heads::new(&c.rt.config.frang);
    bump(&m.handshakes);
    m.handshaking.fetch_add(1, Ordering::Relaxed);
    let sock = crate::socket::Socket::Quic(ep.socket.clone());
    Some(client::adopt(c, sock, peer, Codec::H3(Box::new(codec))))
}
