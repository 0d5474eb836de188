//! The HTTP/1.1 codec of a client connection: it turns the connection's bytes into requests
//! (one exchange at a time, pipelined requests wait in the read buffer) and is the response
//! sink of its exchanges: every byte of HTTP/1 a client receives is written here, except
//! the bytes of an upstream response relayed as they are (its body, in the client's
//! framing, and 1xx heads).
//!
//! The connection's own state (reading a head, serving an exchange, discarding the rest of
//! a body whose exchange already ended) changes only here.

use std::sync::Arc;

use http1::{
    BodyDecoder, BodyFraming, ConnectionOption, FieldSink, Forwarding, ParseError, Version,
};

use super::exchange::ExchangeId;
use super::request::{Request, Scheme};
use super::stored_reply;
use crate::buf::Buf;
use crate::outbox::Outbox;

/// Most request-body bytes discarded after an early answer before the connection is closed
/// instead: a client that keeps sending is not worth a reused connection.
pub const DRAIN_MAX_BYTES: u64 = 1024 * 1024;

/// The rest of a request body being discarded after its exchange ended.
pub struct Drain {
    decoder: BodyDecoder,
    discarded: u64,
}

pub enum ConnState {
    /// Reading the next request head.
    Idle,
    /// Serving an exchange; the next request waits in the read buffer.
    Busy(ExchangeId),
    /// The exchange ended before its request body was read: the rest is discarded.
    Drain(Drain),
    /// The connection switched protocols (`101`, a WebSocket): its bytes are no longer
    /// HTTP/1 but a byte tunnel to an upstream connection (`tunnel.rs`).
    Tunnel(super::tunnel::Tunnel),
}

/// What the read buffer holds. A request is returned by value and moved once, into its
/// exchange's slab slot: boxing it would add an allocation per request for nothing.
#[allow(clippy::large_enum_variant)]
pub enum Parsed {
    Request(Request),
    /// A head is incomplete.
    Partial,
    /// The buffer is full without a complete head.
    TooLarge,
    Invalid(ParseError),
}

/// One client connection's HTTP/1.1 state.
pub struct H1Codec {
    state: ConnState,
}

impl Default for H1Codec {
    fn default() -> Self {
        H1Codec {
            state: ConnState::Idle,
        }
    }
}

impl H1Codec {
    pub fn state(&self) -> &ConnState {
        &self.state
    }

    /// Between requests: nothing being served or discarded.
    pub fn is_idle(&self) -> bool {
        matches!(self.state, ConnState::Idle)
    }

    pub fn current(&self) -> Option<ExchangeId> {
        match self.state {
            ConnState::Busy(id) => Some(id),
            _ => None,
        }
    }

    /// Takes the next request head out of `rbuf` (consuming it) when one is complete.
    pub fn next_request(&self, rbuf: &mut Buf, limits: &http1::Limits, scheme: Scheme) -> Parsed {
        match http1::parse_request(rbuf.bytes(), limits) {
            Ok(Some((head, len))) => {
                let request = Request::new(head, rbuf.bytes(), scheme);
                rbuf.consume(len);
                Parsed::Request(request)
            }
            Ok(None) if rbuf.is_full() => Parsed::TooLarge,
            Ok(None) => Parsed::Partial,
            Err(e) => Parsed::Invalid(e),
        }
    }

    pub fn begin(&mut self, id: ExchangeId) {
        self.state = ConnState::Busy(id);
    }

    /// The current exchange ended. `unread` is its request body's decoder when the body was
    /// not completely read; the rest of it is discarded before the next request is parsed
    /// (its bytes must never be read as requests), unless the connection closes anyway.
    /// Returns whether the connection must close after its queued bytes.
    pub fn exchange_done(&mut self, unread: Option<BodyDecoder>, closing: bool) -> bool {
        self.state = match unread {
            Some(decoder) if !decoder.is_done() && !closing => ConnState::Drain(Drain {
                decoder,
                discarded: 0,
            }),
            // Closing anyway: nothing more of this connection is read.
            Some(decoder) if !decoder.is_done() => {
                self.state = ConnState::Idle;
                return true;
            }
            _ => ConnState::Idle,
        };
        closing
    }

    /// The exchange that asked to switch protocols ended with the origin's `101`: from now on
    /// the connection carries the tunnel's bytes.
    pub fn start_tunnel(&mut self, tunnel: super::tunnel::Tunnel) {
        self.state = ConnState::Tunnel(tunnel);
    }

    pub fn tunnel(&self) -> Option<&super::tunnel::Tunnel> {
        match &self.state {
            ConnState::Tunnel(t) => Some(t),
            _ => None,
        }
    }

    pub fn tunnel_mut(&mut self) -> Option<&mut super::tunnel::Tunnel> {
        match &mut self.state {
            ConnState::Tunnel(t) => Some(t),
            _ => None,
        }
    }

    /// Ends the tunnel, handing back its state (its upstream connection must be closed).
    pub fn take_tunnel(&mut self) -> Option<super::tunnel::Tunnel> {
        match std::mem::replace(&mut self.state, ConnState::Idle) {
            ConnState::Tunnel(t) => Some(t),
            other => {
                self.state = other;
                None
            }
        }
    }

    /// The client is gone: forget the current exchange.
    pub fn reset(&mut self) -> Option<ExchangeId> {
        match std::mem::replace(&mut self.state, ConnState::Idle) {
            ConnState::Busy(id) => Some(id),
            _ => None,
        }
    }

    /// Discards what has arrived of a body whose exchange already ended. Returns (anything
    /// changed, the connection must close).
    pub fn discard_body(&mut self, rbuf: Option<&mut Buf>, peer_closed: bool) -> (bool, bool) {
        let ConnState::Drain(drain) = &mut self.state else {
            return (false, false);
        };
        let Some(rbuf) = rbuf else {
            if peer_closed {
                self.state = ConnState::Idle;
                return (true, true);
            }
            return (false, false);
        };
        let mut moved = false;
        while !rbuf.is_empty() && !drain.decoder.is_done() {
            match drain.decoder.decode(rbuf.bytes()) {
                Ok(step) if step.consumed > 0 || step.done => {
                    drain.discarded += step.consumed as u64;
                    rbuf.consume(step.consumed);
                    moved = true;
                }
                Ok(_) => break,
                Err(_) => {
                    // A malformed rest of a body: the connection is out of step.
                    drain.discarded = u64::MAX;
                    break;
                }
            }
        }
        if drain.decoder.is_done() {
            self.state = ConnState::Idle;
            return (true, false);
        }
        if drain.discarded > DRAIN_MAX_BYTES || (peer_closed && rbuf.is_empty()) {
            self.state = ConnState::Idle;
            return (true, true);
        }
        (moved, false)
    }
}

/// How a response goes to this client (the default: an HTTP/1.1 client kept open, the
/// framing an HTTP/2 client's codec and a cache fill start from).
#[derive(Clone, Copy, Default)]
pub struct ReplyTo {
    pub http10: bool,
    /// The connection closes after this response.
    pub close: bool,
}

impl ReplyTo {
    fn connection(self) -> ConnectionOption {
        if self.close {
            ConnectionOption::Close
        } else if self.http10 {
            ConnectionOption::KeepAlive
        } else {
            ConnectionOption::Default
        }
    }
}

/// A response the proxy makes itself.
pub enum Reply<'a> {
    /// The proxy's page for `status` (errors, blocks; 200 with no body for PURGE).
    Status(u16),
    Redirect {
        status: u16,
        location: &'a str,
    },
    /// A stored response: a hit, a 304 to a conditional request, a stale answer; or what
    /// the cache composes from it for this request (206, multipart/byteranges, 412, 416).
    Stored {
        entry: &'a Arc<cache::Entry>,
        answer: cache::Answer,
    },
    /// A page the proxy composes with fields of its own (the sticky cookie's 302 and its
    /// JavaScript challenge).
    Local(LocalPage<'a>),
}

/// A status, fields (lower-case names) and a body, written for the client's protocol.
pub struct LocalPage<'a> {
    pub status: u16,
    pub fields: &'a [(&'a [u8], &'a [u8])],
    pub body: &'a [u8],
}

impl<'a> Reply<'a> {
    /// The proxy's page for `status`: the `response_body` file configured for it (sent as it
    /// is, as Tempesta does), else the built-in one.
    pub fn status_page(status: u16, pages: &'a crate::error_pages::ErrorPages) -> Reply<'a> {
        match pages.page(status) {
            Some(body) => Reply::Local(LocalPage {
                status,
                fields: &[],
                body,
            }),
            None => Reply::Status(status),
        }
    }

    /// The status the client receives.
    pub fn status(&self) -> u16 {
        match self {
            Reply::Status(status) | Reply::Redirect { status, .. } => *status,
            Reply::Local(page) => page.status,
            Reply::Stored { entry, answer } => stored_reply::status(entry, answer),
        }
    }
}

/// Writes a reply; returns the body bytes sent (for the access log).
pub fn write_reply(out: &mut Outbox, reply: &Reply<'_>, to: ReplyTo, date: &str) -> u64 {
    match reply {
        Reply::Status(200) => {
            out.push(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nServer: ktls-proxy\r\n");
            write_connection(out, to);
            out.push(b"\r\n");
            0
        }
        Reply::Status(status) => {
            let page = http1::error_response(*status, to.close);
            out.push(page);
            page_body_len(page)
        }
        Reply::Redirect { status, location } => {
            let mut head = Vec::with_capacity(160 + location.len());
            http1::write_status_line(&mut head, *status, http1::reason_phrase(*status).as_bytes());
            http1::write_field(&mut head, b"Location", location.as_bytes());
            http1::write_field(&mut head, b"Content-Length", b"0");
            http1::write_field(&mut head, b"Date", date.as_bytes());
            http1::write_field(&mut head, b"Server", b"ktls-proxy");
            out.push(&head);
            write_connection(out, to);
            out.push(b"\r\n");
            0
        }
        Reply::Local(page) => write_local(out, page, to, date, false),
        // The stored bytes as they are (the plain hit) without composing anything.
        Reply::Stored {
            entry,
            answer: cache::Answer::Stored(kind),
        } => write_stored(out, entry, *kind, to),
        Reply::Stored { entry, answer } => match entry.reply(answer) {
            cache::Reply::Stored(kind) => write_stored(out, entry, kind, to),
            cache::Reply::Composed(composed) => {
                stored_reply::write_composed(out, entry, &composed, to)
            }
        },
    }
}

/// A page of the proxy's own; the body is left out for a HEAD request (its length stays).
pub fn write_local(
    out: &mut Outbox,
    page: &LocalPage<'_>,
    to: ReplyTo,
    date: &str,
    head_only: bool,
) -> u64 {
    let mut head = Vec::with_capacity(256);
    let status = page.status;
    http1::write_status_line(&mut head, status, http1::reason_phrase(status).as_bytes());
    for (name, value) in page.fields {
        http1::write_field(&mut head, name, value);
    }
    http1::write_framing(&mut head, BodyFraming::Length(page.body.len() as u64));
    http1::write_field(&mut head, b"Date", date.as_bytes());
    http1::write_field(&mut head, b"Server", b"ktls-proxy");
    out.push(&head);
    write_connection(out, to);
    out.push(b"\r\n");
    if head_only {
        return 0;
    }
    out.push(page.body);
    page.body.len() as u64
}

/// The stored head (copied, small), this client's connection field and the Age, then the
/// body shared without copying. Consecutive pushes land in one outbox segment.
fn write_stored(
    out: &mut Outbox,
    entry: &Arc<cache::Entry>,
    kind: cache::ReplyKind,
    to: ReplyTo,
) -> u64 {
    let (head, body) = entry.reply_parts(kind);
    out.push(head);
    write_connection(out, to);
    stored_reply::write_age(out, entry);
    if !body.is_empty() {
        out.push_shared(entry.body().clone());
    }
    body.len() as u64
}

pub(super) fn write_connection(out: &mut Outbox, to: ReplyTo) {
    match to.connection() {
        ConnectionOption::Close => out.push(b"Connection: close\r\n"),
        ConnectionOption::KeepAlive => out.push(b"Connection: keep-alive\r\n"),
        ConnectionOption::Default => {}
        ConnectionOption::UpgradeWebSocket => {
            out.push(b"Connection: upgrade\r\nUpgrade: websocket\r\n")
        }
    }
}

/// The body length of a canned page (what follows its head).
fn page_body_len(page: &[u8]) -> u64 {
    page.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(0, |end| (page.len() - end - 4) as u64)
}

/// `Expect: 100-continue` answered by the proxy.
pub fn write_continue(out: &mut Outbox) {
    out.push(b"HTTP/1.1 100 Continue\r\n\r\n");
}

/// An upstream's interim (1xx) head, relayed as it came.
pub fn write_interim(out: &mut Outbox, raw_head: &[u8]) {
    out.push(raw_head);
}

/// An interim head another codec decoded (an HTTP/2 origin's 1xx), over `input`: its status
/// line (the reason left empty) and its fields, as the origin gave them.
pub fn write_interim_head(out: &mut Outbox, head: &http1::ResponseHead, input: &[u8]) {
    let mut text = Vec::with_capacity(64);
    http1::write_status_line(&mut text, head.status(), b"");
    for (name, value) in head.headers().fields(input) {
        http1::write_field(&mut text, name, value);
    }
    text.extend_from_slice(http1::TRAILER_END);
    out.push(&text);
}

/// The origin's `101 Switching Protocols` to a WebSocket handshake, rewritten for the
/// client like any relayed head (hop-by-hop fields dropped, the vhost's response edits), with
/// the proxy's own `Connection: upgrade` and `Upgrade: websocket`. Err when it would not fit
/// the forwarding limits.
pub fn write_switching_protocols(
    out: &mut Outbox,
    scratch: &mut Vec<u8>,
    head: &http1::ResponseHead,
    input: &[u8],
    edits: &http1::HeaderEdits,
    limits: &http1::Limits,
) -> Result<(), ()> {
    scratch.clear();
    http1::write_response_head(
        scratch,
        head,
        input,
        &Forwarding {
            forwarded_for: None,
            forwarded_proto: None,
            via: None,
            edits,
            framing: BodyFraming::None,
            connection: ConnectionOption::UpgradeWebSocket,
            limits,
        },
    )
    .map_err(|_| ())?;
    out.push(scratch);
    Ok(())
}

/// How the body of a relayed response is framed for this client.
pub struct BodyPlan {
    /// Send the decoded data only: the upstream's chunked framing cannot reach the client.
    pub dechunk: bool,
    /// The body ends when the connection closes.
    pub close_delimited: bool,
}

/// The head of an upstream response, rewritten for this client as HTTP/1.1 text into
/// `scratch` (the HTTP/1 codec sends it as it is), its pieces also handed to `store` (the
/// cache's copy, when the response fills an entry). Err when the proxy's fields would take
/// it over the limits.
pub fn render_response_head(
    scratch: &mut Vec<u8>,
    relayed: (&http1::ResponseHead, &[u8]),
    edits: &http1::HeaderEdits,
    limits: &http1::Limits,
    to: ReplyTo,
    store: impl FieldSink,
) -> Result<BodyPlan, ()> {
    scratch.clear();
    let text = http1::HeadText { out: scratch };
    relayed_head_fields((text, store), relayed, edits, limits, to)
}

/// The pieces of an upstream response's head as this client gets it, handed to `sink`:
/// what [`render_response_head`] writes, and with `ReplyTo::default()` what an HTTP/2
/// client's HEADERS and a background fill are made of (their framing is not HTTP/1's).
pub fn relayed_head_fields(
    sink: impl FieldSink,
    (head, input): (&http1::ResponseHead, &[u8]),
    edits: &http1::HeaderEdits,
    limits: &http1::Limits,
    to: ReplyTo,
) -> Result<BodyPlan, ()> {
    // An HTTP/1.0 client cannot read chunked framing: its body is sent close-delimited
    // instead (the chunks' data only).
    let framing = match head.forward_framing() {
        BodyFraming::Chunked if to.http10 => BodyFraming::CloseDelimited,
        framing => framing,
    };
    let forwarding = Forwarding {
        forwarded_for: None,
        forwarded_proto: None,
        via: None,
        edits,
        framing,
        connection: to.connection(),
        limits,
    };
    http1::forward_response_fields(sink, head, input, &forwarding).map_err(|_| ())?;
    Ok(BodyPlan {
        dechunk: to.http10 && matches!(head.framing(), BodyFraming::Chunked),
        close_delimited: matches!(framing, BodyFraming::CloseDelimited),
    })
}

/// Relayed body bytes: `raw` as the upstream framed them, `data` the decoded part. Returns
/// the body bytes sent.
pub fn write_body(out: &mut Outbox, raw: &[u8], data: &[u8], chunked: bool, dechunk: bool) -> u64 {
    let forwarded = if chunked && !dechunk { raw } else { data };
    out.push(forwarded);
    forwarded.len() as u64
}

/// Body data another codec decoded (an HTTP/2 origin's DATA): as a chunk when the client
/// reads the body chunked (`framed`; nothing for no data: an empty chunk would end it), else
/// as it is. Returns the bytes sent.
pub fn write_decoded_body(out: &mut Outbox, data: &[u8], framed: bool) -> u64 {
    if !framed {
        out.push(data);
        return data.len() as u64;
    }
    if data.is_empty() {
        return 0;
    }
    let size = http1::ChunkSize::new(data.len());
    out.push(size.as_bytes());
    out.push(data);
    out.push(http1::CHUNK_END);
    (size.as_bytes().len() + data.len() + http1::CHUNK_END.len()) as u64
}

/// The end of a chunked body another codec decoded: the last chunk and the trailer section
/// (`trailers`, none: empty). Returns the bytes sent.
pub fn write_last_chunk(out: &mut Outbox, trailers: &[h2::Field]) -> u64 {
    let mut text = Vec::with_capacity(16);
    text.extend_from_slice(http1::LAST_CHUNK);
    for f in trailers {
        http1::write_field(&mut text, &f.name, &f.value);
    }
    text.extend_from_slice(http1::TRAILER_END);
    out.push(&text);
    text.len() as u64
}

/// Whether this client reads HTTP/1.0.
pub fn is_http10(request: &Request) -> bool {
    request.version() == Version::Http10
}

#[cfg(test)]
#[path = "h1_tests.rs"]
mod tests;
