//! Frang's side of the `cluster` extension (docs/FLEET.md): the per-client counts several
//! instances share through Redis, and the blocks they tell each other about.
//!
//! No I/O here and no wait: a worker counts into the client's entry as it always does, plus
//! a `pending` count per time slot (numbered from the Unix epoch, alike on every node) that
//! the side thread (`crate::fleet`) takes every `sync_interval`, adds to that slot's Redis
//! key and answers with the fleet's count of each slot of the frame, which the next requests
//! are judged against. Every event is counted once, in its own slot, and a slot's fleet count
//! is used only for that slot: the fleet total a node judges never exceeds the true one
//! (clock skew between nodes apart). Between two syncs a node sees the others' counts as
//! they were at the last one: the limit can be exceeded by what the other nodes admit in one
//! interval, and no more.
//!
//! Only clients with new events are synced: a client idle here keeps the slot counts of its
//! last sync, each used for its slot until it leaves the time frame. Redis work is then
//! bounded by the events, not by the clients known.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use config::IpBlock;

use super::clock::FleetClock;
use super::window::SlotRing;

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

/// Blocks from other nodes held at once: more than the block stream keeps (about 10 000), so
/// a node starting up holds every block in force. Beyond, expired ones are dropped, then new
/// ones are not taken (the node that imposed them still enforces them). About 50 bytes each.
pub const REMOTE_BLOCKS_MAX: usize = 16_384;

/// A frang shared with a fleet.
#[derive(Debug)]
pub(super) struct FleetMode {
    /// `on_redis_failure closed`.
    fail_closed: bool,
    /// Blocks imposed here since the last sync, oldest first.
    outbox: Mutex<VecDeque<OutgoingBlock>>,
    /// Blocks other nodes imposed, apart from the client table: replayed from the stream they
    /// would pin its entries and fill it, and every new client would be refused.
    remote: RwLock<HashMap<IpAddr, Blocked>>,
    /// Entries of `remote`: 0 spares the workers its lock.
    remote_len: AtomicUsize,
    /// The clients whose pending counts went from none to some since the last sync: the
    /// side thread visits these, not the whole table.
    dirty: Mutex<Dirty>,
    /// Slots are numbered from the Unix epoch on every node: the process's clock, which
    /// follows the wall clock's steps at each sync (`clock.rs`).
    clock: Arc<FleetClock>,
}

/// Clients with pending counts, listed once per sync each (when their first event since the
/// last sync is counted). Past [`DIRTY_MAX`] the list stops growing and the next sync walks
/// the whole table instead.
#[derive(Debug, Default)]
struct Dirty {
    ips: Vec<IpAddr>,
    overflow: bool,
}

/// Clients listed for one sync before the list gives way to a walk of the table.
const DIRTY_MAX: usize = 1 << 16;

/// A block imposed here, to publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutgoingBlock {
    pub ip: IpAddr,
    /// The block's length, `None`: forever.
    pub length: Option<Duration>,
    /// When it was imposed (Unix time): a block published late (Redis was away) still ends
    /// when it would have.
    pub imposed: Duration,
}

/// One counter of a client as the fleet sees it, per time slot (Unix time / slot length).
#[derive(Debug, Default, Clone)]
pub(super) struct SharedCount {
    /// Events counted here since the side thread last took them.
    pending: SlotRing,
    /// The fleet's count in each slot of the frame at the last sync (this node's flushed
    /// events included); slots out of the frame are not summed.
    fleet: SlotRing,
}

/// The shared counters of one client.
#[derive(Debug, Default, Clone)]
pub(super) struct FleetCounts {
    pub(super) requests: SharedCount,
    pub(super) connections: SharedCount,
}

/// What one client counted here since the last sync, per slot `(slot number, events)`: the
/// side thread adds each to its slot's key and reads the fleet's counts back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetDelta {
    pub ip: IpAddr,
    pub requests: Vec<(u64, u32)>,
    pub connections: Vec<(u64, u32)>,
}

/// The fleet's counts of one counter of one client, per slot `(slot number, events)`, over
/// the time frame that ends with the slot of the sync.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FleetTotal {
    pub slots: Vec<(u64, u32)>,
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
    pub fn with_fleet(self, fail_closed: bool) -> Frang {
        self.with_fleet_clock(fail_closed, FleetClock::system())
    }

    /// [`Frang::with_fleet`], its slots numbered by `clock`.
    pub fn with_fleet_clock(mut self, fail_closed: bool, clock: Arc<FleetClock>) -> Frang {
        self.fleet = Some(FleetMode {
            fail_closed,
            outbox: Mutex::default(),
            remote: RwLock::default(),
            remote_len: AtomicUsize::new(0),
            dirty: Mutex::default(),
            clock,
        });
        self
    }

    pub fn in_fleet(&self) -> bool {
        self.fleet.is_some()
    }

    /// `now` as Unix time, as the slots are numbered (frang's clock: the workers' and the
    /// side thread's slots agree).
    pub fn fleet_unix(&self, now: Instant) -> Duration {
        self.fleet
            .as_ref()
            .map_or(Duration::ZERO, |f| f.clock.unix(now))
    }

    pub fn fleet_slots(&self) -> FleetSlots {
        let slot = |limit: &RateLimit| limit.is_set().then_some(limit.slot);
        FleetSlots {
            requests: slot(&self.requests),
            connections: slot(&self.tcp_connections),
        }
    }

    /// Takes every client's pending counts (left empty): the clients to sync. Visits the
    /// clients listed as having some, or the whole table after the list overflowed. First
    /// ties the slots' clock to the wall clock again if that one stepped (`clock.rs`): the
    /// events counted from now on are in the slots the side thread reads.
    pub fn fleet_drain(&self) -> Vec<FleetDelta> {
        let Some(fleet) = &self.fleet else {
            return Vec::new();
        };
        fleet.clock.follow();
        let (listed, overflow) = {
            let mut dirty = lock(&fleet.dirty);
            (
                std::mem::take(&mut dirty.ips),
                std::mem::take(&mut dirty.overflow),
            )
        };
        let mut deltas = Vec::new();
        if overflow {
            for shard in self.shards.iter() {
                lock(shard).for_each_mut(|ip, client| take_pending(*ip, client, &mut deltas));
            }
            return deltas;
        }
        for ip in listed {
            if let Some(client) = self.shard(ip).as_deref_mut().and_then(|s| s.peek_mut(&ip)) {
                take_pending(ip, client, &mut deltas);
            }
        }
        deltas
    }

    /// The fleet's counts for `ip`, read after its delta was added; `None` for a counter
    /// not read (nothing new of that kind): the counts read before stay until out of frame.
    pub fn fleet_update(
        &self,
        ip: IpAddr,
        requests: Option<FleetTotal>,
        connections: Option<FleetTotal>,
    ) {
        let Some(mut shard) = self.shard(ip) else {
            return;
        };
        // A client forgotten meanwhile starts again from its own counts.
        if let Some(f) = shard.peek_mut(&ip).and_then(|c| c.fleet.as_deref_mut()) {
            for (total, count) in [
                (requests, &mut f.requests),
                (connections, &mut f.connections),
            ] {
                if let Some(total) = total {
                    count.fleet = SlotRing::default();
                    for (q, n) in total.slots {
                        count.fleet.set(q, n);
                    }
                }
            }
        }
    }

    /// The blocks imposed here since the last call, to publish, oldest first.
    pub fn fleet_take_blocks(&self) -> Vec<OutgoingBlock> {
        self.fleet
            .as_ref()
            .map(|f| std::mem::take(&mut *lock(&f.outbox)).into())
            .unwrap_or_default()
    }

    /// A block another node imposed on `ip`, for `remaining` (`None`: forever): the address
    /// is treated as if blocked here (refused at accept, its open connections reset by the
    /// workers once they see the block count move). Kept in its own bounded set, not in the
    /// client table ([`REMOTE_BLOCKS_MAX`]). Not published again. False when it changed
    /// nothing (ip_block off here, already blocked as long, or the set full).
    pub fn fleet_block(&self, ip: IpAddr, remaining: Option<Duration>, now: Instant) -> bool {
        let Some(fleet) = self
            .fleet
            .as_ref()
            .filter(|_| self.ip_block != IpBlock::Off)
        else {
            return false;
        };
        let until = match remaining.and_then(|d| now.checked_add(d)) {
            Some(until) => Blocked::Until(until),
            None => Blocked::Forever,
        };
        let mut remote = fleet.remote.write().unwrap_or_else(PoisonError::into_inner);
        let longer = match (remote.get(&ip), until) {
            (Some(Blocked::Forever), _) => false,
            (Some(Blocked::Until(had)), Blocked::Until(new)) if now < *had => new > *had,
            _ => true,
        };
        if !longer {
            return false;
        }
        if !remote.contains_key(&ip) && remote.len() >= REMOTE_BLOCKS_MAX {
            remote.retain(|_, b| in_force(*b, now));
            if remote.len() >= REMOTE_BLOCKS_MAX {
                return false;
            }
        }
        remote.insert(ip, until);
        fleet.remote_len.store(remote.len(), Ordering::Release);
        drop(remote);
        self.count_block(ip);
        true
    }

    /// Whether another node's block on `ip` is in force at `now`.
    pub(super) fn fleet_blocked(&self, ip: IpAddr, now: Instant) -> bool {
        let Some(fleet) = &self.fleet else {
            return false;
        };
        if fleet.remote_len.load(Ordering::Acquire) == 0 {
            return false;
        }
        let remote = fleet.remote.read().unwrap_or_else(PoisonError::into_inner);
        remote.get(&ip).is_some_and(|b| in_force(*b, now))
    }

    /// Queues the block just imposed on `ip` at `now` here for the fleet.
    pub(super) fn publish_block(&self, ip: IpAddr, now: Instant) {
        let Some(fleet) = &self.fleet else {
            return;
        };
        let length = match self.ip_block {
            IpBlock::For(d) => Some(d),
            IpBlock::Forever | IpBlock::Off => None,
        };
        let block = OutgoingBlock {
            ip,
            length,
            imposed: fleet.clock.unix(now),
        };
        let mut outbox = lock(&fleet.outbox);
        if outbox.len() == OUTBOX_MAX {
            outbox.pop_front();
        }
        outbox.push_back(block);
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
        (ip, names, now): (IpAddr, (&'static str, &'static str), Instant),
    ) -> Result<(), Violation> {
        // Nothing to share for a counter without a limit (a connect-only client would
        // otherwise cost Redis commands every turn).
        let Some(fleet) = self.fleet.as_ref().filter(|_| limit.is_set()) else {
            return Ok(());
        };
        let q = fleet.clock.slot(now, limit.slot);
        let counts = counts.get_or_insert_with(Box::default);
        if counts.requests.pending.is_empty() && counts.connections.pending.is_empty() {
            let mut dirty = lock(&fleet.dirty);
            if dirty.ips.len() < DIRTY_MAX {
                dirty.ips.push(ip);
            } else {
                dirty.overflow = true;
            }
        }
        let count = which(counts);
        count.pending.add(q);
        if !redis_up() {
            return Ok(());
        }
        let in_slot = count.fleet.at(q).saturating_add(count.pending.at(q));
        if let Some(burst) = limit.burst.filter(|&b| in_slot > b) {
            return Err(fleet_exceeded(names.1, in_slot, burst));
        }
        let in_frame = count
            .fleet
            .sum_to(q)
            .saturating_add(count.pending.sum_to(q));
        if let Some(rate) = limit.rate.filter(|&r| in_frame > r) {
            return Err(fleet_exceeded(names.0, in_frame, rate));
        }
        Ok(())
    }
}

/// A client's pending counts into `deltas`, if it has some.
fn take_pending(ip: IpAddr, client: &mut Client, deltas: &mut Vec<FleetDelta>) {
    let Some(f) = client.fleet.as_deref_mut() else {
        return;
    };
    if !f.requests.pending.is_empty() || !f.connections.pending.is_empty() {
        deltas.push(FleetDelta {
            ip,
            requests: f.requests.pending.take(),
            connections: f.connections.pending.take(),
        });
    }
}

fn in_force(block: Blocked, now: Instant) -> bool {
    match block {
        Blocked::Forever => true,
        Blocked::Until(until) => now < until,
    }
}

fn fleet_exceeded(limit: &'static str, value: u32, max: u32) -> Violation {
    Violation::block(limit, format!("{value} > {max} across the cluster"))
}
