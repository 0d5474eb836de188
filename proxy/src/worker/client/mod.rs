//! Client connections: the stage machine `Handshake -> Open`, socket reads and writes and
//! the close (how a connection ends is its [`End`], `end.rs`). The connections live in
//! `table.rs` ([`Clients`], named by [`ClientId`]); their one timer is `timer.rs`, the
//! handshake's deadline `handshake_deadline.rs`, the TLS session and its hand-over `tls.rs`,
//! `client_mem` accounting `mem.rs`, and the codecs the exchange core writes responses
//! through `codec.rs`.

pub mod codec;
mod drain;
mod end;
mod handshake_deadline;
mod mem;
mod table;
mod timer;
mod tls;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use ktls::{IoStatus, Progress, TlsSession};
use mio::Interest;

use super::h1::H1Codec;
use super::limits::{self, Deadline, ReadVerdict};
use super::request::Scheme;
use super::{client_token, Worker};
use crate::buf::{Buf, BufPool};
use crate::close_reason::CloseReason;
use crate::metrics::{bump, WorkerMetrics};
use crate::outbox::Outbox;
use crate::socket::Socket;
use crate::transport::Transport;
use codec::Codec;
pub use end::End;
pub use table::{ClientId, Clients};
pub use timer::idle_timeout;
use timer::Due;

#[allow(
    clippy::large_enum_variant,
    reason = "Transport is inline on purpose (transport.rs)"
)]
pub enum Stage {
    /// TLS handshake in progress on the socket.
    Handshake(Box<TlsSession>),
    /// HTTP/1.1 over plain TCP, user-space TLS or kernel TLS.
    Open(Transport),
    /// Moved out while changing stage, or closed.
    Gone,
}

pub struct Client {
    pub sock: Socket,
    pub peer: SocketAddr,
    pub stage: Stage,
    /// The codec (HTTP/1.1 or HTTP/2): the connection's requests and responses.
    pub codec: Codec,
    /// Received bytes not yet consumed; `None` while idle (returned to the pool).
    pub rbuf: Option<Buf>,
    pub out: Outbox,
    /// How the connection ends (`end.rs`): closing after the response, gone, reset, blocked
    /// by frang, the peer's FIN. Moved only by its transitions.
    pub end: End,
    /// The generation of the client's timer entry (a stale entry's differs).
    pub timer_gen: u64,
    /// When the heap entry of `timer_gen` comes due; `None` once it fired or was disarmed.
    pub timer_queued: Option<Instant>,
    /// The deadline last armed: later than `timer_queued` when
    /// [`Clients::extend_timer`] moved it without a push.
    pub timer_deadline: Option<Instant>,
    /// Unique within the worker (slab slots are reused).
    pub id: u64,
    /// frang's counters of the request head being read.
    pub limits: crate::frang::ConnLimits,
    /// The frang table that counted this connection at accept (the configuration's of that
    /// time): its `on_close` is owed there when the connection ends, even after a reload
    /// replaced the table (new counters must not be decremented for connections they never
    /// counted).
    pub counted_by: Option<std::sync::Arc<crate::frang::Frang>>,
    /// Bytes this connection holds as `counted_by` last saw them (`client_mem`).
    pub mem_held: u64,
    /// The server name the client asked for in its TLS handshake (lower case, no trailing
    /// dot): strict host checking refuses requests routed to another vhost than it names.
    pub sni: Option<crate::server_name::ServerName>,
    /// The TLS fingerprint of the handshake (`None`: plain TCP, or not yet).
    pub tft: Option<crate::fingerprint::Tft>,
    /// The JA4 of the handshake, for the access log (`None`: plain TCP, not yet, or the
    /// access log was off when the handshake completed).
    pub ja4: Option<crate::fingerprint::Ja4>,
    /// The records read by the transport as last counted for `tft`'s record limit.
    pub tft_records: u64,
    /// When the TLS handshake began and how far it got (its deadline's policy).
    pub handshake: handshake_deadline::HandshakeClock,
}

impl Client {
    /// Nothing in flight: no request being served, nothing to send.
    pub fn is_idle(&self) -> bool {
        self.codec.is_idle() && self.out.is_empty() && self.rbuf.as_ref().is_none_or(Buf::is_empty)
    }
}

impl Worker {
    pub(super) fn new_client(
        &mut self,
        mut sock: Socket,
        peer: SocketAddr,
        tls: bool,
        protos: &[config::Proto],
    ) {
        if let Err(v) = self.rt.frang.on_connect(peer.ip(), Instant::now()) {
            // Refused at accept: reset, no reply; the refusal is not a concurrent connection.
            super::limits::note_block((&self.rt, self.metrics()), peer.ip(), &v, "-");
            self.metrics().count_close(CloseReason::Frang);
            let _ = socket2::SockRef::from(&sock).set_linger(Some(Duration::ZERO));
            return;
        }
        // TCP_NODELAY comes from the listener (server::bind).
        let stage = if tls {
            match tls::start_tls(&self.rt, &sock, crate::alpn::Alpn::of(protos)) {
                Some(session) => Stage::Handshake(Box::new(session)),
                None => {
                    self.rt.frang.on_close(peer.ip());
                    return;
                }
            }
        } else {
            Stage::Open(Transport::Plain(Default::default()))
        };
        let ci = self.clients.next_id();
        if let Err(e) = self.poll.registry().register(
            &mut sock,
            client_token(ci),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            crate::warn!("worker {}: cannot register a client socket: {e}", self.id);
            self.rt.frang.on_close(peer.ip());
            return;
        }
        self.next_client_id += 1;
        let handshaking = matches!(stage, Stage::Handshake(_));
        self.clients.insert(Client {
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
            id: self.next_client_id,
            limits: crate::frang::ConnLimits::new(&self.rt.config.frang),
            counted_by: Some(self.rt.frang.clone()),
            mem_held: 0,
            sni: None,
            tft: None,
            ja4: None,
            tft_records: 0,
            handshake: handshake_deadline::HandshakeClock::start(Instant::now()),
        });
        let wm = self.worker_metrics();
        WorkerMetrics::bump(&wm.connections_accepted);
        WorkerMetrics::bump(&wm.connections_open);
        let timeout = if handshaking {
            handshake_deadline::CLIENT_TURN
        } else {
            idle_timeout(&self.rt)
        };
        self.clients
            .arm_timer(&mut self.timers, ci, self.now + timeout);
        if !tls && protos.contains(&config::Proto::H2c) {
            // h2c by prior knowledge: the first bytes must be the HTTP/2 preface.
            self.start_h2(ci, Scheme::Http);
        }
        self.dirty.push_back(client_token(ci));
    }

    /// Moves the client forward as far as its socket allows.
    pub(super) fn drive_client(&mut self, ci: ClientId) {
        let tunnel = self
            .clients
            .get(ci)
            .and_then(|c| c.codec.h1())
            .is_some_and(|h1| h1.tunnel().is_some());
        if tunnel {
            let io = super::tunnel::TunnelIo {
                clients: &mut self.clients,
                upstreams: &mut self.upstreams,
                bufs: &mut self.bufs,
                dirty: &mut self.dirty,
                metrics: &self.shared.metrics.tunnels,
            };
            if let Some(end) = super::tunnel::drive(io, ci) {
                self.close_tunnel(ci, end);
            }
            return;
        }
        if matches!(
            self.clients.get(ci).map(|c| &c.stage),
            Some(Stage::Handshake(_))
        ) && !self.handshake(ci)
        {
            return;
        }
        for _ in 0..64 {
            let mut progressed = self.read_client(ci);
            if progressed {
                let parts = (&mut self.clients, &mut self.exchanges, &mut self.timers);
                match limits::account_read(parts, &self.rt, ci, self.now) {
                    ReadVerdict::Within => {}
                    ReadVerdict::Reset(v) => self.refuse_connection(ci, &v),
                    ReadVerdict::Refuse(at, v) => self.frang_violation(ci, at, &v),
                }
            }
            progressed |= self.process_client(ci);
            progressed |= self.flush_client(ci);
            if !self.clients.contains(ci) {
                return;
            }
            if !progressed {
                self.account_memory(ci);
                return self.settle_client(ci);
            }
        }
        self.account_memory(ci);
        // Still moving after a full round: come back after the others (edge-triggered).
        self.dirty.push_back(client_token(ci));
    }

    /// After a receive pass of client `ci`: its held bytes join its address's total
    /// (`client_mem`); over the hard limit the connection is reset as a block.
    fn account_memory(&mut self, ci: ClientId) {
        let now = self.now;
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        let Err(v) = c.account_memory(now) else {
            return;
        };
        let ip = c.peer.ip();
        super::limits::note_block((&self.rt, self.metrics()), ip, &v, "-");
        self.drop_response(ci, super::finish::Refusal::Attack);
        self.close_client(ci, CloseReason::Frang);
    }

    /// Drives the handshake; true once the connection is open for HTTP.
    fn handshake(&mut self, ci: ClientId) -> bool {
        let Some(c) = self.clients.get_mut(ci) else {
            return false;
        };
        let Stage::Handshake(session) = &mut c.stage else {
            return true;
        };
        match session.handshake(c.sock.as_fd()) {
            Ok(Progress::Done) => {}
            Ok(Progress::WantRead | Progress::WantWrite) => {
                return self
                    .clients
                    .handshake_waits(&mut self.timers, ci, Instant::now())
            }
            Err(e) => {
                let ip = c.peer.ip();
                crate::handshake_failure::report(&self.shared.metrics, ip, session.ssl(), &e);
                let _ = self.rt.frang.on_tls_incomplete(ip, Instant::now());
                self.close_client(ci, CloseReason::HandshakeError);
                return false;
            }
        }
        if tls::acme_validation(session, c.peer.ip()) {
            session.shutdown(c.sock.as_fd());
            self.close_client(ci, CloseReason::Server);
            return false;
        }
        let Stage::Handshake(mut session) = std::mem::replace(&mut c.stage, Stage::Gone) else {
            return false;
        };
        let resumed = session.ssl().session_reused();
        let h2 = crate::alpn::negotiated_h2(session.ssl());
        c.sni = session
            .ssl()
            .servername(openssl::ssl::NameType::HOST_NAME)
            .map(crate::server_name::ServerName::new);
        let now = Instant::now();
        let prints = super::fingerprint_hook::on_handshake(session.ssl_mut(), &self.rt, now);
        c.tft = prints.tft;
        c.ja4 = prints.ja4;
        if let Err(v) = (self.rt.frang)
            .on_tls_handshake(c.peer.ip(), resumed, now)
            .and(prints.verdict)
        {
            let ip = c.peer.ip();
            let _ = socket2::SockRef::from(&c.sock).set_linger(Some(Duration::ZERO));
            super::limits::note_block((&self.rt, self.metrics()), ip, &v, "-");
            self.close_client(ci, CloseReason::Frang);
            return false;
        }
        let metrics = &self.shared.metrics;
        bump(if resumed {
            &metrics.handshakes_resumed
        } else {
            &metrics.handshakes_full
        });
        let mut transport =
            tls::open_transport(*session, c.sock.as_fd(), self.rt.ktls_mode, metrics);
        // The FIN may have been reported while the handshake read the socket (with the last
        // flight and the first request): the new transport must not skip reading past it.
        if c.end.fin_reported() {
            transport.on_readable(true);
        }
        c.stage = Stage::Open(transport);
        if h2 {
            self.start_h2(ci, Scheme::Https);
        } else {
            let idle = idle_timeout(&self.rt);
            self.clients
                .arm_timer(&mut self.timers, ci, self.now + idle);
        }
        true
    }

    /// A readiness event for the client's socket: its transport skips reads while it knows
    /// the socket is empty, until this says bytes (or the end) may have come.
    pub(super) fn client_readable(&mut self, ci: ClientId, read_closed: bool) {
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        if read_closed {
            c.end.on_fin_event();
        }
        if let Stage::Open(transport) = &mut c.stage {
            transport.on_readable(read_closed);
        }
    }

    /// Reads what the socket has, while there is room. True if bytes arrived.
    pub(super) fn read_client(&mut self, ci: ClientId) -> bool {
        let Some(c) = self.clients.get_mut(ci) else {
            return false;
        };
        read(c, ci, &mut self.bufs, &mut self.dirty)
    }

    /// Writes queued bytes. True if any left.
    pub(super) fn flush_client(&mut self, ci: ClientId) -> bool {
        let Some(c) = self.clients.get_mut(ci) else {
            return false;
        };
        let Some(was_full) = flush(c) else {
            return false;
        };
        // An HTTP/2 outbox that was full held back every stream: wake them.
        if let Codec::H2(h2) = &mut c.codec {
            h2.out_stalled_since = None;
            if was_full && c.out.has_room() {
                let ids: Vec<_> = h2.exchanges().map(|(_, id)| id).collect();
                self.wake_upstreams(ids);
                return true;
            }
        }
        // Room in the outbox may let the upstream side continue.
        let up = c
            .codec
            .h1()
            .and_then(H1Codec::current)
            .and_then(|id| self.exchanges.get(id))
            .and_then(|ex| ex.forward())
            .map(|f| f.up);
        if let Some(ui) = up {
            self.dirty.push_back(super::upstream_token(ui));
        }
        true
    }

    /// After driving: close what is finished, release idle buffers, re-arm the idle timer.
    fn settle_client(&mut self, ci: ClientId) {
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        let idle = c.is_idle();
        if c.end.finished(c.codec.is_idle(), c.out.is_empty()) {
            let why = c.end.reason();
            if c.end.must_reset() {
                self.reset_client(ci, why);
            } else {
                self.close_client(ci, why);
            }
            return;
        }
        if idle {
            self.bufs.release_if_empty(&mut c.rbuf);
            if super::drain::last_call_over(self.draining) {
                self.close_client(ci, CloseReason::Shutdown);
            }
        }
    }

    /// Client `ci`'s timer entry of generation `gen` came due: acts on what it is due for.
    pub(super) fn client_timer(&mut self, ci: ClientId, gen: u64, now: Instant) {
        let Some(due) = self.clients.timer_due(&mut self.timers, ci, gen, now) else {
            return;
        };
        match due {
            Due::Handshake => self.handshake_deadline_due(ci, now),
            // A slowloris head (client_header_timeout) is cut by frang; otherwise this is an
            // idle keep-alive client.
            Due::Head => match self.clients.head_deadline(&mut self.timers, ci, now) {
                Deadline::None => self.close_client(ci, CloseReason::IdleTimeout),
                Deadline::Pending => {}
                Deadline::Passed(limit) => self.deadline_violation(ci, None, limit),
            },
            Due::Drain => self.close_client(ci, CloseReason::Error),
            Due::H2 => self.h2_timer(ci, now),
            Due::Tunnel => {
                let (parts, timeout) = (
                    (&mut self.clients, &mut self.timers),
                    self.rt.config.client_ws_timeout,
                );
                if let Some(end) = super::tunnel::timer(parts, timeout, ci, now) {
                    self.close_tunnel(ci, end);
                }
            }
        }
    }

    /// Client `ci`'s handshake deadline came due: process what already arrived, then cut
    /// the handshake unless that finished it or moved it (which re-armed the deadline).
    fn handshake_deadline_due(&mut self, ci: ClientId, now: Instant) {
        let Some(gen) = self.clients.get(ci).map(|c| c.timer_gen) else {
            return;
        };
        self.drive_client(ci);
        let Some((ip, state)) = self.clients.handshake_overdue(ci, gen) else {
            return;
        };
        self.metrics().count_handshake_timeout(state);
        bump(&self.metrics().handshakes_failed);
        let _ = self.rt.frang.on_tls_incomplete(ip, now);
        self.close_client(ci, CloseReason::HandshakeTimeout);
    }

    /// Closes the client, its upstream exchange and returns its buffers.
    pub(super) fn close_client(&mut self, ci: ClientId, why: CloseReason) {
        self.end_client(ci, why, true);
    }

    /// Cuts client connection `ci` with a reset: no close_notify and no FIN, which a reader
    /// of a close-delimited body would take for its clean end (RFC 9112 §8); what was not
    /// sent yet is dropped.
    pub(super) fn reset_client(&mut self, ci: ClientId, why: CloseReason) {
        if let Some(c) = self.clients.get(ci) {
            let _ = socket2::SockRef::from(&c.sock).set_linger(Some(Duration::ZERO));
        }
        self.end_client(ci, why, false);
    }

    /// Closes client connection `ci`; `orderly`: with close_notify (TLS) when the client has
    /// not closed already.
    fn end_client(&mut self, ci: ClientId, why: CloseReason, orderly: bool) {
        let Some(mut c) = self.clients.remove(ci) else {
            return;
        };
        self.metrics().count_close(why);
        // frang first: what follows may panic (the panic guard then finds no client to
        // close), and an address must never keep a connection or bytes it no longer has.
        if let Some(frang) = c.counted_by.take() {
            if c.mem_held > 0 {
                let _ = frang.on_memory(c.peer.ip(), c.mem_held, 0, self.now);
            }
            frang.on_close(c.peer.ip());
        }
        if let Some(t) = match &mut c.codec {
            Codec::H1(h1) => h1.take_tunnel(),
            Codec::H2(_) => None,
        } {
            let tunnels = &self.shared.metrics.tunnels;
            if let Some(ui) = super::tunnel::gone(&self.upstreams, tunnels, t, (ci, c.id), why) {
                self.close_upstream(ui);
            }
        }
        for id in c.codec.reset() {
            self.drop_exchange(id);
        }
        if let Stage::Open(transport) = &mut c.stage {
            if orderly && !c.end.peer_closed() {
                transport.shutdown(&c.sock);
            }
        }
        if let Some(buf) = c.rbuf.take() {
            self.bufs.give(buf);
        }
        // No epoll_ctl(DEL): closing the socket (it is never duplicated) takes it out of the
        // poll set, one syscall per connection less.
        WorkerMetrics::drop_one(&self.worker_metrics().connections_open);
    }
}

/// Reads what client `ci`'s socket has, while there is room. True if bytes arrived.
/// (Always inlined: the wrapper `read_client` is on every request's path, as `flush`.)
#[inline(always)]
pub(super) fn read(
    c: &mut Client,
    ci: ClientId,
    bufs: &mut BufPool,
    dirty: &mut VecDeque<mio::Token>,
) -> bool {
    if !c.end.reads() {
        return false;
    }
    let Stage::Open(transport) = &mut c.stage else {
        return false;
    };
    let rbuf = c.rbuf.get_or_insert_with(|| bufs.take());
    let mut got = false;
    while !rbuf.is_full() {
        match rbuf.fill_with(|space| match transport.read(&mut c.sock, space) {
            IoStatus::Done(n) => Ok(n),
            other => Err(other),
        }) {
            // Nothing into a buffer with room: the transport bounded its work and has more,
            // for which no edge will fire (ktls's per-read bound): come back later.
            Ok(0) => {
                dirty.push_back(client_token(ci));
                break;
            }
            Ok(_) => got = true,
            Err(IoStatus::WantRead | IoStatus::WantWrite) => break,
            // HTTP/1.1 may half-close: requests read before the FIN are still answered
            // (RFC 9112 §9.6). HTTP/2 has no half-closed connection (RFC 9113 §5.1
            // half-closes streams), so its FIN ends the connection as nginx ends it.
            Err(IoStatus::Closed) => {
                c.end.on_peer_end(matches!(c.codec, Codec::H2(_)));
                break;
            }
            // A reset or a broken record: no answer can reach the client, and its queued
            // requests must not keep the origin busy.
            Err(_) => {
                c.end.on_read_error();
                break;
            }
        }
    }
    if rbuf.is_empty() {
        bufs.release_if_empty(&mut c.rbuf);
    }
    got
}

/// Writes client `c`'s queued bytes: Some when some went out, telling whether its outbox
/// was full before (a write error ends the connection: its outbox is dropped).
#[inline(always)]
pub(super) fn flush(c: &mut Client) -> Option<bool> {
    if c.out.is_empty() {
        return None;
    }
    let Stage::Open(transport) = &mut c.stage else {
        return None;
    };
    let was_full = !c.out.has_room();
    match transport.write(&mut c.sock, &mut c.out) {
        IoStatus::Done(n) => (n > 0).then_some(was_full),
        IoStatus::WantRead | IoStatus::WantWrite => None,
        IoStatus::Closed | IoStatus::Error(_) => {
            // Nothing more can reach this client: close now, even mid-response.
            c.out.clear();
            c.end.on_write_error();
            None
        }
    }
}
