//! One upstream connection's own life, as functions over [`Conns`], the state that life
//! touches: opened, timed, settled after its connect, pooled or closed. What follows from it
//! for an exchange (a failure, a retry) or for its group's wait queue is returned to the
//! caller, the worker's loop, never done from here: nothing in `upstream/` calls into the
//! exchange pipeline.

use std::io;
use std::time::{Duration, Instant};

use mio::Interest;

use super::groups::{self, GroupState};
use super::h2_conn::{self, H2Link};
use super::tls::{self, Stage, UpTls};
use super::{reusable, ConnFacts, UpPhase, Upstream, UpstreamEnd, UpstreamId, Upstreams};
use crate::buf::BufPool;
use crate::metrics::{bump, Metrics};
use crate::outbox::Outbox;
use crate::runtime::Runtime;
use crate::socket::{Connector, Socket};
use crate::timers::Timers;

use super::super::exchange::ExchangeId;
use super::super::token::upstream_token;

/// A new connection must be established within this long.
pub(in crate::worker) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The state an upstream connection's life touches: the connection table, the per-group
/// pools and wait queues it counts in, the timers it waits on, the read buffers it borrows.
pub(in crate::worker) struct Conns<'a> {
    pub upstreams: &'a mut Upstreams,
    pub groups: &'a mut [GroupState],
    pub timers: &'a mut Timers,
    pub bufs: &'a mut BufPool,
    /// The configuration generation this worker runs: a connection of another one is not
    /// pooled, and does not count in this one's groups.
    pub rt_gen: u64,
    pub metrics: &'a Metrics,
}

/// A group whose pool lost or regained a connection: its wait queue may move now. The loop
/// serves it (`forward.rs` `serve_freed`) at once, so a queued exchange gets the freed place
/// before any later one.
#[must_use = "the freed group's wait queue is served by the loop"]
pub(in crate::worker) struct Freed(pub Option<usize>);

/// What opening a connection needs beyond [`Conns`]: the configuration naming the server,
/// the poll registry, and the connector (TCP, or the worker tests' socketpairs).
#[derive(Clone, Copy)]
pub(in crate::worker) struct Opener<'a> {
    pub rt: &'a Runtime,
    pub registry: &'a mio::Registry,
    pub connector: &'a Connector,
}

/// Opens a connection to `server` of `group` in `phase`. Errors are immediate connect
/// failures (or indices of a configuration that is gone).
pub(in crate::worker) fn connect(
    c: &mut Conns,
    open: Opener,
    (group, server, phase): (usize, usize, UpPhase),
) -> io::Result<UpstreamId> {
    // Indices may come from an exchange begun under the previous configuration.
    let Some(g) = open.rt.groups.get(group) else {
        return Err(io::ErrorKind::NotFound.into());
    };
    let Some(addr) = g.servers.get(server).map(|s| s.addr) else {
        return Err(io::ErrorKind::NotFound.into());
    };
    let forward_timeout = g.forward_timeout;
    let connect_timeout = CONNECT_TIMEOUT.min(forward_timeout);
    // A cache tier peer knows this node's connections by their source: `self`'s address.
    let from = (open.rt.tier.as_ref())
        .filter(|t| t.is_peer_group(group))
        .map(|t| t.me.ip());
    let mut sock = open.connector.connect(addr, from)?;
    // `server_tls`: the session is made now, its handshake driven once the connect completes.
    let tls = match &g.tls {
        Some(t) => Some(tls::start(t, (server, addr), &sock).map_err(|reason| {
            crate::error!("upstream {addr} TLS: {reason}");
            io::Error::other(reason)
        })?),
        None => None,
    };
    let ui = c.upstreams.next_id();
    let interest = Interest::READABLE | Interest::WRITABLE;
    open.registry
        .register(&mut sock, upstream_token(ui), interest)?;
    c.upstreams.insert(fresh(
        (sock, tls),
        (group, server, addr),
        phase,
        forward_timeout,
        c.rt_gen,
    ));
    if let Some(st) = groups::server_mut(c.groups, group, server) {
        st.opened();
    }
    arm_timer(c.upstreams, c.timers, ui, connect_timeout);
    Ok(ui)
}

fn fresh(
    (sock, tls): (Socket, Option<Box<UpTls>>),
    (group, server, addr): (usize, usize, std::net::SocketAddr),
    phase: UpPhase,
    forward_timeout: Duration,
    rt_gen: u64,
) -> Upstream {
    Upstream {
        sock: Some(sock),
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
        rt_gen,
        removed: false,
        forward_timeout,
        retire_at: None,
        health_body: None,
        tls,
        readiness: Default::default(),
        h2: None,
    }
}

/// (Re)arms connection `ui`'s timer `after` from now; progress counts from now too.
pub(in crate::worker) fn arm_timer(
    upstreams: &mut Upstreams,
    timers: &mut Timers,
    ui: UpstreamId,
    after: Duration,
) {
    if let Some(u) = upstreams.get_mut(ui) {
        u.last_progress = Instant::now();
        u.timer_gen = timers.next_gen();
        timers.schedule(Instant::now() + after, upstream_token(ui).0, u.timer_gen);
    }
}

/// What connection `ui`'s timer came due for; the loop acts on it.
pub(in crate::worker) enum TimerDue {
    /// The connect for exchange `id` did not finish in time; `current`: the server is one
    /// of this configuration (its health is this one's to mark).
    Connect {
        id: ExchangeId,
        group: usize,
        server: usize,
        current: bool,
    },
    /// Exchange `id`'s server was quiet for longer than it may be.
    Quiet(ExchangeId),
    /// A health monitor's request got no verdict in time: a failed check.
    Check,
    /// A probe's connect did not finish in time.
    Probe,
    /// An HTTP/2 connection's codec has a deadline (`h2_conn::arm_deadline`).
    H2,
    /// Anything else (an idle pooled connection): it closes.
    Close,
}

/// Connection `ui`'s timer entry of generation `gen` came due at `now`. A busy connection
/// that made progress since is re-armed for the rest of its quiet period, `quiet_limit`
/// (which the exchange it serves decides: `route::quiet_limit`); None then, and for a stale
/// entry.
pub(in crate::worker) fn timer_due(
    c: &mut Conns,
    ui: UpstreamId,
    (gen, now): (u64, Instant),
    quiet_limit: Option<Duration>,
) -> Option<TimerDue> {
    let u = c.upstreams.get_mut(ui)?;
    if u.timer_gen != gen {
        return None;
    }
    // An HTTP/2 connection's timer is its codec's deadline, not a quiet period.
    let quiet_limit = quiet_limit.filter(|_| !h2_conn::is_conn(u));
    if let (UpPhase::Busy, Some(limit)) = (u.phase, quiet_limit) {
        // Progress since the timer was armed: wait for the rest of the quiet period.
        if now.saturating_duration_since(u.last_progress) < limit {
            u.timer_gen = c.timers.next_gen();
            let (at, key) = (u.last_progress + limit, upstream_token(ui).0);
            c.timers.schedule(at, key, u.timer_gen);
            return None;
        }
    }
    Some(match (u.phase, u.exchange) {
        (UpPhase::Busy, None) if h2_conn::is_conn(u) => TimerDue::H2,
        (UpPhase::Connecting, Some(id)) => TimerDue::Connect {
            id,
            group: u.group,
            server: u.server,
            current: !u.removed,
        },
        (UpPhase::Busy, Some(id)) => TimerDue::Quiet(id),
        (UpPhase::Checking, _) => TimerDue::Check,
        (UpPhase::Probe, _) => TimerDue::Probe,
        _ => TimerDue::Close,
    })
}

/// How a connecting connection (`Connecting`, or a `Probe`) stands after a readiness event.
pub(in crate::worker) enum Settled {
    /// The connect is still in progress.
    Pending,
    /// Connected. `server` is the one to mark up (None for a removed server, whose indices
    /// name an older configuration). `carrying`: the exchange's request goes out now (the
    /// connection is `Busy` under its forward timeout); otherwise it is a probe, already
    /// ended (`monitored` false), or one whose monitor's request goes out now.
    Up {
        server: Option<(usize, usize)>,
        carrying: bool,
        monitored: bool,
        freed: Freed,
    },
    /// The connect failed: the connection is closed. `server` is the one to mark down;
    /// `exchange` the one that had waited for it.
    Failed {
        server: Option<(usize, usize)>,
        exchange: Option<ExchangeId>,
        freed: Freed,
    },
}

/// A connecting connection `ui` became ready: the connect (and its TLS handshake, with
/// `server_tls`) either completed or failed. A completed probe of a group without a monitor
/// ends at once (the server is up); a completed connection for an exchange becomes `Busy`; a
/// failed one closes.
pub(in crate::worker) fn settle(c: &mut Conns, rt: &Runtime, ui: UpstreamId) -> Settled {
    let Some(u) = c.upstreams.get_mut(ui) else {
        return Settled::Pending;
    };
    let probe = u.phase == UpPhase::Probe;
    // A removed server's indices name an older configuration: its state is not this one's.
    let this = (!u.removed).then_some((u.group, u.server));
    let Some(sock) = u.sock.as_ref() else {
        return Settled::Pending;
    };
    let connected = match &u.tls {
        Some(t) if t.connected() => Some(Ok(())),
        _ => connect_result(sock),
    };
    let up = match connected {
        None => return Settled::Pending,
        Some(Err(_)) => false,
        Some(Ok(())) => match u.tls.as_deref_mut() {
            None => true,
            Some(t) => match tls::advance(t, sock, u.addr, c.metrics) {
                Stage::Ready => true,
                Stage::Pending => return Settled::Pending,
                Stage::Failed => false,
            },
        },
    };
    if up {
        settle_up(c, rt, ui, (this, probe))
    } else {
        settle_failed(c, ui, (this, probe))
    }
}

/// [`settle`]: connection `ui` is connected (and its TLS open).
fn settle_up(
    c: &mut Conns,
    rt: &Runtime,
    ui: UpstreamId,
    (this, probe): (Option<(usize, usize)>, bool),
) -> Settled {
    let Some(u) = c.upstreams.get_mut(ui) else {
        return Settled::Pending;
    };
    let monitored = rt.groups.get(u.group).is_some_and(|g| g.health.is_some());
    let mut freed = Freed(None);
    if probe && !monitored {
        freed = end(c, ui, UpstreamEnd::UNUSED);
    } else if !probe && h2_conn::is_conn(u) {
        // Its exchanges are timed on their stream entries; the connection has no timer.
        u.phase = UpPhase::Busy;
        u.timer_gen = 0;
    } else if !probe {
        u.phase = UpPhase::Busy;
        let timeout = u.forward_timeout;
        arm_timer(c.upstreams, c.timers, ui, timeout);
    }
    Settled::Up {
        // A monitored probe's server is judged by the monitor's answer instead.
        server: this.filter(|_| !(probe && monitored)),
        carrying: !probe,
        monitored: probe && monitored,
        freed,
    }
}

/// [`settle`]: connection `ui`'s connect or handshake failed; it closes.
fn settle_failed(
    c: &mut Conns,
    ui: UpstreamId,
    (this, probe): (Option<(usize, usize)>, bool),
) -> Settled {
    let exchange = c.upstreams.get(ui).and_then(|u| u.exchange);
    let freed = if probe {
        end_probe(c, ui).1
    } else {
        bump(&c.metrics.upstream_connect_errors);
        close(c, ui)
    };
    Settled::Failed {
        server: this,
        exchange,
        freed,
    }
}

/// Ends exchange `id`'s use of connection `ui`, if the connection is still its own (a
/// failed connection may already be closed and its slot reused).
pub(in crate::worker) fn end_of(
    c: &mut Conns,
    (id, ui): (ExchangeId, UpstreamId),
    how: UpstreamEnd,
) -> Freed {
    if c.upstreams.get(ui).is_some_and(|u| u.exchange == Some(id)) {
        end(c, ui, how)
    } else {
        Freed(None)
    }
}

/// Ends connection `ui`'s use (an exchange's, or none: `UpstreamEnd::UNUSED`): pooled when
/// [`reusable`], the one reuse decision, says it is in step with its server; closed
/// otherwise.
pub(in crate::worker) fn end(c: &mut Conns, ui: UpstreamId, how: UpstreamEnd) -> Freed {
    let Some(u) = c.upstreams.get(ui) else {
        return Freed(None);
    };
    // An HTTP/2 stream entry is the exchange's alone: it ends with it.
    if h2_conn::is_stream(u) {
        return close(c, ui);
    }
    if reusable(how, ConnFacts::of(u, c.rt_gen)) {
        pool(c, ui)
    } else {
        if !how.request_sent || how.body_may_follow {
            bump(&c.metrics.upstream_not_reused);
        }
        close(c, ui)
    }
}

/// Puts a connection [`reusable`] accepted back in its server's pool.
fn pool(c: &mut Conns, ui: UpstreamId) -> Freed {
    let Some(u) = c.upstreams.get_mut(ui) else {
        return Freed(None);
    };
    u.exchange = None;
    u.phase = UpPhase::Idle;
    u.reused = true;
    // No scheduled entry has generation 0: the timer is off.
    u.timer_gen = 0;
    let (group, server) = (u.group, u.server);
    c.bufs.release_if_empty(&mut u.rbuf);
    match groups::server_mut(c.groups, group, server) {
        Some(st) => st.pool(ui),
        None => return close(c, ui),
    }
    Freed(Some(group))
}

/// Closes connection `ui` and returns its buffer; its group's count drops.
pub(in crate::worker) fn close(c: &mut Conns, ui: UpstreamId) -> Freed {
    let Some(mut u) = c.upstreams.remove(ui) else {
        return Freed(None);
    };
    match u.h2.take() {
        Some(H2Link::Stream(s)) => {
            // Not a connection: it never counted in its server's `conns_n`.
            h2_conn::forget_stream(c.upstreams, ui, &s);
            if let Some(buf) = u.rbuf.take() {
                c.bufs.give(buf);
            }
            return Freed((u.rt_gen == c.rt_gen).then_some(u.group));
        }
        Some(H2Link::Conn(conn)) => {
            let woken = h2_conn::orphan_streams(c.upstreams, &conn.streams);
            c.upstreams.h2_woken.extend(woken);
        }
        None => {}
    }
    if let (Some(t), Some(sock)) = (u.tls.as_deref_mut().filter(|_| !u.peer_failed), &u.sock) {
        tls::shutdown(t, sock);
    }
    // No epoll_ctl(DEL): closing the socket (it is never duplicated) takes it out of the
    // poll set, one syscall per connection less.
    if let Some(buf) = u.rbuf.take() {
        c.bufs.give(buf);
    }
    // A tunnel left its server's count when it started.
    let pooled = !matches!(u.phase, UpPhase::Tunnel { .. });
    if u.rt_gen != c.rt_gen || !pooled {
        return Freed(None);
    }
    if let Some(st) = groups::server_mut(c.groups, u.group, u.server) {
        st.closed(ui);
    }
    Freed(Some(u.group))
}

/// Closes a probe's connection and clears its server's probing mark; the server, if the
/// connection was there. (A reload closes every probe: `refresh_runtime`.)
pub(in crate::worker) fn end_probe(
    c: &mut Conns,
    ui: UpstreamId,
) -> (Option<(usize, usize)>, Freed) {
    let Some(u) = c.upstreams.get(ui) else {
        return (None, Freed(None));
    };
    let (group, server) = (u.group, u.server);
    let freed = close(c, ui);
    if let Some(st) = groups::server_mut(c.groups, group, server) {
        st.probing = false;
    }
    (Some((group, server)), freed)
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
