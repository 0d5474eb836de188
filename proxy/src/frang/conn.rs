//! Per-connection frang state for the request head being read: how many reads carried it
//! (`http_header_chunk_cnt`) and how long it takes (`client_header_timeout`). Slowloris-style
//! clients trickle a head in many small, slow pieces. What concerns a request's body is
//! per request ([`super::RequestLimits`]): a connection that carries many requests at once
//! (HTTP/2) has one head reader but many bodies.

use std::time::{Duration, Instant};

use config::FrangGlobal;

use super::window::{quantum, SlotRing};
use super::Violation;

/// Frang counters of one client connection's head reading. Owned by the connection, no
/// locking.
#[derive(Debug, Clone)]
pub struct ConnLimits {
    header_chunk_cnt: Option<u32>,
    header_timeout: Option<Duration>,
    head_chunks: u32,
    /// When the first piece of the current head arrived.
    head_started: Option<Instant>,
    /// Requests answered with the sticky cookie's redirect or challenge, per slot since
    /// the instant of the first (allocated at the first: most connections never miss).
    sticky_misses: Option<Box<(Instant, SlotRing)>>,
}

impl ConnLimits {
    pub fn new(global: &FrangGlobal) -> ConnLimits {
        ConnLimits {
            header_chunk_cnt: global.http_header_chunk_cnt.filter(|&n| n > 0),
            header_timeout: global.client_header_timeout.filter(|d| !d.is_zero()),
            head_chunks: 0,
            head_started: None,
            sticky_misses: None,
        }
    }

    /// Whether a head is limited at all (`http_header_chunk_cnt` or `client_header_timeout`
    /// set): HTTP/3 tracks its streams' heads only then (`worker/quic/heads.rs`).
    pub fn limits_heads(&self) -> bool {
        self.header_chunk_cnt.is_some() || self.header_timeout.is_some()
    }

    /// After each read that carried bytes of the current request's head
    /// (including the read that completes it). `http_header_chunk_cnt`,
    /// and `client_header_timeout` measured from the head's first read.
    pub fn on_head_chunk(&mut self, now: Instant) -> Result<(), Violation> {
        self.head_chunks = self.head_chunks.saturating_add(1);
        match self.head_started {
            None => self.head_started = Some(now),
            // As in Tempesta, the timeout is checked when more of the head
            // arrives; [`ConnLimits::deadline`] lets a timer catch a client
            // that sends nothing more.
            Some(start) => {
                if let Some(limit) = self.header_timeout {
                    let elapsed = now.saturating_duration_since(start);
                    if elapsed > limit {
                        return Err(timeout("client_header_timeout", elapsed, limit));
                    }
                }
            }
        }
        match self.header_chunk_cnt {
            Some(max) if self.head_chunks > max => Err(Violation::exceeded(
                "http_header_chunk_cnt",
                self.head_chunks,
                max,
            )),
            _ => Ok(()),
        }
    }

    /// When the worker should give up waiting for the rest of the current head: arm a timer
    /// for it and treat firing as the timeout's violation.
    #[inline(always)]
    pub fn deadline(&self) -> Option<(Instant, &'static str)> {
        let start = self.head_started?;
        let limit = self.header_timeout?;
        start
            .checked_add(limit)
            .map(|at| (at, "client_header_timeout"))
    }

    /// Counts a request that arrived without a valid sticky cookie where one is enforced, and
    /// returns this connection's misses within the last second: Tempesta counts them per
    /// connection, over one second in `FRANG_FREQ` slots (frang_sticky_cookie_limit), so a
    /// second connection, or a cookie that expired an hour ago, starts afresh.
    pub fn on_sticky_miss(&mut self, now: Instant) -> u32 {
        let (epoch, ring) = &mut **self
            .sticky_misses
            .get_or_insert_with(|| Box::new((now, SlotRing::default())));
        let slot = super::window::slot_len(Duration::from_secs(1));
        ring.add(quantum(*epoch, now, slot)).in_frame
    }

    /// A head was read completely: the next one starts from zero.
    pub fn head_complete(&mut self) {
        self.head_chunks = 0;
        self.head_started = None;
    }
}

pub(super) fn timeout(limit: &'static str, elapsed: Duration, max: Duration) -> Violation {
    Violation::block(
        limit,
        format!("{} ms > {} ms", elapsed.as_millis(), max.as_millis()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn global() -> FrangGlobal {
        FrangGlobal {
            http_header_chunk_cnt: Some(3),
            client_header_timeout: Some(Duration::from_secs(5)),
            ..FrangGlobal::default()
        }
    }

    #[test]
    fn header_chunks_just_under_and_over() {
        let t = Instant::now();
        let mut conn = ConnLimits::new(&global());
        for _ in 0..3 {
            assert!(conn.on_head_chunk(t).is_ok());
        }
        let v = conn.on_head_chunk(t).unwrap_err();
        assert_eq!((v.limit, v.status), ("http_header_chunk_cnt", 403));
        conn.head_complete();
        assert!(conn.on_head_chunk(t).is_ok());
    }

    #[test]
    fn header_timeout_counts_from_first_head_read() {
        let t = Instant::now();
        let mut conn = ConnLimits::new(&global());
        assert!(conn.on_head_chunk(t).is_ok());
        assert_eq!(
            conn.deadline(),
            Some((t + Duration::from_secs(5), "client_header_timeout"))
        );
        assert!(conn.on_head_chunk(t + Duration::from_secs(5)).is_ok());
        let v = conn
            .on_head_chunk(t + Duration::from_millis(5001))
            .unwrap_err();
        assert_eq!(v.limit, "client_header_timeout");
        conn.head_complete();
        assert_eq!(conn.deadline(), None);
    }

    #[test]
    fn unlimited_by_default() {
        let t = Instant::now();
        let mut conn = ConnLimits::new(&FrangGlobal::default());
        for i in 0..1000 {
            assert!(conn.on_head_chunk(t + Duration::from_secs(i)).is_ok());
        }
        assert_eq!(conn.deadline(), None);
    }
}
