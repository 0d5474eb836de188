//! Frang's side of the `cluster` extension (docs/FLEET.md): the per-client counts several
//! instances share through Redis, and the blocks they tell each other about.
//!
//! No I/O here and no wait: a worker counts into the client's entry as it always does, plus
//! a `pending` count the side thread (`crate::fleet`) takes every `sync_interval`, adds to
//! Redis and answers with the fleet's totals, which the next requests are judged against.
//! Between two syncs a node sees the others' counts as they were at the last one: the limit
//! can be exceeded by what the other nodes admit in one interval, and no more.
//!
//! Only clients with new events are synced: a client idle here keeps the totals of its last
//! sync, judged as they were (erring toward the limit) until a time frame has passed, when
//! they are dropped. Redis work is then bounded by the events, not by the clients known.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use config::IpBlock;

use super::window::FRANG_FREQ;

use super::clients::{lock, Blocked, Client, Frang, RateLimit};
use super::Violation;

/// Whether the last exchange with Redis succeeded: while it is false every node judges with
/// its own counts only (or, `on_redis_failure closed`, refuses new connections). One per
/// process, whatever the reloads: the link outlives every configuration.
static REDIS_UP: AtomicBool = AtomicBool::new(false);

/// Whether Redis answered the last sync (`ktls_proxy_fleet_redis_up`).
pub fn redis_up() -> bool {
    REDIS_UP.load(Ordering::Acquire)
}

/// Set by the side thread after each sync.
pub fn set_redis_up(up: bool) {
    REDIS_UP.store(up, Ordering::Release);
}

/// Blocks waiting to be published; beyond this the oldest are dropped (each node still
/// enforces its own: only the fleet learns of fewer).
const OUTBOX_MAX: usize = 4096;

/// A frang shared with a fleet.
#[derive(Debug)]
pub(super) struct FleetMode {
    /// `on_redis_failure closed`.
    fail_closed: bool,
    /// Blocks imposed here since the last sync: the address and the block's length (`None`:
    /// forever).
    outbox: Mutex<Vec<(IpAddr, Option<Duration>)>>,
}

/// One counter of a client as the fleet sees it.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct SharedCount {
    /// Events counted here since the side thread last took them.
    pending: u32,
    /// The fleet's total over the time frame at the last sync (this node's flushed events
    /// included).
    frame: u32,
    /// The fleet's total in the current time slot at the last sync (for `*_burst`).
    slot: u32,
    /// When `frame` and `slot` were read: older than a time frame, they are not used.
    read_at: Option<Instant>,
}

/// The shared counters of one client.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct FleetCounts {
    pub(super) requests: SharedCount,
    pub(super) connections: SharedCount,
}

/// What one client counted here since the last sync: the side thread adds it to Redis and
/// reads the fleet's totals back (also for clients with nothing new, until their totals are
/// out of the frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetDelta {
    pub ip: IpAddr,
    pub requests: u32,
    pub connections: u32,
}

/// The fleet's totals of one counter of one client: over the time frame and in its current
/// slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FleetTotal {
    pub frame: u32,
    pub slot: u32,
}

/// The slot length of each shared counter, `None` where no limit is set (nothing to share).
#[derive(Debug, Clone, Copy)]
pub struct FleetSlots {
    pub requests: Option<Duration>,
    pub connections: Option<Duration>,
}

impl Frang {
    /// Shares this frang's counts and blocks with a fleet (`cluster`). Without this call the
    /// per-request cost is one branch.
    pub fn with_fleet(mut self, fail_closed: bool) -> Frang {
        self.fleet = Some(FleetMode {
            fail_closed,
            outbox: Mutex::default(),
        });
        self
    }

    pub fn in_fleet(&self) -> bool {
        self.fleet.is_some()
    }

    pub fn fleet_slots(&self) -> FleetSlots {
        let slot = |limit: &RateLimit| limit.is_set().then_some(limit.slot);
        FleetSlots {
            requests: slot(&self.requests),
            connections: slot(&self.tcp_connections),
        }
    }

    /// Takes every client's pending counts (left at 0): the clients to sync.
    pub fn fleet_drain(&self) -> Vec<FleetDelta> {
        let mut deltas = Vec::new();
        for shard in self.shards.iter() {
            lock(shard).for_each_mut(|ip, client| {
                let Some(f) = client.fleet.as_deref_mut() else {
                    return;
                };
                if f.requests.pending > 0 || f.connections.pending > 0 {
                    deltas.push(FleetDelta {
                        ip: *ip,
                        requests: std::mem::take(&mut f.requests.pending),
                        connections: std::mem::take(&mut f.connections.pending),
                    });
                }
            });
        }
        deltas
    }

    /// The fleet's totals for `ip`, read at `now` after its delta was added.
    pub fn fleet_update(
        &self,
        ip: IpAddr,
        requests: FleetTotal,
        connections: FleetTotal,
        now: Instant,
    ) {
        let Some(mut shard) = self.shard(ip) else {
            return;
        };
        // A client forgotten meanwhile starts again from its own counts.
        if let Some(f) = shard.peek_mut(&ip).and_then(|c| c.fleet.as_deref_mut()) {
            (f.requests.frame, f.requests.slot) = (requests.frame, requests.slot);
            (f.connections.frame, f.connections.slot) = (connections.frame, connections.slot);
            (f.requests.read_at, f.connections.read_at) = (Some(now), Some(now));
        }
    }

    /// The blocks imposed here since the last call, to publish.
    pub fn fleet_take_blocks(&self) -> Vec<(IpAddr, Option<Duration>)> {
        self.fleet
            .as_ref()
            .map(|f| std::mem::take(&mut *lock(&f.outbox)))
            .unwrap_or_default()
    }

    /// A block another node imposed on `ip`, for `remaining` (`None`: forever): the address
    /// is treated as if blocked here (refused at accept, its open connections reset by the
    /// workers once they see the block count move). Not published again. False when it
    /// changed nothing (ip_block off here, or already blocked as long).
    pub fn fleet_block(&self, ip: IpAddr, remaining: Option<Duration>, now: Instant) -> bool {
        if self.ip_block == IpBlock::Off {
            return false;
        }
        let Some(mut shard) = self.shard(ip) else {
            return false;
        };
        let Some(client) = shard.get_or_insert_unpinned(ip, Client::default, |c| c.is_pinned(now))
        else {
            return false;
        };
        let until = match remaining.and_then(|d| now.checked_add(d)) {
            Some(until) => Blocked::Until(until),
            None => Blocked::Forever,
        };
        let longer = match (client.blocked, until) {
            (Some(Blocked::Forever), _) => false,
            (Some(Blocked::Until(had)), Blocked::Until(new)) if client.is_blocked(now) => new > had,
            _ => true,
        };
        if longer {
            client.blocked = Some(until);
            self.count_block(ip);
        }
        longer
    }

    /// Queues the block just imposed on `ip` here for the fleet.
    pub(super) fn publish_block(&self, ip: IpAddr) {
        let Some(fleet) = &self.fleet else {
            return;
        };
        let length = match self.ip_block {
            IpBlock::For(d) => Some(d),
            IpBlock::Forever | IpBlock::Off => None,
        };
        let mut outbox = lock(&fleet.outbox);
        if outbox.len() == OUTBOX_MAX {
            outbox.remove(0);
        }
        outbox.push((ip, length));
    }

    /// `on_redis_failure closed` while Redis is away: new connections are refused (without
    /// blocking the address: the client did nothing wrong).
    pub(super) fn fleet_refuses(&self) -> Result<(), Violation> {
        match &self.fleet {
            Some(f) if f.fail_closed && !redis_up() => Err(Violation::block(
                "cluster",
                "Redis is unreachable and on_redis_failure is closed",
            )),
            _ => Ok(()),
        }
    }

    /// Counts one event of `count` for the fleet and judges the fleet's total against
    /// `limit`; Ok without Redis (local limits only) or outside a fleet.
    pub(super) fn fleet_count(
        &self,
        counts: &mut Option<Box<FleetCounts>>,
        which: impl FnOnce(&mut FleetCounts) -> &mut SharedCount,
        limit: &RateLimit,
        (names, now): ((&'static str, &'static str), Instant),
    ) -> Result<(), Violation> {
        if self.fleet.is_none() {
            return Ok(());
        }
        let count = which(counts.get_or_insert_with(Box::default));
        count.pending = count.pending.saturating_add(1);
        if !redis_up() {
            return Ok(());
        }
        let frame = limit.slot * FRANG_FREQ as u32;
        if count
            .read_at
            .is_some_and(|at| now.saturating_duration_since(at) >= frame)
        {
            (count.frame, count.slot, count.read_at) = (0, 0, None);
        }
        let in_slot = count.slot.saturating_add(count.pending);
        if let Some(burst) = limit.burst.filter(|&b| in_slot > b) {
            return Err(fleet_exceeded(names.1, in_slot, burst));
        }
        let in_frame = count.frame.saturating_add(count.pending);
        if let Some(rate) = limit.rate.filter(|&r| in_frame > r) {
            return Err(fleet_exceeded(names.0, in_frame, rate));
        }
        Ok(())
    }
}

fn fleet_exceeded(limit: &'static str, value: u32, max: u32) -> Violation {
    Violation::block(limit, format!("{value} > {max} across the cluster"))
}
