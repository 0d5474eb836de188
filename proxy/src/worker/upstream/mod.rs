//! Upstream connections of one worker, their owner: their table (`table.rs`, named by
//! `UpstreamId`), their life from connect to pool or close (`conn.rs`, over the parts it
//! touches; `reuse.rs` `reusable` the one reuse decision), their reads and writes (below).
//! The per-group state (pools, health, wait queues) and the choice of a server and
//! connection from it are `groups.rs`'s. Nothing here calls into the exchange pipeline:
//! what follows from a connection's life for an exchange is returned to the loop.

use std::io;
use std::time::{Duration, Instant};

use ktls::readiness::ReadReadiness;
use ktls::IoStatus;

mod conn;
pub mod groups;
pub mod h2_conn;
pub mod h2_pieces;
mod h2_render;
mod h2_send;
pub mod reuse;
mod table;
mod tls;

pub(super) use conn::{arm_timer, close, connect, end, end_of, end_probe, settle, timer_due};
pub(super) use conn::{Conns, Freed, Opener, Settled, TimerDue};

pub use reuse::{reusable, ConnFacts, UpstreamEnd};
pub use table::{UpstreamId, Upstreams};
pub use tls::{Alpn, UpTls};

use super::client::ClientId;
use crate::buf::{Buf, BufPool};
use crate::outbox::Outbox;
use crate::socket::Socket;

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
    /// None for an HTTP/2 stream entry (`h2_conn.rs`): its connection's entry has the socket.
    pub sock: Option<Socket>,
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
    /// `server_tls`: the connection's TLS (None: cleartext).
    pub tls: Option<Box<UpTls>>,
    /// Whether the socket may have bytes before its next readiness event: a read that
    /// emptied the receive queue (for TLS: one the session found the socket empty for) is not
    /// followed by one that only says `EAGAIN`, as the clients' reads are not
    /// (`ktls::readiness`).
    pub readiness: ReadReadiness,
    /// `server_proto h2`: the HTTP/2 connection, or one stream of one (`h2_conn.rs`).
    pub h2: Option<h2_conn::H2Link>,
}

impl Upstream {
    /// How the server's side of this connection ended, if it did.
    pub fn peer_end(&self) -> super::lifecycle::PeerEnd {
        super::lifecycle::PeerEnd::of(self.peer_closed, self.peer_failed)
    }

    /// The server's ALPN answer on a TLS connection (None: cleartext).
    pub fn alpn(&self) -> Option<Alpn> {
        self.tls.as_ref().map(|t| t.alpn)
    }
}

/// The connections serving no exchange and no tunnel (pooled, or a probe's).
pub(super) fn unclaimed(upstreams: &Upstreams) -> Vec<UpstreamId> {
    upstreams
        .iter()
        .filter(|(_, u)| u.exchange.is_none() && !matches!(u.phase, UpPhase::Tunnel { .. }))
        // An HTTP/2 connection with streams serves exchanges through them.
        .filter(|(_, u)| !matches!(&u.h2, Some(h2_conn::H2Link::Conn(c)) if !c.streams.is_empty()))
        .map(|(ui, _)| ui)
        .collect()
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
    let Some(sock) = u.sock.as_mut() else {
        return Flushed::Nothing;
    };
    let status = match u.tls.as_deref_mut() {
        None => crate::transport::Transport::Plain(Default::default()).write(sock, &mut u.out),
        Some(t) => tls::write(t, sock, &mut u.out),
    };
    match status {
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

/// Writes connection `ui`'s queued bytes ([`flush`]); with what it did, the exchange it
/// serves and whether its queue is now empty.
#[inline]
pub(super) fn flush_at(
    upstreams: &mut Upstreams,
    ui: UpstreamId,
) -> (Flushed, Option<super::exchange::ExchangeId>, bool) {
    match upstreams.get_mut(ui) {
        Some(u) => (flush(u), u.exchange, u.out.is_empty()),
        None => (Flushed::Nothing, None, false),
    }
}

/// A readiness event for connection `ui`'s socket: its reads, skipped while the socket is
/// known to be empty, may find bytes (or, with `read_closed`, the end) again.
#[inline]
pub(in crate::worker) fn readable(upstreams: &mut Upstreams, ui: UpstreamId, read_closed: bool) {
    if let Some(u) = upstreams.get_mut(ui) {
        u.readiness.on_event(read_closed);
    }
}

/// Reads what connection `ui`'s socket has ([`read`]). True if anything came.
#[inline]
pub(super) fn read_at(upstreams: &mut Upstreams, bufs: &mut BufPool, ui: UpstreamId) -> bool {
    match upstreams.get_mut(ui) {
        Some(u) if u.h2.is_some() => h2_conn::refill(upstreams, bufs, ui),
        Some(u) => read(u, bufs),
        None => false,
    }
}

/// Reads what upstream `u`'s socket has, while there is room. True if anything came (bytes,
/// or the end).
#[inline]
pub(super) fn read(u: &mut Upstream, bufs: &mut BufPool) -> bool {
    if u.peer_closed || u.phase == UpPhase::Connecting {
        return false;
    }
    if u.tls.is_some() {
        return read_tls(u, bufs);
    }
    let Some(sock) = u.sock.as_mut() else {
        return false;
    };
    let rbuf = u.rbuf.get_or_insert_with(|| bufs.take());
    let mut got = false;
    while u.readiness.may_read() {
        let asked = rbuf.spare();
        if asked == 0 {
            break;
        }
        let result = rbuf.read_from(sock);
        u.readiness.after_read(asked, &result);
        match result {
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

/// [`read`] on a TLS connection: its decrypted bytes, while there is room.
fn read_tls(u: &mut Upstream, bufs: &mut BufPool) -> bool {
    let (Some(t), Some(sock)) = (u.tls.as_deref_mut(), u.sock.as_mut()) else {
        return false;
    };
    // Unlike a cleartext read, a short one says nothing here (the session reads records, not
    // the socket's queue): only a read the session found the socket empty for skips the
    // next ones until an event.
    if !u.readiness.may_read() {
        return false;
    }
    let rbuf = u.rbuf.get_or_insert_with(|| bufs.take());
    let mut got = false;
    while !rbuf.is_full() {
        match tls::read(t, (sock, u.addr), rbuf) {
            tls::Read::Bytes => got = true,
            tls::Read::Wait => break,
            tls::Read::Empty => {
                u.readiness
                    .after_read(0, &Err(io::ErrorKind::WouldBlock.into()));
                break;
            }
            tls::Read::Closed => {
                u.peer_closed = true;
                got = true;
                break;
            }
            tls::Read::Failed => {
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
