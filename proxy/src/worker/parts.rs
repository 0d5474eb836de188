//! What the exchange pipeline may touch: the client and upstream connections, the exchanges,
//! the groups' pools and queues, the timers, the cache, the configuration, the loop's queue
//! of connections to drive again, the scratch buffers, and the inbox and waker through
//! which another worker's finished fetch resumes a cache wait. The loop's own state (the
//! poll and its listeners, the fairness of turns, a graceful stop, the QUIC endpoints) is
//! not here: a pipeline step cannot reach it. The worker lends these parts for one call
//! (`Worker::parts`, or inside a drive's `Drive`, drive.rs); a step lends narrower views of
//! them to the functions it calls (the client side's `Conns`, health checks, the sticky
//! scheduler, HTTP/2's parts, refusals, a client's flush).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use mio::{Token, Waker};

use super::caching;
use super::client::refuse::Answering;
use super::client::{self, Clients};
use super::exchange::Exchanges;
use super::sticky_hook::Scheduling;
use super::upstream;
use super::{h2_serve, health};
use crate::date::DateCache;
use crate::metrics::Metrics;
use crate::runtime::Runtime;

pub(super) struct Parts<'a> {
    pub clients: &'a mut Clients,
    pub exchanges: &'a mut Exchanges,
    /// The upstream connections, the groups' pools, queues and health, the timers, the
    /// buffer pool, the configuration generation, the counters.
    pub conns: upstream::Conns<'a>,
    /// What opening an upstream connection needs: the runtime, the poll registry, the
    /// connector.
    pub open: upstream::Opener<'a>,
    pub dirty: &'a mut VecDeque<Token>,
    pub rt: &'a Runtime,
    /// The process's counters (the same as `conns.metrics`; an HTTP/2 codec keeps a handle).
    pub metrics: &'a Arc<Metrics>,
    pub cache: &'a cache::Cache,
    /// Where another worker's fetch, finished, leaves a parked exchange and wakes this
    /// worker (a cache wait, caching.rs).
    pub cache_waits: (&'a caching::Inbox, &'a Arc<Waker>),
    pub date: &'a mut DateCache,
    /// Reused for an upstream request head, so forwarding allocates nothing per request.
    pub scratch: &'a mut Vec<u8>,
    /// The turn's clock (`Worker::now`).
    pub now: Instant,
    /// This worker's index.
    pub worker: usize,
}

impl Parts<'_> {
    /// The client table with the loop's queue, and what answering a refusal needs.
    pub fn refusing(&mut self) -> ((&mut Clients, &mut VecDeque<Token>), Answering<'_>) {
        let answering = Answering {
            rt: self.rt,
            date: self.date,
            counts: &self.conns.metrics.workers[self.worker],
        };
        ((self.clients, self.dirty), answering)
    }

    /// The parts a client connection's life touches (client/conn.rs).
    pub fn client_conns(&mut self) -> client::Conns<'_> {
        let metrics = self.conns.metrics;
        client::Conns {
            clients: self.clients,
            timers: self.conns.timers,
            bufs: self.conns.bufs,
            rt: self.rt,
            metrics,
            worker: (&metrics.workers[self.worker], self.worker),
            now: self.now,
        }
    }

    /// The upstream side's parts, lent again (upstream/conn.rs).
    #[inline]
    pub fn conns(&mut self) -> upstream::Conns<'_> {
        upstream::Conns {
            upstreams: self.conns.upstreams,
            groups: self.conns.groups,
            timers: self.conns.timers,
            bufs: self.conns.bufs,
            rt_gen: self.conns.rt_gen,
            metrics: self.conns.metrics,
        }
    }

    /// Health checks' parts (health.rs): marking servers up and down.
    pub fn checks(&mut self) -> health::Checks<'_> {
        let (open, worker) = (self.open, self.worker);
        health::Checks {
            conns: self.conns(),
            open,
            worker,
        }
    }

    /// The parts serving an HTTP/2 connection touches (h2_serve.rs).
    pub fn h2(&mut self) -> h2_serve::Parts<'_> {
        h2_serve::Parts {
            clients: self.clients,
            exchanges: self.exchanges,
            upstreams: self.conns.upstreams,
            timers: self.conns.timers,
            dirty: self.dirty,
            rt: self.rt,
            metrics: self.metrics,
            worker: self.worker,
            date: self.date,
            now: self.now,
        }
    }

    /// What a client's flush touches (response/mod.rs `flush_client`).
    #[inline]
    pub fn client_side(&mut self) -> super::response::ClientSide<'_> {
        (
            self.clients,
            self.exchanges,
            self.conns.upstreams,
            self.dirty,
        )
    }

    /// The parts choosing a sticky exchange's connection touches (sticky_hook.rs).
    pub fn scheduling(&mut self) -> Scheduling<'_> {
        Scheduling {
            rt: self.rt,
            groups: self.conns.groups,
            upstreams: self.conns.upstreams,
            exchanges: self.exchanges,
            metrics: &self.conns.metrics.sticky,
        }
    }
}
