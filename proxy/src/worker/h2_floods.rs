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
use super::client::{ClientId, Clients};
use crate::metrics::Metrics;
use crate::runtime::Runtime;

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

/// Counts and logs the floods client `ci` tripped since the last look, and judges them: true
/// when one ended the connection and it is to be reset (`block_action attack drop`, or a
/// client that reads nothing, which would never take a GOAWAY either). Called after the
/// connection's frames went into the outbox, so a drop can take them back.
pub(super) fn judge(clients: &mut Clients, ci: ClientId, rt: &Runtime, metrics: &Metrics) -> bool {
    let Some(c) = clients.get_mut(ci) else {
        return false;
    };
    let Codec::H2(h2) = &mut c.codec else {
        return false;
    };
    let trips = h2.new_trips();
    if trips.is_empty() {
        return false;
    }
    let ip = c.peer.ip();
    let action = rt.config.block_action.attack;
    let mut ended = false;
    for t in &trips {
        metrics.h2.add_floods(t.kind, t.times);
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
        return false;
    }
    metrics.count_block("h2_flood");
    rt.frang.on_violation(ip, Instant::now());
    let stalled = trips.iter().any(|t| t.kind == Flood::OutputStall);
    !action.reply || stalled
}

/// The client timer fired: whether client `ci`'s outbox has held bytes for
/// `h2_stall_timeout` without taking any (a slow read). If so it trips the output stall
/// defence, counted and logged here; the caller resets the client (a GOAWAY would never
/// reach it) and ends its streams.
pub(super) fn output_stalled(
    clients: &mut Clients,
    ci: ClientId,
    (rt, metrics): (&Runtime, &Metrics),
    now: Instant,
) -> bool {
    let timeout = rt.config.h2_stall_timeout;
    let Some(c) = clients.get_mut(ci) else {
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
    metrics.h2.add_floods(Flood::OutputStall, 1);
    metrics.count_block("h2_flood");
    if rt.config.block_action.attack.log {
        crate::warn!(
            "h2 flood from {ip}: {} limit tripped, {}",
            Flood::OutputStall.name(),
            effect(Flood::OutputStall, true)
        );
    }
    rt.frang.on_violation(ip, now);
    true
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
