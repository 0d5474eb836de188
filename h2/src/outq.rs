//! The output queue both roles share: frames waiting for the caller to
//! write them, the one PING ack that may be queued (a newer PING
//! overwrites it instead of queueing another), and since when output has
//! waited unread (a peer that reads nothing).

use std::time::Instant;

use crate::write;

pub(crate) struct OutQueue {
    /// Frames are appended here; the unsent part starts at `start`.
    pub buf: Vec<u8>,
    start: usize,
    /// Index in `buf` of a queued, wholly unsent PING ack.
    ping_ack_at: Option<usize>,
    /// Since when output has waited without the caller taking any.
    pub stall_since: Option<Instant>,
}

impl OutQueue {
    pub fn new() -> OutQueue {
        OutQueue {
            buf: Vec::with_capacity(256),
            start: 0,
            ping_ack_at: None,
            stall_since: None,
        }
    }

    /// The bytes to write.
    pub fn pending(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// Bytes queued and not yet written.
    pub fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Starts the stall clock at `now` when output waits.
    pub fn note(&mut self, now: Instant) {
        if self.len() > 0 && self.stall_since.is_none() {
            self.stall_since = Some(now);
        }
    }

    /// `n` bytes were written.
    pub fn advance(&mut self, n: usize, now: Instant) {
        self.start = (self.start + n).min(self.buf.len());
        if matches!(self.ping_ack_at, Some(at) if at < self.start) {
            self.ping_ack_at = None;
        }
        if n > 0 {
            self.stall_since = None;
        }
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
            self.ping_ack_at = None;
        } else if self.start > 64 * 1024 && self.start * 2 > self.buf.len() {
            self.buf.drain(..self.start);
            self.ping_ack_at = self.ping_ack_at.map(|at| at - self.start);
            self.start = 0;
        }
        self.note(now);
    }

    /// Every unsent byte at once, by value.
    pub fn take(&mut self) -> Vec<u8> {
        let out = if self.start == 0 {
            std::mem::take(&mut self.buf)
        } else {
            let rest = self.buf.split_off(self.start);
            self.buf.clear();
            rest
        };
        self.start = 0;
        self.ping_ack_at = None;
        if !out.is_empty() {
            self.stall_since = None;
        }
        out
    }

    /// Queues a PING ack, or overwrites the payload of the one not yet
    /// written (the peer only needs the latest).
    pub fn ping_ack(&mut self, payload: [u8; 8]) {
        if let Some(at) = self.ping_ack_at {
            self.buf[at + 9..at + 17].copy_from_slice(&payload);
            return;
        }
        self.ping_ack_at = Some(self.buf.len());
        write::ping(&mut self.buf, true, payload);
    }
}
