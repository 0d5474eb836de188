//! Request bodies of HTTP/3 streams to their upstreams: what arrived goes into the
//! upstream connection's outbox while it has room (chunked when the request has no
//! Content-Length), the trailers after the last chunk. A stream whose body waits here
//! stops being read at `STREAM_IN_MAX` (`conn.rs`): QUIC's stream credit then holds the
//! client back, as HTTP/2's window does.

use std::collections::VecDeque;

use super::codec::H3Codec;
use crate::worker::client::codec::Codec;
use crate::worker::client::{ClientId, Clients};
use crate::worker::exchange::Exchanges;
use crate::worker::request_body::{push_chunk, push_last_chunk_with};
use crate::worker::token::upstream_token;
use crate::worker::upstream::Upstreams;

/// Passes client `ci`'s waiting request bodies on. True if any moved.
pub fn pump(
    (clients, exchanges, upstreams): (&mut Clients, &mut Exchanges, &mut Upstreams),
    dirty: &mut VecDeque<mio::Token>,
    ci: ClientId,
) -> bool {
    let Some(Codec::H3(h3)) = clients.get_mut(ci).map(|c| &mut c.codec) else {
        return false;
    };
    let h3: &mut H3Codec = h3;
    let mut moved = false;
    for s in h3.streams.values_mut() {
        let Some(id) = s.exchange else {
            continue;
        };
        if s.body.data.is_empty() && !s.body.end {
            continue;
        }
        let Some((request, _, fwd)) = exchanges.get_mut(id).and_then(|ex| ex.body_parts()) else {
            continue;
        };
        if fwd.sending.all_queued() {
            continue;
        }
        let Some(u) = upstreams.get_mut(fwd.up) else {
            continue;
        };
        let chunked = matches!(request.framing(), http1::BodyFraming::Chunked);
        let body = &mut s.body;
        if !body.data.is_empty() && u.out.has_room() {
            let data = std::mem::take(&mut body.data);
            match chunked {
                true => push_chunk(&mut u.out, &data),
                false => u.out.push(&data),
            }
            moved = true;
            dirty.push_back(upstream_token(fwd.up));
        }
        if body.data.is_empty() && body.end {
            if chunked {
                push_last_chunk_with(&mut u.out, &body.trailers);
            }
            fwd.sending.body_done();
            moved = true;
            dirty.push_back(upstream_token(fwd.up));
        }
    }
    moved
}
