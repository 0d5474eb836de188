//! Why the record layer closes a connection, and which alert it sends for it.

use std::fmt;

/// Alert descriptions (RFC 8446 §6, RFC 5246 §7.2) the record layer sends or recognises.
pub mod alert {
    pub const CLOSE_NOTIFY: u8 = 0;
    pub const UNEXPECTED_MESSAGE: u8 = 10;
    pub const BAD_RECORD_MAC: u8 = 20;
    pub const RECORD_OVERFLOW: u8 = 22;
    pub const ILLEGAL_PARAMETER: u8 = 47;
    pub const DECODE_ERROR: u8 = 50;
    pub const INTERNAL_ERROR: u8 = 80;
    pub const USER_CANCELED: u8 = 90;
    pub const NO_RENEGOTIATION: u8 = 100;
}

/// A fatal condition of the record layer. After any of these the connection is finished; the
/// alert of [`RecordError::alert`] (if any) is sent first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    /// A record failed authentication (tampered, truncated, or under an unexpected key).
    BadRecordMac,
    /// A record longer than the protocol allows (ciphertext or plaintext length).
    RecordOverflow(usize),
    /// A record or message that has no place after the handshake.
    UnexpectedMessage(&'static str),
    /// A malformed alert or handshake message.
    DecodeError(&'static str),
    /// A KeyUpdate with a request value other than 0 or 1.
    IllegalParameter(&'static str),
    /// The sequence number of one direction would wrap: the connection must end.
    SequenceExhausted,
    /// The peer sent this fatal alert (nothing is sent back).
    PeerAlert(u8),
    /// OpenSSL failed to set up a cipher or derive a key.
    Crypto(String),
}

impl RecordError {
    /// The alert description to send before closing; `None` when the peer already did.
    pub fn alert(&self) -> Option<u8> {
        match self {
            RecordError::BadRecordMac => Some(alert::BAD_RECORD_MAC),
            RecordError::RecordOverflow(_) => Some(alert::RECORD_OVERFLOW),
            RecordError::UnexpectedMessage(_) => Some(alert::UNEXPECTED_MESSAGE),
            RecordError::DecodeError(_) => Some(alert::DECODE_ERROR),
            RecordError::IllegalParameter(_) => Some(alert::ILLEGAL_PARAMETER),
            // RFC 8446 §5.5 asks for a KeyUpdate or a close; the close is a plain one.
            RecordError::SequenceExhausted => Some(alert::CLOSE_NOTIFY),
            RecordError::PeerAlert(_) => None,
            RecordError::Crypto(_) => Some(alert::INTERNAL_ERROR),
        }
    }

    /// A bounded label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            RecordError::BadRecordMac => "bad_record_mac",
            RecordError::RecordOverflow(_) => "record_overflow",
            RecordError::UnexpectedMessage(_) => "unexpected_message",
            RecordError::DecodeError(_) => "decode_error",
            RecordError::IllegalParameter(_) => "illegal_parameter",
            RecordError::SequenceExhausted => "sequence_exhausted",
            RecordError::PeerAlert(_) => "peer_alert",
            RecordError::Crypto(_) => "internal_error",
        }
    }
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::BadRecordMac => {
                f.write_str("record failed authentication (bad_record_mac)")
            }
            RecordError::RecordOverflow(len) => write!(f, "record of {len} bytes is too long"),
            RecordError::UnexpectedMessage(what) => write!(f, "unexpected message: {what}"),
            RecordError::DecodeError(what) => write!(f, "malformed {what}"),
            RecordError::IllegalParameter(what) => write!(f, "illegal parameter: {what}"),
            RecordError::SequenceExhausted => f.write_str("record sequence number exhausted"),
            RecordError::PeerAlert(code) => write!(f, "peer sent fatal alert {code}"),
            RecordError::Crypto(e) => write!(f, "OpenSSL failed: {e}"),
        }
    }
}

impl std::error::Error for RecordError {}
