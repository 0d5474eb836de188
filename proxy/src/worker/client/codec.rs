//! A client connection's codec, HTTP/1.1 or HTTP/2, and the response sink the exchange
//! core writes through: a reply of the proxy's own, an interim head, a relayed head, relayed
//! body bytes, the end, a reset. Each call goes to the codec's own writer (`h1.rs`,
//! `h2.rs`). Nothing else writes a client's bytes but a WebSocket tunnel (`tunnel.rs`), which
//! passes the origin's bytes on untouched once the codec has handed the connection over.

use http1::{HeaderEdits, Limits, ResponseHead};

use super::Client;
use crate::worker::exchange::ExchangeId;
use crate::worker::h1::{self, BodyPlan, H1Codec, Reply, ReplyTo};
use crate::worker::h2::H2Codec;
use crate::worker::h2_heads::RelayedFields;
use crate::worker::quic::{reply as h3_reply, H3Codec};

pub enum Codec {
    H1(H1Codec),
    H2(Box<H2Codec>),
    /// An HTTP/3 connection (`worker/quic/`): the client entry has no socket of its own.
    H3(Box<H3Codec>),
}

impl Codec {
    /// No exchange in progress and nothing waiting to be sent by the codec itself.
    pub fn is_idle(&self) -> bool {
        match self {
            Codec::H1(h1) => h1.is_idle(),
            Codec::H2(h2) => h2.is_idle(),
            Codec::H3(h3) => h3.is_idle(),
        }
    }

    pub fn h1(&self) -> Option<&H1Codec> {
        match self {
            Codec::H1(h1) => Some(h1),
            Codec::H2(_) | Codec::H3(_) => None,
        }
    }

    /// Exchange `id` is the request on `stream` (HTTP/1.1: the connection's current one;
    /// its stream is 0).
    #[inline]
    pub fn begin(&mut self, stream: u32, id: ExchangeId) {
        match self {
            Codec::H1(h1) => h1.begin(id),
            Codec::H2(h2) => h2.begin(stream, id),
            Codec::H3(h3) => h3.stream_mut(stream).exchange = Some(id),
        }
    }

    /// The exchanges in progress, handed back when the client is gone.
    pub fn reset(&mut self) -> Vec<ExchangeId> {
        match self {
            Codec::H1(h1) => h1.reset().into_iter().collect(),
            Codec::H2(h2) => h2.reset_all(),
            Codec::H3(h3) => h3.reset_all(),
        }
    }
}

/// Writes a reply of the proxy's own on `stream`; returns the body bytes sent.
pub fn reply(
    c: &mut Client,
    stream: u32,
    reply: &Reply<'_>,
    to: ReplyTo,
    date: &str,
    head_only: bool,
) -> u64 {
    match &mut c.codec {
        Codec::H1(_) => match reply {
            Reply::Local(page) => h1::write_local(&mut c.out, page, to, date, head_only),
            _ => h1::write_reply(&mut c.out, reply, to, date),
        },
        Codec::H2(h2) => {
            let bytes = h2.reply(stream, reply, date, head_only);
            h2.flush_into(&mut c.out);
            bytes
        }
        Codec::H3(h3) => h3_reply::reply(h3, stream, reply, date, head_only),
    }
}

/// An upstream's interim (1xx, not 101) head: relayed to an HTTP/1.1 client as it came, to
/// an HTTP/2 client as HEADERS without END_STREAM (RFC 9110 §15.2: a proxy forwards the
/// interim responses it did not ask for). True if the client got it.
/// `head` is the upstream reader's parse of `input`'s first `len` bytes, or (None) a head
/// over `input` that an HTTP/2 origin's stream decoded, which an HTTP/1.1 client gets
/// written from its pieces.
pub fn interim(
    c: &mut Client,
    stream: u32,
    (head, input, len): (&http1::ResponseHead, &[u8], Option<usize>),
) -> bool {
    match &mut c.codec {
        Codec::H1(_) => {
            match len {
                Some(len) => h1::write_interim(&mut c.out, input.get(..len).unwrap_or(&[])),
                None => h1::write_interim_head(&mut c.out, head, input),
            }
            true
        }
        Codec::H2(h2) => {
            let sent = h2.send_interim(stream, head, input);
            h2.flush_into(&mut c.out);
            sent
        }
        Codec::H3(h3) => h3_reply::interim(h3, stream, head, input),
    }
}

/// `Expect: 100-continue` answered by the proxy, on either protocol (an HTTP/2 client that
/// asked for it waits for the `:status 100` HEADERS before its DATA).
pub fn continue_100(c: &mut Client, stream: u32) -> bool {
    match &mut c.codec {
        Codec::H1(_) => {
            h1::write_continue(&mut c.out);
            true
        }
        Codec::H2(h2) => {
            let sent = h2.send_continue(stream);
            h2.flush_into(&mut c.out);
            sent
        }
        Codec::H3(h3) => h3_reply::continue_100(h3, stream),
    }
}

/// The trailer section of a relayed chunked body (validated field lines). An HTTP/1.1
/// client got it already, inside the chunked bytes relayed as they came; an HTTP/2 client
/// gets its end-to-end fields as the final HEADERS.
pub fn trailers(c: &mut Client, stream: u32, section: &[u8]) {
    match &mut c.codec {
        Codec::H2(h2) => h2.relay_trailers(stream, section),
        Codec::H3(h3) => h3_reply::trailers(h3, stream, section),
        Codec::H1(_) => {}
    }
}

/// Body data another codec decoded (an HTTP/2 origin's DATA); `framed`: an HTTP/1.1 client
/// reads it chunked, and gets it as a chunk. Returns the body bytes sent.
pub fn decoded_body(c: &mut Client, stream: u32, data: &[u8], framed: bool) -> u64 {
    if matches!(c.codec, Codec::H1(_)) {
        return h1::write_decoded_body(&mut c.out, data, framed);
    }
    body(c, stream, data, data, false, false)
}

/// The end of a body another codec decoded, with its trailers (none: empty): an HTTP/1.1
/// client reading it chunked (`framed`) gets the last chunk and the trailer section; an
/// HTTP/2 or HTTP/3 client the end-to-end trailers as the final HEADERS. Returns the body
/// bytes sent (an HTTP/1.1 client's framing).
pub fn decoded_end(c: &mut Client, stream: u32, trailers: &[h2::Field], framed: bool) -> u64 {
    match &mut c.codec {
        Codec::H1(_) if framed => h1::write_last_chunk(&mut c.out, trailers),
        Codec::H1(_) => 0,
        Codec::H2(h2) => {
            let fields = super::super::h2_heads::decoded_trailer_fields(trailers);
            if !fields.is_empty() {
                h2.set_trailers(stream, fields);
            }
            0
        }
        Codec::H3(h3) => {
            let fields = super::super::h2_heads::decoded_trailer_fields(trailers);
            h3_reply::fields_as_trailers(h3, stream, &fields);
            0
        }
    }
}

/// What a relayed response head needs besides the head itself.
pub struct RelayedHead<'a> {
    pub head: &'a ResponseHead,
    pub input: &'a [u8],
    pub edits: &'a HeaderEdits,
    pub limits: &'a Limits,
    pub to: ReplyTo,
}

/// A relayed response head, sent to this client in its codec's form (HTTP/1.1 text
/// rendered into `scratch`, or HEADERS encoded from the head's pieces), the same pieces also
/// handed to `store` (the cache's copy, when the response fills an entry). Err when it
/// cannot be sent (over the limits, or not expressible).
pub fn response_head(
    c: &mut Client,
    stream: u32,
    scratch: &mut Vec<u8>,
    relayed: &RelayedHead<'_>,
    store: Option<&mut http1::ResponseFields>,
) -> Result<BodyPlan, ()> {
    let parsed = (relayed.head, relayed.input);
    match &mut c.codec {
        Codec::H1(_) => {
            let plan = h1::render_response_head(
                scratch,
                parsed,
                relayed.edits,
                relayed.limits,
                relayed.to,
                store,
            )?;
            c.out.push(scratch);
            Ok(plan)
        }
        Codec::H2(h2) => {
            // Framing is the codec's: the pieces are those of an HTTP/1.1 client kept open.
            let mut fields = RelayedFields::default();
            let sinks = (&mut fields, store);
            h1::relayed_head_fields(
                sinks,
                parsed,
                relayed.edits,
                relayed.limits,
                Default::default(),
            )?;
            h2.send_relayed_head(stream, &fields)?;
            h2.flush_into(&mut c.out);
            Ok(BodyPlan {
                dechunk: true,
                close_delimited: false,
            })
        }
        Codec::H3(h3) => {
            let mut fields = RelayedFields::default();
            let sinks = (&mut fields, store);
            h1::relayed_head_fields(
                sinks,
                parsed,
                relayed.edits,
                relayed.limits,
                Default::default(),
            )?;
            h3_reply::relayed_head(h3, stream, &fields)?;
            Ok(BodyPlan {
                dechunk: true,
                close_delimited: false,
            })
        }
    }
}

/// Relayed body bytes: `raw` as the upstream framed them, `data` the decoded part.
/// Returns the body bytes sent.
pub fn body(
    c: &mut Client,
    stream: u32,
    raw: &[u8],
    data: &[u8],
    chunked: bool,
    dechunk: bool,
) -> u64 {
    match &mut c.codec {
        Codec::H1(_) => h1::write_body(&mut c.out, raw, data, chunked, dechunk),
        Codec::H2(h2) => {
            h2.data(stream, data);
            h2.flush_into(&mut c.out);
            data.len() as u64
        }
        Codec::H3(h3) => {
            h3_reply::data(h3, stream, data);
            data.len() as u64
        }
    }
}

/// Whether more of a response may be relayed to this client now.
pub fn has_room(c: &Client, stream: u32) -> bool {
    c.out.has_room()
        && match &c.codec {
            Codec::H1(_) => true,
            Codec::H2(h2) => h2.has_room(stream),
            Codec::H3(h3) => h3.has_room(stream),
        }
}
