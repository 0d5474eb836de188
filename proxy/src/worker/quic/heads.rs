//! frang's slow-head limits on HTTP/3 request streams (`client_header_timeout`,
//! `http_header_chunk_cnt`; issue 33). On HTTP/1.1 and HTTP/2 a connection reads one head
//! at a time, and its `ConnLimits` count that head's pieces and time it. An HTTP/3 head
//! arrives on its own stream, beside other streams' heads and bodies, so each request
//! stream whose head is incomplete gets its own count and clock here: from the turn that
//! brought its first byte until the `h3` crate has its request (a head waiting for QPACK
//! inserts is still incomplete: the client's encoder decides when it ends). A piece is a
//! turn of the connection that read bytes of the stream while its head was incomplete,
//! as a read is on HTTP/1.1 and HTTP/2 (`head_chunks`, the same function): STREAM frames
//! that arrive together count once, a head whole in one turn counts nothing. A deadline
//! is the connection's timer (`conn.rs` `flush`), so a stream that stops sending is cut too.
//!
//! How many heads are tracked at once is the client's open request streams: at most
//! `max_concurrent_streams` (QUIC's stream limit, which quinn-proto enforces).

use std::time::Instant;

use crate::frang::{ConnLimits, Violation};
use crate::worker::head_chunks::head_chunks;
use crate::worker::limits::deadline_passed;

/// The incomplete heads of one connection's request streams.
#[derive(Default)]
pub struct Heads {
    /// The limits a head starts with; none when neither limit is set (nothing tracked).
    fresh: Option<ConnLimits>,
    /// Request streams whose head is incomplete, each with its count and start.
    open: Vec<(u64, ConnLimits)>,
    /// Request streams that got bytes in this turn (duplicates possible).
    read: Vec<u64>,
}

impl Heads {
    pub fn new(global: &config::FrangGlobal) -> Heads {
        let limits = ConnLimits::new(global);
        Heads {
            fresh: limits.limits_heads().then_some(limits),
            open: Vec::new(),
            read: Vec::new(),
        }
    }

    /// Request stream `stream` got bytes in this turn.
    pub fn read(&mut self, stream: u64) {
        if self.fresh.is_some() {
            self.read.push(stream);
        }
    }

    /// After the turn's bytes went into the `h3` connection (`awaiting`: whether a stream's
    /// request head is still incomplete): a piece counted for every stream read whose head
    /// was or is incomplete, the heads now complete (or dropped) forgotten, and every
    /// deadline checked at `now`. The first limit broken, if any.
    pub fn judge(&mut self, awaiting: impl Fn(u64) -> bool, now: Instant) -> Result<(), Violation> {
        let Some(fresh) = &self.fresh else {
            return Ok(());
        };
        self.read.sort_unstable();
        self.read.dedup();
        let mut verdict = Ok(());
        for &stream in &self.read {
            let after = awaiting(stream);
            let at = self.open.iter().position(|(s, _)| *s == stream);
            let before = at.is_some();
            let mut limits = match at {
                Some(i) => self.open.swap_remove(i).1,
                None if after => fresh.clone(),
                // Whole in one turn, or body bytes: nothing to count.
                None => continue,
            };
            let piece = head_chunks(&mut limits, now, before, !after, after);
            verdict = verdict.and(piece);
            if after {
                self.open.push((stream, limits));
            }
        }
        self.read.clear();
        self.open.retain(|(s, _)| awaiting(*s));
        verdict?;
        match self.deadline() {
            Some(at) if now >= at => Err(deadline_passed("client_header_timeout")),
            _ => Ok(()),
        }
    }

    /// The earliest deadline of the incomplete heads.
    pub fn deadline(&self) -> Option<Instant> {
        let deadlines = self.open.iter().filter_map(|(_, l)| l.deadline());
        deadlines.map(|(at, _)| at).min()
    }

    /// Heads being read now.
    #[cfg(test)]
    pub fn in_progress(&self) -> usize {
        self.open.len()
    }

    /// An idle connection keeps no capacity here.
    pub fn release_idle(&mut self) {
        if self.open.is_empty() {
            self.open = Vec::new();
        }
        self.read = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use super::*;

    fn heads(chunks: Option<u32>, timeout: Option<u64>) -> Heads {
        Heads::new(&config::FrangGlobal {
            http_header_chunk_cnt: chunks,
            client_header_timeout: timeout.map(Duration::from_secs),
            ..Default::default()
        })
    }

    /// One turn: `read` streams got bytes, `pending` still await their request.
    fn turn(h: &mut Heads, read: &[u64], pending: &[u64], now: Instant) -> Result<(), Violation> {
        for &s in read {
            h.read(s);
        }
        let pending: HashSet<u64> = pending.iter().copied().collect();
        h.judge(|s| pending.contains(&s), now)
    }

    #[test]
    fn a_head_in_more_turns_than_the_limit_is_refused_per_stream() {
        let mut h = heads(Some(3), None);
        let t = Instant::now();
        // Streams 0 and 4 interleave: each counts its own pieces.
        assert!(turn(&mut h, &[0, 4], &[0, 4], t).is_ok());
        assert!(turn(&mut h, &[0, 4, 0], &[0, 4], t).is_ok());
        assert!(turn(&mut h, &[0], &[0, 4], t).is_ok());
        // Stream 4's head completes in its third piece: within the limit.
        assert!(turn(&mut h, &[4], &[0], t).is_ok());
        let v = turn(&mut h, &[0], &[0], t).unwrap_err();
        assert_eq!(v.limit, "http_header_chunk_cnt");
        // A head whole in one turn counts nothing, however many streams do it.
        let mut h = heads(Some(1), None);
        for s in 0..100 {
            assert!(turn(&mut h, &[s * 4], &[], t).is_ok());
        }
        assert_eq!(h.in_progress(), 0);
    }

    #[test]
    fn the_deadline_runs_from_the_first_byte_until_the_request() {
        let mut h = heads(None, Some(5));
        let t = Instant::now();
        assert!(turn(&mut h, &[0], &[0], t).is_ok());
        assert_eq!(h.deadline(), Some(t + Duration::from_secs(5)));
        // A second stream starts later: the earliest deadline is still stream 0's.
        assert!(turn(&mut h, &[4], &[0, 4], t + Duration::from_secs(2)).is_ok());
        assert_eq!(h.deadline(), Some(t + Duration::from_secs(5)));
        // Nothing arrives; the timer's turn finds stream 0 overdue.
        let v = turn(&mut h, &[], &[0, 4], t + Duration::from_secs(5)).unwrap_err();
        assert_eq!(v.limit, "client_header_timeout");
        // Had its head completed (say, a QPACK insert on another stream), it is forgotten.
        assert!(turn(&mut h, &[], &[4], t + Duration::from_secs(5)).is_ok());
        assert_eq!(h.deadline(), Some(t + Duration::from_secs(7)));
        assert!(turn(&mut h, &[], &[], t + Duration::from_secs(6)).is_ok());
        assert_eq!(h.deadline(), None);
    }

    #[test]
    fn nothing_is_tracked_without_the_limits() {
        let mut h = heads(None, None);
        let t = Instant::now();
        for i in 0..1000 {
            assert!(turn(&mut h, &[0], &[0], t + Duration::from_secs(i)).is_ok());
        }
        assert_eq!((h.in_progress(), h.deadline()), (0, None));
    }
}
