//! Flood accounting, timers and the resets the connection sends on its
//! own: every defence of issue 15 that is not a plain protocol rule.

use std::time::Instant;

use super::{Connection, Phase};
use crate::counters::Flood;
use crate::error::{ConnError, ErrorCode, H2Error};
use crate::event::Event;
use crate::guards;
use crate::stream::Closed;
use crate::write;

impl Connection {
    /// Trips `kind`: counted, answered with GOAWAY ENHANCE_YOUR_CALM.
    pub(super) fn trip(&mut self, kind: Flood, reason: &'static str) -> H2Error {
        guards::trip(&mut self.counters, kind, reason)
    }

    /// Byte and rate accounting done for every frame before it is handled.
    pub(super) fn account(
        &mut self,
        frame_kind: u8,
        length: u32,
        now: Instant,
    ) -> Result<(), H2Error> {
        let ctx = (&self.limits, &mut self.counters);
        self.guards.account(ctx, frame_kind, length, now)
    }

    pub(super) fn check_ping_rate(&mut self) -> Result<(), H2Error> {
        let ctx = (&self.limits, &mut self.counters);
        self.guards.ping(ctx, self.now)
    }

    pub(super) fn check_settings_rate(&mut self) -> Result<(), H2Error> {
        let ctx = (&self.limits, &mut self.counters);
        self.guards.settings(ctx, self.now)
    }

    pub(super) fn check_window_update_rate(&mut self) -> Result<(), H2Error> {
        let ctx = (&self.limits, &mut self.counters);
        self.guards.window_update(ctx, self.now)
    }

    pub(super) fn check_empty_data_rate(&mut self) -> Result<(), H2Error> {
        let ctx = (&self.limits, &mut self.counters);
        self.guards.empty_data(ctx, self.now)
    }

    /// The peer reset a stream we had not finished: rapid reset budget.
    pub(super) fn spend_reset_budget(&mut self) -> Result<(), H2Error> {
        if !self.guards.resets.spend() {
            return Err(self.trip(Flood::RapidReset, "rapid reset"));
        }
        Ok(())
    }

    /// A stream ended normally: both budgets get one back.
    pub(super) fn refill_budgets(&mut self) {
        self.guards.resets.refill();
        self.guards.provoked.refill();
    }

    /// Resets `stream` because the peer broke a stream-level rule
    /// (MadeYouReset budget), telling the application if it knew it.
    pub(super) fn stream_error(&mut self, stream: u32, code: ErrorCode) {
        self.send_reset(stream, code);
        if !self.guards.provoked.spend() {
            self.counters.flood(Flood::MadeYouReset);
            self.fail(ConnError {
                code: ErrorCode::ENHANCE_YOUR_CALM,
                reason: "too many stream errors",
            });
        }
    }

    /// Writes RST_STREAM and forgets the stream.
    pub(super) fn send_reset(&mut self, stream: u32, code: ErrorCode) {
        write::rst_stream(&mut self.output.buf, stream, code);
        self.counters.reset_sent(code);
        self.closed.push(stream, Closed::ResetByUs);
        if let Some(s) = self.streams.remove(&stream) {
            self.release_connection_window(s.unconsumed);
            if s.delivered {
                self.events.push_back(Event::Reset { stream, code });
            }
        }
    }

    /// The earliest instant at which [`Connection::on_timeout`] has work:
    /// the SETTINGS ack deadline, a stalled stream, stalled output.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.phase == Phase::Closed {
            return None;
        }
        let l = &self.limits;
        let settings = self
            .settings_unacked_since
            .map(|t| t + l.settings_ack_timeout);
        let output = self.output.stall_since.map(|t| t + l.output_stall_timeout);
        let stream = self
            .streams
            .values()
            .filter_map(|s| s.blocked_since)
            .min()
            .map(|t| t + l.send_window_timeout);
        [settings, output, stream].into_iter().flatten().min()
    }

    /// Acts on the deadlines that passed by `now`.
    pub fn on_timeout(&mut self, now: Instant) {
        self.now = now;
        if self.phase == Phase::Closed {
            return;
        }
        let l = self.limits.clone();
        if matches!(self.output.stall_since, Some(t) if now >= t + l.output_stall_timeout) {
            self.counters.flood(Flood::OutputStall);
            self.fail(ConnError {
                code: ErrorCode::ENHANCE_YOUR_CALM,
                reason: "peer reads nothing",
            });
            return;
        }
        if matches!(self.settings_unacked_since, Some(t) if now >= t + l.settings_ack_timeout) {
            self.counters.flood(Flood::SettingsTimeout);
            self.fail(ConnError {
                code: ErrorCode::SETTINGS_TIMEOUT,
                reason: "SETTINGS not acknowledged",
            });
            return;
        }
        let stalled: Vec<u32> = self
            .streams
            .iter()
            .filter(|(_, s)| matches!(s.blocked_since, Some(t) if now >= t + l.send_window_timeout))
            .map(|(id, _)| *id)
            .collect();
        for id in stalled {
            self.counters.flood(Flood::SendWindowStall);
            self.send_reset(id, ErrorCode::CANCEL);
        }
        self.note_output();
    }
}
