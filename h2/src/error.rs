//! Error codes (RFC 9113 §7) and the two kinds of error the protocol has:
//! a connection error ends the connection with GOAWAY, a stream error ends
//! one stream with RST_STREAM.

use std::fmt;

/// An HTTP/2 error code as carried by RST_STREAM and GOAWAY. Unknown codes
/// from a peer are kept as they are (§7: they must not trigger anything
/// special).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u32);

impl ErrorCode {
    pub const NO_ERROR: ErrorCode = ErrorCode(0x0);
    pub const PROTOCOL_ERROR: ErrorCode = ErrorCode(0x1);
    pub const INTERNAL_ERROR: ErrorCode = ErrorCode(0x2);
    pub const FLOW_CONTROL_ERROR: ErrorCode = ErrorCode(0x3);
    pub const SETTINGS_TIMEOUT: ErrorCode = ErrorCode(0x4);
    pub const STREAM_CLOSED: ErrorCode = ErrorCode(0x5);
    pub const FRAME_SIZE_ERROR: ErrorCode = ErrorCode(0x6);
    pub const REFUSED_STREAM: ErrorCode = ErrorCode(0x7);
    pub const CANCEL: ErrorCode = ErrorCode(0x8);
    pub const COMPRESSION_ERROR: ErrorCode = ErrorCode(0x9);
    pub const CONNECT_ERROR: ErrorCode = ErrorCode(0xa);
    pub const ENHANCE_YOUR_CALM: ErrorCode = ErrorCode(0xb);
    pub const INADEQUATE_SECURITY: ErrorCode = ErrorCode(0xc);
    pub const HTTP_1_1_REQUIRED: ErrorCode = ErrorCode(0xd);

    /// The RFC's name of the code, for logs and metrics labels.
    pub fn name(self) -> &'static str {
        const NAMES: [&str; 14] = [
            "NO_ERROR",
            "PROTOCOL_ERROR",
            "INTERNAL_ERROR",
            "FLOW_CONTROL_ERROR",
            "SETTINGS_TIMEOUT",
            "STREAM_CLOSED",
            "FRAME_SIZE_ERROR",
            "REFUSED_STREAM",
            "CANCEL",
            "COMPRESSION_ERROR",
            "CONNECT_ERROR",
            "ENHANCE_YOUR_CALM",
            "INADEQUATE_SECURITY",
            "HTTP_1_1_REQUIRED",
        ];
        NAMES.get(self.0 as usize).copied().unwrap_or("UNKNOWN")
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (0x{:x})", self.name(), self.0)
    }
}

/// A connection error: the connection answers GOAWAY with `code` and must
/// be closed once the output is flushed. `reason` goes into the GOAWAY
/// debug data and the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnError {
    pub code: ErrorCode,
    pub reason: &'static str,
}

/// A stream error: only `stream` is reset with `code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamError {
    pub stream: u32,
    pub code: ErrorCode,
    pub reason: &'static str,
}

/// What a received frame can break: the whole connection or one stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum H2Error {
    Connection(ConnError),
    Stream(StreamError),
}

impl H2Error {
    pub(crate) fn conn(code: ErrorCode, reason: &'static str) -> H2Error {
        H2Error::Connection(ConnError { code, reason })
    }

    pub(crate) fn stream(stream: u32, code: ErrorCode, reason: &'static str) -> H2Error {
        H2Error::Stream(StreamError {
            stream,
            code,
            reason,
        })
    }
}

impl fmt::Display for ConnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "connection error {}: {}", self.code, self.reason)
    }
}

impl std::error::Error for ConnError {}

/// Why the application's call to send something was refused. These are
/// bugs or races in the caller (the stream went away meanwhile), never
/// the peer's doing, so the connection goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// The stream is not open for sending: never opened, already ended or
    /// reset. Drop the exchange.
    StreamNotWritable(u32),
    /// HEADERS were already sent on this stream; send DATA or trailers.
    HeadersAlreadySent(u32),
    /// DATA or trailers before the response HEADERS.
    HeadersNotSent(u32),
    /// The connection is closed or closing after an error.
    ConnectionClosed,
    /// A status outside 100..=999, or a field name that is not lowercase
    /// token characters, or a connection-specific field.
    InvalidResponse(&'static str),
    /// Client role: no stream may be opened now (the origin's
    /// MAX_CONCURRENT_STREAMS is reached, a GOAWAY came or went, or the
    /// stream ids ran out). Wait for a stream to end or use another
    /// connection.
    NoStreamAvailable,
    /// Client role: a request the protocol cannot carry (missing
    /// pseudo-headers, a connection-specific field, a header list over the
    /// origin's SETTINGS_MAX_HEADER_LIST_SIZE...).
    InvalidRequest(&'static str),
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::StreamNotWritable(s) => {
                write!(f, "stream {s} is not open for sending; drop its exchange")
            }
            SendError::HeadersAlreadySent(s) => {
                write!(
                    f,
                    "stream {s} already has response headers; send data or trailers"
                )
            }
            SendError::HeadersNotSent(s) => {
                write!(f, "stream {s} has no response headers yet; send them first")
            }
            SendError::ConnectionClosed => write!(f, "the connection is closed"),
            SendError::InvalidResponse(why) => write!(f, "invalid response: {why}"),
            SendError::NoStreamAvailable => write!(f, "no stream may be opened now"),
            SendError::InvalidRequest(why) => write!(f, "invalid request: {why}"),
        }
    }
}

impl std::error::Error for SendError {}
