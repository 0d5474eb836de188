//! One load connection's state (`load.rs` drives it): its stage, the HTTP/1.1 responses
//! it waits for, or its HTTP/2 session.

use std::collections::VecDeque;
use std::time::Instant;

use crate::h2_session::H2Session;
use crate::response::ResponseReader;
use crate::stream::Stream;

pub enum Stage {
    Connecting,
    Handshaking,
    Ready,
    /// Waiting to reconnect after an error.
    Paused(Instant),
}

pub struct Conn {
    pub stream: Option<Stream>,
    pub stage: Stage,
    pub since: Instant,
    pub reader: ResponseReader,
    pub input: Vec<u8>,
    /// Start times (ns since the thread started) of requests queued or sent, oldest first.
    pub in_flight: VecDeque<u64>,
    /// Bytes at the tail of the queued requests not written yet.
    pub unsent: usize,
    /// When the oldest outstanding request last saw progress (for `--timeout`).
    pub busy_since: Instant,
    /// Listed as able to take a request (rate mode).
    pub listed: bool,
    /// `--h2`: the connection's HTTP/2 session (its streams replace `in_flight`).
    pub h2: Option<H2Session>,
}

impl Conn {
    pub fn new(now: Instant) -> Conn {
        Conn {
            stream: None,
            stage: Stage::Paused(now),
            since: now,
            reader: ResponseReader::default(),
            input: Vec::new(),
            in_flight: VecDeque::new(),
            unsent: 0,
            busy_since: now,
            listed: false,
            h2: None,
        }
    }

    /// Requests sent or queued whose response has not ended.
    pub fn outstanding(&self) -> usize {
        self.h2
            .as_ref()
            .map_or(self.in_flight.len(), H2Session::in_flight)
    }

    /// Whether one more request may go out now, with at most `pipeline` outstanding.
    pub fn has_room(&self, pipeline: usize) -> bool {
        self.outstanding() < pipeline.max(1) && self.h2.as_ref().is_none_or(H2Session::can_open)
    }
}
