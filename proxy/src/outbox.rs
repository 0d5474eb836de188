//! What a connection still has to send, in order: bytes it produced (heads, relayed bodies)
//! and shared bodies, or byte ranges of them, it did not copy (cache hits, 206 parts).

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

/// Above this many queued bytes a connection stops pulling more from its source.
pub const HIGH_WATER: usize = 256 * 1024;

/// Bytes to send: produced by the connection, or a shared body (a stored response) not
/// copied. The outbox queues these, and an HTTP/2 stream's tail holds them while its window
/// is closed.
pub enum Segment {
    Owned(Vec<u8>),
    /// A shared body, or the part of it a range selects (kept within the body when queued).
    Shared(Arc<[u8]>, Range<usize>),
}

impl Segment {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Segment::Owned(v) => v,
            Segment::Shared(s, range) => s.get(range.clone()).unwrap_or_default(),
        }
    }
}

/// Largest drained segment kept for reuse: response heads fit, and an idle connection
/// holds no more than this.
const SPARE_MAX: usize = 1024;

#[derive(Default)]
pub struct Outbox {
    segments: VecDeque<Segment>,
    /// A small drained segment's allocation, reused by the next push: a keep-alive
    /// connection's response heads then allocate nothing.
    spare: Vec<u8>,
    /// Bytes of the first segment already sent.
    sent: usize,
    queued: usize,
}

impl Outbox {
    pub fn is_empty(&self) -> bool {
        self.queued == 0
    }

    pub fn len(&self) -> usize {
        self.queued
    }

    /// Queued bytes the outbox owns: a shared stored body (a cache hit, a 206 part) is the
    /// cache's memory, not the connection's (`client_mem`).
    pub fn owned_len(&self) -> usize {
        let mut owned = 0;
        for (i, segment) in self.segments.iter().enumerate() {
            if let Segment::Owned(v) = segment {
                owned += v.len().saturating_sub(if i == 0 { self.sent } else { 0 });
            }
        }
        owned
    }

    pub fn has_room(&self) -> bool {
        self.queued < HIGH_WATER
    }

    pub fn push(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.queued += bytes.len();
        if let Some(Segment::Owned(last)) = self.segments.back_mut() {
            if last.len() + bytes.len() <= 64 * 1024 {
                last.extend_from_slice(bytes);
                return;
            }
        }
        let mut segment = std::mem::take(&mut self.spare);
        segment.extend_from_slice(bytes);
        self.segments.push_back(Segment::Owned(segment));
    }

    /// Queues a buffer by value, without copying it.
    pub fn push_vec(&mut self, bytes: Vec<u8>) {
        if bytes.is_empty() {
            return;
        }
        self.queued += bytes.len();
        self.segments.push_back(Segment::Owned(bytes));
    }

    pub fn push_shared(&mut self, bytes: Arc<[u8]>) {
        let all = 0..bytes.len();
        self.push_shared_range(bytes, all);
    }

    /// Queues bytes `range` of a shared body without copying them (a part of a 206); a range
    /// reaching past the body is cut at its end.
    pub fn push_shared_range(&mut self, bytes: Arc<[u8]>, range: Range<usize>) {
        let end = range.end.min(bytes.len());
        let range = range.start.min(end)..end;
        if range.is_empty() {
            return;
        }
        self.queued += range.len();
        self.segments.push_back(Segment::Shared(bytes, range));
    }

    /// The next unsent bytes (part of one segment).
    pub fn front(&self) -> &[u8] {
        self.segments
            .front()
            .map(|s| &s.bytes()[self.sent..])
            .unwrap_or(&[])
    }

    /// Appends the first `len` unsent bytes (across segments) to `dst`.
    pub fn copy_front(&self, mut len: usize, dst: &mut Vec<u8>) {
        for (i, s) in self.segments.iter().enumerate() {
            if len == 0 {
                break;
            }
            let b = if i == 0 {
                &s.bytes()[self.sent..]
            } else {
                s.bytes()
            };
            let n = len.min(b.len());
            dst.extend_from_slice(&b[..n]);
            len -= n;
        }
    }

    /// The unsent bytes as up to `N` slices for writev, in `room` (the caller's stack: a
    /// write allocates nothing); the part of `room` filled.
    pub fn slices<'r, 's, const N: usize>(
        &'s self,
        room: &'r mut [std::io::IoSlice<'s>; N],
    ) -> &'r [std::io::IoSlice<'s>] {
        let mut filled = 0;
        for (i, (slot, s)) in room.iter_mut().zip(&self.segments).enumerate() {
            let b = if i == 0 {
                s.bytes().get(self.sent..).unwrap_or(&[])
            } else {
                s.bytes()
            };
            *slot = std::io::IoSlice::new(b);
            filled += 1;
        }
        room.get(..filled).unwrap_or(&[])
    }

    /// Marks `n` bytes sent.
    pub fn advance(&mut self, mut n: usize) {
        self.queued = self.queued.saturating_sub(n);
        while n > 0 {
            let Some(front) = self.segments.front() else {
                break;
            };
            let left = front.bytes().len() - self.sent;
            if n < left {
                self.sent += n;
                return;
            }
            n -= left;
            self.sent = 0;
            if let Some(Segment::Owned(mut done)) = self.segments.pop_front() {
                if self.spare.capacity() == 0 && done.capacity() <= SPARE_MAX {
                    done.clear();
                    self.spare = done;
                }
            }
        }
        if self.segments.is_empty() {
            self.sent = 0;
        }
    }

    /// Drops everything queued (the connection is closing).
    pub fn clear(&mut self) {
        self.segments.clear();
        self.spare = Vec::new();
        self.sent = 0;
        self.queued = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_across_owned_and_shared() {
        let mut o = Outbox::default();
        o.push(b"head;");
        o.push_shared(Arc::from(&b"body;"[..]));
        o.push(b"next");
        let mut out = Vec::new();
        while !o.is_empty() {
            let chunk = o.front().iter().take(3).copied().collect::<Vec<u8>>();
            out.extend_from_slice(&chunk);
            o.advance(chunk.len());
        }
        assert_eq!(out, b"head;body;next");
        assert_eq!(o.len(), 0);
    }

    #[test]
    fn owned_len_leaves_shared_bodies_out() {
        let mut o = Outbox::default();
        o.push(b"head;");
        o.push_shared(Arc::from(&b"a shared body"[..]));
        o.push_vec(b"tail".to_vec());
        assert_eq!((o.len(), o.owned_len()), (22, 9));
        o.advance(3);
        assert_eq!((o.len(), o.owned_len()), (19, 6));
        o.advance(8);
        assert_eq!((o.len(), o.owned_len()), (11, 4));
    }

    #[test]
    fn copy_front_spans_segments() {
        let mut o = Outbox::default();
        o.push(b"abc");
        o.push_shared(Arc::from(&b"defg"[..]));
        o.advance(1);
        let mut dst = Vec::new();
        o.copy_front(5, &mut dst);
        assert_eq!(dst, b"bcdef");
    }

    #[test]
    fn shared_ranges_send_only_their_bytes() {
        let body: Arc<[u8]> = Arc::from(&b"0123456789"[..]);
        let mut o = Outbox::default();
        o.push(b"[");
        o.push_shared_range(body.clone(), 2..5);
        o.push_shared_range(body.clone(), 8..99);
        o.push_shared_range(body, 4..4);
        o.push(b"]");
        assert_eq!(o.len(), 1 + 3 + 2 + 1);
        o.advance(2);
        let s: Vec<u8> = o
            .slices(&mut [std::io::IoSlice::new(&[]); 8])
            .iter()
            .flat_map(|s| s.iter().copied())
            .collect();
        assert_eq!(s, b"3489]");
    }

    #[test]
    fn slices_start_at_the_sent_offset() {
        let mut o = Outbox::default();
        o.push(b"abc");
        o.push_shared(Arc::from(&b"def"[..]));
        o.advance(2);
        let s: Vec<u8> = o
            .slices(&mut [std::io::IoSlice::new(&[]); 8])
            .iter()
            .flat_map(|s| s.iter().copied())
            .collect();
        assert_eq!(s, b"cdef");
    }
}
