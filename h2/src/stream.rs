//! Per-stream state (RFC 9113 §5.1) and the record of recently closed
//! streams that decides how late frames on them are answered.

use std::collections::VecDeque;
use std::time::Instant;

/// Whether our side of the stream has sent anything yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendState {
    /// No response HEADERS yet.
    Idle,
    /// HEADERS sent, the response goes on.
    Open,
    /// END_STREAM sent: half-closed (local).
    Done,
}

/// A stream that is open or half-closed. Closed streams leave the map.
#[derive(Clone, Debug)]
pub struct Stream {
    /// The peer may still send (false: half-closed (remote)).
    pub recv_open: bool,
    pub send: SendState,
    /// What we may still send (can go negative after a SETTINGS change).
    pub send_window: i64,
    /// What the peer may still send before we replenish.
    pub recv_window: i64,
    /// Bytes the application consumed that were not yet given back by
    /// WINDOW_UPDATE.
    pub recv_unacked: u32,
    /// Body bytes delivered to the application and not yet consumed: on
    /// reset they go back to the connection window.
    pub unconsumed: u64,
    /// Declared request body length, checked against DATA.
    pub content_length: Option<u64>,
    pub received: u64,
    /// The request reached the application (it must hear of a reset).
    pub delivered: bool,
    /// The application had more to send than the windows allowed, since
    /// this instant.
    pub blocked_since: Option<Instant>,
}

impl Stream {
    pub fn new(send_window: u32, recv_window: u32) -> Stream {
        Stream {
            recv_open: true,
            send: SendState::Idle,
            send_window: i64::from(send_window),
            recv_window: i64::from(recv_window),
            recv_unacked: 0,
            unconsumed: 0,
            content_length: None,
            received: 0,
            delivered: false,
            blocked_since: None,
        }
    }

    /// Both directions ended: the stream is closed.
    pub fn is_finished(&self) -> bool {
        !self.recv_open && self.send == SendState::Done
    }
}

/// How a stream left the map: it decides what a late frame means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// We sent RST_STREAM: late frames are the peer's in-flight ones and
    /// are ignored (§5.1, closed).
    ResetByUs,
    /// The peer reset it, or both sides ended it: DATA or HEADERS on it
    /// is a STREAM_CLOSED error.
    ResetByPeer,
    Finished,
}

/// The last few closed streams, bounded so a peer cannot grow it.
#[derive(Clone, Debug)]
pub struct ClosedStreams {
    recent: VecDeque<(u32, Closed)>,
    cap: usize,
}

impl ClosedStreams {
    pub fn new(cap: usize) -> ClosedStreams {
        ClosedStreams {
            recent: VecDeque::with_capacity(cap.min(1024)),
            cap: cap.max(1),
        }
    }

    pub fn push(&mut self, stream: u32, how: Closed) {
        if self.recent.len() == self.cap {
            self.recent.pop_front();
        }
        self.recent.push_back((stream, how));
    }

    pub fn get(&self, stream: u32) -> Option<Closed> {
        self.recent
            .iter()
            .rev()
            .find(|(s, _)| *s == stream)
            .map(|(_, how)| *how)
    }
}

/// Receive-window credit owed to the peer (a connection's or a stream's):
/// `n` more bytes were passed on. Once at least `threshold` are owed the
/// whole debt is repaid: the window grows by it and the increment to
/// announce in a WINDOW_UPDATE is returned.
pub fn owe(window: &mut i64, unacked: &mut u32, n: u32, threshold: u32) -> Option<u32> {
    *unacked = unacked.saturating_add(n);
    if *unacked < threshold.max(1) {
        return None;
    }
    let inc = std::mem::take(unacked);
    *window += i64::from(inc);
    Some(inc)
}
