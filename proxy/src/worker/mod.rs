//! One worker thread: its own mio loop, its own SO_REUSEPORT listening sockets, its client
//! and upstream connections. Nothing here is shared with other workers except through
//! [`Shared`] (the config snapshot, counters, the cache).

mod background;
mod caching;
mod client;
mod drain;
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
mod listener;
pub use listener::WorkerListener;
mod reload;
mod request;
mod request_body;
mod response;
mod route;
mod shared;
pub use shared::Shared;
mod sticky_hook;
mod stored_reply;
#[cfg(test)]
mod tests;
mod token;
mod tunnel;
mod upstream;
pub use upstream::reuse; // public for the `response_framing` fuzz target
mod websocket;

use std::collections::VecDeque;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token, Waker};

use crate::buf::BufPool;
use crate::close_reason::CloseReason;
use crate::metrics::{bump, Metrics, WorkerMetrics};
use crate::runtime::Runtime;
use crate::timers::{Timers, ACCEPT_RETRY};

use client::{ClientId, Clients};
use exchange::{ExchangeId, Exchanges, TimerDue};
use upstream::groups::GroupState;
use upstream::UpstreamId;

use token::{client_token, upstream_token};
use token::{kind, Kind, LISTENER_BASE, WAKER};

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
        worker.health().schedule_checks();
        listener::register_all(worker.poll.registry(), &mut worker.listeners)?;
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
            Some(_) => Some(cap.map_or(drain::DRAIN_POLL, |c| c.min(drain::DRAIN_POLL))),
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
            if !self.drain_idle_closed && drain::last_call_over(self.draining) {
                self.drain_idle_closed = true;
                for ci in self.clients.idle_h1() {
                    self.close_client(ci, CloseReason::Shutdown);
                }
            }
            if self.clients.is_empty() || since.elapsed() > drain::DRAIN_TIMEOUT {
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
                Kind::Upstream(ui) => {
                    match upstream::owner((&self.upstreams, &self.clients, &self.exchanges), ui) {
                        Some(ci) => self.guarded(ci, |w| w.drive_upstream(ui)),
                        None => self.drive_upstream(ui),
                    }
                }
                _ => {}
            }
        }
    }

    /// Runs `f` for exchange `id`, guarded as its client is.
    fn guarded_exchange(&mut self, id: ExchangeId, f: impl FnOnce(&mut Worker)) {
        match self.exchanges.client_of(id, &self.clients) {
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
                        .schedule_retry(self.now + ACCEPT_RETRY, LISTENER_BASE + li);
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
            let (upstreams, timers) = (&mut self.upstreams, &mut self.timers);
            let now_due = grace::retire_removed_servers(upstreams, (&old, &self.rt), timers);
            self.retire(now_due);
            // Pooled connections belong to the old server list: close them; busy ones close
            // when their exchange ends (their generation no longer matches).
            for ui in upstream::unclaimed(&self.upstreams) {
                self.close_upstream(ui);
            }
            let old_groups =
                std::mem::replace(&mut self.groups, upstream::groups::group_states(&self.rt));
            self.carry_exchanges_over(&old, old_groups);
            self.health().publish();
            self.health().schedule_checks();
            // HTTP/2 clients reconnect to meet the new configuration.
            self.clients.go_away_all(&mut self.dirty);
        }
    }

    /// Closes retiring upstream connections `due` and ends what they carried (grace.rs).
    fn retire(&mut self, due: Vec<UpstreamId>) {
        for ui in due {
            match grace::carried(&self.upstreams, &self.clients, ui) {
                Some(grace::Carried::Tunnel(ci)) => self.guarded(ci, |w| {
                    w.close_tunnel(ci, crate::metrics_tunnel::TunnelEnd::ServerRemoved)
                }),
                Some(grace::Carried::Exchange(id)) => {
                    self.close_upstream(ui);
                    let failure = response::Failure::ServerRemoved;
                    self.guarded_exchange(id, |w| w.exchange_failed(id, failure));
                }
                Some(grace::Carried::Nothing) => self.close_upstream(ui),
                None => {}
            }
        }
    }

    /// A reload replaced `old`: its exchanges and queues carried over (reload.rs); those of a
    /// group that is gone answered 502, then every queue served once through.
    fn carry_exchanges_over(&mut self, old: &Runtime, old_groups: Vec<GroupState>) {
        let both = (old, &*self.rt);
        let (exchanges, groups) = (&mut self.exchanges, &mut self.groups);
        for id in reload::carry_exchanges_over(exchanges, groups, both, old_groups) {
            if !reload::queued(&self.exchanges, id) {
                continue;
            }
            self.guarded_exchange(id, |w| {
                if let Some(forward) = reload::take_queued(&mut w.exchanges, id) {
                    w.fail_exchange(id, forward, 502);
                }
            });
        }
        for group in 0..self.groups.len() {
            let waiting = self.groups.get(group).map_or(0, |g| g.queue.len());
            for _ in 0..waiting {
                self.serve_queue(group);
            }
        }
    }

    fn fire_timers(&mut self) {
        let now = Instant::now();
        let live = (&self.clients, &self.upstreams, &self.exchanges);
        let wm = &self.shared.metrics.workers[self.id];
        token::compact_timers(&mut self.timers, live, &self.rt, wm);
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
                    if let Some((id, due)) = self.exchanges.timer_due(index, gen) {
                        self.guarded_exchange(id, |w| match due {
                            TimerDue::CacheWait => w.resume_after_wait(id),
                            TimerDue::Queue => w.queue_expired(id),
                            TimerDue::Body => w.body_deadline(id, now),
                        });
                    }
                }
                Kind::Grace => self.retire(grace::due(&self.upstreams, now)),
                Kind::Listener(li) => self.accept(li),
                _ => {}
            }
        }
        self.timers.recycle(due);
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
        for ci in tunnel::clients(&self.clients) {
            self.close_tunnel(ci, crate::metrics_tunnel::TunnelEnd::Shutdown);
        }
        self.clients.go_away_all(&mut self.dirty);
    }

    /// The origin accepted exchange `id`'s WebSocket handshake on upstream `ui` (its `101` is
    /// queued): the exchange ends, its two connections become a tunnel (tunnel.rs).
    fn start_tunnel(&mut self, id: ExchangeId, ui: UpstreamId) {
        let ups = (&mut self.upstreams, &mut self.groups[..], self.rt_gen);
        let start = match tunnel::detach(&mut self.exchanges, &self.clients, ups, (id, ui)) {
            Ok(start) => start,
            Err(client_gone) => {
                self.close_upstream(ui);
                if client_gone {
                    self.drop_exchange(id);
                }
                return;
            }
        };
        if let Some(group) = start.queue {
            self.serve_queue(group);
        }
        self.finish(id, start.outcome);
        let parts = (&mut self.clients, &mut self.timers, &mut self.dirty);
        let ws = (self.rt.config.client_ws_timeout, self.now);
        if !tunnel::open(parts, &self.shared.metrics.tunnels, (start.client, ui), ws) {
            self.close_upstream(ui);
        }
    }

    /// Ends client `ci`'s tunnel for `end`: both connections close (tunnel.rs).
    fn close_tunnel(&mut self, ci: ClientId, end: crate::metrics_tunnel::TunnelEnd) {
        if let Some(why) = tunnel::end(&mut self.clients, ci, end) {
            self.close_client(ci, why);
        }
    }

    /// The parts health monitoring touches (health.rs).
    fn health(&mut self) -> health::Health<'_> {
        health::Health {
            groups: &mut self.groups,
            rt: &self.rt,
            rt_gen: self.rt_gen,
            timers: &mut self.timers,
            metrics: &self.shared.metrics.upstream,
            worker: self.id,
        }
    }

    /// A probe timer fired: connect to its server if a probe is due.
    fn probe(&mut self, key: usize, gen: u64) {
        let draining = self.draining.is_some();
        if let Some((group, server)) = self.health().probe_due(key, gen, draining) {
            let connected = self
                .connect(group, server, upstream::UpPhase::Probe)
                .is_ok();
            self.health().probe_started(group, server, connected);
        }
    }

    /// A probe's connection is up: send the monitor's request.
    fn send_health_request(&mut self, ui: UpstreamId) {
        if let Some(timeout) = health::send_request(&mut self.upstreams, &self.rt, ui) {
            self.arm_upstream_timer(ui, timeout);
            self.dirty.push_back(upstream_token(ui));
        }
    }

    /// Moves a health check along: write the request, read the answer, judge it. A body
    /// larger than the read buffer is taken a bufferful at a time; with edge-triggered
    /// readiness no new event comes for bytes already waiting.
    fn drive_health(&mut self, ui: UpstreamId) {
        self.flush_upstream(ui);
        for _ in 0..64 {
            self.read_upstream(ui);
            match health::reading(&mut self.upstreams, &self.rt, ui) {
                health::Reading::Verdict(ok) => return self.health_verdict(ui, ok),
                health::Reading::Wait => return,
                health::Reading::Progress => {}
            }
        }
        self.dirty.push_back(upstream_token(ui));
    }

    /// Ends a health check: its connection closes, the server is judged.
    fn health_verdict(&mut self, ui: UpstreamId, ok: bool) {
        if let Some((group, server)) = self.end_probe(ui) {
            self.health().verdict(group, server, ok);
        }
    }

    /// Checks routed exchange `id`'s sticky cookie (sticky_hook.rs): true to serve it, false
    /// when it was answered here (302, the challenge, a block).
    fn sticky_gate(&mut self, id: ExchangeId) -> bool {
        let parts = (&*self.rt, &self.shared.metrics.sticky);
        match sticky_hook::gate(&mut self.exchanges, &mut self.clients, parts, id) {
            sticky_hook::Gate::Serve => return true,
            sticky_hook::Gate::Gone => {}
            sticky_hook::Gate::Status(status, close) => {
                self.answer(id, h1::Reply::Status(status), close)
            }
            sticky_hook::Gate::Page(page) => {
                page.send(|reply, close| self.answer(id, reply, close))
            }
            sticky_hook::Gate::Block(v) => match self.exchanges.client_of(id, &self.clients) {
                Some(ci) => self.frang_violation(ci, finish::RefuseAt::Exchange(id), &v),
                None => self.drop_exchange(id),
            },
        }
        false
    }

    /// The parts choosing a sticky exchange's connection touches (sticky_hook.rs).
    fn scheduling(&mut self) -> sticky_hook::Scheduling<'_> {
        sticky_hook::Scheduling {
            rt: &self.rt,
            groups: &mut self.groups,
            upstreams: &self.upstreams,
            exchanges: &mut self.exchanges,
            metrics: &self.shared.metrics.sticky,
        }
    }

    /// What the cache does for exchange `id` (caching.rs): hits, PURGE and only-if-cached
    /// misses are answered here.
    #[inline]
    fn cache_step(
        &mut self,
        id: ExchangeId,
        rt_cache: &Arc<crate::runtime::CacheRt>,
        vhost: &str,
        overrides: crate::router::CacheOverride,
    ) -> caching::CacheStep {
        let parts = (&*self.rt, &self.shared.cache, (&self.inbox, &self.waker));
        let request = (id, rt_cache, vhost, overrides);
        let (step, answer) = caching::step(&mut self.exchanges, &self.clients, parts, request);
        if let Some(answer) = answer {
            answer.send(|reply, close| self.answer(id, reply, close));
        }
        step
    }

    /// Parked exchanges whose fetch finished (caching.rs): served again.
    fn drain_inbox(&mut self) {
        for id in caching::take_inbox(&self.inbox) {
            if caching::waiting(&self.exchanges, id) {
                self.guarded_exchange(id, |w| w.resume_after_wait(id));
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
