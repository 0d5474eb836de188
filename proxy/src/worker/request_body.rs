//! How a request body is written upstream. A Content-Length body goes as received. A
//! chunked body is re-encoded: its data in chunks of our own framing, then the trailer
//! fields the proxy lets through. Chunk extensions are dropped, and so is every trailer field
//! that frames, routes or authenticates a message or that the proxy itself manages (`Host`,
//! `Content-Length`, `X-Forwarded-For`, ...): a client must not be able to smuggle in through
//! the trailer what the proxy refused or rewrote in the head.

use std::io::Write as _;

use http1::BodyDecoder;

use super::exchange::{vhost_frang, ReqState};
use super::{upstream_token, Worker};
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

/// The field names of a validated request head (its first line is the request line).
pub fn head_field_names(head: &[u8]) -> impl Iterator<Item = &[u8]> + Clone {
    head.split(|&b| b == b'\n')
        .skip(1)
        .take_while(|line| !line.is_empty() && *line != b"\r")
        .filter_map(|line| line.iter().position(|&b| b == b':').map(|c| &line[..c]))
}

/// Queues one run of chunked-body data as a chunk of our own framing.
pub fn push_chunk(out: &mut Outbox, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    let mut size = [0u8; 20];
    let mut cursor = std::io::Cursor::new(&mut size[..]);
    // A usize in hexadecimal fits 16 digits plus CRLF.
    let _ = write!(cursor, "{:x}\r\n", data.len());
    let len = cursor.position() as usize;
    out.push(size.get(..len).unwrap_or(&[]));
    out.push(data);
    out.push(b"\r\n");
}

/// Queues the last chunk and the forwardable fields of `trailer` (a validated section).
pub fn push_last_chunk(out: &mut Outbox, trailer: &[u8]) {
    out.push(b"0\r\n");
    for (name, line) in field_lines(trailer) {
        if trailer_forwardable(name) {
            out.push(line);
        }
    }
    out.push(b"\r\n");
}

impl Worker {
    /// Passes request body bytes from the client to the upstream, as far as it has room.
    pub(super) fn pump_request_body(&mut self, ci: usize) -> bool {
        let Worker {
            clients,
            upstreams,
            dirty,
            rt,
            ..
        } = self;
        let Some(c) = clients.get_mut(ci) else {
            return false;
        };
        let ReqState::Upstream(ex) = &mut c.req else {
            return false;
        };
        let body_limits = vhost_frang(&rt.config, ex.vhost, ex.location);
        if ex.req_body_done {
            return false;
        }
        let Some(u) = upstreams.get_mut(ex.up) else {
            return false;
        };
        let Some(rbuf) = c.rbuf.as_mut() else {
            return false;
        };
        let mut moved = false;
        let mut data = 0u64;
        let mut trailer_violation = None;
        while !rbuf.is_empty() && u.out.has_room() && !ex.req_body_done {
            match ex.req_body.decode(rbuf.bytes()) {
                Ok(step) => {
                    if step.consumed == 0 && !step.done {
                        break;
                    }
                    let bytes = rbuf.bytes();
                    match &ex.req_body {
                        BodyDecoder::Chunked(chunked) => {
                            push_chunk(&mut u.out, bytes.get(step.data.clone()).unwrap_or(&[]));
                            if step.done {
                                let trailer = chunked.trailer_section();
                                let head = ex.chunked_head.as_deref().unwrap_or(&[]);
                                let split = body_limits.map(|l| {
                                    check_trailers(
                                        l,
                                        head_field_names(head),
                                        field_lines(trailer).map(|(name, _)| name),
                                    )
                                });
                                match split {
                                    Some(Err(v)) => trailer_violation = Some(v),
                                    _ => push_last_chunk(&mut u.out, trailer),
                                }
                            }
                        }
                        _ => u.out.push(bytes.get(..step.consumed).unwrap_or(&[])),
                    }
                    rbuf.consume(step.consumed);
                    data += step.data.len() as u64;
                    moved = true;
                    ex.req_body_done = step.done;
                }
                Err(e) => {
                    let up = ex.up;
                    c.req = ReqState::Head;
                    self.abandon_upstream(up);
                    self.parse_refused(ci, &e);
                    return true;
                }
            }
        }
        if let Some(v) = trailer_violation {
            self.frang_violation(ci, &v, "-");
            return true;
        }
        if let Some(Err(v)) = body_limits.map(|l| c.limits.on_body_bytes(data, l)) {
            self.frang_violation(ci, &v, "-");
            return true;
        }
        if moved {
            dirty.push_back(upstream_token(ex.up));
        }
        let truncated =
            c.peer_closed && !ex.req_body_done && c.rbuf.as_ref().is_none_or(|b| b.is_empty());
        if truncated {
            let up = ex.up;
            c.req = ReqState::Head;
            self.abandon_upstream(up);
            self.close_client(ci);
            return true;
        }
        moved
    }
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

    #[test]
    fn head_names_are_listed() {
        let head = b"POST / HTTP/1.1\r\nHost: a\r\nX-Sum: 1\r\n\r\n";
        let names: Vec<&[u8]> = head_field_names(head).collect();
        assert_eq!(names, vec![&b"Host"[..], &b"X-Sum"[..]]);
    }
}
