//! How a request body is written upstream. A Content-Length body goes as received. A
//! chunked body is re-encoded: its data in chunks of our own framing, then the trailer
//! fields the proxy lets through. Chunk extensions are dropped, and so is every trailer field
//! that frames, routes or authenticates a message or that the proxy itself manages (`Host`,
//! `Content-Length`, `X-Forwarded-For`, ...): a client must not be able to smuggle in through
//! the trailer what the proxy refused or rewrote in the head.

use std::collections::VecDeque;

use http1::BodyDecoder;
use mio::Token;

use super::client::{ClientId, Clients};
use super::exchange::{ExchangeId, Exchanges};
use super::limits::vhost_frang;
use super::token::upstream_token;
use super::upstream::Upstreams;
use crate::frang::check_trailers;
use crate::outbox::Outbox;

/// Trailer fields never forwarded (RFC 9110 §6.5.1 lists what a sender must not put in a
/// trailer; the rest are fields the proxy adds or edits in the head).
const DROPPED_TRAILERS: &[&str] = &[
    "authorization",
    "cache-control",
    "connection",
    "content-encoding",
    "content-length",
    "content-range",
    "content-type",
    "cookie",
    "expect",
    "forwarded",
    "host",
    "keep-alive",
    "max-forwards",
    "proxy-authorization",
    "proxy-connection",
    "range",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "via",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
];

/// Whether a trailer field named `name` may reach the upstream.
pub fn trailer_forwardable(name: &[u8]) -> bool {
    let dropped = DROPPED_TRAILERS
        .iter()
        .any(|d| d.as_bytes().eq_ignore_ascii_case(name));
    let conditional = name.len() > 3 && name[..3].eq_ignore_ascii_case(b"if-");
    !dropped && !conditional
}

/// The field lines (`name: value\r\n`) of a validated trailer section or head, as (name,
/// whole line) pairs.
pub fn field_lines(section: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    section.split_inclusive(|&b| b == b'\n').filter_map(|line| {
        let colon = line.iter().position(|&b| b == b':')?;
        Some((&line[..colon], line))
    })
}

/// Queues one run of chunked-body data as a chunk of our own framing.
pub fn push_chunk(out: &mut Outbox, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    out.push(http1::ChunkSize::new(data.len()).as_bytes());
    out.push(data);
    out.push(http1::CHUNK_END);
}

/// Queues the last chunk and the forwardable fields of `trailer` (a validated section).
pub fn push_last_chunk(out: &mut Outbox, trailer: &[u8]) {
    out.push(http1::LAST_CHUNK);
    for (name, line) in field_lines(trailer) {
        if trailer_forwardable(name) {
            out.push(line);
        }
    }
    out.push(http1::TRAILER_END);
}

/// The last chunk of a body that came over HTTP/2 or HTTP/3, with its trailer `fields`
/// (as [`push_last_chunk`] keeps them).
pub fn push_last_chunk_with(out: &mut Outbox, fields: &[h2::Field]) {
    let mut trailer = Vec::new();
    for f in fields {
        http1::write_field(&mut trailer, &f.name, &f.value);
    }
    push_last_chunk(out, &trailer);
}

/// What a pass over the client's body bytes found ([`pump`]), and what the caller does.
pub(super) enum Pumped {
    /// Nothing more to do; true if anything changed.
    Moved(bool),
    /// Malformed framing: the request is refused (`parse_refused`).
    Invalid(http1::ParseError),
    /// A frang limit on the body or its trailer: the request is refused as a block.
    Violation(crate::frang::Violation),
    /// The client closed before the body ended: its connection closes.
    Truncated,
}

/// The parts passing a request body touches: the client it comes from, its exchange, the
/// upstream connection it goes to (and that connection's place among the connections to
/// drive again).
pub(super) struct BodyParts<'a> {
    pub clients: &'a mut Clients,
    pub exchanges: &'a mut Exchanges,
    pub upstreams: &'a mut Upstreams,
    pub dirty: &'a mut VecDeque<Token>,
}

/// Passes exchange `id`'s request body from client `ci` to its upstream connection, as far
/// as the upstream has room (the body's frang limits from `config`).
pub(super) fn pump(
    parts: BodyParts<'_>,
    config: &config::Config,
    (ci, id): (ClientId, ExchangeId),
) -> Pumped {
    let (Some(c), Some(ex)) = (parts.clients.get_mut(ci), parts.exchanges.get_mut(id)) else {
        return Pumped::Moved(false);
    };
    let body_limits = vhost_frang(config, ex.vhost.unwrap_or(0), ex.location);
    let Some((request, limits, fwd)) = ex.body_parts() else {
        return Pumped::Moved(false);
    };
    if fwd.sending.all_queued() {
        return Pumped::Moved(false);
    }
    let Some(u) = parts.upstreams.get_mut(fwd.up) else {
        return Pumped::Moved(false);
    };
    let Some(rbuf) = c.rbuf.as_mut() else {
        return Pumped::Moved(false);
    };
    let mut moved = false;
    let mut data = 0u64;
    while !rbuf.is_empty() && u.out.has_room() {
        let Some(decoder) = fwd.sending.body_mut() else {
            break;
        };
        let step = match decoder.decode(rbuf.bytes()) {
            Ok(step) => step,
            Err(e) => return Pumped::Invalid(e),
        };
        if step.consumed == 0 && !step.done {
            break;
        }
        let bytes = rbuf.bytes();
        match decoder {
            BodyDecoder::Chunked(chunked) => {
                push_chunk(&mut u.out, bytes.get(step.data.clone()).unwrap_or(&[]));
                if step.done {
                    let trailer = chunked.trailer_section();
                    let split = body_limits.map(|l| {
                        check_trailers(
                            l,
                            request.field_names(),
                            field_lines(trailer).map(|(name, _)| name),
                        )
                    });
                    match split {
                        Some(Err(v)) => return Pumped::Violation(v),
                        _ => push_last_chunk(&mut u.out, trailer),
                    }
                }
            }
            _ => u.out.push(bytes.get(..step.consumed).unwrap_or(&[])),
        }
        rbuf.consume(step.consumed);
        data += step.data.len() as u64;
        moved = true;
        if step.done {
            fwd.sending.body_done();
        }
    }
    if let Some(Err(v)) = body_limits.map(|l| limits.on_body_bytes(data, l)) {
        return Pumped::Violation(v);
    }
    if moved {
        parts.dirty.push_back(upstream_token(fwd.up));
    }
    let truncated = c.end.peer_closed()
        && !fwd.sending.all_queued()
        && c.rbuf.as_ref().is_none_or(|b| b.is_empty());
    if truncated {
        return Pumped::Truncated;
    }
    Pumped::Moved(moved)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(out: &mut Outbox) -> Vec<u8> {
        let mut bytes = Vec::new();
        out.copy_front(out.len(), &mut bytes);
        bytes
    }

    #[test]
    fn managed_and_framing_fields_never_leave_in_a_trailer() {
        let mut out = Outbox::default();
        push_chunk(&mut out, b"hello");
        push_last_chunk(
            &mut out,
            b"Host: evil\r\nX-Checksum: 1\r\ncontent-length: 0\r\nIf-Match: *\r\nX-Forwarded-For: 6.6.6.6\r\n",
        );
        assert_eq!(
            drain(&mut out),
            b"5\r\nhello\r\n0\r\nX-Checksum: 1\r\n\r\n".to_vec()
        );
    }
}
