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
