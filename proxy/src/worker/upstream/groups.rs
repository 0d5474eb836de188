//! The per-group state of one worker's upstreams: each server's pool (idle connections, open
//! count against `conns_n`), health (taken out with a short backoff, probed back) and
//! scheduler state, and each group's wait queue (`GroupState`); and the choices made from it
//! alone: a server and connection for a request ([`pick`]: `ratio`, smooth weighted round
//! robin; `hash`, rendezvous hashing on host + URI), one given server's ([`pick_server`]), a
//! server out ([`ServerState::fail`]) or back ([`ServerState::recover`]), an exchange's place
//! in its group's queue ([`GroupState::enqueue`], [`GroupState::next_waiting`],
//! [`unqueue`]: at most `server_queue_size` for each connection the group may open,
//! `GroupRt::queue_limit`, served in arrival order as connections free up). Nothing here
//! touches a socket, a timer or an exchange: the caller acts on what these return.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use super::UpstreamId;
use crate::runtime::{GroupRt, Runtime};
use crate::worker::exchange::ExchangeId;

/// Longest a server stays out before the next probe: the backoff is 0.5 s, then 1 s. It was
/// 10 s, reached after about 8 s of an outage; a sole origin back after one then got 502 for
/// up to 10 s more (7.3 s measured, tests/tests/faults.rs). A probe is one connect a second
/// per worker to a server that is out, which costs the server next to nothing.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

pub struct ServerState {
    idle: Vec<UpstreamId>,
    /// Its HTTP/2 connections carrying exchanges (`server_proto h2`), in the order they
    /// opened: where a request looks for a free stream (`h2_conn.rs` `find_conn`) without
    /// going through the whole upstream table.
    h2: Vec<UpstreamId>,
    open: usize,
    down_until: Option<Instant>,
    failures: u32,
    /// Smooth weighted round robin state.
    current: i64,
    pub probing: bool,
    /// Out after a failure in a monitored group: it stays out until its monitor finds it
    /// alive (as Tempesta suspends it), not only for the backoff.
    held: bool,
}

impl ServerState {
    fn new() -> ServerState {
        ServerState {
            idle: Vec::new(),
            h2: Vec::new(),
            open: 0,
            down_until: None,
            failures: 0,
            current: 0,
            probing: false,
            held: false,
        }
    }

    /// A new connection to the server counts against its `conns_n`.
    pub fn opened(&mut self) {
        self.open += 1;
    }

    /// Connection `ui` waits in the pool for the next request.
    pub fn pool(&mut self, ui: UpstreamId) {
        self.idle.push(ui);
    }

    /// Connection `ui` closed: it leaves the count, the pool and the HTTP/2 list.
    pub fn closed(&mut self, ui: UpstreamId) {
        self.open = self.open.saturating_sub(1);
        self.idle.retain(|&i| i != ui);
        if let Some(at) = self.h2.iter().position(|&i| i == ui) {
            self.h2.remove(at);
        }
    }

    /// Connection `ui` speaks HTTP/2 from now on: exchanges may share it.
    pub fn h2_started(&mut self, ui: UpstreamId) {
        self.h2.push(ui);
    }

    /// Its HTTP/2 connections carrying exchanges, oldest first.
    pub fn h2_conns(&self) -> &[UpstreamId] {
        &self.h2
    }

    /// The server failed (connect refused or timed out, a failed health check): it is out
    /// for a backoff that grows with its failures (a monitored one's: the monitor's
    /// `timeout`, at least 1 s). Returns when to probe it, unless a probe is under way.
    pub fn fail(&mut self, monitor_timeout: Option<Duration>, now: Instant) -> Option<Instant> {
        self.failures = self.failures.saturating_add(1);
        let monitor = monitor_timeout.map(|t| t.max(Duration::from_secs(1)));
        let backoff = monitor.unwrap_or_else(|| {
            Duration::from_millis(250u64 << self.failures.min(6)).min(MAX_BACKOFF)
        });
        self.down_until = Some(now + backoff);
        self.held = monitor.is_some();
        (!self.probing).then_some(now + backoff)
    }

    /// The server answered again: back in, its failures forgotten. True if it was out.
    pub fn recover(&mut self) -> bool {
        let was_down = self.down_until.is_some();
        self.failures = 0;
        self.down_until = None;
        self.probing = false;
        self.held = false;
        was_down
    }

    /// Whether the server is out (a failure's backoff set and not yet recovered).
    pub fn is_out(&self) -> bool {
        self.down_until.is_some()
    }

    /// Whether this server is due a probe: not one under way, and out (or `monitored`:
    /// a health monitor checks its servers up or down).
    pub fn probe_due(&self, monitored: bool) -> bool {
        !self.probing && (monitored || self.down_until.is_some())
    }

    /// A connection leaves the pool's count without closing (it became a tunnel).
    pub fn release_place(&mut self) {
        self.open = self.open.saturating_sub(1);
    }

    /// Whether the server takes requests at `now`: not out, or its backoff over, no probe
    /// under way and no monitor holding it out. A periodic health check of a server that is
    /// in does not take it out while it runs.
    pub fn is_up(&self, now: Instant) -> bool {
        self.down_until
            .is_none_or(|t| now >= t && !self.probing && !self.held)
    }
}

pub struct GroupState {
    pub servers: Vec<ServerState>,
    /// Exchanges waiting for a connection.
    pub queue: VecDeque<ExchangeId>,
}

impl GroupState {
    /// Queues exchange `id` for a connection of this group, unless `limit` exchanges wait
    /// already (Err: the caller answers 503).
    pub fn enqueue(&mut self, id: ExchangeId, limit: usize) -> Result<(), ()> {
        if self.queue.len() >= limit {
            return Err(());
        }
        self.queue.push_back(id);
        Ok(())
    }

    /// The exchange that has waited longest, taken out of the queue.
    pub fn next_waiting(&mut self) -> Option<ExchangeId> {
        self.queue.pop_front()
    }
}

/// The state of `server` of `group`, if both name one in this configuration (indices kept
/// from an earlier one may not).
pub fn server_mut(
    groups: &mut [GroupState],
    group: usize,
    server: usize,
) -> Option<&mut ServerState> {
    groups.get_mut(group)?.servers.get_mut(server)
}

/// Takes exchange `id` out of whichever group's queue holds it.
pub fn unqueue(groups: &mut [GroupState], id: ExchangeId) {
    for g in groups {
        g.queue.retain(|&queued| queued != id);
    }
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
    Pooled(UpstreamId),
    /// Open a new connection to this server.
    Connect(usize),
    /// Every usable server is at its connection limit.
    Full,
    /// No server is up.
    Down,
}
/// Chooses a server and connection of group `g` (its state `state`) for a request with
/// `key` (hash scheduler), avoiding server `avoid`.
/// `fresh`: the request needs a new connection of its own (a WebSocket handshake), which
/// does not wait for a place among the server's `conns_n`.
pub fn pick(
    g: &GroupRt,
    state: &mut GroupState,
    (key, avoid, fresh): (u64, Option<usize>, bool),
    now: Instant,
) -> Pick {
    // The candidates are the servers up (but `avoid`), the primary ones if any is; of them,
    // those with room are usable. Found by going over the servers again rather than by
    // collecting them: no allocation per request.
    let n = g.servers.len();
    let up = |state: &GroupState, s: usize| state.servers[s].is_up(now) && Some(s) != avoid;
    let any_primary = (0..n).any(|s| up(state, s) && !g.servers[s].backup);
    let candidate =
        |state: &GroupState, s: usize| up(state, s) && !(any_primary && g.servers[s].backup);
    if !(0..n).any(|s| candidate(state, s)) {
        return Pick::Down;
    }
    let has_room =
        |s: usize, st: &ServerState| fresh || !st.idle.is_empty() || st.open < g.servers[s].conns_n;
    let usable =
        |state: &GroupState, s: usize| candidate(state, s) && has_room(s, &state.servers[s]);
    let Some(first) = (0..n).find(|&s| usable(state, s)) else {
        return Pick::Full;
    };
    let chosen = if g.hash {
        // Rendezvous hashing: the same key keeps going to the same server while it is up.
        (0..n)
            .filter(|&s| usable(state, s))
            .max_by_key(|&s| mix(key, s as u64))
            .unwrap_or(first)
    } else {
        // Smooth weighted round robin over the usable servers (a server's room does not
        // depend on its `current`, so the set is the same before and after the raise).
        let mut total: i64 = 0;
        for s in 0..n {
            if usable(state, s) {
                let weight = i64::from(g.servers[s].weight);
                total += weight;
                state.servers[s].current += weight;
            }
        }
        let best = (0..n)
            .filter(|&s| usable(state, s))
            .max_by_key(|&s| state.servers[s].current)
            .unwrap_or(first);
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

/// A connection to one given server (a sticky session's) whose `conns_n` is `conns_n`:
/// pooled, new, or `Full` at its `conns_n`; always new when `fresh` (a WebSocket
/// handshake), as in [`pick`].
pub fn pick_server(st: &mut ServerState, server: usize, conns_n: usize, fresh: bool) -> Pick {
    if fresh {
        return Pick::Connect(server);
    }
    match st.idle.pop() {
        Some(ui) => Pick::Pooled(ui),
        None if st.open < conns_n => Pick::Connect(server),
        None => Pick::Full,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::ServerRt;

    fn group(hash: bool, servers: &[(u32, usize, bool)]) -> (GroupRt, GroupState) {
        let servers: Vec<ServerRt> = servers
            .iter()
            .enumerate()
            .map(|(i, &(weight, conns_n, backup))| ServerRt {
                addr: format!("127.0.0.1:{}", 9000 + i).parse().unwrap(),
                weight,
                conns_n,
                backup,
                failover: None,
            })
            .collect();
        let state = GroupState {
            servers: servers.iter().map(|_| ServerState::new()).collect(),
            queue: VecDeque::new(),
        };
        let g = GroupRt {
            name: "g".into(),
            servers,
            hash,
            forward_timeout: Duration::from_secs(60),
            forward_retries: 0,
            connect_retries: 0,
            queue_limit: 0,
            health: None,
            tls: None,
            h2: false,
        };
        (g, state)
    }

    fn server(pick: Pick) -> Option<usize> {
        match pick {
            Pick::Connect(s) => Some(s),
            _ => None,
        }
    }

    #[test]
    fn ratio_follows_the_weights_and_backups_wait_for_every_primary_down() {
        let (g, mut state) = group(false, &[(3, 100, false), (1, 100, false), (5, 100, true)]);
        let now = Instant::now();
        let mut counts = [0; 3];
        for _ in 0..400 {
            let s = server(pick(&g, &mut state, (0, None, false), now)).unwrap();
            counts[s] += 1;
        }
        assert_eq!(counts, [300, 100, 0]);
        state.servers[0].fail(None, now);
        state.servers[1].fail(None, now);
        assert_eq!(server(pick(&g, &mut state, (0, None, false), now)), Some(2));
        state.servers[2].fail(None, now);
        assert!(matches!(
            pick(&g, &mut state, (0, None, false), now),
            Pick::Down
        ));
    }

    #[test]
    fn hash_keeps_a_key_on_its_server_and_avoids_the_one_asked() {
        let (g, mut state) = group(true, &[(1, 100, false), (1, 100, false), (1, 100, false)]);
        let now = Instant::now();
        let first = server(pick(&g, &mut state, (42, None, false), now)).unwrap();
        for _ in 0..10 {
            assert_eq!(
                server(pick(&g, &mut state, (42, None, false), now)),
                Some(first)
            );
        }
        let other = server(pick(&g, &mut state, (42, Some(first), false), now)).unwrap();
        assert_ne!(other, first);
    }

    #[test]
    fn a_pooled_connection_comes_first_and_a_full_server_is_full() {
        let (g, mut state) = group(false, &[(1, 1, false)]);
        let now = Instant::now();
        state.servers[0].opened();
        assert!(matches!(
            pick(&g, &mut state, (0, None, false), now),
            Pick::Full
        ));
        // A WebSocket handshake does not wait for a place among conns_n.
        assert_eq!(server(pick(&g, &mut state, (0, None, true), now)), Some(0));
        let id = UpstreamId::from_index(7);
        state.servers[0].pool(id);
        assert!(matches!(
            pick(&g, &mut state, (0, None, false), now),
            Pick::Pooled(got) if got == id
        ));
        state.servers[0].pool(id);
        assert!(matches!(
            pick_server(&mut state.servers[0], 0, 1, false),
            Pick::Pooled(_)
        ));
        assert!(matches!(
            pick_server(&mut state.servers[0], 0, 1, false),
            Pick::Full
        ));
        state.servers[0].closed(id);
        assert_eq!(
            server(pick_server(&mut state.servers[0], 0, 1, false)),
            Some(0)
        );
    }

    #[test]
    fn a_failed_server_backs_off_up_to_a_second_and_one_probe_at_a_time() {
        let mut st = ServerState::new();
        let now = Instant::now();
        let waits: Vec<Duration> = (0..8).map(|_| st.fail(None, now).unwrap() - now).collect();
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [500, 1000, 1000, 1000, 1000, 1000, 1000, 1000]);
        assert!(!st.is_up(now) && st.is_up(now + Duration::from_secs(1)));
        st.probing = true;
        assert_eq!(st.fail(None, now), None, "a probe is under way");
        assert!(st.recover() && st.is_up(now) && !st.recover());
        // A monitored server waits the monitor's timeout, at least a second.
        let short = Some(Duration::from_millis(100));
        assert_eq!(st.fail(short, now), Some(now + Duration::from_secs(1)));
        let long = Some(Duration::from_secs(3));
        assert_eq!(st.fail(long, now), Some(now + Duration::from_secs(3)));
        // ... and stays out past it until a check finds it alive (between the backoff's end
        // and the next check's start no request reaches it).
        assert!(!st.is_up(now + Duration::from_secs(60)));
        assert!(st.probe_due(false) && st.recover() && !st.probe_due(false) && st.probe_due(true));
    }

    /// A cache tier peer's probe runs every second: a server that is in stays in while its
    /// periodic check is under way; one that is out waits for its probe's verdict.
    #[test]
    fn a_periodic_check_of_a_server_that_is_in_does_not_take_it_out() {
        let mut st = ServerState::new();
        let now = Instant::now();
        st.probing = true;
        assert!(st.is_up(now));
        st.recover();
        st.fail(None, now);
        st.probing = true;
        assert!(!st.is_up(now + Duration::from_secs(5)));
    }
}
