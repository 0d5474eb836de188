//! Upstream connections of one worker: opening them, driving their reads and writes into
//! the exchange's response, their timers, pooling them again (when `reuse.rs` `reusable`,
//! the one reuse decision, says so) or closing them, in their table (`table.rs`, named by
//! `UpstreamId`). The per-group state (pools, health, wait queues) and the choice of a
//! server and connection from it are `groups.rs`'s.

use std::io;
use std::time::{Duration, Instant};

use ktls::IoStatus;
use mio::Interest;

pub mod groups;
pub mod reuse;
mod table;

pub use reuse::{reusable, ConnFacts, UpstreamEnd};
pub use table::{UpstreamId, Upstreams};

use super::client::{ClientId, Clients};
use super::exchange::{ExchangeId, Exchanges};
use super::response::Failure;
use super::{upstream_token, Worker};
use crate::buf::{Buf, BufPool};
use crate::metrics::bump;
use crate::outbox::Outbox;
use crate::socket::Socket;

/// A new connection must be established within this long.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpPhase {
    Connecting,
    /// In the pool, waiting for a request.
    Idle,
    /// Serving the request of `Upstream::exchange`.
    Busy,
    /// A probe: a connect, then the group's health request if it has a monitor.
    Probe,
    /// A health monitor's request is out; its answer decides the server's state.
    Checking,
    /// Half of a WebSocket tunnel owned by client `client` (slab index, unique id); outside
    /// its server's pool (`tunnel.rs`).
    Tunnel {
        client: ClientId,
        client_id: u64,
    },
}

pub struct Upstream {
    pub sock: Socket,
    pub group: usize,
    pub server: usize,
    /// The server's address (the access log's `upstream`).
    pub addr: std::net::SocketAddr,
    pub phase: UpPhase,
    /// The exchange this connection serves.
    pub exchange: Option<super::exchange::ExchangeId>,
    pub rbuf: Option<Buf>,
    pub out: Outbox,
    /// Has completed a request before: a failure before the first response byte may be a
    /// stale keep-alive connection, so the request can be retried elsewhere.
    pub reused: bool,
    pub peer_closed: bool,
    /// The connection ended by an error (a reset, a failed read or write), not by an orderly
    /// close: a close-delimited body read so far is incomplete (`lifecycle::body_end`).
    pub peer_failed: bool,
    /// The last response allowed the connection to persist.
    pub keep_alive: bool,
    pub timer_gen: u64,
    /// When bytes last moved either way: `server_forward_timeout` is a time without progress,
    /// so a slow but moving transfer is not cut.
    pub last_progress: Instant,
    /// The runtime generation the connection belongs to; connections of an older
    /// configuration are closed instead of pooled.
    pub rt_gen: u64,
    /// A reload removed its server (`grace.rs`): it gets no new work, and its `group` and
    /// `server` name an older configuration's server, so they index nothing of this one.
    pub removed: bool,
    /// Its group's `server_forward_timeout`, kept here so that a connection of a removed
    /// server is still timed by its own group's setting.
    pub forward_timeout: Duration,
    /// When a reload's `grace_shutdown_time` runs out for it, if one does.
    pub retire_at: Option<Instant>,
    /// A health answer's body read so far (`Checking`, once its head was judged).
    pub health_body: Option<Box<super::health::HealthBody>>,
}

impl Upstream {
    /// How the server's side of this connection ended, if it did.
    pub fn peer_end(&self) -> super::lifecycle::PeerEnd {
        super::lifecycle::PeerEnd::of(self.peer_closed, self.peer_failed)
    }
}

impl Worker {
    /// Opens a connection to `server` of `group`. Errors are immediate connect failures.
    pub(super) fn connect(
        &mut self,
        group: usize,
        server: usize,
        phase: UpPhase,
    ) -> io::Result<UpstreamId> {
        // Indices may come from an exchange begun under the previous configuration.
        let Some(g) = self.rt.groups.get(group) else {
            return Err(io::ErrorKind::NotFound.into());
        };
        let Some(addr) = g.servers.get(server).map(|s| s.addr) else {
            return Err(io::ErrorKind::NotFound.into());
        };
        let forward_timeout = g.forward_timeout;
        let connect_timeout = CONNECT_TIMEOUT.min(forward_timeout);
        // A cache tier peer knows this node's connections by their source: `self`'s address.
        let from = (self.rt.tier.as_ref())
            .filter(|t| t.is_peer_group(group))
            .map(|t| t.me.ip());
        let mut sock = self.connector.connect(addr, from)?;
        let ui = self.upstreams.next_id();
        self.poll.registry().register(
            &mut sock,
            upstream_token(ui),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        self.upstreams.insert(Upstream {
            sock,
            group,
            server,
            addr,
            phase,
            exchange: None,
            rbuf: None,
            out: Outbox::default(),
            reused: false,
            peer_closed: false,
            peer_failed: false,
            keep_alive: true,
            timer_gen: 0,
            last_progress: Instant::now(),
            rt_gen: self.rt_gen,
            removed: false,
            forward_timeout,
            retire_at: None,
            health_body: None,
        });
        if let Some(st) = self
            .groups
            .get_mut(group)
            .and_then(|g| g.servers.get_mut(server))
        {
            st.opened();
        }
        self.arm_upstream_timer(ui, connect_timeout);
        Ok(ui)
    }

    pub(super) fn arm_upstream_timer(&mut self, ui: UpstreamId, after: Duration) {
        if let Some(u) = self.upstreams.get_mut(ui) {
            u.last_progress = Instant::now();
            u.timer_gen = self.timers.next_gen();
            self.timers
                .schedule(Instant::now() + after, upstream_token(ui).0, u.timer_gen);
        }
    }

    fn disarm_upstream_timer(&mut self, ui: UpstreamId) {
        if let Some(u) = self.upstreams.get_mut(ui) {
            // No scheduled entry has generation 0.
            u.timer_gen = 0;
        }
    }

    pub(super) fn upstream_timer(&mut self, ui: UpstreamId, gen: u64, now: Instant) {
        let Some(u) = self.upstreams.get_mut(ui) else {
            return;
        };
        if u.timer_gen != gen {
            return;
        }
        if u.phase == UpPhase::Busy {
            // Progress since the timer was armed: wait for the rest of the quiet period.
            let timeout = super::route::quiet_limit(&self.rt, &self.exchanges, u);
            let quiet = now.saturating_duration_since(u.last_progress);
            if quiet < timeout {
                u.timer_gen = self.timers.next_gen();
                self.timers
                    .schedule(u.last_progress + timeout, upstream_token(ui).0, u.timer_gen);
                return;
            }
        }
        let Some(u) = self.upstreams.get(ui) else {
            return;
        };
        match (u.phase, u.exchange) {
            (UpPhase::Connecting, Some(id)) => {
                let (group, server, current) = (u.group, u.server, !u.removed);
                bump(&self.metrics().upstream_connect_errors);
                self.close_upstream(ui);
                if current {
                    self.health().mark_down(group, server);
                }
                self.exchange_failed(id, Failure::Connect);
            }
            (UpPhase::Busy, Some(id)) => {
                bump(&self.metrics().upstream_timeouts);
                self.close_upstream(ui);
                self.exchange_failed(id, Failure::Timeout);
            }
            (UpPhase::Checking, _) => self.health_verdict(ui, false),
            (UpPhase::Probe, _) => {
                if let Some((group, server)) = self.end_probe(ui) {
                    self.health().mark_down(group, server);
                }
            }
            _ => self.close_upstream(ui),
        }
    }

    /// Drives one upstream connection: connect completion, writes, reads, and the response.
    pub(super) fn drive_upstream(&mut self, ui: UpstreamId) {
        let Some(u) = self.upstreams.get_mut(ui) else {
            return;
        };
        if let UpPhase::Tunnel { client, client_id } = u.phase {
            return self.drive_tunnel_upstream(ui, client, client_id);
        }
        if matches!(u.phase, UpPhase::Connecting | UpPhase::Probe) && !self.connect_settled(ui) {
            return;
        }
        if self
            .upstreams
            .get(ui)
            .is_some_and(|u| u.phase == UpPhase::Checking)
        {
            return self.drive_health(ui);
        }
        for _ in 0..64 {
            let mut progressed = self.flush_upstream(ui);
            progressed |= self.read_upstream(ui);
            let Some(u) = self.upstreams.get(ui) else {
                return;
            };
            if let UpPhase::Tunnel { client, client_id } = u.phase {
                // The response just relayed was a 101: the rest is the tunnel's.
                return self.drive_tunnel_upstream(ui, client, client_id);
            }
            match u.exchange {
                Some(id) => {
                    if self.relay_response(id, ui) {
                        // Bytes for the client: flush them from its side.
                        if let Some(ci) = self.exchanges.client_of(id, &self.clients) {
                            self.dirty.push_back(super::client_token(ci));
                        }
                        progressed = true;
                    }
                }
                None => {
                    // An idle pooled connection that becomes readable was closed by the
                    // server (or sent something unasked): it cannot be used again.
                    if u.peer_closed || u.rbuf.as_ref().is_some_and(|b| !b.is_empty()) {
                        self.close_upstream(ui);
                    }
                    return;
                }
            }
            if !progressed || !self.upstreams.contains(ui) {
                return;
            }
        }
        // Still moving after a full round: let other connections run, then come back (with
        // edge-triggered readiness no new event would arrive for bytes already waiting).
        self.dirty.push_back(upstream_token(ui));
    }

    /// Upstream `ui` of a tunnel became ready: its client drives the tunnel (tunnel.rs), or
    /// it closes if that client is gone.
    fn drive_tunnel_upstream(&mut self, ui: UpstreamId, client: ClientId, client_id: u64) {
        match super::tunnel::live_client(&self.clients, client, client_id) {
            Some(ci) => self.drive_client(ci),
            None => self.close_upstream(ui),
        }
    }

    /// A connecting upstream (`Connecting`, or a `Probe`) became ready: the connect either
    /// completed or failed. A completed probe marks its server up (or sends the health
    /// monitor's request); a completed connection for an exchange becomes `Busy` under the
    /// forward timeout; a failure marks the server down and fails the exchange (a retry).
    /// True: the connection carries a request now and driving it goes on.
    fn connect_settled(&mut self, ui: UpstreamId) -> bool {
        let Some(u) = self.upstreams.get_mut(ui) else {
            return false;
        };
        let (group, server, probe) = (u.group, u.server, u.phase == UpPhase::Probe);
        // A removed server's indices name an older configuration: its state is not this one's.
        let current = !u.removed;
        match connect_result(&u.sock) {
            None => false,
            Some(Ok(())) => {
                let monitored = self
                    .rt
                    .groups
                    .get(group)
                    .is_some_and(|g| g.health.is_some());
                if probe && monitored {
                    self.send_health_request(ui);
                    return false;
                }
                if current {
                    self.health().mark_up(group, server);
                }
                if probe {
                    self.end_upstream(ui, UpstreamEnd::UNUSED);
                    return false;
                }
                let Some(u) = self.upstreams.get_mut(ui) else {
                    return false;
                };
                u.phase = UpPhase::Busy;
                let timeout = u.forward_timeout;
                self.arm_upstream_timer(ui, timeout);
                true
            }
            Some(Err(_)) => {
                let exchange = u.exchange;
                if probe {
                    self.end_probe(ui);
                } else {
                    self.close_upstream(ui);
                    bump(&self.metrics().upstream_connect_errors);
                }
                if current {
                    self.health().mark_down(group, server);
                }
                if let Some(id) = exchange {
                    self.exchange_failed(id, Failure::Connect);
                }
                false
            }
        }
    }

    pub(super) fn flush_upstream(&mut self, ui: UpstreamId) -> bool {
        let Some(u) = self.upstreams.get_mut(ui) else {
            return false;
        };
        match flush(u) {
            Flushed::Nothing => false,
            Flushed::Failed => true,
            Flushed::Wrote => {
                if u.out.is_empty() {
                    if let Some(fwd) = u
                        .exchange
                        .and_then(|id| self.exchanges.get_mut(id))
                        .and_then(|ex| ex.forward_mut())
                    {
                        fwd.sending.flushed(Instant::now());
                    }
                }
                // Room again: the client may have more request body to pass.
                if let Some(id) = u.exchange {
                    if let Some(ci) = self.exchanges.client_of(id, &self.clients) {
                        self.dirty.push_back(super::client_token(ci));
                    }
                }
                true
            }
        }
    }

    pub(super) fn read_upstream(&mut self, ui: UpstreamId) -> bool {
        let Some(u) = self.upstreams.get_mut(ui) else {
            return false;
        };
        read(u, &mut self.bufs)
    }

    /// Ends exchange `id`'s use of upstream connection `ui`, if the connection is still
    /// its own (a failed connection may already be closed and its slot reused).
    pub(super) fn end_upstream_of(&mut self, id: ExchangeId, ui: UpstreamId, end: UpstreamEnd) {
        if self
            .upstreams
            .get(ui)
            .is_some_and(|u| u.exchange == Some(id))
        {
            self.end_upstream(ui, end);
        }
    }

    /// Ends upstream connection `ui`'s use (an exchange's, or none: `UpstreamEnd::UNUSED`):
    /// pooled when [`reusable`] says it is in step with its server, closed otherwise.
    pub(super) fn end_upstream(&mut self, ui: UpstreamId, end: UpstreamEnd) {
        let Some(u) = self.upstreams.get(ui) else {
            return;
        };
        if reusable(end, ConnFacts::of(u, self.rt_gen)) {
            self.pool_upstream(ui);
        } else {
            if !end.request_sent || end.body_may_follow {
                bump(&self.metrics().upstream_not_reused);
            }
            self.close_upstream(ui);
        }
    }

    /// Puts a connection [`reusable`] accepted back in its server's pool, then hands it to
    /// a waiting exchange if there is one.
    fn pool_upstream(&mut self, ui: UpstreamId) {
        let Some(u) = self.upstreams.get_mut(ui) else {
            return;
        };
        u.exchange = None;
        u.phase = UpPhase::Idle;
        u.reused = true;
        let (group, server) = (u.group, u.server);
        self.bufs.release_if_empty(&mut u.rbuf);
        self.disarm_upstream_timer(ui);
        match self
            .groups
            .get_mut(group)
            .and_then(|g| g.servers.get_mut(server))
        {
            Some(st) => st.pool(ui),
            None => return self.close_upstream(ui),
        }
        self.serve_queue(group);
    }

    pub(super) fn close_upstream(&mut self, ui: UpstreamId) {
        let Some(mut u) = self.upstreams.remove(ui) else {
            return;
        };
        // No epoll_ctl(DEL): closing the socket (it is never duplicated) takes it out of the
        // poll set, one syscall per connection less.
        if let Some(buf) = u.rbuf.take() {
            self.bufs.give(buf);
        }
        // A tunnel left its server's count when it started.
        let pooled = !matches!(u.phase, UpPhase::Tunnel { .. });
        if u.rt_gen == self.rt_gen && pooled {
            if let Some(st) = self
                .groups
                .get_mut(u.group)
                .and_then(|g| g.servers.get_mut(u.server))
            {
                st.closed(ui);
            }
            self.serve_queue(u.group);
        }
    }

    /// Closes a probe's connection and clears its server's probing mark; returns the server.
    /// (A reload closes every probe: `refresh_runtime`.)
    pub(super) fn end_probe(&mut self, ui: UpstreamId) -> Option<(usize, usize)> {
        let u = self.upstreams.get(ui)?;
        let (group, server) = (u.group, u.server);
        self.close_upstream(ui);
        if let Some(st) = self
            .groups
            .get_mut(group)
            .and_then(|g| g.servers.get_mut(server))
        {
            st.probing = false;
        }
        Some((group, server))
    }
}

/// The client connection upstream `ui` works for, if still the one it began with: its
/// exchange's, or its tunnel's.
pub(super) fn owner(
    (upstreams, clients, exchanges): (&Upstreams, &Clients, &Exchanges),
    ui: UpstreamId,
) -> Option<ClientId> {
    let u = upstreams.get(ui)?;
    let (ci, client_id) = match u.phase {
        UpPhase::Tunnel { client, client_id } => (client, client_id),
        _ => exchanges
            .get(u.exchange?)
            .map(|ex| (ex.client, ex.client_id))?,
    };
    clients
        .get(ci)
        .is_some_and(|c| c.id == client_id)
        .then_some(ci)
}

/// The connections serving no exchange and no tunnel (pooled, or a probe's).
pub(super) fn unclaimed(upstreams: &Upstreams) -> Vec<UpstreamId> {
    upstreams
        .iter()
        .filter(|(_, u)| u.exchange.is_none() && !matches!(u.phase, UpPhase::Tunnel { .. }))
        .map(|(ui, _)| ui)
        .collect()
}

/// Whether a non-blocking connect finished: None while in progress.
fn connect_result(sock: &Socket) -> Option<io::Result<()>> {
    if let Ok(Some(e)) | Err(e) = sock.take_error() {
        return Some(Err(e));
    }
    match sock.connected() {
        Ok(()) => Some(Ok(())),
        Err(e) if e.kind() == io::ErrorKind::NotConnected => None,
        Err(e) => Some(Err(e)),
    }
}

/// What writing an upstream connection's queued bytes did ([`flush`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flushed {
    /// Nothing to write, or the socket takes nothing now.
    Nothing,
    /// Bytes went out.
    Wrote,
    /// The write failed: the connection is over both ways, its outbox dropped.
    Failed,
}

/// Writes upstream `u`'s queued bytes, in a phase that sends.
#[inline]
pub(super) fn flush(u: &mut Upstream) -> Flushed {
    if u.out.is_empty()
        || !matches!(
            u.phase,
            UpPhase::Busy | UpPhase::Checking | UpPhase::Tunnel { .. }
        )
    {
        return Flushed::Nothing;
    }
    let mut plain = crate::transport::Transport::Plain(Default::default());
    match plain.write(&mut u.sock, &mut u.out) {
        IoStatus::Done(n) if n > 0 => {
            u.last_progress = Instant::now();
            Flushed::Wrote
        }
        IoStatus::Done(_) | IoStatus::WantRead | IoStatus::WantWrite => Flushed::Nothing,
        IoStatus::Closed | IoStatus::Error(_) => {
            // Reads stop here too, so whatever the server sent after is never seen.
            u.peer_closed = true;
            u.peer_failed = true;
            u.out.clear();
            Flushed::Failed
        }
    }
}

/// Reads what upstream `u`'s socket has, while there is room. True if anything came (bytes,
/// or the end).
#[inline]
pub(super) fn read(u: &mut Upstream, bufs: &mut BufPool) -> bool {
    if u.peer_closed || u.phase == UpPhase::Connecting {
        return false;
    }
    let rbuf = u.rbuf.get_or_insert_with(|| bufs.take());
    let mut got = false;
    while !rbuf.is_full() {
        match rbuf.read_from(&mut u.sock) {
            Ok(0) => {
                u.peer_closed = true;
                got = true;
                break;
            }
            Ok(_) => got = true,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => {
                // ECONNRESET is not the end of a close-delimited body (RFC 9112 §8).
                u.peer_closed = true;
                u.peer_failed = true;
                got = true;
                break;
            }
        }
    }
    bufs.release_if_empty(&mut u.rbuf);
    if got {
        u.last_progress = Instant::now();
    }
    got
}
