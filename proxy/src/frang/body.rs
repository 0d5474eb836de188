//! Per-request frang state for a request body: how many reads carried it
//! (`http_body_chunk_cnt`), the time between them (`client_body_timeout`) and how much
//! arrived (`http_body_len`, for bodies without a Content-Length). Owned by the exchange, so
//! each of a connection's requests has its own.

use std::time::{Duration, Instant};

use config::{FrangGlobal, FrangHttp};

use super::conn::timeout;
use super::Violation;

/// Frang counters of one request's body.
#[derive(Debug, Clone)]
pub struct RequestLimits {
    body_chunk_cnt: Option<u32>,
    body_timeout: Option<Duration>,
    body_chunks: u32,
    body_bytes: u64,
    /// When the previous piece of the body arrived (from the end of the head).
    last_body_chunk: Option<Instant>,
}

impl RequestLimits {
    /// The limits of a request whose head was complete at `now`; the body timeout runs from
    /// there, as in Tempesta.
    pub fn new(global: &FrangGlobal, has_body: bool, now: Instant) -> RequestLimits {
        RequestLimits {
            body_chunk_cnt: global.http_body_chunk_cnt.filter(|&n| n > 0),
            body_timeout: global.client_body_timeout.filter(|d| !d.is_zero()),
            body_chunks: 0,
            body_bytes: 0,
            last_body_chunk: has_body.then_some(now),
        }
    }

    /// After each read that carried bytes of the body (or chunked framing / trailer).
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

    /// After decoding `len` body bytes: `http_body_len` of the request's location.
    pub fn on_body_bytes(&mut self, len: u64, limits: &FrangHttp) -> Result<(), Violation> {
        self.body_bytes = self.body_bytes.saturating_add(len);
        match limits.http_body_len.filter(|&n| n > 0) {
            Some(max) if self.body_bytes > max => {
                Err(Violation::exceeded("http_body_len", self.body_bytes, max))
            }
            _ => Ok(()),
        }
    }

    /// When the worker should give up waiting for more of the body.
    pub fn deadline(&self) -> Option<(Instant, &'static str)> {
        let start = self.last_body_chunk?;
        let limit = self.body_timeout?;
        start
            .checked_add(limit)
            .map(|at| (at, "client_body_timeout"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn global() -> FrangGlobal {
        FrangGlobal {
            http_body_chunk_cnt: Some(2),
            client_body_timeout: Some(Duration::from_secs(2)),
            ..FrangGlobal::default()
        }
    }

    #[test]
    fn body_chunks_just_under_and_over() {
        let t = Instant::now();
        let mut req = RequestLimits::new(&global(), true, t);
        assert!(req.on_body_chunk(t).is_ok());
        assert!(req.on_body_chunk(t).is_ok());
        assert_eq!(
            req.on_body_chunk(t).unwrap_err().limit,
            "http_body_chunk_cnt"
        );
    }

    #[test]
    fn body_timeout_is_between_reads() {
        let t = Instant::now();
        let mut req = RequestLimits::new(&global(), true, t);
        assert!(req.on_body_chunk(t + Duration::from_secs(2)).is_ok());
        assert_eq!(
            req.deadline(),
            Some((t + Duration::from_secs(4), "client_body_timeout"))
        );
        let v = req
            .on_body_chunk(t + Duration::from_millis(4001))
            .unwrap_err();
        assert_eq!(v.limit, "client_body_timeout");
    }

    #[test]
    fn no_body_no_deadline() {
        let req = RequestLimits::new(&global(), false, Instant::now());
        assert_eq!(req.deadline(), None);
    }

    #[test]
    fn streamed_body_length() {
        let limits = FrangHttp {
            http_body_len: Some(10),
            ..FrangHttp::default()
        };
        let now = Instant::now();
        let mut req = RequestLimits::new(&FrangGlobal::default(), true, now);
        assert!(req.on_body_bytes(6, &limits).is_ok());
        assert!(req.on_body_bytes(4, &limits).is_ok());
        assert_eq!(
            req.on_body_bytes(1, &limits).unwrap_err().limit,
            "http_body_len"
        );
        let mut next = RequestLimits::new(&FrangGlobal::default(), true, now);
        assert!(next.on_body_bytes(10, &limits).is_ok());
        assert!(next.on_body_bytes(u64::MAX, &FrangHttp::default()).is_err());
    }

    #[test]
    fn unlimited_by_default() {
        let t = Instant::now();
        let mut req = RequestLimits::new(&FrangGlobal::default(), true, t);
        for i in 0..1000 {
            assert!(req.on_body_chunk(t + Duration::from_secs(i * 100)).is_ok());
        }
        assert_eq!(req.deadline(), None);
    }
}
