//! The side thread's loop: one turn every `sync_interval`, the connection to Redis kept
//! across turns and made again with a growing backoff after a failure. While Redis is away
//! frang judges with local counts only (`frang::redis_up` false) and the counts of each turn
//! are dropped: a restarted Redis is filled again by the next turns, not by a backlog.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use std::collections::VecDeque;

use super::keys::{Outcome, RemoteBlock, Turn, BLOCKS_PER_READ};
use super::position::StreamPosition;
use super::resp::{Budget, Connection, Reply};
use super::sticky::StickySync;
use crate::fingerprint::{FingerprintDelta, Fingerprints};
use crate::frang::{set_redis_up, FleetDelta, Frang, OutgoingBlock};
use crate::runtime::Runtime;

/// First wait before connecting again after a failure; doubled up to [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Blocks kept for publishing while Redis is away (the oldest are dropped beyond).
const UNPUBLISHED_MAX: usize = 4096;
/// Commands in one pipeline at most (a client's counts are never split: one with more goes
/// alone). Redis answers this many in about a millisecond, so a pipeline that is not
/// answered within [`PIPELINE_DEADLINE`] means a Redis that is not making progress, whatever
/// the number of clients waiting.
pub const PIPELINE_COMMANDS: usize = 128;
/// How long one pipeline (connecting, writing the commands, reading every reply) may take:
/// past it Redis counts as down. Far more than Redis needs (a millisecond for 128 commands,
/// 20 ms over a link of 1 MB/s), because judging Redis down is what costs: the counts of
/// the turn are dropped and, with `on_redis_failure closed`, every new client is refused,
/// while a late judgement costs nothing, as no request waits for Redis. The deadline was
/// the interval (100 ms) until CI saw a healthy Redis miss it on a host whose cores were
/// taken: a node under a flood is such a host, just when the fleet's limits matter.
pub(super) const PIPELINE_DEADLINE: Duration = Duration::from_millis(500);
/// Blocks published per pipeline at most (two commands each; with `XINFO` and `XREAD`, 128).
const BLOCKS_PER_PIPELINE: usize = 63;
/// Clients' counts waiting for a turn at most; beyond, the oldest are dropped and counted
/// (`ktls_proxy_fleet_dropped_total`). About 100 bytes each.
pub const BACKLOG_MAX: usize = 65_536;

pub struct Link {
    cluster: config::Cluster,
    /// `cluster.redis`, which the thread is started with.
    redis: std::net::SocketAddr,
    /// This process's name in the block stream, so it skips its own blocks.
    node: String,
    conn: Option<Connection>,
    backoff: Duration,
    retry_at: Instant,
    /// Position read up to in the block stream ("0": from the oldest entry kept).
    last_id: String,
    /// Blocks imposed here not yet published (Redis was away).
    unpublished: Vec<OutgoingBlock>,
    /// Clients' counts not yet sent, oldest first.
    backlog: VecDeque<FleetDelta>,
    /// Entries of the block stream up to `last_id`, counted from its first ever.
    position: StreamPosition,
    /// The sticky cookie key, session pins and challenge passes (sticky.rs).
    sticky: StickySync,
}

impl Link {
    pub fn new(cluster: config::Cluster, redis: std::net::SocketAddr) -> Link {
        let node = format!(
            "{}-{}",
            std::process::id(),
            unix_now().as_nanos() % 1_000_000_007
        );
        Link {
            sticky: StickySync::new(&node),
            cluster,
            redis,
            node,
            conn: None,
            backoff: BACKOFF_MIN,
            retry_at: Instant::now(),
            last_id: "0".to_owned(),
            unpublished: Vec::new(),
            backlog: VecDeque::new(),
            position: StreamPosition::default(),
        }
    }

    /// Runs until the process ends.
    pub fn run(mut self, current: impl Fn() -> super::Shared, wake: impl Fn()) {
        let interval = self.cluster.sync_interval;
        let mut previous: Option<Arc<Frang>> = None;
        let mut previous_rt: Option<Arc<Runtime>> = None;
        let mut retired: Vec<Arc<Runtime>> = Vec::new();
        loop {
            let started = Instant::now();
            let super::Shared {
                frang,
                fingerprints,
                runtime,
            } = current();
            if let Some(old) = previous.filter(|old| !Arc::ptr_eq(old, &frang)) {
                // A reload: the new table knows none of the fleet's blocks, so the stream is
                // read again from its start; the old table's last blocks still go out.
                self.unpublished.extend(old.fleet_take_blocks());
                self.last_id = "0".to_owned();
            }
            previous = Some(Arc::clone(&frang));
            if let Some(old) = previous_rt.filter(|old| !Arc::ptr_eq(old, &runtime)) {
                // New session tables, which read the sticky stream again from its start; the
                // old ones' pins and passes still go out (sticky.rs, `collect_retired`).
                retired.push(old);
                self.sticky.reloaded();
            }
            previous_rt = Some(Arc::clone(&runtime));
            self.sticky.collect_retired(&mut retired);
            if frang.in_fleet() {
                self.turn(&frang, (&fingerprints, &runtime.sticky), &wake);
            }
            // A turn that spent its interval on a backlog starts the next one at once.
            std::thread::sleep(interval.saturating_sub(started.elapsed()));
        }
    }

    /// One turn: the blocks (out and in) first, then the counts waiting, oldest first, in
    /// pipelines of at most [`PIPELINE_COMMANDS`] commands, until none is left or the
    /// interval is spent; what is left waits for the next turn (bounded by
    /// [`BACKLOG_MAX`]). Each pipeline must be answered within [`PIPELINE_DEADLINE`]: a slow
    /// Redis fails one small pipeline, a large attack only lengthens the backlog.
    fn turn(
        &mut self,
        frang: &Frang,
        (fingerprints, sticky): (&Fingerprints, &crate::sticky::runtime::StickyRt),
        wake: &impl Fn(),
    ) {
        let started = Instant::now();
        self.sticky.collect(sticky);
        self.backlog.extend(frang.fleet_drain());
        // Bounded by the configured fingerprints: taken every turn, sent when Redis is there.
        let fingerprint_deltas = fingerprints.fleet_drain();
        let excess = self.backlog.len().saturating_sub(BACKLOG_MAX);
        if excess > 0 {
            self.backlog.drain(..excess);
            super::note_dropped(excess);
        }
        self.unpublished.extend(frang.fleet_take_blocks());
        let excess = self.unpublished.len().saturating_sub(UNPUBLISHED_MAX);
        self.unpublished.drain(..excess);
        if self.connected().is_none() {
            // Redis away: counts are dropped, not replayed (docs/FLEET.md).
            self.backlog.clear();
            super::note_backlog(0);
            return;
        }
        // The fingerprint counts first (the first half of the interval), sticky pins up to
        // three quarters, frang's counts to the end: a flood of pins cannot starve a limit,
        // and a sticky turn that fails (a malformed or wrong-type stream) costs only the pins.
        if self.blocks(frang, wake).is_ok()
            && self
                .fingerprints(fingerprints, &fingerprint_deltas, started)
                .is_ok()
        {
            let _ = self.sticky_turn(sticky, started);
            while !self.backlog.is_empty() && started.elapsed() < self.cluster.sync_interval {
                if self.counts(frang).is_err() {
                    break;
                }
            }
        }
        super::note_backlog(self.backlog.len());
    }

    /// Publishes the blocks imposed here and reads those published elsewhere, again and
    /// again until caught up with the stream or the interval is spent.
    fn blocks(&mut self, frang: &Frang, wake: &impl Fn()) -> Result<(), ()> {
        let started = Instant::now();
        loop {
            let read = self.blocks_once(frang, wake)?;
            if read < BLOCKS_PER_READ || started.elapsed() >= self.cluster.sync_interval {
                return Ok(());
            }
        }
    }

    /// One pipeline of [`Link::blocks`]; returns the stream entries read.
    fn blocks_once(&mut self, frang: &Frang, wake: &impl Fn()) -> Result<usize, ()> {
        let unix = unix_now();
        let publishing = self.unpublished.len().min(BLOCKS_PER_PIPELINE);
        let mut turn = Turn::default();
        turn.publish(&self.unpublished[..publishing], unix, &self.node);
        turn.read_blocks(&self.last_id);
        // Reading from the start (after a reload): this node's own blocks apply too, the new
        // table having none of them.
        let skip = (self.last_id != "0").then(|| self.node.clone());
        let out = self.exchange(&turn, 0, skip.as_deref())?;
        self.unpublished.drain(..publishing);
        if self.last_id == "0" {
            // From the oldest entry kept: whatever was trimmed before is not a gap.
            self.position.restart();
        }
        if let Some(id) = out.last_id {
            self.last_id = id;
        }
        let lost = self.position.follow(out.stream, out.entries_read);
        if lost > 0 {
            super::note_lost(lost);
        }
        apply_blocks(frang, &out.blocks, unix, wake);
        Ok(out.entries_read)
    }

    /// Adds the fingerprints' counts to Redis and applies the fleet's totals, in pipelines
    /// of at most [`PIPELINE_COMMANDS`] commands, within the first half of the turn's
    /// interval: what is left (thousands of configured fingerprints, all active at once) is
    /// dropped, as counts are while Redis is away, and the clients' counts keep their time.
    fn fingerprints(
        &mut self,
        fingerprints: &Fingerprints,
        deltas: &[FingerprintDelta],
        started: Instant,
    ) -> Result<(), ()> {
        let mut rest = deltas;
        while !rest.is_empty() && started.elapsed() < self.cluster.sync_interval / 2 {
            let mut commands = 0;
            let take = rest
                .iter()
                .take_while(|d| {
                    commands += Turn::fingerprint_commands_of(d);
                    commands <= PIPELINE_COMMANDS
                })
                .count()
                .max(1);
            let (chunk, after) = rest.split_at(take);
            let mut turn = Turn::default();
            turn.fingerprint_counts(chunk, fingerprints.fleet_slot(), unix_now());
            let out = self.exchange(&turn, 0, None)?;
            for (d, total) in chunk.iter().zip(out.fingerprint_totals) {
                if let Some(total) = total {
                    fingerprints.fleet_update(d.kind, d.hash, d.counter, total);
                }
            }
            rest = after;
        }
        Ok(())
    }

    /// Sends the oldest counts waiting (a pipeline's worth) and applies the fleet's totals.
    fn counts(&mut self, frang: &Frang) -> Result<(), ()> {
        let slots = frang.fleet_slots();
        let mut commands = 0;
        let mut taken = Vec::new();
        while let Some(next) = self.backlog.front() {
            let cost = Turn::commands_of(next, slots);
            if !taken.is_empty() && commands + cost > PIPELINE_COMMANDS {
                break;
            }
            commands += cost;
            taken.extend(self.backlog.pop_front());
        }
        let mut turn = Turn::default();
        turn.counts(&taken, slots, frang.fleet_unix(Instant::now()));
        let out = self.exchange(&turn, taken.len(), None)?;
        for (delta, (requests, connections)) in taken.iter().zip(out.totals) {
            frang.fleet_update(delta.ip, requests, connections);
        }
        Ok(())
    }

    /// The sticky key, pins and passes, within the first three quarters of the turn's
    /// interval (after the fingerprint counts).
    fn sticky_turn(
        &mut self,
        sticky: &crate::sticky::runtime::StickyRt,
        started: Instant,
    ) -> Result<(), ()> {
        let mut sync = std::mem::replace(&mut self.sticky, StickySync::new(""));
        let until = self.cluster.sync_interval * 3 / 4;
        let result = sync.turn(
            sticky,
            (started, until),
            &mut |commands: &[Vec<String>], budget: Budget| {
                self.pipeline(commands, budget, super::sticky::replies)
            },
        );
        self.sticky = sync;
        result
    }

    /// One pipeline and its replies, within [`PIPELINE_DEADLINE`]; a failure marks Redis down.
    fn exchange(&mut self, turn: &Turn, deltas: usize, skip: Option<&str>) -> Result<Outcome, ()> {
        self.pipeline(&turn.commands, turn.budget(), |replies| {
            turn.outcome(replies, deltas, skip)
        })
    }

    /// Sends `commands`, reads their replies within [`PIPELINE_DEADLINE`] and `budget`, and
    /// reads them with `outcome`; a failure of either marks Redis down.
    fn pipeline<T>(
        &mut self,
        commands: &[Vec<String>],
        budget: Budget,
        outcome: impl FnOnce(&[Reply]) -> Result<T, String>,
    ) -> Result<T, ()> {
        let Some(conn) = self.connected() else {
            return Err(());
        };
        for command in commands {
            conn.queue(command);
        }
        let result = conn
            .run(Instant::now() + PIPELINE_DEADLINE, budget)
            .map_err(|e| e.to_string())
            .and_then(|replies| outcome(&replies[..]));
        match result {
            Ok(out) => {
                self.up();
                Ok(out)
            }
            Err(reason) => {
                self.down(&reason);
                self.backlog.clear();
                Err(())
            }
        }
    }

    /// The connection, made now if it is due; `None` while waiting for the backoff.
    fn connected(&mut self) -> Option<&mut Connection> {
        if self.conn.is_none() && Instant::now() >= self.retry_at {
            match Connection::connect(self.redis, PIPELINE_DEADLINE) {
                Ok(conn) => self.conn = Some(conn),
                Err(e) => self.down(&e.to_string()),
            }
        }
        self.conn.as_mut()
    }

    fn up(&mut self) {
        if !crate::frang::redis_up() {
            crate::info!(
                "cluster: Redis at {} answers: fleet limits apply",
                self.redis
            );
        }
        self.backoff = BACKOFF_MIN;
        set_redis_up(true);
    }

    fn down(&mut self, reason: &str) {
        set_redis_up(false);
        self.conn = None;
        self.retry_at = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        crate::warn!(
            "cluster: Redis at {} failed ({reason}): local limits only until it answers",
            self.redis
        );
    }
}

/// Blocks published by other nodes, as this node's own; the workers are woken once.
fn apply_blocks(frang: &Frang, blocks: &[RemoteBlock], unix: Duration, wake: &impl Fn()) {
    let now = Instant::now();
    let now_ms = u64::try_from(unix.as_millis()).unwrap_or(u64::MAX);
    let mut any = false;
    for block in blocks {
        let remaining = match block.until_ms {
            None => None,
            Some(until) if until > now_ms => Some(Duration::from_millis(until - now_ms)),
            Some(_) => continue,
        };
        any |= frang.fleet_block(block.ip, remaining, now);
    }
    if any {
        wake();
    }
}

fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}
