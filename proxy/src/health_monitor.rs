//! What a health monitor expects of a server's answer, shared by every worker: the
//! configured `health_check` and, under `resp_crc32 auto`, the CRC32 learned from the first
//! non-empty body (Tempesta keeps it in the monitor, so every server the monitor checks is
//! compared with the same value; a reload starts a new monitor, which learns again).

use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::frang::window::{quantum, slot_len, SlotRing};

/// No CRC32 learned yet (a CRC32 is 32 bits: this value is never one).
const NOT_LEARNED: u64 = u64::MAX;

pub struct HealthMonitor {
    check: config::HealthCheck,
    /// `resp_crc32 auto`: learn the expected CRC32 from the first non-empty body.
    crc_auto: bool,
    learned_crc: AtomicU64,
}

impl HealthMonitor {
    /// The monitor `check`; `implicit`: Tempesta's built-in `auto` monitor, used without a
    /// `health_check auto` block, which learns its CRC32.
    pub fn new(check: config::HealthCheck, implicit: bool) -> HealthMonitor {
        HealthMonitor {
            crc_auto: check.resp_crc32_auto || implicit,
            check,
            learned_crc: AtomicU64::new(NOT_LEARNED),
        }
    }

    /// Whether judging an answer needs its body.
    pub fn reads_body(&self) -> bool {
        self.check.resp_crc32.is_some() || self.crc_auto
    }

    /// Whether a body of `len` bytes with CRC32 `crc` is what the monitor expects: `crc`
    /// equals `resp_crc32`, or the learned value. Under `auto`, the first non-empty body
    /// sets the value and passes; an empty body passes until then (as in Tempesta, whose
    /// unset value is 0, an empty body's CRC).
    pub fn crc_ok(&self, crc: u32, len: u64) -> bool {
        if let Some(expected) = self.check.resp_crc32 {
            return crc == expected;
        }
        if !self.crc_auto {
            return true;
        }
        match self.learned_crc.load(Ordering::Acquire) {
            NOT_LEARNED if len == 0 => true,
            NOT_LEARNED => {
                // Another worker may learn at the same moment: the first value stands.
                match self.learned_crc.compare_exchange(
                    NOT_LEARNED,
                    u64::from(crc),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => true,
                    Err(first) => first == u64::from(crc),
                }
            }
            learned => learned == u64::from(crc),
        }
    }

    /// [`HealthMonitor::crc_ok`] for a whole body.
    pub fn body_ok(&self, body: &[u8]) -> bool {
        self.crc_ok(crc32(body), body.len() as u64)
    }
}

impl Deref for HealthMonitor {
    type Target = config::HealthCheck;

    fn deref(&self) -> &config::HealthCheck {
        &self.check
    }
}

/// `server_failover_http CODE COUNT TIMEOUT` for one server of a group with a health
/// monitor: its responses with CODE counted over TIMEOUT seconds (a ring of slots, as
/// Tempesta's `tfw_apm_hm_srv_limit` keeps), shared by the workers; more than COUNT of them
/// and the server is suspended until its monitor finds it alive.
pub struct Failover {
    epoch: Instant,
    rules: Vec<(config::FailoverHttp, Mutex<SlotRing>)>,
}

impl Failover {
    /// The counters for `rules`; `None` without any.
    pub fn new(rules: &[config::FailoverHttp]) -> Option<Failover> {
        (!rules.is_empty()).then(|| Failover {
            epoch: Instant::now(),
            rules: rules
                .iter()
                .map(|r| (r.clone(), Mutex::new(SlotRing::default())))
                .collect(),
        })
    }

    /// Counts a response with `status` at `now`; true when a rule's count within its time
    /// frame is over its COUNT.
    pub fn exceeded(&self, status: u16, now: Instant) -> bool {
        let mut over = false;
        for (rule, ring) in self.rules.iter().filter(|(r, _)| r.code == status) {
            let q = quantum(self.epoch, now, slot_len(rule.timeframe));
            let mut ring = ring.lock().unwrap_or_else(|e| e.into_inner());
            over |= ring.add(q).in_frame > rule.count;
        }
        over
    }
}

/// CRC-32 as Tempesta computes `resp_crc32` (the kernel's `crc32_le` from seed 0): the
/// reflected IEEE 802.3 polynomial without zlib's initial and final inversion, so "Hello"
/// is 0x31f37e9f (zlib's CRC-32 of it is 0xf7d18982).
pub fn crc32(data: &[u8]) -> u32 {
    crc32_update(0, data)
}

/// Continues [`crc32`] over `data` from the value of the bytes before it.
pub fn crc32_update(mut crc: u32, data: &[u8]) -> u32 {
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (!(crc & 1)).wrapping_add(1));
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_the_kernels_crc32_le_from_zero() {
        assert_eq!(crc32(b"Hello"), 0x31f3_7e9f);
        assert_eq!(crc32(b""), 0);
        // zlib's check value of "123456789" is 0xcbf43926: the same register, inverted
        // before and after.
        assert_ne!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32_update(crc32(b"He"), b"llo"), crc32(b"Hello"));
    }

    fn monitor(crc: Option<u32>, auto: bool, implicit: bool) -> HealthMonitor {
        let check = config::HealthCheck {
            name: "auto".into(),
            resp_crc32: crc,
            resp_crc32_auto: auto,
            ..Default::default()
        };
        HealthMonitor::new(check, implicit)
    }

    #[test]
    fn a_configured_crc_is_compared() {
        let m = monitor(Some(0x31f3_7e9f), false, false);
        assert!(m.body_ok(b"Hello"));
        assert!(!m.body_ok(b"Hello!"));
        assert!(!m.body_ok(b""));
    }

    #[test]
    fn auto_learns_the_first_non_empty_body_and_refuses_a_changed_one() {
        for (auto, implicit) in [(true, false), (false, true)] {
            let m = monitor(None, auto, implicit);
            assert!(m.reads_body());
            assert!(m.body_ok(b""), "nothing learned from an empty body");
            assert!(m.body_ok(b"v1"));
            assert!(m.body_ok(b"v1"));
            assert!(!m.body_ok(b"v2"), "a changed body");
            assert!(!m.body_ok(b""), "an emptied body");
            assert!(m.body_ok(b"v1"), "the first body again");
        }
    }

    #[test]
    fn failover_counts_its_code_within_the_frame() {
        let rule = config::FailoverHttp {
            code: 404,
            count: 2,
            timeframe: std::time::Duration::from_secs(10),
        };
        let f = Failover::new(&[rule]).expect("a rule");
        let now = Instant::now();
        assert!(!f.exceeded(404, now));
        assert!(!f.exceeded(500, now), "another code is not counted");
        assert!(!f.exceeded(404, now));
        assert!(f.exceeded(404, now), "the third 404 is over 2");
        let later = now + std::time::Duration::from_secs(11);
        assert!(!f.exceeded(404, later), "a new frame");
        assert!(Failover::new(&[]).is_none());
    }

    #[test]
    fn without_crc_any_body_passes() {
        let m = monitor(None, false, false);
        assert!(!m.reads_body());
        assert!(m.body_ok(b"anything"));
    }
}
