//! SETTINGS (RFC 9114 §7.2.4, RFC 9204 §5): the peer's, checked, and ours, written.

use crate::error::{conn, Error, ErrorCode};
use crate::frame;
use crate::limits::Limits;
use crate::varint;

pub const QPACK_MAX_TABLE_CAPACITY: u64 = 0x01;
pub const MAX_FIELD_SECTION_SIZE: u64 = 0x06;
pub const QPACK_BLOCKED_STREAMS: u64 = 0x07;
/// RFC 9220 (extended CONNECT): we do not send it, so peers do not use `:protocol`.
pub const ENABLE_CONNECT_PROTOCOL: u64 = 0x08;
/// RFC 9297 (HTTP datagrams).
pub const H3_DATAGRAM: u64 = 0x33;

/// Identifiers reserved because HTTP/2 used them (§7.2.4.1, §11.2.2): receiving one is
/// H3_SETTINGS_ERROR.
pub fn is_http2_only(id: u64) -> bool {
    matches!(id, 0x00 | 0x02..=0x05)
}

/// What the peer's SETTINGS say; the defaults (§7.2.4.1, RFC 9204 §5) hold until it
/// arrives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerSettings {
    /// How large a dynamic table the peer's decoder allows ours to use. Our encoder uses
    /// none, so this is only recorded.
    pub qpack_max_table_capacity: u64,
    /// The largest field section the peer accepts; `None`: unlimited.
    pub max_field_section_size: Option<u64>,
    pub qpack_blocked_streams: u64,
    pub enable_connect_protocol: bool,
    pub h3_datagram: bool,
}

impl PeerSettings {
    /// Checks the pairs of one SETTINGS frame: no identifier twice (§7.2.4), none of
    /// HTTP/2's, booleans 0 or 1; unknown identifiers are ignored (§7.2.4.1).
    pub fn from_pairs(pairs: &[(u64, u64)]) -> Result<PeerSettings, Error> {
        let bad = |why| conn(ErrorCode::SettingsError, why);
        let mut s = PeerSettings::default();
        for (i, &(id, value)) in pairs.iter().enumerate() {
            if pairs[..i].iter().any(|&(seen, _)| seen == id) {
                return Err(bad("a setting twice in SETTINGS"));
            }
            if is_http2_only(id) {
                return Err(bad("an HTTP/2 setting in SETTINGS"));
            }
            let flag = || match value {
                0 | 1 => Ok(value == 1),
                _ => Err(bad("a boolean setting neither 0 nor 1")),
            };
            match id {
                QPACK_MAX_TABLE_CAPACITY => s.qpack_max_table_capacity = value,
                MAX_FIELD_SECTION_SIZE => s.max_field_section_size = Some(value),
                QPACK_BLOCKED_STREAMS => s.qpack_blocked_streams = value,
                ENABLE_CONNECT_PROTOCOL => s.enable_connect_protocol = flag()?,
                H3_DATAGRAM => s.h3_datagram = flag()?,
                _ => {}
            }
        }
        Ok(s)
    }
}

/// Appends our SETTINGS frame: the QPACK table capacity, field section size and blocked
/// streams of `limits`.
pub fn write(out: &mut Vec<u8>, limits: &Limits) {
    let mut payload = Vec::new();
    for (id, value) in [
        (QPACK_MAX_TABLE_CAPACITY, limits.qpack_max_table_capacity),
        (MAX_FIELD_SECTION_SIZE, limits.max_field_section_size),
        (QPACK_BLOCKED_STREAMS, limits.qpack_blocked_streams),
    ] {
        varint::write(&mut payload, id);
        varint::write(&mut payload, value);
    }
    frame::write(out, frame::SETTINGS, &payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(pairs: &[(u64, u64)]) -> Option<ErrorCode> {
        match PeerSettings::from_pairs(pairs) {
            Ok(_) => None,
            Err(Error::Connection(e)) => Some(e.code),
            Err(e) => panic!("{e:?}"),
        }
    }

    /// §7.2.4.1: the values a server reads; a greased identifier is ignored.
    #[test]
    fn rfc9114_7_2_4_1_known_and_unknown_settings() {
        let s =
            PeerSettings::from_pairs(&[(0x01, 100), (0x06, 9000), (0x07, 3), (0x21, 7)]).unwrap();
        assert_eq!(s.qpack_max_table_capacity, 100);
        assert_eq!(s.max_field_section_size, Some(9000));
        assert_eq!(s.qpack_blocked_streams, 3);
        assert_eq!(PeerSettings::default().max_field_section_size, None);
    }

    /// §7.2.4.1: HTTP/2's identifiers are H3_SETTINGS_ERROR; §7.2.4: so is a repeat.
    #[test]
    fn rfc9114_7_2_4_1_http2_settings_and_repeats_are_settings_errors() {
        for id in [0x00, 0x02, 0x03, 0x04, 0x05] {
            assert_eq!(code(&[(id, 1)]), Some(ErrorCode::SettingsError), "{id:#x}");
        }
        assert_eq!(
            code(&[(0x06, 1), (0x06, 1)]),
            Some(ErrorCode::SettingsError)
        );
        assert_eq!(code(&[(0x08, 2)]), Some(ErrorCode::SettingsError));
        assert_eq!(code(&[(0x08, 1), (0x33, 0)]), None);
    }

    #[test]
    fn our_settings_are_what_limits_say() {
        let mut out = Vec::new();
        write(&mut out, &Limits::default());
        let mut input = &out[..];
        let mut r = frame::FrameReader::new(frame::StreamKind::Control);
        let Ok(Some(frame::Piece::Frame(frame::Frame::Settings(pairs)))) =
            r.next(&mut input, &Limits::default())
        else {
            panic!("{out:?}")
        };
        assert_eq!(pairs, [(0x01, 4096), (0x06, 16384), (0x07, 16)]);
    }
}
