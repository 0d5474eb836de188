//! What the connection counts, for the proxy to export as metrics (`..._h3_floods_total
//! {kind}`, errors by code).

use crate::error::{ConnError, ErrorCode};

/// Each limit of [`crate::Limits`] that can trip. `name()` is the metrics label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flood {
    /// A HEADERS frame over `max_field_section_size` (skipped, 431).
    HeadersFrameSize,
    /// A decoded field section over `max_field_section_size` (431).
    FieldSectionSize,
    /// A field section with more than `max_header_fields` fields (431).
    HeaderFields,
    /// Set Dynamic Table Capacity above `qpack_max_table_capacity`.
    TableCapacity,
    /// One blocked stream more than `qpack_blocked_streams`.
    BlockedStreams,
    /// A blocked stream receiving more than `max_blocked_input`.
    BlockedInput,
    /// An encoder-stream instruction longer than the table could hold.
    EncoderInstruction,
    /// A SETTINGS frame over `max_settings_size`.
    SettingsSize,
    /// More than `max_skipped_frames` unknown or reserved frames on a stream.
    SkippedFrames,
    /// More than `max_empty_frames` empty DATA frames on a stream.
    EmptyFrames,
}

impl Flood {
    pub const ALL: [Flood; 10] = [
        Flood::HeadersFrameSize,
        Flood::FieldSectionSize,
        Flood::HeaderFields,
        Flood::TableCapacity,
        Flood::BlockedStreams,
        Flood::BlockedInput,
        Flood::EncoderInstruction,
        Flood::SettingsSize,
        Flood::SkippedFrames,
        Flood::EmptyFrames,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Flood::HeadersFrameSize => "headers_frame_size",
            Flood::FieldSectionSize => "field_section_size",
            Flood::HeaderFields => "header_fields",
            Flood::TableCapacity => "qpack_table_capacity",
            Flood::BlockedStreams => "qpack_blocked_streams",
            Flood::BlockedInput => "blocked_input",
            Flood::EncoderInstruction => "qpack_encoder_instruction",
            Flood::SettingsSize => "settings_size",
            Flood::SkippedFrames => "skipped_frames",
            Flood::EmptyFrames => "empty_frames",
        }
    }

    /// The connection error for the limits that end a connection when they trip.
    pub fn conn_error(self) -> ConnError {
        let (code, reason) = match self {
            Flood::TableCapacity => (
                ErrorCode::QpackEncoderStreamError,
                "Set Dynamic Table Capacity above our QPACK_MAX_TABLE_CAPACITY",
            ),
            Flood::BlockedStreams => (
                ErrorCode::QpackDecompressionFailed,
                "more blocked streams than our QPACK_BLOCKED_STREAMS",
            ),
            Flood::EncoderInstruction => (
                ErrorCode::QpackEncoderStreamError,
                "encoder stream instruction larger than the table",
            ),
            Flood::SettingsSize => (ErrorCode::ExcessiveLoad, "SETTINGS over max_settings_size"),
            Flood::SkippedFrames => (
                ErrorCode::ExcessiveLoad,
                "too many unknown or reserved frames on the control stream",
            ),
            _ => (ErrorCode::ExcessiveLoad, self.name()),
        };
        ConnError { code, reason }
    }

    fn index(self) -> usize {
        Flood::ALL
            .iter()
            .position(|&f| f == self)
            .unwrap_or_default()
    }
}

/// Counts of one connection; the caller adds them to its totals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    floods: [u64; Flood::ALL.len()],
    /// Allocated at the first error: most connections have none, and the counts by code
    /// are most of the connection's size (issue 33's idle connection bytes).
    errors: Option<Box<ErrorCounts>>,
    /// Requests handed to the application.
    pub requests: u64,
    /// Frames of unknown or reserved type skipped (within the limit).
    pub skipped_frames: u64,
}

/// Stream and connection errors by code.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ErrorCounts {
    stream: [u64; ErrorCode::ALL.len()],
    conn: [u64; ErrorCode::ALL.len()],
}

impl Counters {
    pub fn flood(&self, kind: Flood) -> u64 {
        self.floods[kind.index()]
    }

    pub fn stream_errors(&self, code: ErrorCode) -> u64 {
        self.errors.as_ref().map_or(0, |e| e.stream[code.index()])
    }

    pub fn conn_errors(&self, code: ErrorCode) -> u64 {
        self.errors.as_ref().map_or(0, |e| e.conn[code.index()])
    }

    pub(crate) fn trip(&mut self, kind: Flood) {
        self.floods[kind.index()] += 1;
    }

    pub(crate) fn stream_error(&mut self, code: ErrorCode) {
        self.errors_mut().stream[code.index()] += 1;
    }

    pub(crate) fn conn_error(&mut self, code: ErrorCode) {
        self.errors_mut().conn[code.index()] += 1;
    }

    fn errors_mut(&mut self) -> &mut ErrorCounts {
        self.errors.get_or_insert_with(|| {
            Box::new(ErrorCounts {
                stream: [0; ErrorCode::ALL.len()],
                conn: [0; ErrorCode::ALL.len()],
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counts by code start at zero without their table and count each code apart.
    #[test]
    fn error_counts_are_kept_by_code_once_there_is_one() {
        let mut c = Counters::default();
        assert_eq!(c.conn_errors(ErrorCode::FrameError), 0);
        assert!(c.errors.is_none());
        c.conn_error(ErrorCode::FrameError);
        c.stream_error(ErrorCode::MessageError);
        c.stream_error(ErrorCode::MessageError);
        assert_eq!(c.conn_errors(ErrorCode::FrameError), 1);
        assert_eq!(c.stream_errors(ErrorCode::MessageError), 2);
        assert_eq!(c.stream_errors(ErrorCode::FrameError), 0);
        assert_eq!(c.conn_errors(ErrorCode::MessageError), 0);
    }
}
