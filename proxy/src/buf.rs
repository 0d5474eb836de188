//! Byte buffers for connection I/O, recycled through a per-worker pool so that a busy worker
//! allocates none per request, and an idle keep-alive connection holds none.

use std::io::{self, Read};

/// Size of every pooled buffer.
pub const BUF_SIZE: usize = 16 * 1024;
/// Buffers a worker keeps for reuse; beyond that, returned buffers are freed.
const POOL_MAX: usize = 1024;

/// A fixed-capacity buffer: bytes `start..end` are unread.
pub struct Buf {
    data: Vec<u8>,
    start: usize,
    end: usize,
}

impl Buf {
    fn new() -> Buf {
        Buf {
            data: vec![0; BUF_SIZE],
            start: 0,
            end: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// The unread bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    pub fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Room left for reading, after moving unread bytes to the front if that makes room.
    #[inline]
    pub fn spare(&mut self) -> usize {
        if self.end == self.data.len() && self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        self.data.len() - self.end
    }

    #[inline]
    pub fn is_full(&mut self) -> bool {
        self.spare() == 0
    }

    /// Fills spare room from `reader` with one read call.
    pub fn read_from(&mut self, reader: &mut impl Read) -> io::Result<usize> {
        self.spare();
        let n = reader.read(&mut self.data[self.end..])?;
        self.end += n;
        Ok(n)
    }

    /// Fills spare room with a closure that reads into a slice (TLS sessions).
    #[inline]
    pub fn fill_with<E>(
        &mut self,
        f: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        self.spare();
        let n = f(&mut self.data[self.end..])?;
        self.end += n.min(self.data.len() - self.end);
        Ok(n)
    }

    /// Appends as much of `bytes` as fits; returns how much did.
    pub fn push(&mut self, bytes: &[u8]) -> usize {
        let n = self.spare().min(bytes.len());
        self.data[self.end..self.end + n].copy_from_slice(&bytes[..n]);
        self.end += n;
        n
    }
}

/// A worker's free buffers.
#[derive(Default)]
pub struct BufPool {
    free: Vec<Buf>,
}

impl BufPool {
    #[inline]
    pub fn take(&mut self) -> Buf {
        self.free.pop().unwrap_or_else(Buf::new)
    }

    #[inline]
    pub fn give(&mut self, mut buf: Buf) {
        if self.free.len() < POOL_MAX {
            buf.start = 0;
            buf.end = 0;
            self.free.push(buf);
        }
    }

    /// Returns `slot`'s buffer to the pool if it holds no unread bytes.
    #[inline]
    pub fn release_if_empty(&mut self, slot: &mut Option<Buf>) {
        if slot.as_ref().is_some_and(Buf::is_empty) {
            if let Some(buf) = slot.take() {
                self.give(buf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consume_compacts_and_push_fills() {
        let mut pool = BufPool::default();
        let mut b = pool.take();
        assert_eq!(b.push(&[7u8; BUF_SIZE + 10]), BUF_SIZE);
        assert!(b.is_full());
        b.consume(100);
        assert_eq!(b.len(), BUF_SIZE - 100);
        assert_eq!(b.spare(), 100);
        assert_eq!(b.bytes().len(), BUF_SIZE - 100);
        b.consume(BUF_SIZE);
        assert!(b.is_empty());
        let mut slot = Some(b);
        pool.release_if_empty(&mut slot);
        assert!(slot.is_none());
        assert_eq!(pool.free.len(), 1);
    }

    #[test]
    fn read_from_reader() {
        let mut b = BufPool::default().take();
        let mut src: &[u8] = b"hello";
        assert_eq!(b.read_from(&mut src).expect("read"), 5);
        assert_eq!(b.bytes(), b"hello");
    }
}
