//! The `cluster` extension's side thread (docs/FLEET.md): every `sync_interval` it takes
//! the counts the workers made since the last turn, adds them to Redis, reads the fleet's
//! totals back into frang, publishes the blocks imposed here and applies those imposed
//! elsewhere. Workers never wait for it: they read what the last turn left.
//!
//! Keys (the client address in braces, so a Redis Cluster keeps one client on one shard):
//! - `ktls:r:{IP}:Q`, `ktls:c:{IP}:Q`: requests and new connections of `IP` counted in the
//!   time slot `Q` (Unix time / slot length, the same on every node with a synchronised
//!   clock), expiring after two time frames;
//! - `ktls:tft:c:{HASH}:Q`, `ktls:tft:r:{HASH}:Q`, `ktls:tfh:r:{HASH}:Q`: the connections
//!   and records of a TLS fingerprint and the requests of an HTTP one, for the configured
//!   fingerprints (crate::fingerprint), in slots of one second cut in eight;
//! - `ktls:blocks`: a stream of the blocks (`ip`, `until` in Unix ms, 0 forever, `node`),
//!   capped at [`keys::BLOCKS_KEPT`] entries, read by every node from where it stopped;
//! - `ktls:block:{IP}`: one key per block in force, with the block's expiry, for operators;
//! - `ktls:sticky:key`, `ktls:sticky`: the sticky cookie key the fleet agreed, and the stream
//!   of session pins and JS-challenge passes (sticky.rs).

mod keys;
mod link;
pub mod owners;
mod position;
pub mod resp;
mod sticky;
pub mod tier;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

use crate::fingerprint::Fingerprints;
use crate::frang::Frang;

/// What the side thread shares with the workers: the tables in force (a reload replaces
/// them).
pub struct Shared {
    pub frang: Arc<Frang>,
    pub fingerprints: Arc<Fingerprints>,
    /// The runtime in force, for its sticky tables (`runtime.sticky`).
    pub runtime: Arc<crate::runtime::Runtime>,
}

/// Starts the side thread for `cluster`. `current` gives the tables in force; `wake` tells
/// the workers the block count moved, so an idle worker resets the connections of an
/// address blocked elsewhere at once.
pub fn start(
    (cluster, redis): (config::Cluster, std::net::SocketAddr),
    current: impl Fn() -> Shared + Send + 'static,
    wake: impl Fn() + Send + 'static,
) -> std::io::Result<()> {
    crate::info!(
        "cluster: sharing frang counts, blocks, sticky sessions and challenge passes through Redis at {} every {} ms",
        redis,
        cluster.sync_interval.as_millis()
    );
    thread::Builder::new()
        .name("fleet-sync".into())
        .spawn(move || link::Link::new(cluster, redis).run(current, wake))
        .map(drop)
}

/// Clients' counts waiting for a turn (`ktls_proxy_fleet_backlog`).
static BACKLOG: AtomicU64 = AtomicU64::new(0);
/// Clients' counts dropped at the backlog's bound (`ktls_proxy_fleet_dropped_total`).
static DROPPED: AtomicU64 = AtomicU64::new(0);

fn note_backlog(waiting: usize) {
    BACKLOG.store(waiting as u64, Ordering::Relaxed);
}

fn note_dropped(count: usize) {
    DROPPED.fetch_add(count as u64, Ordering::Relaxed);
    crate::warn!(
        "cluster: {count} client count(s) dropped: more clients with new events than a turn's backlog holds ({})",
        link::BACKLOG_MAX
    );
}

/// Blocks trimmed from the stream before this process read them
/// (`ktls_proxy_fleet_blocks_lost_total`).
static LOST: AtomicU64 = AtomicU64::new(0);

fn note_lost(count: u64) {
    LOST.fetch_add(count, Ordering::Relaxed);
    crate::warn!(
        "cluster: {count} block(s) published by other nodes were trimmed from {} before this node read them: more blocks between two turns than the stream keeps ({})",
        keys::BLOCKS,
        keys::BLOCKS_KEPT
    );
}

/// Blocks of other nodes this process never read (the stream trimmed past it).
pub fn blocks_lost() -> u64 {
    LOST.load(Ordering::Relaxed)
}

/// Sticky pins and challenge passes trimmed from their stream before this process read
/// them (`ktls_proxy_fleet_sticky_lost_total`).
static STICKY_LOST: AtomicU64 = AtomicU64::new(0);

fn note_sticky_lost(count: u64) {
    STICKY_LOST.fetch_add(count, Ordering::Relaxed);
    crate::warn!(
        "cluster: {count} sticky pin(s)/pass(es) were trimmed from {} before this node read them: more published between two turns than the stream keeps ({})",
        sticky::STREAM,
        sticky::STREAM_KEPT
    );
}

/// Sticky pins and passes of the fleet this process never read (the stream trimmed past it).
pub fn sticky_lost() -> u64 {
    STICKY_LOST.load(Ordering::Relaxed)
}

/// Clients' counts waiting for a turn, and those dropped since the start.
pub fn backlog() -> (u64, u64) {
    (
        BACKLOG.load(Ordering::Relaxed),
        DROPPED.load(Ordering::Relaxed),
    )
}
