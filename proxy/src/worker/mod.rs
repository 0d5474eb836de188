//! One worker thread: its own mio loop, its own SO_REUSEPORT listening sockets, its client
//! and upstream connections. Nothing here is shared with other workers except through
//! [`Shared`] (the config snapshot, counters, the cache).

mod background;
mod caching;
mod client;
mod exchange;
mod fairness;
mod fill;
mod fingerprint_hook;
mod finish;
mod forward;
mod grace;
mod h1;
mod h2;
mod h2_floods;
mod h2_heads;
mod h2_serve;
mod health;
mod ip_block;
pub mod lifecycle;
mod limits;
mod reload;
mod request;
mod request_body;
mod response;
mod route;
mod sticky_hook;
mod stored_reply;
#[cfg(test)]
mod tests;
mod tunnel;
mod upstream;
pub use upstream::reuse; // public for the `response_framing` fuzz target
mod websocket;

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::buf::BufPool;
use crate::close_reason::CloseReason;
use crate::metrics::{bump, Metrics, WorkerMetrics};
use crate::runtime::Runtime;
use crate::timers::{Timers, ACCEPT_RETRY};

use client::{ClientId, Clients};
use exchange::{ExchangeId, Exchanges, EXCHANGE_TIMER_BASE};
use upstream::groups::GroupState;
use upstream::UpstreamId;

const WAKER: Token = Token(0);
const LISTENER_BASE: usize = 1;
const CLIENT_BASE: usize = 1 << 32;
const UPSTREAM_BASE: usize = 2 << 32;
/// Timer keys of health probes: PROBE_BASE + group * 65536 + server.
const PROBE_BASE: usize = 3 << 32;

/// What the workers of one process share.
pub struct Shared {
    runtime: RwLock<Arc<Runtime>>,
    /// Bumped on every successful reload, so workers notice without taking the lock.
    generation: AtomicU64,
    stopping: AtomicBool,
    pub metrics: Arc<Metrics>,
    /// The response cache of this process, shared by all workers.
    pub cache: cache::Cache,
    /// Every worker's waker, for `ip_block`'s resets (ip_block.rs).
    block_wake: ip_block::BlockWake,
}

impl Shared {
    pub fn new(runtime: Arc<Runtime>, metrics: Arc<Metrics>) -> Shared {
        let total_bytes = usize::try_from(runtime.config.cache.size).unwrap_or(usize::MAX);
        let max_object = usize::try_from(runtime.config.cache.max_object_size).unwrap_or(1);
        let limits = cache::CacheLimits {
            total_bytes,
            // One object is at most a shard's share: fewer shards when the largest object
            // would not fit one, so `cache_max_object_size` is what decides (with the
            // defaults, 64 shards of 4 MiB never stored a body of 4 to 8 MiB).
            shards: (total_bytes / max_object.max(1))
                .clamp(1, cache::CacheLimits::default().shards),
        };
        Shared {
            runtime: RwLock::new(runtime),
            generation: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
            metrics,
            cache: cache::Cache::new(limits),
            block_wake: ip_block::BlockWake::default(),
        }
    }

    pub fn runtime(&self) -> Arc<Runtime> {
        self.runtime
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Installs a new configuration: new connections and requests use it.
    pub fn replace_runtime(&self, runtime: Arc<Runtime>) {
        *self.runtime.write().unwrap_or_else(|e| e.into_inner()) = runtime;
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub fn begin_stop(&self) {
        self.stopping.store(true, Ordering::Release);
    }
}

/// A listening socket of this worker.
pub struct WorkerListener {
    pub socket: TcpListener,
    pub addr: SocketAddr,
    pub tls: bool,
    /// The protocols the listener serves (`listen ... proto=`).
    pub protos: Vec<config::Proto>,
}

enum Kind {
    Waker,
    Listener(usize),
    Client(ClientId),
    Upstream(UpstreamId),
    Probe(usize),
    /// A timer of an exchange (slab index).
    Exchange(usize),
    /// The `grace_shutdown_time` deadline of a reload.
    Grace,
}

fn kind(token: Token) -> Kind {
    match token.0 {
        0 => Kind::Waker,
        grace::GRACE_TIMER => Kind::Grace,
        n if n >= EXCHANGE_TIMER_BASE => Kind::Exchange(n - EXCHANGE_TIMER_BASE),
        n if n >= PROBE_BASE => Kind::Probe(n),
        n if n >= UPSTREAM_BASE => Kind::Upstream(UpstreamId::from_index(n - UPSTREAM_BASE)),
        n if n >= CLIENT_BASE => Kind::Client(ClientId::from_index(n - CLIENT_BASE)),
        n => Kind::Listener(n - LISTENER_BASE),
    }
}

pub struct Worker {
    id: usize,
    poll: Poll,
    listeners: Vec<WorkerListener>,
    clients: Clients,
    /// Every request in progress, whatever its stage.
    exchanges: Exchanges,
    upstreams: upstream::Upstreams,
    /// Per server group: pools, health and the wait queue, for this worker.
    groups: Vec<GroupState>,
    timers: Timers,
    bufs: BufPool,
    rt: Arc<Runtime>,
    rt_gen: u64,
    /// frang's block count when this worker last reset blocked addresses (ip_block.rs).
    seen_blocks: u64,
    shared: Arc<Shared>,
    /// Connections to drive again before sleeping (tokens).
    dirty: VecDeque<Token>,
    /// How often each client was driven this turn; the ones deferred to the next.
    fair: fairness::FairTurns,
    /// Since when a graceful stop drains this worker.
    draining: Option<Instant>,
    /// The idle HTTP/1 connections were closed once the drain's last call was over.
    drain_idle_closed: bool,
    date: crate::date::DateCache,
    /// Reused for serialising heads, so forwarding allocates nothing per request.
    scratch: Vec<u8>,
    /// This worker's waker, and the clients other threads woke it for (cache waits).
    waker: Arc<Waker>,
    inbox: caching::Inbox,
    /// Distinguishes a client from a later one that reuses its slab slot.
    next_client_id: u64,
    /// When this turn's events arrived: the clock of the requests and timers it arms (one
    /// clock read per turn, not several per request; a deadline comes a turn early at most).
    now: Instant,
    /// Opens upstream connections (TCP; socketpairs in the worker's tests).
    connector: crate::socket::Connector,
}

/// How long a graceful stop waits for in-flight requests.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A graceful stop's last call: for this long an idle HTTP/1 keep-alive connection stays
/// open, and a request it brings is answered with `Connection: close`. Closing it at once
/// would lose a request the client sent just before the close reached it (it cannot tell
/// that request was never read, and nothing says it may be retried unless idempotent); the
/// clients of a busy connection send their next request well within this.
const DRAIN_LAST_CALL: Duration = Duration::from_millis(500);

/// The longest a draining worker sleeps, so that the last call ends on time.
const DRAIN_POLL: Duration = Duration::from_millis(50);

impl Worker {
    pub fn new(
        id: usize,
        listeners: Vec<WorkerListener>,
        shared: Arc<Shared>,
    ) -> io::Result<(Worker, Arc<Waker>)> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let rt = shared.runtime();
        let rt_gen = shared.generation.load(Ordering::Acquire);
        shared.add_waker(waker.clone());
        let seen_blocks = rt.frang.blocks();
        let mut worker = Worker {
            id,
            poll,
            listeners,
            clients: Clients::default(),
            exchanges: Exchanges::default(),
            upstreams: upstream::Upstreams::default(),
            groups: Vec::new(),
            date: crate::date::DateCache::default(),
            scratch: Vec::with_capacity(4096),
            timers: Timers::default(),
            bufs: BufPool::default(),
            rt,
            rt_gen,
            seen_blocks,
            shared,
            dirty: VecDeque::new(),
            fair: fairness::FairTurns::default(),
            draining: None,
            drain_idle_closed: false,
            waker: waker.clone(),
            inbox: caching::Inbox::default(),
            next_client_id: 0,
            now: Instant::now(),
            connector: crate::socket::Connector::default(),
        };
        worker.groups = upstream::groups::group_states(&worker.rt);
        worker.schedule_health_checks();
        for (i, l) in worker.listeners.iter_mut().enumerate() {
            worker.poll.registry().register(
                &mut l.socket,
                Token(LISTENER_BASE + i),
                Interest::READABLE,
            )?;
        }
        Ok((worker, waker))
    }

    /// Runs until a stop is requested and in-flight work has drained (bounded).
    pub fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        while self.turn(&mut events, None) {}
    }

    /// One round of the loop: waits for events until the next timer is due (1 s when none
    /// is; never longer than `cap` when given), drives what they name, fires due timers.
    /// False once the worker is done (a stop has drained, or polling failed). The worker's
    /// tests step the loop with it, with a short cap.
    fn turn(&mut self, events: &mut Events, cap: Option<Duration>) -> bool {
        let now = Instant::now();
        let cap = match self.draining {
            Some(_) => Some(cap.map_or(DRAIN_POLL, |c| c.min(DRAIN_POLL))),
            None => cap,
        };
        let timeout = self
            .timers
            .next_timeout(now)
            .map(|d| d.max(Duration::from_millis(1)));
        let wait = match cap {
            Some(cap) => timeout.map_or(cap, |t| t.min(cap)),
            None => timeout.unwrap_or(Duration::from_secs(1)),
        };
        // Connections deferred by the last turn are due now: only collect the events.
        let wait = if self.fair.has_deferred() {
            Duration::ZERO
        } else {
            wait
        };
        if let Err(e) = self
            .poll
            .poll(events, ktls::offload::memory::cap_wait(Some(wait), now))
        {
            if e.kind() != io::ErrorKind::Interrupted {
                crate::error!("worker {}: poll failed: {e}", self.id);
                return false;
            }
        }
        self.now = Instant::now();
        // A reload applies to the next request of every connection, not only to new
        // connections.
        self.refresh_runtime();
        self.fair.begin_turn(&mut self.dirty);
        for event in events.iter() {
            match kind(event.token()) {
                Kind::Waker => self.drain_inbox(),
                Kind::Listener(i) => self.accept(i),
                Kind::Client(ci) => {
                    if event.is_readable() || event.is_read_closed() || event.is_error() {
                        self.client_readable(ci, event.is_read_closed() || event.is_error());
                    }
                    self.dirty.push_back(event.token());
                }
                Kind::Upstream(_) => self.dirty.push_back(event.token()),
                Kind::Probe(_) | Kind::Exchange(_) | Kind::Grace => {}
            }
        }
        self.drain_dirty();
        self.fire_timers();
        self.drain_dirty();
        // After the turn's work, which may have imposed a block.
        let (rt, clients) = (&self.rt, &self.clients);
        let blocked = ip_block::newly_blocked(&mut self.seen_blocks, &self.shared, rt, clients);
        for ci in blocked {
            self.reset_client(ci, CloseReason::Frang);
        }
        ktls::offload::memory::run_owed_trim(Instant::now());
        if self.shared.stopping.load(Ordering::Acquire) && self.draining.is_none() {
            self.start_drain();
        }
        if let Some(since) = self.draining {
            if !self.drain_idle_closed && self.last_call_over() {
                self.drain_idle_closed = true;
                self.close_idle_h1();
            }
            if self.clients.is_empty() || since.elapsed() > DRAIN_TIMEOUT {
                return false;
            }
        }
        true
    }

    fn drain_dirty(&mut self) {
        // Each drive makes bounded progress and re-queues a peer only after moving bytes, and
        // a client is driven at most `DRIVES_PER_TURN` times per turn (`fairness`), so this
        // ends even while clients keep sending; the budget is a last guard.
        let mut budget = 100_000usize;
        while let Some(token) = self.dirty.pop_front() {
            budget = budget.saturating_sub(1);
            if budget == 0 {
                self.dirty.push_front(token);
                self.fair.defer_all(&mut self.dirty);
                break;
            }
            match kind(token) {
                // A client past its drives this turn was deferred by `admit`.
                Kind::Client(ci) if self.fair.admit(ci, token) => {
                    self.guarded(ci, |w| w.drive_client(ci))
                }
                Kind::Upstream(ui) => match self.upstream_owner(ui) {
                    Some(ci) => self.guarded(ci, |w| w.drive_upstream(ui)),
                    None => self.drive_upstream(ui),
                },
                _ => {}
            }
        }
    }

    /// The client connection upstream `ui` works for: its exchange's, or its tunnel's.
    fn upstream_owner(&self, ui: UpstreamId) -> Option<ClientId> {
        let u = self.upstreams.get(ui)?;
        match u.phase {
            upstream::UpPhase::Tunnel { client, client_id } => self
                .clients
                .get(client)
                .is_some_and(|c| c.id == client_id)
                .then_some(client),
            _ => u.exchange.and_then(|id| self.client_of(id)),
        }
    }

    /// Runs `f` for exchange `id`, guarded as its client is.
    fn guarded_exchange(&mut self, id: ExchangeId, f: impl FnOnce(&mut Worker)) {
        match self.client_of(id) {
            Some(ci) => self.guarded(ci, f),
            None => self.drop_exchange(id),
        }
    }

    /// Runs `f` for client `ci`; a panic closes that client (and its upstream) only.
    fn guarded(&mut self, ci: ClientId, f: impl FnOnce(&mut Worker)) {
        if catch_unwind(AssertUnwindSafe(|| f(self))).is_err() {
            bump(&self.shared.metrics.panics);
            crate::error!(
                "worker {}: panic while serving a connection; closed it",
                self.id
            );
            self.close_client(ci, CloseReason::Error);
        }
    }

    fn accept(&mut self, li: usize) {
        loop {
            if self.draining.is_some() {
                return;
            }
            let Some(listener) = self.listeners.get(li) else {
                return;
            };
            match listener.socket.accept() {
                Ok((sock, peer)) => {
                    let (tls, protos) = (listener.tls, listener.protos.clone());
                    self.refresh_runtime();
                    self.new_client(crate::socket::Socket::Tcp(sock), peer, tls, &protos);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.timers
                        .schedule(self.now + ACCEPT_RETRY, LISTENER_BASE + li, 0);
                    crate::warn!(
                        "worker {}: accept on {} failed: {e}",
                        self.id,
                        self.listeners[li].addr
                    );
                    return;
                }
            }
        }
    }

    /// Picks up a reloaded configuration for new connections.
    fn refresh_runtime(&mut self) {
        let gen = self.shared.generation.load(Ordering::Acquire);
        if gen != self.rt_gen {
            let old = std::mem::replace(&mut self.rt, self.shared.runtime());
            self.rt_gen = gen;
            self.seen_blocks = self.rt.frang.blocks(); // a new frang counts from 0
            self.retire_removed_servers(&old);
            // Pooled connections belong to the old server list: close them; busy ones close
            // when their exchange ends (their generation no longer matches).
            let idle: Vec<UpstreamId> = self
                .upstreams
                .iter()
                .filter(|(_, u)| {
                    u.exchange.is_none() && !matches!(u.phase, upstream::UpPhase::Tunnel { .. })
                })
                .map(|(i, _)| i)
                .collect();
            for ui in idle {
                self.close_upstream(ui);
            }
            let old_groups =
                std::mem::replace(&mut self.groups, upstream::groups::group_states(&self.rt));
            self.carry_exchanges_over(&old, old_groups);
            self.publish_health();
            self.schedule_health_checks();
            // HTTP/2 clients reconnect to meet the new configuration.
            self.go_away_all();
        }
    }

    fn fire_timers(&mut self) {
        let now = Instant::now();
        self.compact_timers();
        let due = self.timers.take_due(now);
        // Only this worker writes its counters (WorkerMetrics::bump's invariant).
        let fired = &self.worker_metrics().timers_fired;
        fired.store(
            fired.load(Ordering::Relaxed) + due.len() as u64,
            Ordering::Relaxed,
        );
        for &(key, gen) in &due {
            match kind(Token(key)) {
                Kind::Client(ci) => self.guarded(ci, |w| w.client_timer(ci, gen, now)),
                Kind::Upstream(ui) => self.upstream_timer(ui, gen, now),
                Kind::Probe(key) => self.probe(key, gen),
                Kind::Exchange(index) => {
                    if let Some(id) = self.exchanges.id_at(index) {
                        self.guarded_exchange(id, |w| w.exchange_timer(index, gen, now));
                    }
                }
                Kind::Grace => self.retire_due(now),
                Kind::Listener(li) => self.accept(li),
                _ => {}
            }
        }
        self.timers.recycle(due);
    }

    /// Drops the timer entries that re-arming left stale, once they outnumber the live ones
    /// (`timers` module): the heap's size follows the connections, not the request rate.
    fn compact_timers(&mut self) {
        // Below the slack no compaction is due, whatever is live: skip counting.
        if self.timers.queued() > crate::timers::COMPACT_SLACK {
            let live_bound = self.clients.len()
                + self.upstreams.len()
                + self.exchanges.len()
                + self
                    .rt
                    .groups
                    .iter()
                    .map(|g| g.servers.len())
                    .sum::<usize>();
            if self.timers.needs_compaction(live_bound) {
                let Worker {
                    timers,
                    clients,
                    upstreams,
                    exchanges,
                    ..
                } = self;
                timers.compact(|key, gen| match kind(Token(key)) {
                    Kind::Client(ci) => clients.get(ci).is_some_and(|c| c.timer_gen == gen),
                    Kind::Upstream(ui) => upstreams.get(ui).is_some_and(|u| u.timer_gen == gen),
                    Kind::Exchange(index) => exchanges.timer_gen_at(index) == Some(gen),
                    // Health probes keep their own generations; they are few.
                    _ => true,
                });
            }
        }
        let queued = u64::try_from(self.timers.queued()).unwrap_or(u64::MAX);
        self.metrics().workers[self.id]
            .timers_queued
            .store(queued, Ordering::Relaxed);
    }

    fn start_drain(&mut self) {
        self.draining = Some(Instant::now());
        for l in &mut self.listeners {
            let _ = self.poll.registry().deregister(&mut l.socket);
        }
        self.listeners.clear();
        // Every HTTP/1 response from now on says `Connection: close` (`route` does the same
        // for requests that arrive during the last call).
        for ex in self.exchanges.iter_mut() {
            ex.keep_alive = false;
        }
        // A tunnel has no request to finish: it would only hold the stop for its timeout.
        for ci in self.tunnel_clients() {
            self.close_tunnel(ci, crate::metrics_tunnel::TunnelEnd::Shutdown);
        }
        self.go_away_all();
    }

    /// Whether a graceful stop's last call is over: idle HTTP/1 connections close.
    fn last_call_over(&self) -> bool {
        self.draining
            .is_some_and(|since| since.elapsed() >= DRAIN_LAST_CALL)
    }

    fn close_idle_h1(&mut self) {
        let idle: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(_, c)| c.is_idle() && c.codec.h1().is_some())
            .map(|(i, _)| i)
            .collect();
        for ci in idle {
            self.close_client(ci, CloseReason::Shutdown);
        }
    }

    /// Tells every HTTP/2 client that no new stream will be served (GOAWAY with the last
    /// stream accepted); the streams in flight finish, then the connection closes.
    fn go_away_all(&mut self) {
        for (ci, c) in self.clients.iter_mut() {
            // Not `End::close_after_flush`: the streams in flight still read WINDOW_UPDATEs; the
            // codec says when the connection is done.
            if let client::Client {
                codec: client::codec::Codec::H2(h2),
                out,
                ..
            } = c
            {
                h2.conn.go_away();
                h2.flush_into(out);
                self.dirty.push_back(client_token(ci));
            }
        }
    }

    fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// This worker's own counters (only this thread writes them).
    fn worker_metrics(&self) -> &WorkerMetrics {
        &self.shared.metrics.workers[self.id]
    }
}

fn client_token(ci: ClientId) -> Token {
    Token(CLIENT_BASE + ci.index())
}

fn upstream_token(ui: UpstreamId) -> Token {
    Token(UPSTREAM_BASE + ui.index())
}
