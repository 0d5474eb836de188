//! What the client connection tells the application about its exchanges.

use crate::error::{ConnError, ErrorCode};
use crate::hpack::Field;
use crate::response::Response;

/// One thing that happened on a client connection, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientEvent {
    /// A 1xx head (`100 Continue`, `103 Early Hints`): the final response
    /// is still to come on `stream`.
    Interim { stream: u32, response: Response },
    /// The final response head. With `end_stream` it has no body.
    Response {
        stream: u32,
        response: Response,
        end_stream: bool,
    },
    /// Response body bytes. Call `ClientConnection::consumed` once they
    /// are passed on: only then may the origin send more (backpressure).
    Data {
        stream: u32,
        data: Vec<u8>,
        end_stream: bool,
    },
    /// Response trailers (gRPC's `grpc-status`); the response is complete.
    Trailers { stream: u32, fields: Vec<Field> },
    /// The stream is gone before its response completed, or while the
    /// request was still being sent. `retryable`: the origin did not
    /// process the request (RST_STREAM REFUSED_STREAM, or a stream above
    /// the last id of its GOAWAY, RFC 9113 §8.7), so the caller may send
    /// it again on another connection (idempotent requests at least).
    Reset {
        stream: u32,
        code: ErrorCode,
        retryable: bool,
    },
    /// A stream whose request body could not all be sent has window again.
    WindowOpened { stream: u32 },
    /// The origin opens no new stream for us: streams at or below
    /// `last_stream` go on, those above were reported as retryable resets.
    GoAway {
        last_stream: u32,
        code: ErrorCode,
        debug: Vec<u8>,
    },
    /// The connection ended with an error of the origin's making; a GOAWAY
    /// is in the output (every stream was reported reset before this).
    Closed { error: ConnError },
}
