//! SETTINGS parameters (RFC 9113 §6.5.2): the peer's values, validated
//! as they arrive.

use crate::error::{ErrorCode, H2Error};

/// Parameter identifiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum SettingId {
    HeaderTableSize = 0x1,
    EnablePush = 0x2,
    MaxConcurrentStreams = 0x3,
    InitialWindowSize = 0x4,
    MaxFrameSize = 0x5,
    MaxHeaderListSize = 0x6,
}

/// The peer's settings as they apply to what we send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerSettings {
    pub header_table_size: u32,
    pub initial_window_size: u32,
    pub max_frame_size: u32,
    pub max_header_list_size: Option<u32>,
}

impl Default for PeerSettings {
    fn default() -> Self {
        PeerSettings {
            header_table_size: 4096,
            initial_window_size: 65_535,
            max_frame_size: 16_384,
            max_header_list_size: None,
        }
    }
}

impl PeerSettings {
    /// Applies a SETTINGS payload (length already checked to be a multiple
    /// of 6) in order, as §6.5.3 requires. Unknown identifiers are ignored.
    pub fn apply(&mut self, payload: &[u8]) -> Result<(), H2Error> {
        for p in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([p[0], p[1]]);
            let value = u32::from_be_bytes([p[2], p[3], p[4], p[5]]);
            match id {
                0x1 => self.header_table_size = value,
                0x2 if value > 1 => {
                    return Err(H2Error::conn(
                        ErrorCode::PROTOCOL_ERROR,
                        "ENABLE_PUSH not 0 or 1",
                    ))
                }
                0x4 if value > 0x7fff_ffff => {
                    return Err(H2Error::conn(
                        ErrorCode::FLOW_CONTROL_ERROR,
                        "INITIAL_WINDOW_SIZE above 2^31-1",
                    ))
                }
                0x4 => self.initial_window_size = value,
                0x5 if !(16_384..=16_777_215).contains(&value) => {
                    return Err(H2Error::conn(
                        ErrorCode::PROTOCOL_ERROR,
                        "MAX_FRAME_SIZE outside 16384..=16777215",
                    ))
                }
                0x5 => self.max_frame_size = value,
                0x6 => self.max_header_list_size = Some(value),
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(id: u16, v: u32) -> Vec<u8> {
        let mut p = id.to_be_bytes().to_vec();
        p.extend_from_slice(&v.to_be_bytes());
        p
    }

    fn code(r: Result<(), H2Error>) -> ErrorCode {
        match r {
            Err(H2Error::Connection(e)) => e.code,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn values_applied_in_order_unknown_ignored() {
        let mut s = PeerSettings::default();
        let mut p = param(4, 10);
        p.extend(param(4, 20));
        p.extend(param(0x99, 1));
        p.extend(param(5, 20_000));
        s.apply(&p).unwrap();
        assert_eq!(s.initial_window_size, 20);
        assert_eq!(s.max_frame_size, 20_000);
    }

    #[test]
    fn invalid_values_are_connection_errors() {
        let mut s = PeerSettings::default();
        assert_eq!(code(s.apply(&param(2, 2))), ErrorCode::PROTOCOL_ERROR);
        assert_eq!(
            code(s.apply(&param(4, 1 << 31))),
            ErrorCode::FLOW_CONTROL_ERROR
        );
        assert_eq!(code(s.apply(&param(5, 16_383))), ErrorCode::PROTOCOL_ERROR);
        assert_eq!(code(s.apply(&param(5, 1 << 24))), ErrorCode::PROTOCOL_ERROR);
    }
}
