//! Health monitors (`health_check NAME { ... }`, `health NAME` in a server group): every
//! `timeout` each server of the group gets the monitor's request; a status outside
//! `resp_code`, a body whose CRC32 differs from `resp_crc32`, a timeout or a refused connect
//! suspends the server, and the same check brings it back. Groups without a monitor are
//! probed back with a plain connect.

use std::time::{Duration, Instant};

use http1::BodyDecoder;

use super::upstream::UpPhase;
use super::{Worker, PROBE_BASE};

impl Worker {
    /// Schedules the first periodic check of every monitored server (at start and reload).
    pub(super) fn schedule_health_checks(&mut self) {
        let now = Instant::now();
        let mut due = Vec::new();
        for (g, group) in self.rt.groups.iter().enumerate() {
            if let Some(check) = &group.health {
                for s in 0..group.servers.len() {
                    due.push((g, s, check.timeout.max(Duration::from_secs(1))));
                }
            }
        }
        for (g, s, after) in due {
            self.timers
                .schedule(now + after, probe_key(g, s), self.rt_gen);
        }
    }

    /// A probe's connection is up: send the monitor's request.
    pub(super) fn send_health_request(&mut self, ui: usize) {
        let Some(u) = self.upstreams.get_mut(ui) else {
            return;
        };
        let Some(check) = self.rt.groups.get(u.group).and_then(|g| g.health.clone()) else {
            return;
        };
        u.out.push(check.request.as_bytes());
        u.phase = UpPhase::Checking;
        self.arm_upstream_timer(
            ui,
            check
                .timeout
                .clamp(Duration::from_secs(1), Duration::from_secs(10)),
        );
        self.dirty.push_back(super::upstream_token(ui));
    }

    /// Moves a health check along: write the request, read the answer, judge it.
    pub(super) fn drive_health(&mut self, ui: usize) {
        self.flush_upstream(ui);
        self.read_upstream(ui);
        let Some(u) = self.upstreams.get_mut(ui) else {
            return;
        };
        let Some(check) = self.rt.groups.get(u.group).and_then(|g| g.health.clone()) else {
            return;
        };
        let input = u.rbuf.as_ref().map_or(&[][..], |b| b.bytes());
        let verdict = match http1::parse_response(input, &self.rt.limits, false) {
            Ok(Some((head, len))) => {
                let status_ok = check.resp_codes.contains(&head.status());
                match check.resp_crc32 {
                    None => Some(status_ok),
                    Some(expected) => {
                        // The whole body is needed: wait for it (bounded), then compare.
                        let mut decoder =
                            BodyDecoder::new(head.framing(), &http1::Limits::default());
                        let mut body = Vec::new();
                        let mut rest = input.get(len..).unwrap_or(&[]);
                        let mut complete = false;
                        while let Ok(step) = decoder.decode(rest) {
                            body.extend_from_slice(&rest[step.data.clone()]);
                            rest = rest.get(step.consumed..).unwrap_or(&[]);
                            if step.done {
                                complete = true;
                                break;
                            }
                            if step.consumed == 0 {
                                break;
                            }
                        }
                        let complete = complete
                            || super::lifecycle::body_end(&decoder, u.peer_end())
                                == super::lifecycle::BodyEnd::Complete;
                        // The body must fit in one read buffer (16 KiB) to be checked.
                        if complete {
                            Some(status_ok && crc32(&body) == expected)
                        } else if u.peer_closed || u.rbuf.as_mut().is_some_and(|b| b.is_full()) {
                            Some(false)
                        } else {
                            None
                        }
                    }
                }
            }
            Ok(None) if !u.peer_closed && !u.rbuf.as_mut().is_some_and(|b| b.is_full()) => None,
            Ok(None) | Err(_) => Some(false),
        };
        if let Some(ok) = verdict {
            self.health_verdict(ui, ok);
        }
    }

    /// Ends a health check: the server is up (next check in `timeout`) or suspended.
    pub(super) fn health_verdict(&mut self, ui: usize, ok: bool) {
        let Some((group, server)) = self.end_probe(ui) else {
            return;
        };
        if ok {
            self.mark_up(group, server);
            let interval = self
                .rt
                .groups
                .get(group)
                .and_then(|g| g.health.as_ref())
                .map(|c| c.timeout);
            if let Some(interval) = interval {
                let when = Instant::now() + interval.max(Duration::from_secs(1));
                self.timers
                    .schedule(when, probe_key(group, server), self.rt_gen);
            }
        } else {
            crate::warn!(
                "health check of {} failed: server suspended",
                self.rt
                    .groups
                    .get(group)
                    .and_then(|g| g.servers.get(server))
                    .map_or_else(String::new, |s| s.addr.to_string())
            );
            self.mark_down(group, server);
        }
    }
}

/// The timer key of server `server` of group `group`'s probes.
pub(super) fn probe_key(group: usize, server: usize) -> usize {
    PROBE_BASE + group * 65_536 + server
}

/// CRC-32 (IEEE 802.3, as zlib's), for `resp_crc32`.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (!(crc & 1)).wrapping_add(1));
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    #[test]
    fn crc32_check_value() {
        assert_eq!(super::crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(super::crc32(b""), 0);
    }
}
