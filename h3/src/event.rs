//! What the connection tells its caller (the QUIC glue and the application).

use h2::{Field, Request};

use crate::error::{ConnError, ErrorCode};

/// Our unidirectional streams (RFC 9114 §6.2): the caller opens one of each when the
/// connection starts and writes there what [`Event::Send`] gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LocalStream {
    /// Stream type 0x00; its first frame is our SETTINGS.
    Control,
    /// Stream type 0x02. Our encoder uses no dynamic table: only the type is ever sent.
    Encoder,
    /// Stream type 0x03: Section Acknowledgment, Stream Cancellation, Insert Count
    /// Increment for the peer's encoder.
    Decoder,
}

/// One thing that happened on the connection, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Bytes to append to one of our unidirectional streams. The first `Send` for each
    /// starts with its stream type. These streams are never closed (§6.2.1).
    Send { on: LocalStream, bytes: Vec<u8> },
    /// A request stream carries a request. With `end_stream` it has no body.
    Request {
        stream: u64,
        request: Request,
        end_stream: bool,
    },
    /// Request body bytes; `end_stream` on the last (possibly empty) piece.
    Data {
        stream: u64,
        data: Vec<u8>,
        end_stream: bool,
    },
    /// Request trailers; the request is complete.
    Trailers { stream: u64, fields: Vec<Field> },
    /// The request's field section is over our limits (RFC 9114 §4.2.2): answer `status`
    /// (431) with [`crate::Connection::send_headers`], end the stream, and ask the peer to
    /// stop sending with H3_NO_ERROR (§4.1). Its further input is dropped.
    Refuse { stream: u64, status: u16 },
    /// The stream broke a rule: reset it (RESET_STREAM and STOP_SENDING with `code`) and
    /// cancel its exchange. Its further input is dropped.
    StreamError {
        stream: u64,
        code: ErrorCode,
        reason: &'static str,
    },
    /// The peer's GOAWAY: from a client it carries a push ID (§5.2); we never push, so it
    /// only says the client is going away.
    GoAway { push_id: u64 },
    /// The connection ended with an error: close the QUIC connection with
    /// `error.code` (CONNECTION_CLOSE). Nothing more is read.
    Closed { error: ConnError },
}
