//! A worker's listening sockets: each worker has its own, bound with SO_REUSEPORT, so the
//! kernel spreads new connections over the workers.

use std::io;
use std::net::SocketAddr;

use mio::net::TcpListener;
use mio::{Interest, Registry, Token};

use super::token::LISTENER_BASE;

/// A listening socket of this worker.
pub struct WorkerListener {
    pub socket: TcpListener,
    pub addr: SocketAddr,
    pub tls: bool,
    /// The protocols the listener serves (`listen ... proto=`).
    pub protos: Vec<config::Proto>,
}

/// Registers every listener with the worker's poll, each under its own token.
pub(super) fn register_all(
    registry: &Registry,
    listeners: &mut [WorkerListener],
) -> io::Result<()> {
    for (i, l) in listeners.iter_mut().enumerate() {
        registry.register(&mut l.socket, Token(LISTENER_BASE + i), Interest::READABLE)?;
    }
    Ok(())
}

/// What one accept on a listener gave.
pub(super) enum Accepted {
    /// A new connection, with what the listener serves on it.
    Conn(crate::socket::Socket, SocketAddr, bool, Vec<config::Proto>),
    /// No connection waits (or the listener is gone).
    Empty,
    /// The accept failed (descriptors exhausted, say): try again after a pause.
    Failed(io::Error),
}

/// Accepts one connection on listener `li`, if one waits.
pub(super) fn accept(listeners: &[WorkerListener], li: usize) -> Accepted {
    let Some(listener) = listeners.get(li) else {
        return Accepted::Empty;
    };
    loop {
        return match listener.socket.accept() {
            Ok((sock, peer)) => Accepted::Conn(
                crate::socket::Socket::Tcp(sock),
                peer,
                listener.tls,
                listener.protos.clone(),
            ),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Accepted::Empty,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => Accepted::Failed(e),
        };
    }
}
