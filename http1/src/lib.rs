//! HTTP/1.1 parsing and serialisation without I/O, for both roles of a
//! reverse proxy: requests from clients, responses from upstreams.
//!
//! The event loop owns the buffers and the sockets; this crate only looks
//! at bytes. Heads are parsed with `httparse` into offsets over the
//! caller's buffer (up to 32 fields inline, so a typical request does not
//! allocate); bodies are decoded incrementally without being copied.
//!
//! ```
//! use http1::{parse_request, BodyDecoder, Limits};
//!
//! let limits = Limits::default();
//! let buf = b"POST /up HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\n\r\nhello";
//! let (head, head_len) = parse_request(buf, &limits).unwrap().unwrap();
//! assert_eq!(head.host(buf), Some(&b"example.com"[..]));
//! let mut body = BodyDecoder::new(head.framing(), &limits);
//! let step = body.decode(&buf[head_len..]).unwrap();
//! assert_eq!(&buf[head_len..][step.data], b"hello");
//! assert!(step.done);
//! ```
//!
//! # Security choices
//!
//! A proxy is only as safe as the disagreement between it and the servers
//! behind it: whatever this parser accepts, an upstream or a cache may
//! read differently (request smuggling, cache poisoning). So anything
//! with two readings is refused instead of interpreted:
//!
//! - **Content-Length with Transfer-Encoding** — refused in both roles
//!   (400 for requests; the proxy answers 502 for a response). RFC 9112
//!   lets TE win, but a message carrying both is an attack or a bug.
//! - **Content-Length** must be `1*DIGIT` without overflow. Identical
//!   repeated values (`5, 5`, or two fields) are folded as RFC 9110 §8.6
//!   allows, since the writers always emit a single value of their own;
//!   differing values are refused.
//! - **Transfer-Encoding** must be exactly `chunked`: a final coding that
//!   is not chunked, `chunked` twice, `xchunked`, parameters or an empty
//!   list give 400; another coding before `chunked` (`gzip, chunked`)
//!   gives 501, because the writers re-frame bodies. TE in an HTTP/1.0
//!   message is faulty framing (400).
//! - **Line breaks** must be CRLF. httparse accepts a bare LF (RFC 9112
//!   §2.2 allows a server to); this proxy refuses it because an upstream
//!   might not. A bare CR is refused too.
//! - **obs-fold** (a line starting with SP/HTAB), **whitespace between a
//!   name and its colon**, **non-token bytes in names**, and **NUL or
//!   other controls in values** are refused (400).
//! - **Host**: exactly one field in HTTP/1.1 (missing or repeated: 400),
//!   made of authority bytes only. An absolute-form target's authority
//!   takes precedence (RFC 9112 §3.2.2) and replaces Host upstream.
//!   Userinfo in a target, fragments, and targets that are not origin,
//!   absolute (http/https) or `*` with OPTIONS are refused; CONNECT is
//!   501 (this is not a tunnel).
//! - **Limits** ([`Limits`]): head size and field count (431), one field's
//!   length (431), target length (414, also detected before the request
//!   line is complete), body length (413, from Content-Length at once or
//!   while decoding chunks), chunk extension and trailer sizes. Optional
//!   [`ByteSet`]s restrict the bytes of targets and values
//!   (`http_uri_brange`, `http_*_brange`: 400).
//! - **Chunked bodies**: at most 16 hex digits per size, extensions only
//!   after `;` and without controls, CRLF required after the size line and
//!   after data, trailer fields parsed like header fields (no obs-fold)
//!   and bounded.
//! - **Forwarding** drops hop-by-hop fields, including those named by
//!   Connection (but never Host), and re-writes framing itself, so the
//!   next hop sees exactly one framing the proxy validated.
//! - **Parser and writer agree**: a forwarded head is checked against the
//!   same limits (field count, field length, head size) it was parsed
//!   with, after the proxy's own fields are added; one that would not fit
//!   is refused ([`OversizedHead`]: 431 for a request, 502 for a
//!   response), so the proxy never sends what it would refuse itself.
//! - **One verdict whatever the protocol**: a request head another codec
//!   decoded (an HTTP/2 header block) is assembled by [`RequestBuilder`]
//!   without HTTP/1 text, each piece checked with the byte classes the
//!   parser applies to it and the whole by the same rules and limits
//!   (sizes counted as the HTTP/1.1 lines would be); an HTTP/2 origin's response head is
//!   assembled the same way by [`ResponseBuilder`]. The other way, the upstream request head
//!   is decided once as pieces ([`forward_request_fields`] to a [`RequestSink`]) that the
//!   HTTP/1.1 writer ([`RequestText`]) and an HTTP/2 encoder render.

#![forbid(unsafe_code)]

mod assemble;
mod assemble_response;
mod body;
mod byteset;
mod canned;
mod chunked;
mod error;
mod fields;
mod fit;
mod forwarded;
mod forwarded_for;
mod limits;
mod message;
mod request;
mod request_sink;
mod response;
mod sink;
mod span;
mod strict;
mod write;

pub use assemble::RequestBuilder;
pub use assemble_response::ResponseBuilder;
pub use body::{BodyDecoder, LengthDecoder};
pub use byteset::ByteSet;
pub use canned::{error_body_is_empty, error_response, reason_phrase};
pub use chunked::{ChunkedDecoder, Step};
pub use error::ParseError;
pub use fields::METHOD_OVERRIDE_FIELDS;
pub use fit::OversizedHead;
pub use forwarded_for::client_address as forwarded_for_address;
pub use limits::Limits;
pub use message::{BodyFraming, Method, Version};
pub use request::{parse_request, RequestHead, TargetForm};
pub use request_sink::{
    decimal_len, forward_request_fields, RequestMeasure, RequestSink, RequestText,
};
pub use response::{parse_response, ResponseHead};
pub use sink::{forward_response_fields, FieldSink, HeadMeasure, HeadText, ResponseFields};
pub use span::{FieldSpan, HeaderSpans, Span};
pub use write::{
    is_forwarded_field, write_field, write_framing, write_request_head, write_response_head,
    write_status_line, ChunkSize, ConnectionOption, Forwarding, HeaderEdits, InvalidHeader,
    CHUNK_END, LAST_CHUNK, TRAILER_END,
};
