//! `ip_block` ends the blocked address's open connections on every worker, as Tempesta
//! resets them (its filter drops the address and frang resets the client's connections;
//! tempesta-test frang/test_ip_block.py expects the other connections from that address
//! reset, those of another address untouched). A block bumps frang's block count
//! ([`crate::frang::Frang::blocks`]); each worker compares it once per loop turn, and the
//! worker that sees a change wakes the others, so an idle worker resets its share at once
//! instead of at its next event.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use mio::Waker;

use super::client::{ClientId, Clients};
use super::shared::Shared;
use crate::runtime::Runtime;

/// The workers' wakers: the first worker to see a new block count wakes the others, once
/// (`Frang::first_to_see`).
#[derive(Default)]
pub(super) struct BlockWake {
    wakers: Mutex<Vec<Arc<Waker>>>,
}

impl Shared {
    pub(super) fn add_waker(&self, waker: Arc<Waker>) {
        self.block_wake
            .wakers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(waker);
    }

    /// Wakes every worker to look for new blocks: the first worker to see a block count, or
    /// the `cluster` side thread after it applied blocks imposed by other instances
    /// (crate::fleet), which no worker of this process has seen yet.
    pub fn wake_for_blocks(&self) {
        let wakers = self.block_wake.wakers.lock();
        for waker in wakers.unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = waker.wake();
        }
    }
}

/// The connections of a worker to reset because `ip_block` blocked their address since the
/// worker last looked (`seen`, the block count it saw then): none, for one atomic load, when
/// nothing changed. The addresses come from frang's list of recent blocks and are compared
/// with each connection's, with no lock per connection (a block is cheap for an attacker to
/// provoke); only a worker further behind than that list looks each address up. The first
/// worker to see a count wakes the others, once.
pub(super) fn newly_blocked(
    seen: &mut u64,
    shared: &Shared,
    rt: &Runtime,
    clients: &Clients,
) -> Vec<ClientId> {
    let frang = &rt.frang;
    if frang.blocks() == *seen {
        return Vec::new();
    }
    let (blocks, addresses) = frang.blocked_since(*seen);
    *seen = blocks;
    if frang.first_to_see(blocks) {
        shared.wake_for_blocks();
    }
    let now = Instant::now();
    let blocked = |ip: IpAddr| match &addresses {
        Some(list) => list.contains(&ip),
        None => frang.is_blocked(ip, now),
    };
    clients
        .iter()
        .filter(|(_, c)| !c.end.is_gone() && blocked(c.peer.ip()))
        .map(|(ci, _)| ci)
        .collect()
}
