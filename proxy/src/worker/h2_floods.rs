//! The flood defences of an HTTP/2 connection as the operator sees them: the `h2` crate
//! trips and counts them; here each kind is counted in the metrics as it trips, logged once
//! per connection (a flood trips some defences once per frame or stream: the log must not
//! become the flood's amplifier), and a trip that ends the connection is treated as a frang
//! block: `ip_block` blocks the address, and `block_action attack` decides how the
//! connection ends — `reply`: the GOAWAY (ENHANCE_YOUR_CALM, or SETTINGS_TIMEOUT) is sent,
//! then the connection closes; `drop`: nothing more is sent and the connection is reset.

use std::time::Instant;

use h2::{Counters, Flood};

use super::client::codec::Codec;
use super::client::ClientId;
use super::finish::Refusal;
use super::Worker;

/// What one connection's floods have been seen to do so far.
#[derive(Default)]
pub struct FloodWatch {
    /// Trips already counted in the metrics, by kind (`Flood::ALL` order).
    counted: [u64; Flood::ALL.len()],
}

/// A defence that tripped since the last look.
pub struct Trip {
    pub kind: Flood,
    pub times: u64,
    /// The first trip of this kind on this connection (to be logged).
    pub first: bool,
}

impl FloodWatch {
    /// The kinds whose count grew since the last call.
    pub fn new_trips(&mut self, counters: &Counters) -> Vec<Trip> {
        let mut trips = Vec::new();
        for (i, kind) in Flood::ALL.iter().enumerate() {
            let now = counters.floods(*kind);
            let before = std::mem::replace(&mut self.counted[i], now);
            if now > before {
                trips.push(Trip {
                    kind: *kind,
                    times: now - before,
                    first: before == 0,
                });
            }
        }
        trips
    }
}

/// Whether tripping `kind` ends the connection (the others refuse or reset one stream).
pub fn ends_connection(kind: Flood) -> bool {
    !matches!(
        kind,
        Flood::SendWindowStall | Flood::NewStreamsPerRead | Flood::HeaderList
    )
}

/// What the defence does, for the log.
fn effect(kind: Flood, drop: bool) -> &'static str {
    match kind {
        Flood::SendWindowStall => "stream reset (CANCEL)",
        Flood::NewStreamsPerRead => "streams refused (REFUSED_STREAM)",
        Flood::HeaderList => "request answered 431",
        Flood::OutputStall => "connection reset (the client reads nothing)",
        _ if drop => "connection reset (block_action attack drop)",
        Flood::SettingsTimeout => "connection closed with GOAWAY SETTINGS_TIMEOUT",
        _ => "connection closed with GOAWAY ENHANCE_YOUR_CALM",
    }
}

impl Worker {
    /// Counts, logs and acts on the floods client `ci` tripped since the last look. Called
    /// after the connection's frames went into the outbox, so a drop can take them back.
    pub(super) fn h2_floods(&mut self, ci: ClientId) {
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        let Codec::H2(h2) = &mut c.codec else {
            return;
        };
        let trips = h2.new_trips();
        if trips.is_empty() {
            return;
        }
        let ip = c.peer.ip();
        let action = self.rt.config.block_action.attack;
        let mut ended = false;
        for t in &trips {
            self.shared.metrics.h2.add_floods(t.kind, t.times);
            ended |= ends_connection(t.kind);
            if t.first && action.log {
                crate::warn!(
                    "h2 flood from {ip}: {} limit tripped, {}",
                    t.kind.name(),
                    effect(t.kind, !action.reply && ends_connection(t.kind))
                );
            }
        }
        if !ended {
            return;
        }
        self.metrics().count_block("h2_flood");
        self.rt.frang.on_violation(ip, Instant::now());
        // A client that reads nothing would never take a GOAWAY either: reset it.
        let stalled = trips.iter().any(|t| t.kind == Flood::OutputStall);
        if !action.reply || stalled {
            self.drop_response(ci, Refusal::Attack);
        }
    }
}

impl Worker {
    /// The client timer fired: a client whose outbox has held bytes for `h2_stall_timeout`
    /// without taking any reads nothing (slow read). It trips the output stall defence and
    /// is reset: a GOAWAY would never reach it. True if so.
    pub(super) fn h2_output_stalled(&mut self, ci: ClientId, now: Instant) -> bool {
        let timeout = self.rt.config.h2_stall_timeout;
        let Some(c) = self.clients.get_mut(ci) else {
            return false;
        };
        let Codec::H2(h2) = &mut c.codec else {
            return false;
        };
        if h2.out_stalled_since.is_none_or(|at| now < at + timeout) || c.out.is_empty() {
            return false;
        }
        h2.out_stalled_since = None;
        let ip = c.peer.ip();
        self.shared.metrics.h2.add_floods(Flood::OutputStall, 1);
        self.metrics().count_block("h2_flood");
        if self.rt.config.block_action.attack.log {
            crate::warn!(
                "h2 flood from {ip}: {} limit tripped, {}",
                Flood::OutputStall.name(),
                effect(Flood::OutputStall, true)
            );
        }
        self.rt.frang.on_violation(ip, now);
        self.drop_response(ci, Refusal::Attack);
        // Its streams end with it (their upstream requests are cancelled).
        let dropped = match self.clients.get_mut(ci) {
            Some(c) => c.codec.reset(),
            None => Vec::new(),
        };
        for id in dropped {
            self.drop_exchange(id);
        }
        self.dirty.push_back(super::client_token(ci));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_level_trips_keep_the_connection() {
        assert!(ends_connection(Flood::Ping));
        assert!(ends_connection(Flood::OutputStall));
        assert!(!ends_connection(Flood::SendWindowStall));
        assert!(effect(Flood::Ping, true).contains("reset"));
        assert!(effect(Flood::Ping, false).contains("GOAWAY"));
    }
}
