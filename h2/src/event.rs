//! What the connection tells the application.

use crate::error::{ConnError, ErrorCode};
use crate::hpack::Field;
use crate::request::Request;

/// One thing that happened on the connection, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A new stream carries a request. With `end_stream` it has no body.
    Request {
        stream: u32,
        request: Request,
        end_stream: bool,
    },
    /// Request body bytes. Call `Connection::consumed` once they are
    /// passed on, to reopen the peer's window.
    Data {
        stream: u32,
        data: Vec<u8>,
        end_stream: bool,
    },
    /// Request trailers; the request is complete.
    Trailers { stream: u32, fields: Vec<Field> },
    /// The stream is gone: the peer reset it, or it broke a rule and we
    /// reset it. Cancel its exchange (and its upstream request).
    Reset { stream: u32, code: ErrorCode },
    /// A stream that could not send all its data has window again.
    WindowOpened { stream: u32 },
    /// The peer will open no stream above `last_stream`.
    GoAway {
        last_stream: u32,
        code: ErrorCode,
        debug: Vec<u8>,
    },
    /// The connection ended with an error; a GOAWAY is in the output.
    /// Flush it and close the socket.
    Closed { error: ConnError },
}
