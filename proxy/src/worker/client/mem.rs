//! `client_mem`: what the proxy holds for one client address across its connections, as
//! Tempesta accounts it. After each receive pass a connection's bytes join its address's
//! total in frang's client table; a pass that finds the total over the hard limit resets the
//! connection (and `ip_block` then refuses the address).

use std::time::Instant;

use super::codec::Codec;
use super::Client;
use crate::frang::Violation;

impl Client {
    /// Bytes held for this connection: read and not yet consumed, queued for the client,
    /// and on HTTP/2 request bodies, waiting response bytes and frames; on HTTP/3 per
    /// stream the same, with the `h3` crate's partial frames, blocked sections and QPACK
    /// table (`H3Codec::held_bytes`; accounted after each turn of the connection,
    /// `drive_h3`). A stored body shared from the cache is the cache's, not counted.
    pub fn held_bytes(&self) -> u64 {
        let read = self.rbuf.as_ref().map_or(0, |b| b.len());
        let codec = match &self.codec {
            Codec::H2(h2) => h2.held_bytes(),
            Codec::H3(h3) => h3.held_bytes(),
            Codec::H1(_) => 0,
        };
        (read + self.out.owned_len() + codec) as u64
    }

    /// After a receive pass: the connection's held bytes join its address's total. Err when
    /// the total is over `client_mem`'s hard limit (the connection is then marked
    /// blocked (`End::block`); the caller resets it as a block).
    #[inline]
    pub fn account_memory(&mut self, now: Instant) -> Result<(), Violation> {
        // The table that counted the connection at accept keeps its memory too (a reload
        // must not move bytes into counters that never saw them).
        let Some(frang) = self.counted_by.as_ref().filter(|f| f.accounts_memory()) else {
            return Ok(());
        };
        let held = self.held_bytes();
        let verdict = frang.on_memory(self.peer.ip(), self.mem_held, held, now);
        self.mem_held = held;
        if verdict.is_err() {
            self.end.block();
        }
        verdict
    }
}
