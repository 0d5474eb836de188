//! Server-group scheduling of one worker: which server and connection a request gets. The
//! per-server pool counts and the groups' wait queues (`GroupState`), the schedulers
//! (`ratio`: smooth weighted round robin; `hash`: rendezvous hashing on host + URI), and
//! server health (a failing server is taken out with a short backoff and probed back with a
//! connect before it gets traffic again). The connections themselves are `upstream.rs`'s.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use super::upstream::UpPhase;
use super::{Worker, PROBE_BASE};
use crate::runtime::Runtime;

/// Longest a server stays out before the next probe: the backoff is 0.5 s, then 1 s. It was
/// 10 s, reached after about 8 s of an outage; a sole origin back after one then got 502 for
/// up to 10 s more (7.3 s measured, tests/tests/faults.rs). A probe is one connect a second
/// per worker to a server that is out, which costs the server next to nothing.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

pub struct ServerState {
    idle: Vec<usize>,
    open: usize,
    down_until: Option<Instant>,
    failures: u32,
    /// Smooth weighted round robin state.
    current: i64,
    pub(super) probing: bool,
}

impl ServerState {
    fn new() -> ServerState {
        ServerState {
            idle: Vec::new(),
            open: 0,
            down_until: None,
            failures: 0,
            current: 0,
            probing: false,
        }
    }

    /// A new connection to the server counts against its `conns_n`.
    pub(super) fn opened(&mut self) {
        self.open += 1;
    }

    /// Connection `ui` waits in the pool for the next request.
    pub(super) fn pool(&mut self, ui: usize) {
        self.idle.push(ui);
    }

    /// Connection `ui` closed: it leaves the count and the pool.
    pub(super) fn closed(&mut self, ui: usize) {
        self.open = self.open.saturating_sub(1);
        self.idle.retain(|&i| i != ui);
    }

    /// A connection leaves the pool's count without closing (it became a tunnel).
    pub(super) fn release_place(&mut self) {
        self.open = self.open.saturating_sub(1);
    }

    fn is_up(&self, now: Instant) -> bool {
        self.down_until.is_none_or(|t| now >= t) && !self.probing
    }
}

pub struct GroupState {
    pub servers: Vec<ServerState>,
    /// Exchanges waiting for a connection.
    pub queue: VecDeque<super::exchange::ExchangeId>,
}

pub fn group_states(rt: &Runtime) -> Vec<GroupState> {
    rt.groups
        .iter()
        .map(|g| GroupState {
            servers: g.servers.iter().map(|_| ServerState::new()).collect(),
            queue: VecDeque::new(),
        })
        .collect()
}

/// The choice for one request.
pub enum Pick {
    /// An idle pooled connection.
    Pooled(usize),
    /// Open a new connection to this server.
    Connect(usize),
    /// Every usable server is at its connection limit.
    Full,
    /// No server is up.
    Down,
}
impl Worker {
    /// Chooses a server and connection of `group` for a request with `key` (hash scheduler).
    /// `fresh`: the request needs a new connection of its own (a WebSocket handshake), which
    /// does not wait for a place among the server's `conns_n`.
    pub(super) fn pick(
        &mut self,
        group: usize,
        key: u64,
        avoid: Option<usize>,
        fresh: bool,
    ) -> Pick {
        let now = Instant::now();
        let Some(g) = self.rt.groups.get(group) else {
            return Pick::Down;
        };
        let Some(state) = self.groups.get_mut(group) else {
            return Pick::Down;
        };
        let up: Vec<usize> = (0..g.servers.len())
            .filter(|&s| state.servers[s].is_up(now) && Some(s) != avoid)
            .collect();
        let primary: Vec<usize> = up
            .iter()
            .copied()
            .filter(|&s| !g.servers[s].backup)
            .collect();
        let candidates = if primary.is_empty() { up } else { primary };
        if candidates.is_empty() {
            return Pick::Down;
        }
        let has_room = |s: usize, st: &ServerState| {
            fresh || !st.idle.is_empty() || st.open < g.servers[s].conns_n
        };
        let usable: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|&s| has_room(s, &state.servers[s]))
            .collect();
        if usable.is_empty() {
            return Pick::Full;
        }
        let chosen = if g.hash {
            // Rendezvous hashing: the same key keeps going to the same server while it is up.
            *usable
                .iter()
                .max_by_key(|&&s| mix(key, s as u64))
                .unwrap_or(&usable[0])
        } else {
            let total: i64 = usable.iter().map(|&s| i64::from(g.servers[s].weight)).sum();
            for &s in &usable {
                state.servers[s].current += i64::from(g.servers[s].weight);
            }
            let best = *usable
                .iter()
                .max_by_key(|&&s| state.servers[s].current)
                .unwrap_or(&usable[0]);
            state.servers[best].current -= total;
            best
        };
        if fresh {
            return Pick::Connect(chosen);
        }
        match state.servers[chosen].idle.pop() {
            Some(ui) => Pick::Pooled(ui),
            None => Pick::Connect(chosen),
        }
    }

    /// Whether `server` of `group` takes requests now, as this worker knows it.
    pub(super) fn server_up(&self, group: usize, server: usize) -> bool {
        self.groups
            .get(group)
            .and_then(|g| g.servers.get(server))
            .is_some_and(|st| st.is_up(Instant::now()))
    }

    /// A connection to one given server (a sticky session's): pooled, new, or `Full` at
    /// its `conns_n`; always new when `fresh` (a WebSocket handshake), as in `pick`.
    pub(super) fn pick_server(&mut self, group: usize, server: usize, fresh: bool) -> Pick {
        let conns_n = self
            .rt
            .groups
            .get(group)
            .and_then(|g| g.servers.get(server))
            .map_or(0, |s| s.conns_n);
        let Some(st) = self
            .groups
            .get_mut(group)
            .and_then(|g| g.servers.get_mut(server))
        else {
            return Pick::Down;
        };
        if fresh {
            return Pick::Connect(server);
        }
        match st.idle.pop() {
            Some(ui) => Pick::Pooled(ui),
            None if st.open < conns_n => Pick::Connect(server),
            None => Pick::Full,
        }
    }
    /// A server failed (connect refused or timed out): take it out and schedule a probe.
    pub(super) fn mark_down(&mut self, group: usize, server: usize) {
        let Some(st) = self
            .groups
            .get_mut(group)
            .and_then(|g| g.servers.get_mut(server))
        else {
            return;
        };
        st.failures = st.failures.saturating_add(1);
        // A monitored server is checked again after the monitor's interval; others back off.
        let monitor = self
            .rt
            .groups
            .get(group)
            .and_then(|g| g.health.as_ref())
            .map(|h| h.timeout.max(Duration::from_secs(1)));
        let backoff = monitor.unwrap_or_else(|| {
            Duration::from_millis(250u64 << st.failures.min(6)).min(MAX_BACKOFF)
        });
        st.down_until = Some(Instant::now() + backoff);
        if !st.probing {
            let key = super::health::probe_key(group, server);
            self.timers
                .schedule(Instant::now() + backoff, key, self.rt_gen);
        }
        self.publish_health();
    }

    pub(super) fn mark_up(&mut self, group: usize, server: usize) {
        if let Some(st) = self
            .groups
            .get_mut(group)
            .and_then(|g| g.servers.get_mut(server))
        {
            let was_down = st.down_until.is_some();
            st.failures = 0;
            st.down_until = None;
            st.probing = false;
            if was_down {
                self.publish_health();
            }
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
                    .filter(|(st, _)| st.down_until.is_some())
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
            .is_some_and(|st| !st.probing && (monitored || st.down_until.is_some()));
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
}

/// The hash key of a request for the `hash` scheduler.
pub fn request_key(host: &[u8], uri: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    host.hash(&mut h);
    uri.hash(&mut h);
    h.finish()
}

fn mix(key: u64, server: u64) -> u64 {
    let mut x = key ^ server.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x
}
