//! Per-connection frang state for the request being read: how many reads
//! carried its head or its body (`http_header_chunk_cnt`,
//! `http_body_chunk_cnt`), how long they take (`client_header_timeout`,
//! `client_body_timeout`) and how much body arrived (`http_body_len`).
//! Slowloris-style clients trickle a request in many small, slow pieces.

use std::time::{Duration, Instant};

use config::{FrangGlobal, FrangHttp};

use super::Violation;

/// Frang counters of one client connection. Owned by the connection, no
/// locking.
#[derive(Debug, Clone)]
pub struct ConnLimits {
    header_chunk_cnt: Option<u32>,
    body_chunk_cnt: Option<u32>,
    header_timeout: Option<Duration>,
    body_timeout: Option<Duration>,
    head_chunks: u32,
    body_chunks: u32,
    body_bytes: u64,
    /// When the first piece of the current head arrived.
    head_started: Option<Instant>,
    /// When the previous piece of the current body arrived.
    last_body_chunk: Option<Instant>,
}

impl ConnLimits {
    pub fn new(global: &FrangGlobal) -> ConnLimits {
        ConnLimits {
            header_chunk_cnt: global.http_header_chunk_cnt.filter(|&n| n > 0),
            body_chunk_cnt: global.http_body_chunk_cnt.filter(|&n| n > 0),
            header_timeout: global.client_header_timeout.filter(|d| !d.is_zero()),
            body_timeout: global.client_body_timeout.filter(|d| !d.is_zero()),
            head_chunks: 0,
            body_chunks: 0,
            body_bytes: 0,
            head_started: None,
            last_body_chunk: None,
        }
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

    /// After each read that carried bytes of the current request's body
    /// (or chunked framing / trailer). `http_body_chunk_cnt`, and
    /// `client_body_timeout` measured between consecutive body reads.
    pub fn on_body_chunk(&mut self, now: Instant) -> Result<(), Violation> {
        self.body_chunks = self.body_chunks.saturating_add(1);
        if let (Some(previous), Some(limit)) = (self.last_body_chunk, self.body_timeout) {
            let elapsed = now.saturating_duration_since(previous);
            if elapsed > limit {
                return Err(timeout("client_body_timeout", elapsed, limit));
            }
        }
        self.last_body_chunk = Some(now);
        match self.body_chunk_cnt {
            Some(max) if self.body_chunks > max => Err(Violation::exceeded(
                "http_body_chunk_cnt",
                self.body_chunks,
                max,
            )),
            _ => Ok(()),
        }
    }

    /// When the head is complete and the body (if any) starts: the body
    /// timeout runs from here, as in Tempesta.
    pub fn on_head_complete(&mut self, now: Instant) {
        self.last_body_chunk = Some(now);
    }

    /// After decoding `len` body bytes: `http_body_len` of the request's
    /// location, for bodies without a Content-Length (chunked).
    pub fn on_body_bytes(&mut self, len: u64, limits: &FrangHttp) -> Result<(), Violation> {
        self.body_bytes = self.body_bytes.saturating_add(len);
        match limits.http_body_len.filter(|&n| n > 0) {
            Some(max) if self.body_bytes > max => {
                Err(Violation::exceeded("http_body_len", self.body_bytes, max))
            }
            _ => Ok(()),
        }
    }

    /// When the worker should give up waiting for the rest of the current
    /// head or body: arm a timer for it and treat firing as the timeout's
    /// violation (reply 403 and close, or just close).
    pub fn deadline(&self) -> Option<(Instant, &'static str)> {
        if let Some(start) = self.last_body_chunk {
            let limit = self.body_timeout?;
            return start
                .checked_add(limit)
                .map(|at| (at, "client_body_timeout"));
        }
        let start = self.head_started?;
        let limit = self.header_timeout?;
        start
            .checked_add(limit)
            .map(|at| (at, "client_header_timeout"))
    }

    /// When the current request has been read completely, before the next
    /// pipelined or keep-alive request.
    pub fn reset_for_next_request(&mut self) {
        self.head_chunks = 0;
        self.body_chunks = 0;
        self.body_bytes = 0;
        self.head_started = None;
        self.last_body_chunk = None;
    }
}

fn timeout(limit: &'static str, elapsed: Duration, max: Duration) -> Violation {
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
            http_body_chunk_cnt: Some(2),
            client_header_timeout: Some(Duration::from_secs(5)),
            client_body_timeout: Some(Duration::from_secs(2)),
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
        conn.reset_for_next_request();
        assert!(conn.on_head_chunk(t).is_ok());
    }

    #[test]
    fn body_chunks_just_under_and_over() {
        let t = Instant::now();
        let mut conn = ConnLimits::new(&global());
        conn.on_head_complete(t);
        assert!(conn.on_body_chunk(t).is_ok());
        assert!(conn.on_body_chunk(t).is_ok());
        assert_eq!(
            conn.on_body_chunk(t).unwrap_err().limit,
            "http_body_chunk_cnt"
        );
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
    }

    #[test]
    fn body_timeout_is_between_reads() {
        let t = Instant::now();
        let mut conn = ConnLimits::new(&global());
        conn.on_head_complete(t);
        assert!(conn.on_body_chunk(t + Duration::from_secs(2)).is_ok());
        assert_eq!(
            conn.deadline(),
            Some((t + Duration::from_secs(4), "client_body_timeout"))
        );
        let v = conn
            .on_body_chunk(t + Duration::from_millis(4001))
            .unwrap_err();
        assert_eq!(v.limit, "client_body_timeout");
    }

    #[test]
    fn streamed_body_length() {
        let limits = FrangHttp {
            http_body_len: Some(10),
            ..FrangHttp::default()
        };
        let mut conn = ConnLimits::new(&FrangGlobal::default());
        assert!(conn.on_body_bytes(6, &limits).is_ok());
        assert!(conn.on_body_bytes(4, &limits).is_ok());
        assert_eq!(
            conn.on_body_bytes(1, &limits).unwrap_err().limit,
            "http_body_len"
        );
        conn.reset_for_next_request();
        assert!(conn.on_body_bytes(10, &limits).is_ok());
        assert!(conn.on_body_bytes(u64::MAX, &FrangHttp::default()).is_err());
    }

    #[test]
    fn unlimited_by_default() {
        let t = Instant::now();
        let mut conn = ConnLimits::new(&FrangGlobal::default());
        for i in 0..1000 {
            assert!(conn.on_head_chunk(t + Duration::from_secs(i)).is_ok());
            assert!(conn.on_body_chunk(t + Duration::from_secs(i * 100)).is_ok());
        }
        assert_eq!(conn.deadline(), None);
    }
}
