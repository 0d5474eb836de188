//! Small accounting helpers for the flood defences: a per-second counter
//! and a refillable budget. Time comes from the caller (sans-IO).

use std::time::{Duration, Instant};

/// Counts events in fixed one-second windows.
#[derive(Clone, Debug)]
pub struct PerSecond {
    window_start: Option<Instant>,
    count: u32,
}

impl PerSecond {
    pub const fn new() -> PerSecond {
        PerSecond {
            window_start: None,
            count: 0,
        }
    }

    /// Counts one event at `now`; false when that makes more than `limit`
    /// in the current second.
    pub fn allow(&mut self, now: Instant, limit: u32) -> bool {
        match self.window_start {
            Some(start) if now.saturating_duration_since(start) < Duration::from_secs(1) => {}
            _ => {
                self.window_start = Some(now);
                self.count = 0;
            }
        }
        self.count = self.count.saturating_add(1);
        self.count <= limit
    }
}

/// A budget spent by bad events and refilled by good ones, up to a cap.
#[derive(Clone, Debug)]
pub struct Budget {
    left: u32,
    cap: u32,
}

impl Budget {
    pub const fn new(cap: u32) -> Budget {
        Budget { left: cap, cap }
    }

    /// Spends one unit; false once the budget is exhausted.
    pub fn spend(&mut self) -> bool {
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        self.left > 0
    }

    pub fn refill(&mut self) {
        self.left = (self.left + 1).min(self.cap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_second_resets_each_second() {
        let t = Instant::now();
        let mut r = PerSecond::new();
        assert!((0..3).all(|_| r.allow(t, 3)));
        assert!(!r.allow(t + Duration::from_millis(999), 3));
        assert!(r.allow(t + Duration::from_secs(1), 3));
    }

    #[test]
    fn budget_spends_and_refills_to_cap() {
        let mut b = Budget::new(2);
        assert!(b.spend());
        b.refill();
        b.refill();
        assert!(b.spend());
        assert!(!b.spend());
        assert!(!b.spend());
    }
}
