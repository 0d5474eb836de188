//! Health monitors (`health_check NAME { ... }`, `health NAME` in a server group): every
//! `timeout` each server of the group gets the monitor's request; a status outside
//! `resp_code`, a body whose CRC32 differs from `resp_crc32`, a timeout or a refused connect
//! suspends the server, and the same check brings it back. In a `server_proto h2` group the
//! request goes as an HTTP/2 stream on a connection of its own (`h2_origin::start_check`),
//! whose answer is judged the same way. Groups without a monitor are probed back with a
//! plain connect.

use std::time::{Duration, Instant};

use http1::BodyDecoder;

use super::lifecycle::BodyEnd;
use super::token::PROBE_BASE;
use super::upstream::groups::{self, GroupState};
use super::upstream::{self, UpPhase, Upstream, UpstreamId, Upstreams};
use crate::health_monitor::{crc32_update, HealthMonitor};
use crate::metrics_upstream::UpstreamMetrics;
use crate::runtime::Runtime;
use crate::timers::Timers;

/// The parts health monitoring touches: this worker's view of its servers (`groups`), the
/// configuration they belong to (`rt`, generation `rt_gen`: probe timers of an earlier one
/// are stale), the timers its probes wait on, and where it publishes the servers it has out.
pub(super) struct Health<'a> {
    pub groups: &'a mut [GroupState],
    pub rt: &'a Runtime,
    pub rt_gen: u64,
    pub timers: &'a mut Timers,
    pub metrics: &'a UpstreamMetrics,
    /// This worker's index (`publish_down`).
    pub worker: usize,
}

impl Health<'_> {
    /// A server failed (connect refused or timed out, a failed check): take it out and
    /// schedule a probe (`upstream/groups.rs` `ServerState::fail` decides for how long).
    pub fn mark_down(&mut self, group: usize, server: usize) {
        let Some(st) = groups::server_mut(self.groups, group, server) else {
            return;
        };
        let monitor = self.rt.groups.get(group).and_then(|g| g.health.as_ref());
        if let Some(at) = st.fail(monitor.map(|h| h.timeout), Instant::now()) {
            let key = probe_key(group, server);
            self.timers.schedule(at, key, self.rt_gen);
        }
        self.publish();
    }

    pub fn mark_up(&mut self, group: usize, server: usize) {
        let was_down =
            groups::server_mut(self.groups, group, server).is_some_and(|st| st.recover());
        if was_down {
            self.publish();
        }
    }

    /// Tells the metrics which servers this worker has out (`metrics_upstream`): after a
    /// server goes out or comes back, and after a reload replaces the groups.
    pub fn publish(&self) {
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
        self.metrics.publish_down(self.worker, down);
    }

    /// A probe timer with `key` and `gen` fired: the (group, server) to connect to, if its
    /// server is due a probe. A monitored group's servers are checked periodically, up or
    /// down; others only while down. Nothing is probed while the worker drains.
    pub fn probe_due(&self, key: usize, gen: u64, draining: bool) -> Option<(usize, usize)> {
        let group = (key - PROBE_BASE) / 65_536;
        let server = (key - PROBE_BASE) % 65_536;
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
        (gen == self.rt_gen && due && !draining).then_some((group, server))
    }

    /// The probe of `server` of `group` connects (`connected`), or it failed at once.
    pub fn probe_started(&mut self, group: usize, server: usize, connected: bool) {
        if !connected {
            return self.mark_down(group, server);
        }
        if let Some(st) = groups::server_mut(self.groups, group, server) {
            st.probing = true;
        }
    }

    /// Schedules the first periodic check of every monitored server (at start and reload).
    pub fn schedule_checks(&mut self) {
        let now = Instant::now();
        for (g, group) in self.rt.groups.iter().enumerate() {
            if let Some(check) = &group.health {
                let after = check.timeout.max(Duration::from_secs(1));
                for s in 0..group.servers.len() {
                    self.timers
                        .schedule(now + after, probe_key(g, s), self.rt_gen);
                }
            }
        }
    }

    /// `server_failover_http`: a response with `status` came from `server` of `group`. Over
    /// a rule's count the server is suspended, as Tempesta does, until its monitor finds it
    /// alive (the count is shared by the workers; each suspends the server on the next such
    /// response it relays).
    pub fn count_failover(&mut self, group: usize, server: usize, status: u16) {
        let failover = self
            .rt
            .groups
            .get(group)
            .and_then(|g| g.servers.get(server))
            .and_then(|s| s.failover.as_ref().map(|f| (s.addr, f)));
        let Some((addr, failover)) = failover else {
            return;
        };
        let up = self
            .groups
            .get(group)
            .and_then(|g| g.servers.get(server))
            .is_some_and(|st| st.is_up(Instant::now()));
        if failover.exceeded(status, Instant::now()) && up {
            crate::warn!("server_failover_http: {status} responses over the limit from {addr}: server suspended");
            self.mark_down(group, server);
        }
    }

    /// A health check of `server` of `group` ended (its connection closed): the server is up
    /// (next check in `timeout`) or suspended.
    pub fn verdict(&mut self, group: usize, server: usize, ok: bool) {
        let rt = self.rt;
        if !ok {
            crate::warn!(
                "health check of {} failed: server suspended",
                rt.groups
                    .get(group)
                    .and_then(|g| g.servers.get(server))
                    .map_or_else(String::new, |s| s.addr.to_string())
            );
            return self.mark_down(group, server);
        }
        self.mark_up(group, server);
        let interval = rt.groups.get(group).and_then(|g| g.health.as_ref());
        if let Some(interval) = interval.map(|c| c.timeout) {
            let when = Instant::now() + interval.max(Duration::from_secs(1));
            self.timers
                .schedule(when, probe_key(group, server), self.rt_gen);
        }
    }
}

/// Health checks as they run on upstream connections: a probe's connect, the monitor's
/// request and answer, the verdict. What a closed check connection frees in its group is
/// returned (`upstream::Freed`), for the loop to serve that group's queue.
pub(super) struct Checks<'a> {
    pub conns: upstream::Conns<'a>,
    pub open: upstream::Opener<'a>,
    /// This worker's index (`publish_down`).
    pub worker: usize,
}

/// Where a health check stands after a drive ([`Checks::drive`]).
pub(super) enum Checked {
    /// Judged: its connection closed.
    Judged(upstream::Freed),
    /// Waiting for the server.
    Waiting,
    /// More to read than one drive takes: drive it again after the others.
    Again,
}

impl Checks<'_> {
    /// The parts marking servers touches.
    pub fn health(&mut self) -> Health<'_> {
        Health {
            groups: self.conns.groups,
            rt: self.open.rt,
            rt_gen: self.conns.rt_gen,
            timers: self.conns.timers,
            metrics: &self.conns.metrics.upstream,
            worker: self.worker,
        }
    }

    /// A probe timer with `key` and `gen` fired: connect to its server if a probe is due.
    pub fn probe(&mut self, key: usize, gen: u64, draining: bool) {
        if let Some((group, server)) = self.health().probe_due(key, gen, draining) {
            let probe = (group, server, UpPhase::Probe);
            let connected = upstream::connect(&mut self.conns, self.open, probe).is_ok();
            self.health().probe_started(group, server, connected);
        }
    }

    /// A probe's connection `ui` is up: the monitor's request goes out on it. True: drive
    /// the connection now.
    pub fn start(&mut self, ui: UpstreamId) -> bool {
        let group = self.conns.upstreams.get(ui).map(|u| u.group);
        if group.is_some_and(|g| super::h2_origin::is_h2(self.open.rt, g)) {
            return self.start_h2(ui);
        }
        let Some(timeout) = send_request(self.conns.upstreams, self.open.rt, ui) else {
            return false;
        };
        upstream::arm_timer(self.conns.upstreams, self.conns.timers, ui, timeout);
        true
    }

    /// [`Checks::start`] in a `server_proto h2` group: the monitor's request goes as the one
    /// stream of an HTTP/2 connection (h2c, or TLS with ALPN h2); the stream entry is the
    /// check, its answer rendered as HTTP/1.1 and judged by the same [`Checks::drive`], its
    /// timer the monitor's timeout. True: drive the connection now.
    fn start_h2(&mut self, ui: UpstreamId) -> bool {
        let rt = self.open.rt;
        let check = (self.conns.upstreams.get(ui))
            .and_then(|u| rt.groups.get(u.group))
            .and_then(|g| g.health.as_ref());
        let Some(check) = check else {
            return false;
        };
        let upstreams = &mut *self.conns.upstreams;
        match super::h2_origin::start_check((upstreams, rt), ui, check.request.as_bytes()) {
            Some(si) => {
                upstream::arm_timer(upstreams, self.conns.timers, si, check_timeout(check));
                true
            }
            None => {
                crate::error!(
                    "health monitor `{}`: its request cannot be sent as HTTP/2 (check its \
                     method, URI and Host)",
                    check.name
                );
                // The freed place is served by the next event of the group.
                let _ = self.judge(ui, false);
                false
            }
        }
    }

    /// Moves check `ui` along: write the request, read the answer, judge it. A body larger
    /// than the read buffer is taken a bufferful at a time; with edge-triggered readiness no
    /// new event comes for bytes already waiting.
    pub fn drive(&mut self, ui: UpstreamId) -> Checked {
        let _ = upstream::flush_at(self.conns.upstreams, ui);
        for _ in 0..64 {
            upstream::read_at(self.conns.upstreams, self.conns.bufs, ui);
            match reading(self.conns.upstreams, self.open.rt, ui) {
                Reading::Verdict(ok) => return Checked::Judged(self.judge(ui, ok)),
                Reading::Wait => return Checked::Waiting,
                Reading::Progress => {}
            }
        }
        Checked::Again
    }

    /// Ends check `ui`: its connection closes, its server is judged `ok` or not (a timeout
    /// is a failed check).
    pub fn judge(&mut self, ui: UpstreamId, ok: bool) -> upstream::Freed {
        // An HTTP/2 check is a stream entry: its connection was the monitor's alone.
        let h2_conn = (self.conns.upstreams.get(ui))
            .and_then(upstream::h2_conn::stream_state)
            .map(|(conn, _)| conn);
        let (server, mut freed) = upstream::end_probe(&mut self.conns, ui);
        if let Some(conn) = h2_conn {
            if let upstream::Freed(Some(group)) = upstream::close(&mut self.conns, conn) {
                freed = upstream::Freed(Some(group));
            }
        }
        if let Some((group, server)) = server {
            self.health().verdict(group, server, ok);
        }
        freed
    }

    /// Probe `ui`'s connect did not finish in time: its server stays out.
    pub fn probe_timed_out(&mut self, ui: UpstreamId) -> upstream::Freed {
        let (server, freed) = upstream::end_probe(&mut self.conns, ui);
        if let Some((group, server)) = server {
            self.health().mark_down(group, server);
        }
        freed
    }
}

/// A probe's connection `ui` is up: queues the monitor's request on it. The timeout to arm
/// the connection's timer with; None if it is no monitored probe.
fn send_request(upstreams: &mut Upstreams, rt: &Runtime, ui: UpstreamId) -> Option<Duration> {
    let u = upstreams.get_mut(ui)?;
    let check = rt.groups.get(u.group).and_then(|g| g.health.as_ref())?;
    u.out.push(check.request.as_bytes());
    u.phase = UpPhase::Checking;
    Some(check_timeout(check))
}

/// How long a check waits for its answer: the monitor's `timeout`, within 1 to 10 s.
fn check_timeout(check: &HealthMonitor) -> Duration {
    check
        .timeout
        .clamp(Duration::from_secs(1), Duration::from_secs(10))
}

/// Where a health check on upstream `ui` stands after a read.
fn reading(upstreams: &mut Upstreams, rt: &Runtime, ui: UpstreamId) -> Reading {
    let Some(u) = upstreams.get_mut(ui) else {
        return Reading::Wait;
    };
    let Some(check) = rt.groups.get(u.group).and_then(|g| g.health.as_ref()) else {
        return Reading::Wait;
    };
    read_health_answer(u, check, &rt.limits)
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
pub(super) enum Reading {
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
