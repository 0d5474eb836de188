//! Per-thread buffers for records in flight. A connection holds a receive buffer only while a
//! record is partly read or decrypted data waits, and a send buffer only while the socket has
//! not taken all of a burst; otherwise the buffers go back here, so an idle connection holds
//! none.

use std::cell::RefCell;

use super::layer::MAX_RECORD;

/// Receive buffer: room for two whole records, so a read can take more than one.
pub(crate) const RX_CAP: usize = 2 * MAX_RECORD;
/// Plaintext sealed per burst (four full records, one syscall).
pub(crate) const BURST: usize = 4 * super::layer::MAX_PLAINTEXT;
/// Send buffer: a burst and its record overhead.
pub(crate) const TX_CAP: usize = BURST + 4 * 64;
/// Buffers kept per thread and kind; beyond that they are freed.
const KEEP: usize = 16;

thread_local! {
    static RX: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    static TX: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// A zero-filled buffer of `RX_CAP` bytes (its length is its capacity).
pub(crate) fn take_rx() -> Vec<u8> {
    RX.with(|p| p.borrow_mut().pop())
        .unwrap_or_else(|| vec![0u8; RX_CAP])
}

pub(crate) fn give_rx(buf: Vec<u8>) {
    if buf.len() == RX_CAP {
        RX.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < KEEP {
                p.push(buf);
            }
        });
    }
}

/// An empty buffer with room for a burst.
pub(crate) fn take_tx() -> Vec<u8> {
    TX.with(|p| p.borrow_mut().pop())
        .unwrap_or_else(|| Vec::with_capacity(TX_CAP))
}

pub(crate) fn give_tx(mut buf: Vec<u8>) {
    buf.clear();
    if buf.capacity() >= TX_CAP && buf.capacity() <= 2 * TX_CAP {
        TX.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < KEEP {
                p.push(buf);
            }
        });
    }
}
