//! Per-client-IP accounting shared by all worker threads: connection,
//! request and TLS handshake rates, concurrent connections, response-code
//! blocking and `ip_block`.
//!
//! Clients are spread over shards by a keyed hash of the address; each
//! shard is a bounded LRU behind its own mutex, held only for one client's
//! counter update, so threads rarely contend and an attacker cannot aim
//! many addresses at one shard.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use config::{FrangGlobal, IpBlock, RespCodeBlock};

use super::fleet::{FleetCounts, FleetMode};
use super::window::{quantum, slot_len, SlotRing};
use super::Violation;
use crate::lru::Lru;

/// Tempesta's default `client_lru_size`.
pub const DEFAULT_CLIENT_LRU_SIZE: usize = 8000;

const MAX_SHARDS: usize = 64;

/// The `*_rate`/`*_burst` pair of one counter and its time frame.
#[derive(Debug, Clone, Copy)]
pub(super) struct RateLimit {
    pub(super) rate: Option<u32>,
    pub(super) burst: Option<u32>,
    pub(super) slot: Duration,
}

impl RateLimit {
    fn new(rate: Option<u32>, burst: Option<u32>) -> RateLimit {
        // Tempesta's `request_rate NUM [TIME_FRAME]` stretches the window;
        // the config model has no time frame yet, so it is one second.
        RateLimit {
            rate: rate.filter(|&n| n > 0),
            burst: burst.filter(|&n| n > 0),
            slot: slot_len(Duration::from_secs(1)),
        }
    }

    pub(super) fn is_set(&self) -> bool {
        self.rate.is_some() || self.burst.is_some()
    }

    /// Counts one event and checks the burst, then the rate.
    fn count(
        &self,
        ring: &mut SlotRing,
        epoch: Instant,
        now: Instant,
        names: (&'static str, &'static str),
    ) -> Result<(), Violation> {
        let counts = ring.add(quantum(epoch, now, self.slot));
        if let Some(burst) = self.burst.filter(|&b| counts.in_slot > b) {
            return Err(Violation::exceeded(names.1, counts.in_slot, burst));
        }
        if let Some(rate) = self.rate.filter(|&r| counts.in_frame > r) {
            return Err(Violation::exceeded(names.0, counts.in_frame, rate));
        }
        Ok(())
    }
}

fn over_memory(total: u64, hard: u64) -> Violation {
    Violation::block(
        "client_mem",
        format!("{total} bytes held for the address > {hard}"),
    )
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Blocked {
    Forever,
    Until(Instant),
}

/// What frang remembers about one client address.
#[derive(Debug, Default)]
pub(super) struct Client {
    connections: u32,
    new_connections: SlotRing,
    requests: SlotRing,
    tls_full_handshakes: SlotRing,
    tls_incomplete: SlotRing,
    blocked_responses: SlotRing,
    pub(super) blocked: Option<Blocked>,
    /// Bytes the proxy holds for this address's connections (`client_mem`).
    memory: u64,
    /// The counts shared with a fleet (`cluster`); `None` outside one (boxed: a lone proxy's
    /// table stays as small as it was).
    pub(super) fleet: Option<Box<FleetCounts>>,
}

impl Client {
    /// State that must never be forgotten to make room (as nginx's `limit_conn` refuses new
    /// clients when its zone is full rather than forget one): open connections, whose close
    /// is still to be counted, and a block in force. Otherwise an attacker with many
    /// addresses could flush its own block or connection count out of the table.
    pub(super) fn is_pinned(&mut self, now: Instant) -> bool {
        self.connections > 0 || self.is_blocked(now)
    }

    /// Whether the client is blocked at `now`; forgets an expired block.
    pub(super) fn is_blocked(&mut self, now: Instant) -> bool {
        match self.blocked {
            Some(Blocked::Forever) => true,
            Some(Blocked::Until(until)) if now < until => true,
            Some(Blocked::Until(_)) => {
                self.blocked = None;
                false
            }
            None => false,
        }
    }

    fn check_not_blocked(&mut self, now: Instant) -> Result<(), Violation> {
        if self.is_blocked(now) {
            return Err(Violation::block("ip_block", "client address is blocked"));
        }
        Ok(())
    }
}

/// Process-wide frang accounting, shared by worker threads through `Arc`.
#[derive(Debug)]
pub struct Frang {
    pub(super) epoch: Instant,
    pub(super) requests: RateLimit,
    pub(super) tcp_connections: RateLimit,
    tls_connections: RateLimit,
    tls_incomplete_rate: Option<u32>,
    concurrent_connections: Option<u32>,
    pub(super) ip_block: IpBlock,
    /// `client_mem`'s hard limit in bytes (Tempesta enforces only this one; the soft limit
    /// sets its default, twice the soft).
    client_mem_hard: Option<u64>,
    hasher: RandomState,
    pub(super) shards: Box<[Mutex<Lru<IpAddr, Client>>]>,
    /// Bumped by every block `ip_block` imposes: workers compare it once per loop turn and
    /// then reset the blocked addresses' open connections (no lookup per read).
    blocks: AtomicU64,
    /// The highest block count a worker has woken the others for (`first_to_see`).
    woken: AtomicU64,
    /// The addresses of the latest blocks with their count, at most [`RECENT_BLOCKS`]: a
    /// worker resets the connections of these addresses by comparing addresses, without
    /// locking a shard per connection (a block is cheap for an attacker to provoke).
    recent: Mutex<std::collections::VecDeque<(u64, IpAddr)>>,
    /// `cluster`: counts and blocks shared with other instances (fleet.rs).
    pub(super) fleet: Option<FleetMode>,
}

/// Blocks remembered for the workers' resets; a worker further behind than this looks every
/// connection up instead.
const RECENT_BLOCKS: usize = 256;

impl Frang {
    /// Accounting for `global` limits, remembering at most
    /// `client_lru_size` clients (Tempesta's `client_lru_size`, default
    /// [`DEFAULT_CLIENT_LRU_SIZE`]).
    pub fn new(global: &FrangGlobal, client_lru_size: usize) -> Frang {
        Frang::with_epoch(global, client_lru_size, Instant::now())
    }

    /// As [`Frang::new`], with time slots counted from `epoch` (tests pass
    /// their own so they know where slot boundaries fall).
    pub fn with_epoch(global: &FrangGlobal, client_lru_size: usize, epoch: Instant) -> Frang {
        let capacity = client_lru_size.max(1);
        let shard_count = capacity.min(MAX_SHARDS);
        // Split the capacity so the shards add up to exactly `capacity`.
        let base = capacity / shard_count;
        let extra = capacity % shard_count;
        let shards = (0..shard_count)
            .map(|i| Mutex::new(Lru::new(base + usize::from(i < extra))))
            .collect();
        Frang {
            epoch,
            requests: RateLimit::new(global.request_rate, global.request_burst),
            tcp_connections: RateLimit::new(
                global.tcp_connection_rate,
                global.tcp_connection_burst,
            ),
            tls_connections: RateLimit::new(
                global.tls_connection_rate,
                global.tls_connection_burst,
            ),
            tls_incomplete_rate: global.tls_incomplete_connection_rate.filter(|&n| n > 0),
            concurrent_connections: global.concurrent_tcp_connections.filter(|&n| n > 0),
            ip_block: global.ip_block,
            client_mem_hard: None,
            hasher: RandomState::new(),
            shards,
            blocks: AtomicU64::new(0),
            woken: AtomicU64::new(0),
            recent: Mutex::default(),
            fleet: None,
        }
    }

    /// Stretches the windows of `request_rate`/`_burst` and
    /// `tcp_connection_rate`/`_burst` to Tempesta's optional time frame
    /// (`request_rate NUM [TIME_FRAME]`): the rate then counts over
    /// `request` (resp. `tcp`) and a burst over an eighth of it; both default
    /// to one second.
    pub fn with_rate_time_frames(mut self, request: Duration, tcp: Duration) -> Frang {
        self.requests.slot = slot_len(request);
        self.tcp_connections.slot = slot_len(tcp);
        self
    }

    /// Accounts memory per client address against `client_mem`'s hard limit.
    pub fn with_client_mem(mut self, hard: Option<u64>) -> Frang {
        self.client_mem_hard = hard.filter(|&h| h > 0);
        self
    }

    /// Whether `client_mem` is set: only then is memory accounted ([`Frang::on_memory`]).
    pub fn accounts_memory(&self) -> bool {
        self.client_mem_hard.is_some()
    }

    /// A connection of `ip` held `was` bytes and now holds `held` (0 when it closes): the
    /// address's total moves by the difference. Err (and `ip_block`) when the total is over
    /// `client_mem`'s hard limit: as Tempesta does, reset the connection whose receive pass
    /// found it so.
    pub fn on_memory(
        &self,
        ip: IpAddr,
        was: u64,
        held: u64,
        now: Instant,
    ) -> Result<(), Violation> {
        let Some(hard) = self.client_mem_hard else {
            return Ok(());
        };
        if was == held {
            return match self
                .shard(ip)
                .and_then(|mut s| s.get_mut(&ip).map(|c| c.memory))
            {
                Some(total) if total > hard => Err(over_memory(total, hard)),
                _ => Ok(()),
            };
        }
        self.with_client(ip, now, |_, client| {
            client.memory = client.memory.saturating_sub(was).saturating_add(held);
            if client.memory > hard && held > 0 {
                return Err(over_memory(client.memory, hard));
            }
            Ok(())
        })
    }

    /// At accept, before anything is read: refuses a blocked address, then
    /// counts the connection for `concurrent_tcp_connections` and
    /// `tcp_connection_rate`/`_burst`. Refused attempts still count toward
    /// the rate (as in Tempesta). On `Err` close the socket without a reply
    /// and do NOT call [`Frang::on_close`]; on `Ok` call it exactly once.
    pub fn on_connect(&self, ip: IpAddr, now: Instant) -> Result<(), Violation> {
        self.fleet_refuses()?;
        self.with_client(ip, now, |frang, client| {
            client.check_not_blocked(now)?;
            client.connections = client.connections.saturating_add(1);
            let result = frang.check_connect(ip, client, now);
            if result.is_err() {
                client.connections = client.connections.saturating_sub(1);
            }
            result
        })
    }

    fn check_connect(
        &self,
        ip: IpAddr,
        client: &mut Client,
        now: Instant,
    ) -> Result<(), Violation> {
        if let Some(max) = self
            .concurrent_connections
            .filter(|&m| client.connections > m)
        {
            return Err(Violation::exceeded(
                "concurrent_tcp_connections",
                client.connections,
                max,
            ));
        }
        let names = ("tcp_connection_rate", "tcp_connection_burst");
        let local = self
            .tcp_connections
            .count(&mut client.new_connections, self.epoch, now, names);
        let fleet = self.fleet_count(
            &mut client.fleet,
            |f| &mut f.connections,
            &self.tcp_connections,
            (ip, names, now),
        );
        local.and(fleet)
    }

    /// When a connection accepted by [`Frang::on_connect`] closes, however
    /// it closes.
    pub fn on_close(&self, ip: IpAddr) {
        let Some(mut shard) = self.shard(ip) else {
            return;
        };
        // An evicted client has no entry: nothing to count down.
        if let Some(client) = shard.get_mut(&ip) {
            client.connections = client.connections.saturating_sub(1);
        }
    }

    /// When a TLS handshake completes: only full handshakes (`resumed ==
    /// false`) count toward `tls_connection_rate`/`_burst`. On `Err` reset
    /// the connection.
    pub fn on_tls_handshake(
        &self,
        ip: IpAddr,
        resumed: bool,
        now: Instant,
    ) -> Result<(), Violation> {
        if resumed || !self.tls_connections.is_set() {
            return self.check_blocked(ip, now);
        }
        self.with_client(ip, now, |frang, client| {
            client.check_not_blocked(now)?;
            let names = ("tls_connection_rate", "tls_connection_burst");
            frang
                .tls_connections
                .count(&mut client.tls_full_handshakes, frang.epoch, now, names)
        })
    }

    /// When a TLS handshake fails (alert, bad record, EOF mid-handshake) or
    /// times out: counts toward `tls_incomplete_connection_rate`. The
    /// connection is closed anyway; on `Err` the address may get blocked.
    pub fn on_tls_incomplete(&self, ip: IpAddr, now: Instant) -> Result<(), Violation> {
        let Some(rate) = self.tls_incomplete_rate else {
            return self.check_blocked(ip, now);
        };
        self.with_client(ip, now, |frang, client| {
            client.check_not_blocked(now)?;
            let slot = frang.tls_connections.slot;
            let counts = client.tls_incomplete.add(quantum(frang.epoch, now, slot));
            if counts.in_frame > rate {
                return Err(Violation::exceeded(
                    "tls_incomplete_connection_rate",
                    counts.in_frame,
                    rate,
                ));
            }
            Ok(())
        })
    }

    /// When a request head starts arriving (its first bytes were read), or
    /// at the latest when it is parsed: `request_rate`/`_burst`. On `Err`
    /// reply `status` and close.
    pub fn on_request(&self, ip: IpAddr, now: Instant) -> Result<(), Violation> {
        if !self.requests.is_set() {
            return self.check_blocked(ip, now);
        }
        self.with_client(ip, now, |frang, client| {
            client.check_not_blocked(now)?;
            let names = ("request_rate", "request_burst");
            let local = frang
                .requests
                .count(&mut client.requests, frang.epoch, now, names);
            let fleet = frang.fleet_count(
                &mut client.fleet,
                |f| &mut f.requests,
                &frang.requests,
                (ip, names, now),
            );
            local.and(fleet)
        })
    }

    /// When a response with `status` is forwarded to `ip`; `rule` is the
    /// `http_resp_code_block` of the request's location (or vhost). On `Err`
    /// do not send this response: answer 403 (per `block_action attack`), then
    /// close the connection and drop the client's queued requests (Tempesta
    /// blocks on the response because an attacker can pipeline many guesses
    /// before any answer).
    pub fn on_response(
        &self,
        ip: IpAddr,
        status: u16,
        rule: Option<&RespCodeBlock>,
        now: Instant,
    ) -> Result<(), Violation> {
        let Some(rule) = rule.filter(|r| (100..600).contains(&status) && r.codes.contains(&status))
        else {
            return Ok(());
        };
        self.with_client(ip, now, |frang, client| {
            // The window is the rule's time frame, cut into FRANG_FREQ slots.
            let slot = slot_len(rule.timeframe);
            let counts = client
                .blocked_responses
                .add(quantum(frang.epoch, now, slot));
            if counts.in_frame > rule.limit {
                return Err(Violation::exceeded(
                    "http_resp_code_block",
                    counts.in_frame,
                    rule.limit,
                ));
            }
            Ok(())
        })
    }

    /// Applies `ip_block` for a violation found outside this type
    /// ([`super::check_request`], [`super::ConnLimits`]): blocks the
    /// address if `ip_block` is on. The `on_*` methods do this themselves.
    pub fn on_violation(&self, ip: IpAddr, now: Instant) {
        if self.ip_block == IpBlock::Off {
            return;
        }
        let Some(mut shard) = self.shard(ip) else {
            return;
        };
        if let Some(client) =
            shard.get_or_insert_unpinned(ip, Client::default, |c| c.is_pinned(now))
        {
            self.block(ip, client, now);
        }
    }

    /// Whether `ip` is blocked by `ip_block` after an earlier violation.
    pub fn is_blocked(&self, ip: IpAddr, now: Instant) -> bool {
        // Without ip_block nobody is ever blocked: skip the lock.
        if self.ip_block == IpBlock::Off {
            return false;
        }
        if self.fleet_blocked(ip, now) {
            return true;
        }
        let Some(mut shard) = self.shard(ip) else {
            return false;
        };
        shard
            .get_mut(&ip)
            .is_some_and(|client| client.is_blocked(now))
    }

    /// How many blocks `ip_block` has imposed: a change means some address's open
    /// connections are to be reset.
    pub fn blocks(&self) -> u64 {
        self.blocks.load(Ordering::Acquire)
    }

    /// Whether the caller is the first to see block count `blocks` (it then wakes the
    /// other workers). Kept here, not beside the workers: a reload's new frang counts from
    /// 0 again, and a count of the old one's must not hide its first blocks.
    pub fn first_to_see(&self, blocks: u64) -> bool {
        self.woken.fetch_max(blocks, Ordering::AcqRel) < blocks
    }

    /// The block count now and the addresses blocked since count `seen`; `None` for the
    /// addresses when more blocks came than are remembered (then look every address up).
    pub fn blocked_since(&self, seen: u64) -> (u64, Option<Vec<IpAddr>>) {
        let recent = lock(&self.recent);
        let now = self.blocks();
        let oldest = recent.front().map_or(now + 1, |(n, _)| *n);
        if now > seen && oldest > seen + 1 {
            return (now, None);
        }
        let ips = recent.iter().filter(|(n, _)| *n > seen).map(|(_, ip)| *ip);
        (now, Some(ips.collect()))
    }

    /// Number of clients remembered (at most `client_lru_size`).
    pub fn tracked_clients(&self) -> usize {
        self.shards.iter().map(|shard| lock(shard).len()).sum()
    }

    fn check_blocked(&self, ip: IpAddr, now: Instant) -> Result<(), Violation> {
        if self.is_blocked(ip, now) {
            return Err(Violation::block("ip_block", "client address is blocked"));
        }
        Ok(())
    }

    /// Runs `check` on the client's entry under its shard's lock and blocks
    /// the client on a new violation if `ip_block` is on.
    fn with_client(
        &self,
        ip: IpAddr,
        now: Instant,
        check: impl FnOnce(&Frang, &mut Client) -> Result<(), Violation>,
    ) -> Result<(), Violation> {
        if self.fleet_blocked(ip, now) {
            return Err(Violation::block("ip_block", "client address is blocked"));
        }
        let Some(mut shard) = self.shard(ip) else {
            return Ok(());
        };
        // A client with open connections or an active block is never forgotten to make
        // room: an attacker with many addresses could otherwise flush its own block.
        let Some(client) = shard.get_or_insert_unpinned(ip, Client::default, |c| c.is_pinned(now))
        else {
            return Err(Violation::block(
                "client_lru_size",
                "client table full of connected or blocked clients (raise client_lru_size)",
            ));
        };
        let result = check(self, client);
        if let Err(violation) = &result {
            if violation.limit != "ip_block" {
                self.block(ip, client, now);
            }
        }
        result
    }

    fn block(&self, ip: IpAddr, client: &mut Client, now: Instant) {
        if self.ip_block != IpBlock::Off {
            self.count_block(ip);
            self.publish_block(ip, now);
        }
        client.blocked = match self.ip_block {
            IpBlock::Off => None,
            IpBlock::Forever => Some(Blocked::Forever),
            IpBlock::For(duration) => Some(match now.checked_add(duration) {
                Some(until) => Blocked::Until(until),
                None => Blocked::Forever,
            }),
        };
    }

    /// A new block of `ip`: the workers reset its connections when they see the count move.
    pub(super) fn count_block(&self, ip: IpAddr) {
        let mut recent = lock(&self.recent);
        let n = self.blocks.fetch_add(1, Ordering::AcqRel) + 1;
        if recent.len() == RECENT_BLOCKS {
            recent.pop_front();
        }
        recent.push_back((n, ip));
    }

    /// The locked shard of `ip`; `None` only if there were no shards, which
    /// `with_epoch` never builds.
    pub(super) fn shard(&self, ip: IpAddr) -> Option<MutexGuard<'_, Lru<IpAddr, Client>>> {
        let hash = self.hasher.hash_one(ip);
        let count = u64::try_from(self.shards.len()).ok().filter(|&n| n > 0)?;
        let index = usize::try_from(hash % count).ok()?;
        self.shards.get(index).map(lock)
    }
}

/// A poisoned shard only means a thread panicked between two counter
/// updates; the counters are still usable.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
