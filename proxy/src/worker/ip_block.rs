//! `ip_block` ends the blocked address's open connections on every worker, as Tempesta
//! resets them (its filter drops the address and frang resets the client's connections;
//! tempesta-test frang/test_ip_block.py expects the other connections from that address
//! reset, those of another address untouched). A block bumps frang's block count
//! ([`crate::frang::Frang::blocks`]); each worker compares it once per loop turn, and the
//! worker that sees a change wakes the others, so an idle worker resets its share at once
//! instead of at its next event.

use std::sync::Arc;

use mio::Waker;

use super::{Shared, Worker};
use crate::close_reason::CloseReason;

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

impl Worker {
    /// Resets every connection of this worker whose address `ip_block` blocked since the
    /// last turn (cheap when nothing changed: one atomic load).
    pub(super) fn reset_blocked_clients(&mut self) {
        let blocks = self.rt.frang.blocks();
        if blocks == self.seen_blocks {
            return;
        }
        self.seen_blocks = blocks;
        self.shared.wake_workers();
        let (frang, now) = (self.rt.frang.clone(), self.now);
        let blocked: Vec<usize> = self
            .clients
            .iter()
            .filter(|(_, c)| c.gone.is_none() && frang.is_blocked(c.peer.ip(), now))
            .map(|(ci, _)| ci)
            .collect();
        for ci in blocked {
            self.reset_client(ci, CloseReason::Frang);
        }
    }
}
