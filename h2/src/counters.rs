//! What the connection counts, for the proxy to export as metrics
//! (`..._h2_floods_total{kind}`, resets by code, GOAWAYs, streams).

use crate::error::ErrorCode;

/// Each flood defence that can trip. `name()` is the metrics label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flood {
    Ping,
    Settings,
    SettingsTimeout,
    RapidReset,
    NewStreamsPerRead,
    MadeYouReset,
    Continuation,
    HeaderList,
    EmptyData,
    WindowUpdate,
    ControlFrames,
    Overhead,
    SendWindowStall,
    OutputStall,
}

impl Flood {
    pub const ALL: [Flood; 14] = [
        Flood::Ping,
        Flood::Settings,
        Flood::SettingsTimeout,
        Flood::RapidReset,
        Flood::NewStreamsPerRead,
        Flood::MadeYouReset,
        Flood::Continuation,
        Flood::HeaderList,
        Flood::EmptyData,
        Flood::WindowUpdate,
        Flood::ControlFrames,
        Flood::Overhead,
        Flood::SendWindowStall,
        Flood::OutputStall,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Flood::Ping => "ping",
            Flood::Settings => "settings",
            Flood::SettingsTimeout => "settings_timeout",
            Flood::RapidReset => "rapid_reset",
            Flood::NewStreamsPerRead => "new_streams_per_read",
            Flood::MadeYouReset => "made_you_reset",
            Flood::Continuation => "continuation",
            Flood::HeaderList => "header_list",
            Flood::EmptyData => "empty_data",
            Flood::WindowUpdate => "window_update",
            Flood::ControlFrames => "control_frames",
            Flood::Overhead => "overhead",
            Flood::SendWindowStall => "send_window_stall",
            Flood::OutputStall => "output_stall",
        }
    }
}

/// Codes 0x0..=0xd by index; any other code is counted in the last slot.
const CODE_SLOTS: usize = 15;

fn slot(code: ErrorCode) -> usize {
    (code.0 as usize).min(CODE_SLOTS - 1)
}

/// Per-connection counters; the proxy adds them into its global metrics
/// when the connection ends (or samples them while it runs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    floods: [u64; 14],
    resets_sent: [u64; CODE_SLOTS],
    resets_received: [u64; CODE_SLOTS],
    pub goaways_sent: u64,
    pub goaways_received: u64,
    /// Streams opened by the peer and accepted.
    pub streams_total: u64,
    /// Streams refused (over max_concurrent_streams, per-read cap, after
    /// GOAWAY).
    pub streams_refused: u64,
}

impl Counters {
    pub(crate) fn flood(&mut self, kind: Flood) {
        let i = Flood::ALL.iter().position(|k| *k == kind).unwrap_or(0);
        self.floods[i] += 1;
    }

    pub(crate) fn reset_sent(&mut self, code: ErrorCode) {
        self.resets_sent[slot(code)] += 1;
    }

    pub(crate) fn reset_received(&mut self, code: ErrorCode) {
        self.resets_received[slot(code)] += 1;
    }

    /// Times the defence `kind` tripped.
    pub fn floods(&self, kind: Flood) -> u64 {
        let i = Flood::ALL.iter().position(|k| *k == kind).unwrap_or(0);
        self.floods[i]
    }

    /// RST_STREAM frames we sent with `code` (codes above 0xd share one
    /// slot).
    pub fn resets_sent(&self, code: ErrorCode) -> u64 {
        self.resets_sent[slot(code)]
    }

    /// RST_STREAM frames the peer sent with `code`.
    pub fn resets_received(&self, code: ErrorCode) -> u64 {
        self.resets_received[slot(code)]
    }
}
