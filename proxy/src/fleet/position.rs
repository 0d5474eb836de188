//! A node's position in a capped stream (`ktls:blocks`, `ktls:sticky`), counted in entries
//! since the stream's first ever (`XINFO STREAM`'s `entries-added`, Redis 7.0 and later):
//! when trimming removed entries past it, the node never read them, and says how many.

use super::keys::StreamInfo;

#[derive(Debug, Default)]
pub struct StreamPosition {
    /// Entries up to the last one read; `None` until known, or after reading again from
    /// the oldest entry kept.
    at: Option<u64>,
}

impl StreamPosition {
    /// The node reads from the oldest entry kept: whatever was trimmed before is no gap.
    pub fn restart(&mut self) {
        self.at = None;
    }

    /// Moves by `read` entries, read after XINFO said `info`; returns the entries trimmed
    /// before this node read them (0 without `entries-added`, or without a stream).
    pub fn follow(&mut self, info: Option<StreamInfo>, read: usize) -> u64 {
        let Some(info) = info else {
            return 0;
        };
        let trimmed = info.added.saturating_sub(info.length);
        let (from, lost) = match self.at {
            // Fewer entries ever than read here: the stream was made anew (Redis emptied).
            Some(at) if info.added < at => (trimmed, 0),
            Some(at) if trimmed > at => (trimmed, trimmed - at),
            Some(at) => (at, 0),
            None => (trimmed, 0),
        };
        self.at = Some(from + read as u64);
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(added: u64, length: u64) -> Option<StreamInfo> {
        Some(StreamInfo { added, length })
    }

    #[test]
    fn entries_trimmed_past_the_position_are_counted_once() {
        let mut p = StreamPosition::default();
        // Started on a stream trimmed to 100 of 150: no gap, 100 read.
        assert_eq!(p.follow(info(150, 100), 100), 0);
        // 30 more, read: still no gap.
        assert_eq!(p.follow(info(180, 130), 30), 0);
        // 500 added while away, 100 kept: 580 trimmed in all, 400 of them past this node.
        assert_eq!(p.follow(info(680, 100), 100), 580 - 180);
        assert_eq!(p.follow(info(680, 100), 0), 0);
        // No entries-added (Redis before 7.0), or no stream: nothing known, nothing lost.
        assert_eq!(p.follow(None, 5), 0);
        // Redis emptied, the stream made again: counted from its new start.
        assert_eq!(p.follow(info(3, 3), 3), 0);
        assert_eq!(p.follow(info(1003, 100), 100), 903 - 3);
        p.restart();
        assert_eq!(p.follow(info(10_000, 10), 10), 0);
    }
}
