//! The fingerprint limits' side of the `cluster` extension (docs/FLEET.md): the `tft` and
//! `tfh` counts several instances share through Redis, as frang's per-client counts are
//! shared (crate::frang's fleet.rs has the model; this is the same one, keyed by
//! fingerprint).
//!
//! A worker counts an event into its entry as always, plus a `pending` count in the event's
//! time slot, numbered from the Unix epoch so that every node numbers it alike (frang's
//! `FleetClock`, which follows the wall clock's steps). The side
//! thread (crate::fleet) takes the pending counts every `sync_interval`, adds them to their
//! slot's Redis key and reads the fleet's count of each slot of the frame back. While Redis
//! answers, an event is judged against the larger of this node's count and the fleet's
//! (read at the last sync, plus what was counted here since): between two syncs a node sees
//! the others as they were at the last one, so the fleet can exceed a limit by what the
//! other nodes admit in one interval and no more. Without Redis each node judges alone.
//!
//! Only configured fingerprints are counted, so the side thread walks the configured
//! entries: its work is bounded by the configuration, never by the clients.

use crate::frang::window::SlotRing;
use crate::frang::FleetTotal;

/// The two kinds of fingerprint, as their Redis keys name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Tls,
    Http,
}

/// What is counted of a fingerprint: `tft`'s connections and records, `tfh`'s requests
/// (kept as its `records`, as Tempesta keeps them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    Connections,
    Records,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Tls => "tft",
            Kind::Http => "tfh",
        }
    }
}

impl Counter {
    pub fn letter(self) -> char {
        match self {
            Counter::Connections => 'c',
            Counter::Records => 'r',
        }
    }
}

/// The events of one counter of one fingerprint counted here since the last sync, per slot
/// `(slot number, events)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FingerprintDelta {
    pub kind: Kind,
    pub hash: u64,
    pub counter: Counter,
    pub slots: Vec<(u64, u32)>,
}

/// One counter of a fingerprint as the fleet sees it.
#[derive(Debug, Default)]
pub(super) struct SharedCount {
    /// Events counted here since the side thread last took them.
    pending: SlotRing,
    /// The fleet's count of each slot of the frame at the last sync (this node's flushed
    /// events included).
    fleet: SlotRing,
}

impl SharedCount {
    /// Counts `events` in slot `q`; returns the fleet's count over the frame ending at `q`
    /// as this node knows it.
    pub(super) fn add(&mut self, q: u64, events: u64) -> u32 {
        self.pending
            .add_many(q, u32::try_from(events).unwrap_or(u32::MAX));
        self.fleet.sum_to(q).saturating_add(self.pending.sum_to(q))
    }

    /// The pending counts, leaving none.
    pub(super) fn take(&mut self) -> Vec<(u64, u32)> {
        self.pending.take()
    }

    /// The fleet's counts read back from Redis replace those of the last sync.
    pub(super) fn update(&mut self, total: FleetTotal) {
        self.fleet = SlotRing::default();
        for (q, n) in total.slots {
            self.fleet.set(q, n);
        }
    }
}
