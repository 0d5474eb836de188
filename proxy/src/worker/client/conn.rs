//! One client connection's own life, as functions over [`Conns`], the state that life
//! touches: accepted, its TLS handshake, its writes, settled after a drive, closed. What
//! follows from it for the exchanges it carries (dropped), its tunnel's upstream (closed) or
//! the codec (HTTP/2 started) is returned to the caller, the worker's loop: nothing in
//! `client/` calls into the exchange pipeline.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use ktls::Progress;
use mio::{Interest, Registry};

use super::codec::Codec;
use super::{handshake_deadline, idle_timeout, tls, Client, ClientId, Clients, End, Stage};
use crate::buf::BufPool;
use crate::close_reason::CloseReason;
use crate::metrics::{bump, Metrics, WorkerMetrics};
use crate::outbox::Outbox;
use crate::runtime::Runtime;
use crate::socket::Socket;
use crate::timers::Timers;
use crate::transport::Transport;

use super::super::exchange::ExchangeId;
use super::super::h1::H1Codec;
use super::super::limits;
use super::super::token::client_token;
use super::super::tunnel::Tunnel;

/// The state a client connection's life touches: the connection table, the timers it waits
/// on, the read buffers it borrows, the configuration it runs under and the counters.
pub(in crate::worker) struct Conns<'a> {
    pub clients: &'a mut Clients,
    pub timers: &'a mut Timers,
    pub bufs: &'a mut BufPool,
    pub rt: &'a Runtime,
    pub metrics: &'a Metrics,
    /// This worker's own counters, and its index (for log lines).
    pub worker: (&'a WorkerMetrics, usize),
    /// The turn's clock (`Worker::now`).
    pub now: Instant,
}

/// A new connection from `peer` on a listener serving `tls` (and `protos`).
pub(in crate::worker) struct Accepted<'p> {
    pub sock: Socket,
    pub peer: SocketAddr,
    pub tls: bool,
    pub protos: &'p [config::Proto],
}

/// Takes accepted connection `new` in: counted by frang (which may refuse it at once: a
/// reset, no reply), its handshake started, registered with the poll under a new id. None
/// when it was refused or could not be registered.
pub(in crate::worker) fn open(
    c: &mut Conns,
    registry: &Registry,
    new: Accepted,
) -> Option<ClientId> {
    let Accepted {
        mut sock,
        peer,
        tls,
        protos,
    } = new;
    if let Err(v) = c.rt.frang.on_connect(peer.ip(), Instant::now()) {
        // Refused at accept: reset, no reply; the refusal is not a concurrent connection.
        limits::note_block((c.rt, c.metrics), peer.ip(), &v, "-");
        c.metrics.count_close(CloseReason::Frang);
        let _ = socket2::SockRef::from(&sock).set_linger(Some(Duration::ZERO));
        return None;
    }
    // TCP_NODELAY comes from the listener (server::bind).
    let stage = if tls {
        let Some(session) = tls::start_tls(c.rt, &sock, crate::alpn::Alpn::of(protos)) else {
            c.rt.frang.on_close(peer.ip());
            return None;
        };
        Stage::Handshake(Box::new(session))
    } else {
        Stage::Open(Transport::Plain(Default::default()))
    };
    let ci = c.clients.next_id();
    let interest = Interest::READABLE | Interest::WRITABLE;
    if let Err(e) = registry.register(&mut sock, client_token(ci), interest) {
        crate::warn!(
            "worker {}: cannot register a client socket: {e}",
            c.worker.1
        );
        c.rt.frang.on_close(peer.ip());
        return None;
    }
    let handshaking = matches!(stage, Stage::Handshake(_));
    let unique = c.clients.next_unique();
    c.clients.insert(fresh((sock, peer, stage), unique, c.rt));
    WorkerMetrics::bump(&c.worker.0.connections_accepted);
    WorkerMetrics::bump(&c.worker.0.connections_open);
    let timeout = if handshaking {
        handshake_deadline::CLIENT_TURN
    } else {
        idle_timeout(c.rt)
    };
    c.clients.arm_timer(c.timers, ci, c.now + timeout);
    Some(ci)
}

/// Takes in a connection that has no socket of its own (an HTTP/3 connection of the QUIC
/// owner, `worker/quic/`, already counted by frang): a client entry with `codec`, no
/// timer until its codec arms one.
pub(in crate::worker) fn adopt(
    c: &mut Conns,
    sock: Socket,
    peer: SocketAddr,
    codec: Codec,
) -> ClientId {
    let unique = c.clients.next_unique();
    let mut client = fresh((sock, peer, Stage::Gone), unique, c.rt);
    client.codec = codec;
    WorkerMetrics::bump(&c.worker.0.connections_accepted);
    WorkerMetrics::bump(&c.worker.0.connections_open);
    c.clients.insert(client)
}

fn fresh((sock, peer, stage): (Socket, SocketAddr, Stage), id: u64, rt: &Runtime) -> Client {
    Client {
        sock,
        peer,
        stage,
        codec: Codec::H1(H1Codec::default()),
        rbuf: None,
        out: Outbox::default(),
        end: End::default(),
        timer_gen: 0,
        timer_queued: None,
        timer_deadline: None,
        id,
        limits: crate::frang::ConnLimits::new(&rt.config.frang),
        counted_by: Some(rt.frang.clone()),
        mem_held: 0,
        sni: None,
        tft: None,
        ja4: None,
        tft_records: 0,
        handshake: handshake_deadline::HandshakeClock::start(Instant::now()),
    }
}

/// Where a client's TLS handshake stands after a step.
pub(in crate::worker) enum Handshake {
    /// Open for HTTP (it was already, or just finished); `h2`: ALPN chose HTTP/2 now, and
    /// the HTTP/2 codec is to start (otherwise the idle timer is armed).
    Open { h2: bool },
    /// Waiting for the peer.
    Pending,
    /// It failed, was refused by frang, or was an ACME validation: close the connection.
    Close(CloseReason),
}

/// Drives client `ci`'s handshake, if it is in one.
pub(in crate::worker) fn handshake(c: &mut Conns, ci: ClientId) -> Handshake {
    let Some(cl) = c.clients.get_mut(ci) else {
        return Handshake::Pending;
    };
    let Stage::Handshake(session) = &mut cl.stage else {
        return Handshake::Open { h2: false };
    };
    match session.handshake(cl.sock.as_fd()) {
        Ok(Progress::Done) => {}
        Ok(Progress::WantRead | Progress::WantWrite) => {
            c.clients.handshake_waits(c.timers, ci, Instant::now());
            return Handshake::Pending;
        }
        Err(e) => {
            let ip = cl.peer.ip();
            crate::handshake_failure::report(c.metrics, ip, session.ssl(), &e);
            let _ = c.rt.frang.on_tls_incomplete(ip, Instant::now());
            return Handshake::Close(CloseReason::HandshakeError);
        }
    }
    if tls::acme_validation(session, cl.peer.ip()) {
        session.shutdown(cl.sock.as_fd());
        return Handshake::Close(CloseReason::Server);
    }
    let Stage::Handshake(mut session) = std::mem::replace(&mut cl.stage, Stage::Gone) else {
        return Handshake::Pending;
    };
    let resumed = session.ssl().session_reused();
    let h2 = crate::alpn::negotiated_h2(session.ssl());
    cl.sni = (session.ssl())
        .servername(openssl::ssl::NameType::HOST_NAME)
        .map(crate::server_name::ServerName::new);
    let now = Instant::now();
    let prints = super::super::fingerprint_hook::on_handshake(session.ssl_mut(), c.rt, now);
    (cl.tft, cl.ja4) = (prints.tft, prints.ja4);
    if let Err(v) = (c.rt.frang)
        .on_tls_handshake(cl.peer.ip(), resumed, now)
        .and(prints.verdict)
    {
        let _ = socket2::SockRef::from(&cl.sock).set_linger(Some(Duration::ZERO));
        limits::note_block((c.rt, c.metrics), cl.peer.ip(), &v, "-");
        return Handshake::Close(CloseReason::Frang);
    }
    bump(if resumed {
        &c.metrics.handshakes_resumed
    } else {
        &c.metrics.handshakes_full
    });
    let mut transport = tls::open_transport(*session, cl.sock.as_fd(), c.rt.ktls_mode, c.metrics);
    // The FIN may have been reported while the handshake read the socket (with the last
    // flight and the first request): the new transport must not skip reading past it.
    if cl.end.fin_reported() {
        transport.on_readable(true);
    }
    cl.stage = Stage::Open(transport);
    if !h2 {
        let idle = idle_timeout(c.rt);
        c.clients.arm_timer(c.timers, ci, c.now + idle);
    }
    Handshake::Open { h2 }
}

/// A readiness event for client `ci`'s socket: its transport skips reads while it knows the
/// socket is empty, until this says bytes (or the end) may have come.
pub(in crate::worker) fn readable(clients: &mut Clients, ci: ClientId, read_closed: bool) {
    let Some(c) = clients.get_mut(ci) else {
        return;
    };
    if read_closed {
        c.end.on_fin_event();
    }
    if let Stage::Open(transport) = &mut c.stage {
        transport.on_readable(read_closed);
    }
}

/// What writing a client's queued bytes did ([`write`]), for whoever waits on its room.
pub(in crate::worker) enum Wrote {
    /// Nothing went out.
    Nothing,
    /// Bytes went out, and an HTTP/2 outbox that was full has room again: every stream's
    /// exchange (these) was held back.
    Stalled(Vec<ExchangeId>),
    /// Bytes went out; the HTTP/1 exchange being answered, if any, may read more from its
    /// upstream.
    Sent(Option<ExchangeId>),
}

/// Writes client `ci`'s queued bytes.
#[inline]
pub(in crate::worker) fn write(clients: &mut Clients, ci: ClientId) -> Wrote {
    let Some(c) = clients.get_mut(ci) else {
        return Wrote::Nothing;
    };
    let Some(was_full) = super::flush(c) else {
        return Wrote::Nothing;
    };
    if let Codec::H2(h2) = &mut c.codec {
        h2.out_stalled_since = None;
        if was_full && c.out.has_room() {
            return Wrote::Stalled(h2.exchanges().map(|(_, id)| id).collect());
        }
        return Wrote::Sent(None);
    }
    Wrote::Sent(c.codec.h1().and_then(H1Codec::current))
}

/// After a drive of client `ci`: whether it is finished, and how it ends (`reset`: without
/// close_notify or FIN). An idle one gives its read buffer back, and is closed once a
/// graceful stop's last call is over (`last_call_over`).
#[inline]
pub(in crate::worker) fn settle(
    clients: &mut Clients,
    bufs: &mut BufPool,
    ci: ClientId,
    last_call_over: bool,
) -> Option<(CloseReason, bool)> {
    let c = clients.get_mut(ci)?;
    let idle = c.is_idle();
    if c.end.finished(c.codec.is_idle(), c.out.is_empty()) {
        return Some((c.end.reason(), c.end.must_reset()));
    }
    if idle {
        bufs.release_if_empty(&mut c.rbuf);
        if last_call_over {
            return Some((CloseReason::Shutdown, false));
        }
    }
    None
}

/// What a closed client connection leaves for the loop to end: its tunnel (whose upstream
/// closes) and the exchanges its codec carried (dropped).
pub(in crate::worker) struct Closed {
    pub tunnel: Option<(Tunnel, u64)>,
    pub exchanges: Vec<ExchangeId>,
}

/// Closes client connection `ci` for `why`. `orderly`: with close_notify (TLS) and a FIN,
/// unless the client closed first; otherwise with a reset (SO_LINGER 0). The client hears of
/// the close before its tunnel's upstream closes and its exchanges are dropped (the caller
/// does that with what this returns). frang is told first: what follows may panic (the panic
/// guard then finds no client to close), and an address must never keep a connection or
/// bytes it no longer has.
pub(in crate::worker) fn close(
    c: &mut Conns,
    ci: ClientId,
    why: CloseReason,
    orderly: bool,
) -> Option<Closed> {
    let mut cl = c.clients.remove(ci)?;
    if !orderly {
        let _ = socket2::SockRef::from(&cl.sock).set_linger(Some(Duration::ZERO));
    }
    c.metrics.count_close(why);
    if let Some(frang) = cl.counted_by.take() {
        if cl.mem_held > 0 {
            let _ = frang.on_memory(cl.peer.ip(), cl.mem_held, 0, c.now);
        }
        frang.on_close(cl.peer.ip());
    }
    let tunnel = match &mut cl.codec {
        Codec::H1(h1) => h1.take_tunnel().map(|t| (t, cl.id)),
        Codec::H2(_) | Codec::H3(_) => None,
    };
    let exchanges = cl.codec.reset();
    if let Stage::Open(transport) = &mut cl.stage {
        if orderly && !cl.end.peer_closed() {
            transport.shutdown(&cl.sock);
        }
    }
    if let Some(buf) = cl.rbuf.take() {
        c.bufs.give(buf);
    }
    // No epoll_ctl(DEL): closing the socket (it is never duplicated) takes it out of the
    // poll set, one syscall per connection less.
    WorkerMetrics::drop_one(&c.worker.0.connections_open);
    Some(Closed { tunnel, exchanges })
}
