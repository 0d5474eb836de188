//! One worker thread: a mio event loop driving `-l` peers.
//!
//! Peers start slowly, as upstream does: 10 at first, then one more each time an attempt ends
//! (a handshake completes or fails), so the server's caches warm up and the client does not
//! flood the listen queue. When every thread runs all its peers, measuring begins.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::{Events, Poll, Token};
use openssl::ssl::SslContext;

use crate::peer::{Outcome, Peer, PeerEnv, StageKind, TicketWait};
use crate::stats::{Shared, ThreadCounters};

/// Peers started at once when a thread begins.
const SLOW_START_PEERS: u32 = 10;
/// Upper bound of one poll, and the period of the timer sweep over all peers.
const TICK: Duration = Duration::from_millis(10);
/// After this many ticket waits in a row time out without any ticket ever having arrived,
/// the server evidently sends no TLS 1.3 tickets: stop waiting for them.
const TICKETLESS_GIVE_UP: u32 = 8;

pub struct WorkerConfig {
    pub index: usize,
    pub peers: u32,
    pub target: SocketAddr,
    pub sni: Option<String>,
    pub resume: bool,
    pub debug: bool,
}

/// Handshake latencies in microseconds.
pub type Latencies = Histogram<u64>;

pub fn new_latencies() -> Latencies {
    // 1 µs to 10 minutes at 3 significant digits; larger values saturate.
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("constant histogram bounds are valid")
}

pub struct WorkerResult {
    /// Latencies of handshakes completed while measuring.
    pub measured: Latencies,
    /// Latencies during the ramp-up, used only when measuring never began.
    pub ramp_up: Latencies,
}

struct Ramp {
    /// `-l`: peers this thread runs once ramped up.
    target: u32,
    started: u32,
    /// Peers allowed to start but not started yet.
    allowance: u32,
    reported: bool,
}

struct TicketWatch {
    ever_received: bool,
    missed_in_a_row: u32,
}

impl TicketWatch {
    /// No ticket ever arrived and the last TICKETLESS_GIVE_UP waits timed out.
    fn server_sends_none(&self) -> bool {
        !self.ever_received && self.missed_in_a_row >= TICKETLESS_GIVE_UP
    }
}

pub fn run(config: WorkerConfig, ctx: SslContext, shared: Arc<Shared>) -> io::Result<WorkerResult> {
    let counters = &shared.threads[config.index];
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(1024);
    let mut peers: Vec<Peer> = Vec::with_capacity(config.peers as usize);
    let mut result = WorkerResult {
        measured: new_latencies(),
        ramp_up: new_latencies(),
    };
    let mut ramp = Ramp {
        target: config.peers,
        started: 0,
        allowance: SLOW_START_PEERS.min(config.peers),
        reported: false,
    };
    let mut tickets = TicketWatch {
        ever_received: false,
        missed_in_a_row: 0,
    };
    // Peers ready to connect again, served after each batch of events like upstream's
    // reconnect queue, so one busy peer cannot starve the others.
    let mut reconnect: Vec<usize> = Vec::with_capacity(config.peers as usize);
    let mut next_sweep = Instant::now() + TICK;
    let mut wait_for_ticket = config.resume;

    while !shared.stopping() {
        match poll.poll(&mut events, Some(TICK)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        let env = PeerEnv {
            ctx: &ctx,
            registry: poll.registry(),
            target: config.target,
            sni: config.sni.as_deref(),
            resume: config.resume,
            wait_for_ticket,
            tickets_seen: tickets.ever_received,
            debug: config.debug,
        };
        let mut ctl = Control {
            shared: &shared,
            counters,
            result: &mut result,
            ramp: &mut ramp,
            tickets: &mut tickets,
            reconnect: &mut reconnect,
        };
        for event in events.iter() {
            let index = event.token().0;
            if let Some(peer) = peers.get_mut(index) {
                let outcome = peer.on_ready(&env);
                ctl.handle(index, outcome);
            }
        }
        let now = Instant::now();
        if now >= next_sweep {
            next_sweep = now + TICK;
            sweep(&mut peers, &env, &mut ctl, now);
        }
        connect_peers(&mut peers, &env, &mut ctl);
        if wait_for_ticket && ctl.tickets.server_sends_none() {
            wait_for_ticket = false;
            eprintln!(
                "WARNING: thread {}: the server sent no TLS 1.3 session ticket in {} \
                 handshakes; no longer waiting for tickets",
                config.index, TICKETLESS_GIVE_UP
            );
        }
    }
    for peer in &mut peers {
        peer.abandon();
    }
    Ok(result)
}

/// The timer sweep: every peer's timers, then the thread's gauges of connecting,
/// handshaking and open peers.
fn sweep(peers: &mut [Peer], env: &PeerEnv<'_>, ctl: &mut Control<'_>, now: Instant) {
    let mut gauges = [0u64; 3];
    for (index, peer) in peers.iter_mut().enumerate() {
        let outcome = peer.on_tick(env, now);
        ctl.handle(index, outcome);
        match peer.stage_kind() {
            StageKind::Connecting => gauges[0] += 1,
            StageKind::Handshaking => gauges[1] += 1,
            StageKind::AwaitingTicket => gauges[2] += 1,
            StageKind::Idle => {}
        }
    }
    let counters = ctl.counters;
    counters.connecting.store(gauges[0], Relaxed);
    counters.handshaking.store(gauges[0] + gauges[1], Relaxed);
    counters
        .open
        .store(gauges[0] + gauges[1] + gauges[2], Relaxed);
}

/// New peers (slow start) and reconnecting ones, then tells the monitor once this thread
/// has started all its peers. A connect never completes a handshake by itself, so this
/// ends; failures wait for the retry timer instead.
fn connect_peers(peers: &mut Vec<Peer>, env: &PeerEnv<'_>, ctl: &mut Control<'_>) {
    while ctl.ramp.allowance > 0 && ctl.ramp.started < ctl.ramp.target {
        ctl.ramp.allowance -= 1;
        ctl.ramp.started += 1;
        let index = peers.len();
        peers.push(Peer::new(Token(index)));
        let outcome = peers[index].connect(env, Instant::now());
        ctl.handle(index, outcome);
    }
    while let Some(index) = ctl.reconnect.pop() {
        if ctl.shared.stopping() {
            break;
        }
        let outcome = peers[index].connect(env, Instant::now());
        ctl.handle(index, outcome);
    }
    if ctl.ramp.started == ctl.ramp.target && !ctl.ramp.reported {
        ctl.ramp.reported = true;
        ctl.shared.thread_ramped();
    }
}

/// Accounting of peer outcomes for one loop iteration.
struct Control<'a> {
    shared: &'a Shared,
    counters: &'a ThreadCounters,
    result: &'a mut WorkerResult,
    ramp: &'a mut Ramp,
    tickets: &'a mut TicketWatch,
    reconnect: &'a mut Vec<usize>,
}

impl Control<'_> {
    fn handle(&mut self, index: usize, outcome: Outcome) {
        match outcome {
            Outcome::Pending => {}
            Outcome::Completed { handshake, ticket } => {
                self.attempt_ended();
                if self.shared.claim_handshake() {
                    self.counters.handshakes.fetch_add(1, Relaxed);
                    if handshake.resumed {
                        self.counters.resumed.fetch_add(1, Relaxed);
                    }
                    let micros = u64::try_from(handshake.latency.as_micros()).unwrap_or(u64::MAX);
                    let histogram = if self.shared.measuring.load(Relaxed) {
                        &mut self.result.measured
                    } else {
                        &mut self.result.ramp_up
                    };
                    histogram.saturating_record(micros.max(1));
                }
                match ticket {
                    TicketWait::Pending => {}
                    TicketWait::None => self.reconnect.push(index),
                    TicketWait::Settled { received } => self.ticket_settled(index, received),
                }
            }
            Outcome::TicketSettled { received } => self.ticket_settled(index, received),
            Outcome::Failed(failure) => {
                self.attempt_ended();
                self.counters.count_failure(failure);
            }
        }
    }

    fn ticket_settled(&mut self, index: usize, received: bool) {
        if received {
            self.tickets.ever_received = true;
            self.tickets.missed_in_a_row = 0;
        } else {
            self.tickets.missed_in_a_row += 1;
            self.counters.tickets_missed.fetch_add(1, Relaxed);
        }
        self.reconnect.push(index);
    }

    /// Slow start: every finished attempt lets one more peer start.
    fn attempt_ended(&mut self) {
        if self.ramp.started + self.ramp.allowance < self.ramp.target {
            self.ramp.allowance += 1;
        }
    }
}
