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
    stream_errors: [u64; ErrorCode::ALL.len()],
    conn_errors: [u64; ErrorCode::ALL.len()],
    /// Requests handed to the application.
    pub requests: u64,
    /// Frames of unknown or reserved type skipped (within the limit).
    pub skipped_frames: u64,
}

impl Counters {
    pub fn flood(&self, kind: Flood) -> u64 {
        self.floods[kind.index()]
    }

    pub fn stream_errors(&self, code: ErrorCode) -> u64 {
        self.stream_errors[code.index()]
    }

    pub fn conn_errors(&self, code: ErrorCode) -> u64 {
        self.conn_errors[code.index()]
    }

    pub(crate) fn trip(&mut self, kind: Flood) {
        self.floods[kind.index()] += 1;
    }

    pub(crate) fn stream_error(&mut self, code: ErrorCode) {
        self.stream_errors[code.index()] += 1;
    }

    pub(crate) fn conn_error(&mut self, code: ErrorCode) {
        self.conn_errors[code.index()] += 1;
    }
}
