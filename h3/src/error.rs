//! HTTP/3 error codes (RFC 9114 §8.1) and QPACK's (RFC 9204 §6), and the two kinds of error:
//! a connection error closes the QUIC connection with its code (CONNECTION_CLOSE), a stream
//! error resets one request stream (RESET_STREAM and STOP_SENDING with its code).

use std::fmt;

/// An application error code as carried by QUIC's CONNECTION_CLOSE, RESET_STREAM and
/// STOP_SENDING.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ErrorCode {
    NoError = 0x100,
    GeneralProtocolError = 0x101,
    InternalError = 0x102,
    StreamCreationError = 0x103,
    ClosedCriticalStream = 0x104,
    FrameUnexpected = 0x105,
    FrameError = 0x106,
    ExcessiveLoad = 0x107,
    IdError = 0x108,
    SettingsError = 0x109,
    MissingSettings = 0x10a,
    RequestRejected = 0x10b,
    RequestCancelled = 0x10c,
    RequestIncomplete = 0x10d,
    MessageError = 0x10e,
    ConnectError = 0x10f,
    VersionFallback = 0x110,
    QpackDecompressionFailed = 0x200,
    QpackEncoderStreamError = 0x201,
    QpackDecoderStreamError = 0x202,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 20] = [
        ErrorCode::NoError,
        ErrorCode::GeneralProtocolError,
        ErrorCode::InternalError,
        ErrorCode::StreamCreationError,
        ErrorCode::ClosedCriticalStream,
        ErrorCode::FrameUnexpected,
        ErrorCode::FrameError,
        ErrorCode::ExcessiveLoad,
        ErrorCode::IdError,
        ErrorCode::SettingsError,
        ErrorCode::MissingSettings,
        ErrorCode::RequestRejected,
        ErrorCode::RequestCancelled,
        ErrorCode::RequestIncomplete,
        ErrorCode::MessageError,
        ErrorCode::ConnectError,
        ErrorCode::VersionFallback,
        ErrorCode::QpackDecompressionFailed,
        ErrorCode::QpackEncoderStreamError,
        ErrorCode::QpackDecoderStreamError,
    ];

    /// The code on the wire.
    pub fn code(self) -> u64 {
        self as u64
    }

    /// The code for a wire value; `None` for codes this crate does not know (reserved
    /// `0x1f * N + 0x21` codes included), which mean nothing special (§9).
    pub fn from_code(code: u64) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.code() == code)
    }

    /// Position in [`ErrorCode::ALL`], for counters.
    pub fn index(self) -> usize {
        ErrorCode::ALL
            .iter()
            .position(|&c| c == self)
            .unwrap_or_default()
    }

    /// The RFC's name, for logs and metrics labels.
    pub fn name(self) -> &'static str {
        self.describe().0
    }

    /// What the code means, in the RFC's words shortened.
    pub fn message(self) -> &'static str {
        self.describe().1
    }

    fn describe(self) -> (&'static str, &'static str) {
        match self {
            ErrorCode::NoError => ("H3_NO_ERROR", "no error"),
            ErrorCode::GeneralProtocolError => {
                ("H3_GENERAL_PROTOCOL_ERROR", "general protocol error")
            }
            ErrorCode::InternalError => ("H3_INTERNAL_ERROR", "internal error"),
            ErrorCode::StreamCreationError => ("H3_STREAM_CREATION_ERROR", "stream creation error"),
            ErrorCode::ClosedCriticalStream => {
                ("H3_CLOSED_CRITICAL_STREAM", "critical stream was closed")
            }
            ErrorCode::FrameUnexpected => ("H3_FRAME_UNEXPECTED", "frame not permitted here"),
            ErrorCode::FrameError => ("H3_FRAME_ERROR", "frame violated layout or size rules"),
            ErrorCode::ExcessiveLoad => ("H3_EXCESSIVE_LOAD", "peer generating excessive load"),
            ErrorCode::IdError => ("H3_ID_ERROR", "an identifier was used incorrectly"),
            ErrorCode::SettingsError => ("H3_SETTINGS_ERROR", "SETTINGS frame invalid"),
            ErrorCode::MissingSettings => ("H3_MISSING_SETTINGS", "no SETTINGS frame received"),
            ErrorCode::RequestRejected => ("H3_REQUEST_REJECTED", "request not processed"),
            ErrorCode::RequestCancelled => ("H3_REQUEST_CANCELLED", "data no longer needed"),
            ErrorCode::RequestIncomplete => ("H3_REQUEST_INCOMPLETE", "stream ended early"),
            ErrorCode::MessageError => ("H3_MESSAGE_ERROR", "malformed message"),
            ErrorCode::ConnectError => ("H3_CONNECT_ERROR", "CONNECT tunnel failed"),
            ErrorCode::VersionFallback => ("H3_VERSION_FALLBACK", "retry over HTTP/1.1"),
            ErrorCode::QpackDecompressionFailed => {
                ("QPACK_DECOMPRESSION_FAILED", "field section not decodable")
            }
            ErrorCode::QpackEncoderStreamError => (
                "QPACK_ENCODER_STREAM_ERROR",
                "encoder stream instruction invalid",
            ),
            ErrorCode::QpackDecoderStreamError => (
                "QPACK_DECODER_STREAM_ERROR",
                "decoder stream instruction invalid",
            ),
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.message())
    }
}

/// The connection must close with `code`; `reason` says which rule was broken (for logs,
/// and as CONNECTION_CLOSE's reason phrase if the caller wants one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnError {
    pub code: ErrorCode,
    pub reason: &'static str,
}

impl fmt::Display for ConnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.name(), self.reason)
    }
}

/// Either kind of error, as the parts of the connection return them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Ends the connection.
    Connection(ConnError),
    /// Ends one request stream.
    Stream(ErrorCode, &'static str),
    /// A limit tripped that ends the connection: counted, then as
    /// [`crate::Flood::conn_error`] says.
    Flood(crate::Flood),
}

/// A connection error.
pub fn conn(code: ErrorCode, reason: &'static str) -> Error {
    Error::Connection(ConnError { code, reason })
}

/// A stream error.
pub fn stream(code: ErrorCode, reason: &'static str) -> Error {
    Error::Stream(code, reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9114 §8.1 and RFC 9204 §6: the wire values.
    #[test]
    fn rfc9114_8_1_codes_have_their_values_and_names() {
        assert_eq!(ErrorCode::NoError.code(), 0x100);
        assert_eq!(ErrorCode::VersionFallback.code(), 0x110);
        assert_eq!(ErrorCode::QpackDecoderStreamError.code(), 0x202);
        for (i, c) in ErrorCode::ALL.into_iter().enumerate() {
            assert_eq!(ErrorCode::from_code(c.code()), Some(c));
            assert_eq!(c.index(), i);
            assert!(c.name().starts_with("H3_") || c.name().starts_with("QPACK_"));
            assert!(!c.message().is_empty());
        }
        // A reserved (greased) code means nothing.
        assert_eq!(ErrorCode::from_code(0x21), None);
    }
}
