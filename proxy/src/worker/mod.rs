//! One worker thread: its own mio loop, its own SO_REUSEPORT listening sockets, its client
//! and upstream connections. Nothing here is shared with other workers except through
//! [`Shared`] (the config snapshot, counters, the cache).

mod background;
mod caching;
mod chain;
mod client;
mod drain;
mod drive;
mod drive_h3;
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
mod h2_origin;
mod h2_serve;
mod head_chunks;
mod health;
mod ip_block;
mod quic;
pub use quic::{bind as bind_quic, Bound as QuicBound};
pub mod lifecycle;
mod limits;
mod listener;
mod parts;
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
mod tier_hop;
mod token;
mod tunnel;
mod upstream;
pub use upstream::reuse; // public for the `response_framing` fuzz target
mod websocket;

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token, Waker};

use crate::buf::BufPool;
use crate::close_reason::CloseReason;
use crate::metrics::WorkerMetrics;
use crate::runtime::Runtime;
use crate::timers::{Timers, ACCEPT_RETRY};

use client::Clients;
use exchange::{Exchanges, TimerDue};
use upstream::groups::GroupState;
use upstream::UpstreamId;

use token::client_token;
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
    /// When this turn's events arrived: the clock of the requests and timers it arms (one
    /// clock read per turn, not several per request; a deadline comes a turn early at most).
    now: Instant,
    /// Opens upstream connections (TCP; socketpairs in the worker's tests).
    connector: crate::socket::Connector,
    /// The QUIC sockets and endpoints of the `h3` listeners (HTTP/3 connections are clients).
    quic: quic::Quic,
}

impl Worker {
    pub fn new(
        id: usize,
        (listeners, quic): (Vec<WorkerListener>, Vec<quic::Bound>),
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
            now: Instant::now(),
            connector: crate::socket::Connector::default(),
            quic: quic::Quic::default(),
        };
        let (registry, shared) = (worker.poll.registry(), (id, &*worker.shared, waker.clone()));
        worker.quic = quic::Quic::new(quic, registry, worker.rt.quic.clone(), shared)?;
        worker.groups = upstream::groups::group_states(&worker.rt);
        worker.parts().checks().health().schedule_checks();
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
        // A reload applies to the next request of every connection, not only to new ones.
        self.refresh_runtime();
        self.fair.begin_turn(&mut self.dirty);
        for event in events.iter() {
            match kind(event.token()) {
                Kind::Waker => {
                    self.drain_inbox();
                    let (mut d, fair) = self.drive_and_fair();
                    drive_h3::quic_readable(&mut d, fair, None);
                }
                Kind::Listener(i) => self.accept(i),
                Kind::Client(_) | Kind::Upstream(_) => {
                    token::note_readiness(event, &mut self.clients, &mut self.upstreams);
                    self.dirty.push_back(event.token());
                }
                Kind::Quic(i) => {
                    let (mut d, fair) = self.drive_and_fair();
                    drive_h3::quic_readable(&mut d, fair, Some(i));
                }
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
            drive::reset_client(&mut self.drive(), ci, CloseReason::Frang);
        }
        ktls::offload::memory::run_owed_trim(Instant::now());
        if self.shared.stopping.load(Ordering::Acquire) && self.draining.is_none() {
            self.start_drain();
        }
        if let Some(since) = self.draining {
            if !self.drain_idle_closed && drain::last_call_over(self.draining) {
                self.drain_idle_closed = true;
                for ci in drain::idle_to_close(&mut self.clients, &mut self.bufs, &mut self.dirty) {
                    drive::close_client(&mut self.drive(), ci, CloseReason::Shutdown);
                }
                self.drain_dirty();
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
        // ends even while clients keep sending; the budget is a last guard. The drives' parts
        // are lent once for the whole drain.
        let (mut d, fair) = self.drive_and_fair();
        let mut budget = 100_000usize;
        while let Some(token) = d.p.dirty.pop_front() {
            budget = budget.saturating_sub(1);
            if budget == 0 {
                d.p.dirty.push_front(token);
                fair.defer_all(d.p.dirty);
                break;
            }
            match kind(token) {
                // A client past its drives this turn was deferred by `admit`.
                Kind::Client(ci) if fair.admit(ci, token) => {
                    drive::guarded(&mut d, ci, |d| drive::drive_client(d, ci))
                }
                Kind::Quic(i) => drive_h3::quic_readable(&mut d, fair, Some(i)),
                Kind::Upstream(ui) => {
                    let owner = (d.p.conns.upstreams.get(ui))
                        .and_then(|u| d.p.exchanges.client_of_upstream(u, d.p.clients));
                    match owner {
                        Some(ci) => drive::guarded(&mut d, ci, |d| drive::drive_upstream(d, ui)),
                        None => drive::drive_upstream(&mut d, ui),
                    }
                }
                _ => {}
            }
        }
    }

    fn accept(&mut self, li: usize) {
        while self.draining.is_none() {
            match listener::accept(&self.listeners, li) {
                listener::Accepted::Conn(sock, peer, tls, protos) => {
                    self.refresh_runtime();
                    self.new_client(client::Accepted {
                        sock,
                        peer,
                        tls,
                        protos: &protos,
                    });
                }
                listener::Accepted::Empty => return,
                listener::Accepted::Failed(e) => {
                    let (at, key) = (self.now + ACCEPT_RETRY, LISTENER_BASE + li);
                    self.timers.schedule_retry(at, key);
                    let addr = self.listeners[li].addr;
                    crate::warn!("worker {}: accept on {addr} failed: {e}", self.id);
                    return;
                }
            }
        }
    }

    /// Takes a new client connection in (client/conn.rs `open`).
    fn new_client(&mut self, new: client::Accepted) {
        // h2c by prior knowledge: the first bytes must be the HTTP/2 preface.
        let h2c = !new.tls && new.protos.contains(&config::Proto::H2c);
        let (mut conns, registry) = self.client_conns();
        let Some(ci) = client::open(&mut conns, registry, new) else {
            return;
        };
        if h2c {
            h2_serve::start(&mut self.parts().h2(), ci, request::Scheme::Http);
        }
        self.dirty.push_back(client_token(ci));
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
                forward::close_upstream(&mut self.parts(), ui);
            }
            let old_groups =
                std::mem::replace(&mut self.groups, upstream::groups::group_states(&self.rt));
            self.carry_exchanges_over(&old, old_groups);
            self.parts().checks().health().publish();
            self.parts().checks().health().schedule_checks();
            // HTTP/2 clients reconnect to meet the new configuration.
            self.clients.go_away_all(&mut self.dirty);
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
                Kind::Client(ci) => drive::guarded(&mut self.drive(), ci, |d| {
                    drive::client_timer(d, ci, gen, now)
                }),
                Kind::Upstream(ui) => forward::upstream_timer(&mut self.parts(), ui, gen, now),
                Kind::Probe(key) => {
                    let draining = self.draining.is_some();
                    self.parts().checks().probe(key, gen, draining);
                }
                Kind::Exchange(index) => {
                    if let Some((id, due)) = self.exchanges.timer_due(index, gen) {
                        drive::guarded_exchange(&mut self.drive(), id, |d| match due {
                            TimerDue::CacheWait => route::resume_after_wait(&mut d.p, id),
                            TimerDue::Queue => forward::queue_expired(&mut d.p, id),
                            TimerDue::Body => drive::body_deadline(d, id, now),
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
        let queued = drain::close_listeners(&mut self.listeners, self.poll.registry());
        drain::each_accepted(queued, |new| self.new_client(new));
        drain::answer_with_close(&mut self.exchanges);
        // A tunnel has no request to finish: it would only hold the stop for its timeout.
        for ci in tunnel::clients(&self.clients) {
            drive::close_tunnel(
                &mut self.drive(),
                ci,
                crate::metrics_tunnel::TunnelEnd::Shutdown,
            );
        }
        self.clients.go_away_all(&mut self.dirty);
    }

    /// The parts a client connection's life touches (client/conn.rs), and the poll registry.
    fn client_conns(&mut self) -> (client::Conns<'_>, &mio::Registry) {
        let metrics = &self.shared.metrics;
        let conns = client::Conns {
            clients: &mut self.clients,
            timers: &mut self.timers,
            bufs: &mut self.bufs,
            rt: &self.rt,
            metrics,
            worker: (&metrics.workers[self.id], self.id),
            now: self.now,
        };
        (conns, self.poll.registry())
    }

    /// What a drive touches (drive.rs), lent for one call.
    #[inline]
    fn drive(&mut self) -> drive::Drive<'_> {
        self.drive_and_fair().0
    }

    /// [`Worker::drive`], and the fairness of turns beside it (`drain_dirty`).
    #[inline]
    fn drive_and_fair(&mut self) -> (drive::Drive<'_>, &mut fairness::FairTurns) {
        let conns = upstream::Conns {
            upstreams: &mut self.upstreams,
            groups: &mut self.groups,
            timers: &mut self.timers,
            bufs: &mut self.bufs,
            rt_gen: self.rt_gen,
            metrics: &self.shared.metrics,
        };
        let open = upstream::Opener {
            rt: &self.rt,
            registry: self.poll.registry(),
            connector: &self.connector,
        };
        let p = parts::Parts {
            clients: &mut self.clients,
            exchanges: &mut self.exchanges,
            conns,
            open,
            dirty: &mut self.dirty,
            rt: &self.rt,
            metrics: &self.shared.metrics,
            cache: &self.shared.cache,
            cache_waits: (&self.inbox, &self.waker),
            date: &mut self.date,
            scratch: &mut self.scratch,
            now: self.now,
            worker: self.id,
        };
        let d = drive::Drive {
            p,
            quic: &mut self.quic,
            draining: self.draining,
        };
        (d, &mut self.fair)
    }

    /// The parts the exchange pipeline touches (parts.rs), lent for one call.
    #[inline]
    fn parts(&mut self) -> parts::Parts<'_> {
        self.drive().p
    }

    /// Closes retiring upstream connections `due` and ends what they carried (grace.rs).
    fn retire(&mut self, due: Vec<UpstreamId>) {
        for ui in due {
            match grace::carried(&self.upstreams, &self.clients, ui) {
                Some(grace::Carried::Tunnel(ci)) => {
                    let end = crate::metrics_tunnel::TunnelEnd::ServerRemoved;
                    drive::guarded(&mut self.drive(), ci, |d| drive::close_tunnel(d, ci, end))
                }
                Some(grace::Carried::Exchange(id)) => {
                    forward::close_upstream(&mut self.parts(), ui);
                    let failure = response::Failure::ServerRemoved;
                    drive::guarded_exchange(&mut self.drive(), id, |d| {
                        response::exchange_failed(&mut d.p, id, failure)
                    });
                }
                Some(grace::Carried::Nothing) => forward::close_upstream(&mut self.parts(), ui),
                None => {}
            }
        }
    }

    /// A reload replaced `old`: its exchanges and queues carried over (reload.rs); those of a
    /// group that is gone answered 502, then every queue served once through.
    fn carry_exchanges_over(
        &mut self,
        old: &crate::runtime::Runtime,
        old_groups: Vec<upstream::groups::GroupState>,
    ) {
        let both = (old, &*self.rt);
        let (exchanges, groups) = (&mut self.exchanges, &mut self.groups);
        for id in reload::carry_exchanges_over(exchanges, groups, both, old_groups) {
            if !reload::queued(&self.exchanges, id) {
                continue;
            }
            drive::guarded_exchange(&mut self.drive(), id, |d| {
                if let Some(forward) = reload::take_queued(d.p.exchanges, id) {
                    forward::fail_exchange(&mut d.p, id, forward, 502);
                }
            });
        }
        for group in 0..self.groups.len() {
            let waiting = self.groups.get(group).map_or(0, |g| g.queue.len());
            for _ in 0..waiting {
                forward::serve_queue(&mut self.parts(), group);
            }
        }
    }

    /// Parked exchanges whose fetch finished (caching.rs): served again.
    fn drain_inbox(&mut self) {
        for id in caching::take_inbox(&self.inbox) {
            if caching::waiting(&self.exchanges, id) {
                let resume = |d: &mut drive::Drive<'_>| route::resume_after_wait(&mut d.p, id);
                drive::guarded_exchange(&mut self.drive(), id, resume);
            }
        }
    }

    /// This worker's own counters (only this thread writes them).
    fn worker_metrics(&self) -> &WorkerMetrics {
        &self.shared.metrics.workers[self.id]
    }
}
