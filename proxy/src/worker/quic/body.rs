//! Request bodies of HTTP/3 streams to their upstreams: what arrived goes into the
//! upstream connection's outbox while it has room (chunked when the request has no
//! Content-Length), the trailers after the last chunk. A stream whose body waits here
//! stops being read at `STREAM_IN_MAX` (`conn.rs`): QUIC's stream credit then holds the
//! client back, as HTTP/2's window does.

use std::collections::VecDeque;
use std::time::Instant;

use super::codec::H3Codec;
use crate::frang::Violation;
use crate::runtime::Runtime;
use crate::timers::Timers;
use crate::worker::client::codec::Codec;
use crate::worker::client::{ClientId, Clients};
use crate::worker::exchange::{ExchangeId, Exchanges};
use crate::worker::limits;
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

/// Request body bytes on client `ci`'s HTTP/3 stream `stream`: counted by frang, kept for the
/// stream's exchange (passed on by [`pump`]), whose body deadline starts again. Err: the
/// exchange broke a frang limit with them.
pub fn take_data(
    (clients, exchanges, timers): (&mut Clients, &mut Exchanges, &mut Timers),
    rt: &Runtime,
    (ci, stream, now): (ClientId, u32, Instant),
    (data, end_stream): (Vec<u8>, bool),
) -> Result<(), (ExchangeId, Violation)> {
    let Some(Codec::H3(h3)) = clients.get_mut(ci).map(|c| &mut c.codec) else {
        return Ok(());
    };
    let Some(id) = h3.exchange_of(stream) else {
        return Ok(());
    };
    let Some(ex) = exchanges.get_mut(id) else {
        return Ok(());
    };
    let frang = limits::vhost_frang(&rt.config, ex.vhost.unwrap_or(0), ex.location);
    let chunk = ex
        .limits
        .on_body_chunk(now)
        .and_then(|()| frang.map_or(Ok(()), |l| ex.limits.on_body_bytes(data.len() as u64, l)));
    chunk.map_err(|v| (id, v))?;
    let body = &mut h3.stream_mut(stream).body;
    body.data.extend_from_slice(&data);
    body.end |= end_stream;
    exchanges.arm_body_deadline(timers, id, now);
    Ok(())
}
