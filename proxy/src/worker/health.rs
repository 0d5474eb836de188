//! Health monitors (`health_check NAME { ... }`, `health NAME` in a server group): every
//! `timeout` each server of the group gets the monitor's request; a status outside
//! `resp_code`, a body whose CRC32 differs from `resp_crc32`, a timeout or a refused connect
//! suspends the server, and the same check brings it back. Groups without a monitor are
//! probed back with a plain connect.

use std::time::{Duration, Instant};

use http1::BodyDecoder;

use super::lifecycle::BodyEnd;
use super::upstream::UpstreamId;
use super::upstream::{UpPhase, Upstream};
use super::{Worker, PROBE_BASE};
use crate::health_monitor::{crc32_update, HealthMonitor};

impl Worker {
    /// A server failed (connect refused or timed out, a failed check): take it out and
    /// schedule a probe (`upstream/groups.rs` `ServerState::fail` decides for how long).
    pub(super) fn mark_down(&mut self, group: usize, server: usize) {
        let Some(st) = self
            .groups
            .get_mut(group)
            .and_then(|g| g.servers.get_mut(server))
        else {
            return;
        };
        let monitor = self.rt.groups.get(group).and_then(|g| g.health.as_ref());
        if let Some(at) = st.fail(monitor.map(|h| h.timeout), Instant::now()) {
            let key = probe_key(group, server);
            self.timers.schedule(at, key, self.rt_gen);
        }
        self.publish_health();
    }

    pub(super) fn mark_up(&mut self, group: usize, server: usize) {
        let was_down = self
            .groups
            .get_mut(group)
            .and_then(|g| g.servers.get_mut(server))
            .is_some_and(|st| st.recover());
        if was_down {
            self.publish_health();
        }
    }

    /// Tells the metrics which servers this worker has out (`metrics_upstream`): after a
    /// server goes out or comes back, and after a reload replaces the groups.
    pub(super) fn publish_health(&self) {
        let down = self
            .groups
            .iter()
            .zip(&self.rt.groups)
            .flat_map(|(state, group)| {
                state
                    .servers
                    .iter()
                    .zip(&group.servers)
                    .filter(|(st, _)| st.is_out())
                    .map(|(_, server)| (group.name.clone(), server.addr.to_string()))
            })
            .collect();
        self.shared.metrics.upstream.publish_down(self.id, down);
    }

    /// A probe timer fired for a server that is down: try to connect.
    pub(super) fn probe(&mut self, key: usize, gen: u64) {
        let group = (key - PROBE_BASE) / 65_536;
        let server = (key - PROBE_BASE) % 65_536;
        // A monitored group's servers are checked periodically, up or down; others only
        // while down. Timers of an earlier configuration are stale.
        let monitored = self
            .rt
            .groups
            .get(group)
            .is_some_and(|g| g.health.is_some());
        let due = self
            .groups
            .get(group)
            .and_then(|g| g.servers.get(server))
            .is_some_and(|st| st.probe_due(monitored));
        if gen != self.rt_gen || !due || self.draining.is_some() {
            return;
        }
        match self.connect(group, server, UpPhase::Probe) {
            Ok(_) => {
                if let Some(st) = self
                    .groups
                    .get_mut(group)
                    .and_then(|g| g.servers.get_mut(server))
                {
                    st.probing = true;
                }
            }
            Err(_) => self.mark_down(group, server),
        }
    }

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
    pub(super) fn send_health_request(&mut self, ui: UpstreamId) {
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
    pub(super) fn drive_health(&mut self, ui: UpstreamId) {
        self.flush_upstream(ui);
        let rt = self.rt.clone();
        // A body larger than the read buffer is taken a bufferful at a time; with
        // edge-triggered readiness no new event comes for bytes already waiting.
        for _ in 0..64 {
            self.read_upstream(ui);
            let Some(u) = self.upstreams.get_mut(ui) else {
                return;
            };
            let Some(check) = rt.groups.get(u.group).and_then(|g| g.health.as_ref()) else {
                return;
            };
            match read_health_answer(u, check, &rt.limits) {
                Reading::Verdict(ok) => return self.health_verdict(ui, ok),
                Reading::Wait => return,
                Reading::Progress => {}
            }
        }
        self.dirty.push_back(super::upstream_token(ui));
    }

    /// `server_failover_http`: a response with `status` came from `server` of `group`. Over a
    /// rule's count the server is suspended, as Tempesta does, until its monitor finds it
    /// alive (the count is shared by the workers; each suspends the server on the next such
    /// response it relays).
    pub(super) fn count_failover(&mut self, group: usize, server: usize, status: u16) {
        let rt = self.rt.clone();
        let failover = rt
            .groups
            .get(group)
            .and_then(|g| g.servers.get(server))
            .and_then(|s| s.failover.as_ref().map(|f| (s.addr, f)));
        let Some((addr, failover)) = failover else {
            return;
        };
        if failover.exceeded(status, Instant::now()) && self.server_up(group, server) {
            crate::warn!("server_failover_http: {status} responses over the limit from {addr}: server suspended");
            self.mark_down(group, server);
        }
    }

    /// Ends a health check: the server is up (next check in `timeout`) or suspended.
    pub(super) fn health_verdict(&mut self, ui: UpstreamId, ok: bool) {
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

/// A health answer's body as it arrives: its CRC32 so far, not the bytes, so that a body of
/// any size is checked (Tempesta's `auto` monitor checks the page at `/`, whatever its size).
pub struct HealthBody {
    decoder: BodyDecoder,
    crc: u32,
    len: u64,
}

/// Where reading a health answer stands.
enum Reading {
    /// The server is up (true) or not.
    Verdict(bool),
    /// Bytes were taken: read again.
    Progress,
    /// Nothing more to take until the server sends more.
    Wait,
}

/// Reads what upstream `u` holds of a health answer: the verdict once there is one (the
/// status, then the body's CRC32 if the monitor checks one).
fn read_health_answer(u: &mut Upstream, check: &HealthMonitor, limits: &http1::Limits) -> Reading {
    let peer_end = u.peer_end();
    let full = u.rbuf.as_mut().is_some_and(|b| b.is_full());
    let mut used = 0;
    if u.health_body.is_none() {
        let input = u.rbuf.as_ref().map_or(&[][..], |b| b.bytes());
        let (head, len) = match http1::parse_response(input, limits, false) {
            Ok(Some(parsed)) => parsed,
            Ok(None) if !u.peer_closed && !full => return Reading::Wait,
            Ok(None) | Err(_) => return Reading::Verdict(false),
        };
        let status_ok = check.resp_codes.contains(&head.status());
        if !status_ok || !check.reads_body() {
            return Reading::Verdict(status_ok);
        }
        u.health_body = Some(Box::new(HealthBody {
            decoder: BodyDecoder::new(head.framing(), &http1::Limits::default()),
            crc: 0,
            len: 0,
        }));
        if let Some(b) = u.rbuf.as_mut() {
            b.consume(len);
        }
        used = len;
    }
    let Some(body) = u.health_body.as_mut() else {
        return Reading::Wait;
    };
    let input = u.rbuf.as_ref().map_or(&[][..], |b| b.bytes());
    let mut taken = 0;
    let mut done = false;
    while let Ok(step) = body.decoder.decode(input.get(taken..).unwrap_or(&[])) {
        let data = input.get(taken..).and_then(|r| r.get(step.data.clone()));
        let data = data.unwrap_or(&[]);
        body.crc = crc32_update(body.crc, data);
        body.len += data.len() as u64;
        taken += step.consumed;
        if step.done || step.consumed == 0 {
            done = step.done;
            break;
        }
    }
    if let Some(b) = u.rbuf.as_mut() {
        b.consume(taken);
    }
    used += taken;
    let complete = done || super::lifecycle::body_end(&body.decoder, peer_end) == BodyEnd::Complete;
    if complete {
        Reading::Verdict(check.crc_ok(body.crc, body.len))
    } else if u.peer_closed {
        Reading::Verdict(false)
    } else if used > 0 {
        Reading::Progress
    } else {
        Reading::Wait
    }
}
