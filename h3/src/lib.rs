#![forbid(unsafe_code)]
//! HTTP/3 (RFC 9114) and QPACK (RFC 9204) for the server side of a reverse proxy, without
//! I/O and without QUIC.
//!
//! QUIC (quinn-proto in the proxy, driven by the worker's loop) owns the packets, the
//! streams and their flow control; a [`Connection`] only sees each stream's bytes as they
//! arrive: [`Connection::recv`] takes `(stream id, bytes, fin)`,
//! [`Connection::stream_reset`] a peer's RESET_STREAM, [`Connection::poll_event`] gives
//! requests, body data, trailers, refusals, stream and connection errors, and the bytes to
//! write on our control, QPACK encoder and QPACK decoder streams. Responses are written
//! into buffers the caller provides ([`Connection::send_headers`], [`write::data`],
//! [`Connection::send_trailers`]) and then onto the request stream.
//!
//! ```
//! use h3::{Connection, Event, Limits, LocalStream};
//!
//! let mut conn = Connection::new(Limits::default()).unwrap();
//! // First: our control stream (with SETTINGS), encoder and decoder streams.
//! let mut opened = Vec::new();
//! while let Some(Event::Send { on, .. }) = conn.poll_event() {
//!     opened.push(on);
//! }
//! assert_eq!(opened, [LocalStream::Control, LocalStream::Encoder, LocalStream::Decoder]);
//! // A client: its control stream (type 0, an empty SETTINGS), then a GET on stream 0.
//! conn.recv(2, &[0x00, 0x04, 0x00], false);
//! let mut section = Vec::new();
//! h3::qpack::encode(
//!     [(&b":method"[..], &b"GET"[..]), (b":scheme", b"https"),
//!      (b":authority", b"a.test"), (b":path", b"/")],
//!     &mut section,
//! );
//! let mut request = Vec::new();
//! h3::frame::write(&mut request, h3::frame::HEADERS, &section);
//! conn.recv(0, &request, true);
//! let Some(Event::Request { stream: 0, request, end_stream: true }) = conn.poll_event()
//! else { panic!() };
//! assert_eq!(request.path.as_deref(), Some(&b"/"[..]));
//! let mut out = Vec::new();
//! conn.send_headers(&mut out, 200, &[(b"content-type", b"text/plain")]).unwrap();
//! h3::write::data(&mut out, b"hello");
//! // `out` goes on stream 0, which the caller then finishes.
//! conn.stream_done(0);
//! ```
//!
//! Memory per connection is bounded by [`Limits`], never by the peer: per request stream
//! one frame buffered (at most `max_field_section_size`), the QPACK dynamic table (at most
//! `qpack_max_table_capacity`), at most `qpack_blocked_streams` sections waiting for
//! inserts (each with at most `max_blocked_input` of held input), one encoder-stream
//! instruction. DATA payload is handed out as it arrives, never gathered. Every limit that
//! trips is counted in [`Counters`] by [`Flood`] kind, every error by code.
//!
//! Not here yet: server push (we never send PUSH_PROMISE; MAX_PUSH_ID and CANCEL_PUSH are
//! only checked), extended CONNECT (RFC 9220; `:protocol` is refused), datagrams (RFC
//! 9297), and a dynamic table in our encoder (see [`qpack`]).

mod conn;
mod counters;
mod error;
mod event;
pub mod frame;
mod limits;
pub mod qpack;
mod request;
pub mod settings;
pub mod varint;

pub use conn::{Connection, SendError};
pub use counters::{Counters, Flood};
pub use error::{ConnError, Error, ErrorCode};
pub use event::{Event, LocalStream};
pub use h2::{Field, Request};
pub use limits::Limits;
pub use request::{check_trailers, request_from_fields, Malformed};
pub use settings::PeerSettings;

/// Response body framing.
pub mod write {
    pub use crate::conn::{data, data_head};
}
