//! `client_mem`: what the proxy holds for one client address across its connections, as
//! Tempesta accounts it. After each receive pass a connection's bytes join its address's
//! total in frang's client table; a pass that finds the total over the hard limit resets the
//! connection (and `ip_block` then refuses the address).

use super::client::Client;
use super::codec::Codec;
use super::finish::Refusal;
use super::Worker;
use crate::close_reason::CloseReason;

impl Client {
    /// Bytes held for this connection: read and not yet consumed, queued for the client,
    /// and on HTTP/2 request bodies, waiting response bytes and frames. A stored body shared
    /// from the cache is the cache's, not counted.
    pub fn held_bytes(&self) -> u64 {
        let read = self.rbuf.as_ref().map_or(0, |b| b.len());
        let codec = match &self.codec {
            Codec::H2(h2) => h2.held_bytes(),
            Codec::H1(_) => 0,
        };
        (read + self.out.owned_len() + codec) as u64
    }
}

impl Worker {
    /// After a receive pass of client `ci`: its held bytes join its address's total; over
    /// `client_mem`'s hard limit the connection is reset as a block.
    pub(super) fn account_memory(&mut self, ci: usize) {
        let now = self.now;
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        // The table that counted the connection at accept keeps its memory too (a reload
        // must not move bytes into counters that never saw them).
        let Some(frang) = c.counted_by.as_ref().filter(|f| f.accounts_memory()) else {
            return;
        };
        let held = c.held_bytes();
        let verdict = frang.on_memory(c.peer.ip(), c.mem_held, held, now);
        c.mem_held = held;
        if let Err(v) = verdict {
            let ip = c.peer.ip();
            c.frang_blocked = true;
            self.note_block(ip, &v, "-");
            self.drop_response(ci, Refusal::Attack);
            self.close_client(ci, CloseReason::Frang);
        }
    }
}
