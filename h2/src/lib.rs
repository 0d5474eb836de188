#![forbid(unsafe_code)]
//! HTTP/2 (RFC 9113) for both sides of a reverse proxy, without I/O: the
//! server role ([`Connection`], below) and the client role towards origins
//! ([`ClientConnection`], the same parts and limits mirrored).
//!
//! The event loop owns the socket and the clock; a [`Connection`] only
//! sees bytes and instants: [`Connection::recv`] takes what was read,
//! [`Connection::poll_event`] gives requests, body data, trailers and
//! resets, the `send_*` methods queue the response, and
//! [`Connection::output`] is what to write. [`Connection::next_deadline`]
//! and [`Connection::on_timeout`] drive the few timers (SETTINGS ack,
//! stalled streams, a peer that reads nothing).
//!
//! ```
//! use std::time::Instant;
//! use h2::{write, Connection, Event, Limits};
//!
//! let now = Instant::now();
//! let mut conn = Connection::new(Limits::default(), now).unwrap();
//! // A client: preface, SETTINGS, and a GET on stream 1.
//! let mut client = Vec::new();
//! write::client_preface(&mut client);
//! write::settings(&mut client, &[]);
//! let mut enc = h2::HpackEncoder::default();
//! let mut block = Vec::new();
//! enc.encode([(&b":method"[..], &b"GET"[..]), (b":scheme", b"https"),
//!             (b":authority", b"a.test"), (b":path", b"/")], &mut block);
//! write::headers(&mut client, 1, &block, true, 16384);
//! conn.recv(&client, now);
//! let Some(Event::Request { stream, request, end_stream: true }) = conn.poll_event() else { panic!() };
//! assert_eq!(request.path.as_deref(), Some(&b"/"[..]));
//! conn.send_headers(stream, 200, &[(b"content-type", b"text/plain")], false).unwrap();
//! assert_eq!(conn.send_data(stream, b"hello", true).unwrap(), 5);
//! let wire = conn.output().len();
//! conn.advance_output(wire);
//! ```
//!
//! Memory per connection is bounded by [`Limits`], never by the peer: one
//! frame of input, one header block, `max_concurrent_streams` streams, an
//! output queue the caller stops reading at (`wants_read`), and a PING
//! ack that is overwritten instead of queued. Every flood defence is a
//! field of [`Limits`] and every trip is counted in [`Counters`].

mod client;
mod conn;
mod counters;
mod error;
mod event;
pub mod frame;
mod guards;
mod hpack;
mod limits;
mod outq;
mod rate;
mod request;
mod response;
mod settings;
mod stream;
pub mod write;

pub use client::{ClientConnection, ClientEvent};
pub use conn::Connection;
pub use counters::{Counters, Flood};
pub use error::{ConnError, ErrorCode, H2Error, SendError, StreamError};
pub use event::Event;
pub use hpack::{huffman_decode, DecodeError, Field, HpackDecoder, HpackEncoder, HuffmanError};
pub use limits::Limits;
pub use request::{check_trailers, request_from_fields, Request};
pub use response::{response_from_fields, Response};
pub use settings::{PeerSettings, SettingId};
