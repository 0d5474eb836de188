//! The limits keyed by fingerprint, shared by all worker threads: `tft`'s connections and
//! TLS records per second, `tfh`'s requests per second, and the blocklist file.
//!
//! As in Tempesta (fw/tf_filter.c) a rate is the count of events over the last second, cut
//! into 8 slots, and an event is refused when the count, itself included, is over the
//! limit: with `hash H 1 10;` the second connection within a second is refused. The slots
//! are frang's ([`crate::frang::window`]). Only configured fingerprints are counted (an
//! unconfigured one has no limit in Tempesta either), each behind its own lock, so the
//! table is as large as the configuration and a new fingerprint never allocates. Like
//! frang's tables, a reload starts the counts afresh. With `cluster`, the counts are shared
//! with the other instances through Redis (`fleet.rs`).
//!
//! `tfh`'s connection number is accepted and, as in Tempesta, not enforced: Tempesta limits
//! an HTTP fingerprint's requests only.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use config::{Config, FingerprintLimit, FingerprintLimits};

use super::fleet::{Counter, FingerprintDelta, Kind, SharedCount};
use super::{Tfh, Tft};
use crate::frang::window::{quantum, slot_len, SlotRing};
use crate::frang::{redis_up, FleetClock, FleetTotal, Violation, FRANG_BLOCK_STATUS};

#[derive(Debug, Default)]
struct Rates {
    connections: SlotRing,
    records: SlotRing,
    /// The same counts as the fleet sees them (used only with `cluster`).
    shared_connections: SharedCount,
    shared_records: SharedCount,
}

impl Rates {
    fn shared(&mut self, counter: Counter) -> &mut SharedCount {
        match counter {
            Counter::Connections => &mut self.shared_connections,
            Counter::Records => &mut self.shared_records,
        }
    }
}

#[derive(Debug)]
struct Entry {
    limit: FingerprintLimit,
    rates: Mutex<Rates>,
}

/// One kind's limits (`tft` or `tfh`).
#[derive(Debug, Default)]
struct Table {
    entries: HashMap<u64, Entry>,
    blocked: HashSet<u64>,
}

impl Table {
    fn new(limits: Option<&FingerprintLimits>) -> Table {
        // `storage_size=0`: Tempesta opens no table, and counts nothing.
        let entries = limits
            .filter(|l| l.storage_size > 0)
            .map(|l| {
                l.hashes
                    .iter()
                    .map(|&limit| {
                        let rates = Mutex::new(Rates::default());
                        (limit.hash, Entry { limit, rates })
                    })
                    .collect()
            })
            .unwrap_or_default();
        Table {
            entries,
            blocked: HashSet::new(),
        }
    }
}

/// What a violation of a fingerprint limit says (counted as `blocks_total{limit=kind}`).
fn violation(kind: &'static str, detail: String) -> Violation {
    Violation {
        limit: kind,
        detail,
        status: FRANG_BLOCK_STATUS,
    }
}

/// The per-fingerprint limits and blocklist in force, shared by the workers (`Runtime`).
#[derive(Debug)]
pub struct Fingerprints {
    epoch: Instant,
    slot: Duration,
    tls: Table,
    http: Table,
    /// With `cluster`: the clock of the Unix-numbered slots the fleet's counts are kept in
    /// (the process's, frang's too).
    fleet: Option<Arc<FleetClock>>,
}

/// Whether a connection, record or request may go on.
pub type Verdict = Result<(), Violation>;

impl Fingerprints {
    /// The limits of `config`, with the blocklist file read now. Err: the file cannot be
    /// read or a line of it is not a fingerprint (`PATH:LINE: ...`).
    pub fn build(config: &Config) -> Result<Fingerprints, String> {
        let mut fingerprints = Fingerprints {
            epoch: Instant::now(),
            slot: slot_len(Duration::from_secs(1)),
            tls: Table::new(config.tft.as_ref()),
            http: Table::new(config.tfh.as_ref()),
            // Shared only through Redis: a cache tier alone (`cluster` with peers only)
            // has no side thread to take the counts.
            fleet: config
                .cluster
                .as_ref()
                .filter(|c| c.redis.is_some())
                .map(|_| FleetClock::system()),
        };
        if let Some(path) = &config.tf_blocklist {
            fingerprints.read_blocklist(path)?;
        }
        Ok(fingerprints)
    }

    /// [`Fingerprints::build`], the fleet's slots (with `cluster`) numbered by `clock`.
    #[cfg(test)]
    pub(crate) fn with_fleet_clock(mut self, clock: Arc<FleetClock>) -> Fingerprints {
        if self.fleet.is_some() {
            self.fleet = Some(clock);
        }
        self
    }

    /// Reads `tf_blocklist`: one `tft HEX` or `tfh HEX` per line; `#` starts a comment.
    fn read_blocklist(&mut self, path: &Path) -> Result<(), String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("tf_blocklist {}: {e}", path.display()))?;
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut words = line.split_whitespace();
            let table = match words.next() {
                Some("tft") => &mut self.tls,
                Some("tfh") => &mut self.http,
                _ => return Err(bad_line(path, i, "expected `tft HEX` or `tfh HEX`")),
            };
            let hash = words
                .next()
                .and_then(config::parse_fingerprint)
                .ok_or_else(|| bad_line(path, i, "not a fingerprint (up to 16 hex digits)"))?;
            if words.next().is_some() {
                return Err(bad_line(path, i, "one fingerprint per line"));
            }
            table.blocked.insert(hash);
        }
        Ok(())
    }

    /// Whether requests need their `tfh` for a decision (a limit or a blocklist entry).
    pub fn judges_requests(&self) -> bool {
        !self.http.entries.is_empty() || !self.http.blocked.is_empty()
    }

    /// A TLS handshake completed with fingerprint `tft`: refused when blocklisted, or when
    /// it is one connection too many this second.
    pub fn on_tls_connection(&self, tft: Tft, now: Instant) -> Verdict {
        if self.tls.blocked.contains(&tft.0) {
            return Err(violation("tft", format!("{tft} is on the blocklist")));
        }
        let Some(entry) = self.tls.entries.get(&tft.0) else {
            return Ok(());
        };
        let q = quantum(self.epoch, now, self.slot);
        let mut rates = lock(&entry.rates);
        let count = rates.connections.add(q).in_frame;
        let count = self.judged(&mut rates, Counter::Connections, (count, 1), now);
        over("tft", tft.0, "connections", count, entry.limit.connections)
    }

    /// `records` TLS records arrived on a connection with fingerprint `tft`.
    pub fn on_tls_records(&self, tft: Tft, records: u64, now: Instant) -> Verdict {
        let Some(entry) = self.tls.entries.get(&tft.0).filter(|_| records > 0) else {
            return Ok(());
        };
        let q = quantum(self.epoch, now, self.slot);
        let mut rates = lock(&entry.rates);
        let mut count = 0;
        // Bounded by what one read decrypts (a few dozen records at most).
        for _ in 0..records.min(1 << 16) {
            count = rates.records.add(q).in_frame;
        }
        let count = self.judged(&mut rates, Counter::Records, (count, records), now);
        over("tft", tft.0, "records", count, entry.limit.records)
    }

    /// A request head with fingerprint `tfh` is complete: refused (403) when blocklisted,
    /// or when it is one request too many this second.
    pub fn on_request(&self, tfh: Tfh, now: Instant) -> Verdict {
        if self.http.blocked.contains(&tfh.0) {
            return Err(violation("tfh", format!("{tfh} is on the blocklist")));
        }
        let Some(entry) = self.http.entries.get(&tfh.0) else {
            return Ok(());
        };
        let q = quantum(self.epoch, now, self.slot);
        let mut rates = lock(&entry.rates);
        let count = rates.records.add(q).in_frame;
        let count = self.judged(&mut rates, Counter::Records, (count, 1), now);
        over("tfh", tfh.0, "requests", count, entry.limit.records)
    }

    /// Counts `events` of `counter` for the fleet (with `cluster`) and returns the count to
    /// judge: `local`, this node's, or the fleet's when Redis answers and it is larger.
    fn judged(
        &self,
        rates: &mut Rates,
        counter: Counter,
        (local, events): (u32, u64),
        now: Instant,
    ) -> u32 {
        let Some(clock) = &self.fleet else {
            return local;
        };
        let fleet = rates
            .shared(counter)
            .add(clock.slot(now, self.slot), events);
        if redis_up() {
            local.max(fleet)
        } else {
            local
        }
    }

    /// The length of the fleet's slots (one second cut in `FRANG_FREQ`).
    pub fn fleet_slot(&self) -> Duration {
        self.slot
    }

    /// Takes every configured fingerprint's pending counts (left empty), for the side
    /// thread to add to Redis; first ties the slots' clock to the wall clock again if that
    /// one stepped (frang's `FleetClock::follow`): the side thread numbers the frame it
    /// reads back by the wall clock of its turn.
    pub fn fleet_drain(&self) -> Vec<FingerprintDelta> {
        let mut deltas = Vec::new();
        let Some(clock) = &self.fleet else {
            return deltas;
        };
        clock.follow();
        for (kind, table) in [(Kind::Tls, &self.tls), (Kind::Http, &self.http)] {
            for (&hash, entry) in &table.entries {
                let mut rates = lock(&entry.rates);
                for counter in [Counter::Connections, Counter::Records] {
                    let slots = rates.shared(counter).take();
                    if !slots.is_empty() {
                        deltas.push(FingerprintDelta {
                            kind,
                            hash,
                            counter,
                            slots,
                        });
                    }
                }
            }
        }
        deltas
    }

    /// The fleet's counts of one counter of a fingerprint, read after its delta was added.
    pub fn fleet_update(&self, kind: Kind, hash: u64, counter: Counter, total: FleetTotal) {
        let table = match kind {
            Kind::Tls => &self.tls,
            Kind::Http => &self.http,
        };
        if let Some(entry) = table.entries.get(&hash) {
            lock(&entry.rates).shared(counter).update(total);
        }
    }
}

fn over(kind: &'static str, hash: u64, what: &str, count: u32, limit: u32) -> Verdict {
    if count > limit {
        return Err(violation(
            kind,
            format!("{hash:x}: {count} {what}/s > {limit}"),
        ));
    }
    Ok(())
}

fn lock(rates: &Mutex<Rates>) -> std::sync::MutexGuard<'_, Rates> {
    // The counters stay consistent whatever a panicking holder did: keep counting.
    rates.lock().unwrap_or_else(PoisonError::into_inner)
}

fn bad_line(path: &Path, index: usize, what: &str) -> String {
    format!("tf_blocklist {}:{}: {what}", path.display(), index + 1)
}

#[cfg(test)]
#[path = "limits_tests.rs"]
mod tests;
