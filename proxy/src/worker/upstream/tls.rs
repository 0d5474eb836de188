//! The TLS stage of an upstream connection (`server_tls`): its client session is made at the
//! connect, its handshake driven once the TCP connect completed (the connection stays
//! `Connecting` or `Probe` meanwhile, under the connect timer), then its records are read
//! and written through `Transport`.
//!
//! The records stay with OpenSSL (`Transport::Tls`), not the proxy's record layer or the
//! kernel that the client side hands them to: that hand-over is made for the server side
//! (`ktls::record::server_record_layer` and `ktls::offload` take the client's traffic
//! secret as the receive key and assume OpenSSL read nothing after the peer's Finished), and
//! a TLS 1.3 server sends its session tickets after the handshake, as post-handshake
//! records that only OpenSSL turns into the session the next connection resumes.

use std::net::SocketAddr;
use std::os::fd::AsFd;

use ktls::{IoStatus, Progress, TlsSession};

use crate::buf::Buf;
use crate::metrics::{bump, Metrics};
use crate::socket::Socket;
use crate::transport::Transport;
use crate::upstream_tls::{self, Failure, UpstreamTls};

/// An upstream connection's TLS.
pub struct UpTls {
    /// `Transport::Tls` from the start; its handshake is done when `open`.
    transport: Transport,
    /// The TCP connect completed (the handshake has begun).
    connected: bool,
    open: bool,
    /// What the server agreed to by ALPN, once open.
    pub alpn: Alpn,
}

/// The server's ALPN answer (`http/1.1` is offered to HTTP/1.1 groups, `h2` to
/// `server_proto h2` ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alpn {
    /// No answer (the server does not do ALPN): HTTP/1.1 is assumed.
    None,
    Http11,
    H2,
}

/// Where a connection's TLS stage stands after a readiness event.
pub(super) enum Stage {
    /// Open (or no TLS at all): requests may go out.
    Ready,
    Pending,
    /// The handshake failed, and was logged and counted.
    Failed,
}

/// The TLS of a new connection to server `server` (at `addr`) of a group with `tls`.
pub(super) fn start(
    tls: &UpstreamTls,
    (server, addr): (usize, SocketAddr),
    sock: &Socket,
) -> Result<Box<UpTls>, String> {
    let session = tls.start(server, addr, sock.as_fd())?;
    Ok(Box::new(UpTls {
        transport: Transport::Tls(Box::new(session), 0),
        connected: false,
        open: false,
        alpn: Alpn::None,
    }))
}

impl UpTls {
    /// Whether the TCP connect is known complete (the handshake has begun).
    pub(super) fn connected(&self) -> bool {
        self.connected
    }

    fn session(&mut self) -> Option<&mut TlsSession> {
        match &mut self.transport {
            Transport::Tls(session, _) => Some(session),
            _ => None,
        }
    }
}

/// Drives connection `tls`'s handshake on `sock` (to `addr`) as far as the socket allows.
pub(super) fn advance(
    tls: &mut UpTls,
    sock: &Socket,
    addr: SocketAddr,
    metrics: &Metrics,
) -> Stage {
    if tls.open {
        return Stage::Ready;
    }
    tls.connected = true;
    let Some(session) = tls.session() else {
        return Stage::Failed;
    };
    match session.handshake(sock.as_fd()) {
        Ok(Progress::Done) => {
            let ssl = session.ssl();
            let resumed = ssl.session_reused();
            let alpn = match ssl.selected_alpn_protocol() {
                Some(b"http/1.1") => Alpn::Http11,
                Some(b"h2") => Alpn::H2,
                _ => Alpn::None,
            };
            bump(if resumed {
                &metrics.upstream_tls.resumed
            } else {
                &metrics.upstream_tls.full
            });
            tls.alpn = alpn;
            tls.open = true;
            Stage::Ready
        }
        Ok(Progress::WantRead | Progress::WantWrite) => Stage::Pending,
        Err(e) => {
            let (kind, reason) = upstream_tls::failure(session.ssl(), &e);
            bump(match kind {
                Failure::Verify => &metrics.upstream_tls.verify_failed,
                Failure::Other => &metrics.upstream_tls.failed,
            });
            crate::error!("upstream {addr} TLS: {reason}");
            Stage::Failed
        }
    }
}

/// What one read of an open TLS connection gave.
pub(super) enum Read {
    Bytes,
    /// Nothing now.
    Wait,
    /// Nothing now, and the session found the socket empty (`SSL_read` wanted to read): any
    /// record it holds in part needs more bytes from the socket, whose arrival is an event.
    Empty,
    /// close_notify, or the end of the stream.
    Closed,
    /// The connection failed (a reset, a bad record, the end without close_notify).
    Failed,
}

/// Reads decrypted bytes into `rbuf`'s spare room from the server at `addr`. A failure is
/// logged with its reason: a TLS 1.3 server that wanted a client certificate refuses it
/// only after the handshake, so the first read is where that shows.
pub(super) fn read(
    tls: &mut UpTls,
    (sock, addr): (&mut Socket, SocketAddr),
    rbuf: &mut Buf,
) -> Read {
    if !tls.open {
        return Read::Wait;
    }
    let status = rbuf.fill_with(|room| match tls.transport.read(sock, room) {
        IoStatus::Done(n) => Ok(n),
        other => Err(other),
    });
    match status {
        Ok(0) => Read::Wait,
        Ok(_) => Read::Bytes,
        Err(IoStatus::Closed) => Read::Closed,
        Err(IoStatus::WantRead) => Read::Empty,
        Err(IoStatus::WantWrite | IoStatus::Done(_)) => Read::Wait,
        Err(IoStatus::Error(e)) => {
            if let Some(session) = tls.session() {
                let (_, reason) = upstream_tls::failure(session.ssl(), &e);
                crate::error!("upstream {addr} TLS: {reason}");
            }
            Read::Failed
        }
    }
}

/// Writes `out` through an open TLS connection (nothing while the handshake runs).
pub(super) fn write(
    tls: &mut UpTls,
    sock: &mut Socket,
    out: &mut crate::outbox::Outbox,
) -> IoStatus {
    if !tls.open {
        return IoStatus::WantWrite;
    }
    tls.transport.write(sock, out)
}

/// Says goodbye (close_notify), best effort, before the socket closes.
pub(super) fn shutdown(tls: &mut UpTls, sock: &Socket) {
    if tls.open {
        tls.transport.shutdown(sock);
    }
}
