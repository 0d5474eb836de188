//! Per-thread buffers for records in flight. A connection holds a receive buffer only while a
//! record is partly read or decrypted data waits, and a send buffer only while the socket has
//! not taken all of a burst; otherwise the buffers go back here, so an idle connection holds
//! none. A buffer is kept with the box that holds its cursors ([`Rx`], [`Tx`]): taking one
//! and giving it back allocates nothing (a request took and gave both, so a box of its own
//! was two `malloc`/`free` pairs per request).

use std::cell::RefCell;
use std::ops::Range;

use super::layer::MAX_RECORD;

/// Receive buffer: room for two whole records, so a read can take more than one.
pub(crate) const RX_CAP: usize = 2 * MAX_RECORD;
/// Plaintext sealed per burst (four full records, one syscall).
pub(crate) const BURST: usize = 4 * super::layer::MAX_PLAINTEXT;
/// Send buffer: a burst and its record overhead.
pub(crate) const TX_CAP: usize = BURST + 4 * 64;
/// Buffers kept per thread and kind; beyond that they are freed.
const KEEP: usize = 16;

/// Received bytes of one connection, while it has any.
pub(crate) struct Rx {
    /// `RX_CAP` bytes (its length is its capacity).
    pub buf: Vec<u8>,
    /// Undecrypted bytes: `buf[start..end]`.
    pub start: usize,
    pub end: usize,
    /// Decrypted application data not yet handed out.
    pub plain: Range<usize>,
}

/// Sealed records the socket has not taken yet.
pub(crate) struct Tx {
    pub buf: Vec<u8>,
    pub sent: usize,
    /// Plaintext bytes these records carry that the caller has not been told about.
    pub plain: usize,
}

// The boxes themselves are what is pooled: a connection holds `Option<Box<Rx>>` (8 bytes
// while idle), so a buffer kept without its box would need a new box per take.
thread_local! {
    #[expect(clippy::vec_box, reason = "the boxes are handed to connections as they are")]
    static RX: RefCell<Vec<Box<Rx>>> = const { RefCell::new(Vec::new()) };
    #[expect(clippy::vec_box, reason = "the boxes are handed to connections as they are")]
    static TX: RefCell<Vec<Box<Tx>>> = const { RefCell::new(Vec::new()) };
}

/// A receive buffer of `RX_CAP` zero-filled (when new) bytes, no bytes in it.
pub(crate) fn take_rx() -> Box<Rx> {
    match RX.with(|p| p.borrow_mut().pop()) {
        Some(mut rx) => {
            rx.start = 0;
            rx.end = 0;
            rx.plain = 0..0;
            rx
        }
        None => Box::new(Rx {
            buf: vec![0u8; RX_CAP],
            start: 0,
            end: 0,
            plain: 0..0,
        }),
    }
}

pub(crate) fn give_rx(rx: Box<Rx>) {
    if rx.buf.len() == RX_CAP {
        RX.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < KEEP {
                p.push(rx);
            }
        });
    }
}

/// An empty send buffer with room for a burst.
pub(crate) fn take_tx() -> Box<Tx> {
    match TX.with(|p| p.borrow_mut().pop()) {
        Some(mut tx) => {
            tx.sent = 0;
            tx.plain = 0;
            tx
        }
        None => Box::new(Tx {
            buf: Vec::with_capacity(TX_CAP),
            sent: 0,
            plain: 0,
        }),
    }
}

pub(crate) fn give_tx(mut tx: Box<Tx>) {
    tx.buf.clear();
    if tx.buf.capacity() >= TX_CAP && tx.buf.capacity() <= 2 * TX_CAP {
        TX.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < KEEP {
                p.push(tx);
            }
        });
    }
}
