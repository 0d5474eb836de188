//! `ip_block` ends the blocked address's open connections on every worker, as Tempesta
//! resets them (its filter drops the address and frang resets the client's connections;
//! tempesta-test frang/test_ip_block.py expects the other connections from that address
//! reset, those of another address untouched). A block bumps frang's block count
//! ([`crate::frang::Frang::blocks`]); each worker compares it once per loop turn, and the
//! worker that sees a change wakes the others, so an idle worker resets its share at once
//! instead of at its next event.

use std::sync::Arc;
use std::time::Instant;

use mio::Waker;
use slab::Slab;

use super::client::Client;
use super::Shared;
use crate::runtime::Runtime;

impl Shared {
    pub(super) fn add_waker(&self, waker: Arc<Waker>) {
        self.wakers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(waker);
    }

    fn wake_workers(&self) {
        let wakers = self.wakers.lock().unwrap_or_else(|e| e.into_inner());
        for waker in wakers.iter() {
            // A worker that cannot be woken sees the block at its next event.
            let _ = waker.wake();
        }
    }
}

/// The connections of a worker to reset because `ip_block` blocked their address since the
/// worker last looked (`seen`, the block count it saw then): none, for one atomic load, when
/// nothing changed. The worker that sees a change first wakes the others.
pub(super) fn newly_blocked(
    seen: &mut u64,
    shared: &Shared,
    rt: &Runtime,
    clients: &Slab<Client>,
) -> Vec<usize> {
    let frang = &rt.frang;
    let blocks = frang.blocks();
    if blocks == *seen {
        return Vec::new();
    }
    *seen = blocks;
    shared.wake_workers();
    let now = Instant::now();
    clients
        .iter()
        .filter(|(_, c)| c.gone.is_none() && frang.is_blocked(c.peer.ip(), now))
        .map(|(ci, _)| ci)
        .collect()
}
