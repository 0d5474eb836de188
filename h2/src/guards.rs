//! The flood accounting both roles share: per-frame byte and rate
//! accounting, the per-second rates of PING, SETTINGS, WINDOW_UPDATE and
//! empty DATA, and the two reset budgets. A server's peer is a client, a
//! client's peer is an origin: the same limits bound either.

use std::time::Instant;

use crate::counters::{Counters, Flood};
use crate::error::{ErrorCode, H2Error};
use crate::frame::kind;
use crate::limits::Limits;
use crate::rate::{Budget, PerSecond};

/// Counts the trip of `kind` and makes its GOAWAY ENHANCE_YOUR_CALM error.
pub(crate) fn trip(counters: &mut Counters, kind: Flood, reason: &'static str) -> H2Error {
    counters.flood(kind);
    H2Error::conn(ErrorCode::ENHANCE_YOUR_CALM, reason)
}

/// Flood accounting of one connection.
pub(crate) struct Guards {
    pings: PerSecond,
    settings: PerSecond,
    control: PerSecond,
    window_updates: PerSecond,
    empty_data: PerSecond,
    pub resets: Budget,
    pub provoked: Budget,
    pub new_streams_this_read: u32,
    control_bytes: u64,
    pub payload_bytes: u64,
    /// WINDOW_UPDATE frames that answer DATA we sent (one per 4 KiB of it, at most 1024
    /// banked): a peer acknowledging every frame of a fast transfer is not flooding, so
    /// these do not count against the WINDOW_UPDATE rate.
    pub answered_updates: u64,
}

impl Guards {
    pub fn new(limits: &Limits) -> Guards {
        Guards {
            pings: PerSecond::new(),
            settings: PerSecond::new(),
            control: PerSecond::new(),
            window_updates: PerSecond::new(),
            empty_data: PerSecond::new(),
            resets: Budget::new(limits.reset_budget.max(1)),
            provoked: Budget::new(limits.provoked_reset_budget.max(1)),
            new_streams_this_read: 0,
            control_bytes: 0,
            payload_bytes: 0,
            answered_updates: 0,
        }
    }

    /// `n` payload bytes were sent: they count for the overhead ratio and
    /// bank the WINDOW_UPDATEs that will answer them.
    pub fn sent_payload(&mut self, n: usize) {
        self.payload_bytes += n as u64;
        self.answered_updates = (self.answered_updates + (n as u64).div_ceil(4096)).min(1024);
    }

    /// Byte and rate accounting done for every frame before it is handled.
    pub fn account(
        &mut self,
        (l, c): (&Limits, &mut Counters),
        frame_kind: u8,
        length: u32,
        now: Instant,
    ) -> Result<(), H2Error> {
        let wire = 9 + u64::from(length);
        let limit = l
            .max_concurrent_streams
            .saturating_mul(l.ctrl_frame_rate_multiplier)
            .max(100);
        match frame_kind {
            kind::DATA | kind::HEADERS | kind::CONTINUATION if length > 0 => {
                self.payload_bytes += u64::from(length);
            }
            kind::HEADERS | kind::CONTINUATION => {}
            _ => {
                self.control_bytes += wire;
                if !self.control.allow(now, limit) {
                    return Err(trip(c, Flood::ControlFrames, "control frame rate"));
                }
            }
        }
        let allowed = self.payload_bytes.saturating_add(l.overhead_allowance);
        if self.control_bytes > allowed.saturating_mul(u64::from(l.max_overhead_ratio)) {
            return Err(trip(c, Flood::Overhead, "control frames dwarf payload"));
        }
        Ok(())
    }

    pub fn ping(&mut self, (l, c): (&Limits, &mut Counters), now: Instant) -> Result<(), H2Error> {
        if !self.pings.allow(now, l.max_pings_per_sec) {
            return Err(trip(c, Flood::Ping, "PING rate"));
        }
        Ok(())
    }

    pub fn settings(
        &mut self,
        (l, c): (&Limits, &mut Counters),
        now: Instant,
    ) -> Result<(), H2Error> {
        if !self.settings.allow(now, l.max_settings_per_sec) {
            return Err(trip(c, Flood::Settings, "SETTINGS rate"));
        }
        Ok(())
    }

    pub fn window_update(
        &mut self,
        (l, c): (&Limits, &mut Counters),
        now: Instant,
    ) -> Result<(), H2Error> {
        if self.answered_updates > 0 {
            self.answered_updates -= 1;
            return Ok(());
        }
        let limit = l
            .max_concurrent_streams
            .saturating_mul(l.window_update_frame_rate_multiplier)
            .max(100);
        if !self.window_updates.allow(now, limit) {
            return Err(trip(c, Flood::WindowUpdate, "WINDOW_UPDATE rate"));
        }
        Ok(())
    }

    pub fn empty_data(
        &mut self,
        (l, c): (&Limits, &mut Counters),
        now: Instant,
    ) -> Result<(), H2Error> {
        if !self.empty_data.allow(now, l.max_empty_data_per_sec) {
            return Err(trip(c, Flood::EmptyData, "empty DATA frames"));
        }
        Ok(())
    }
}
