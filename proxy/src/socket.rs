//! The stream under a client or upstream connection, and how upstream connections are opened.
//!
//! In the proxy it is always TCP. The worker's in-process tests (`worker/tests/`) run the
//! real worker loop on AF_UNIX socketpairs instead (no ports, no network stack: the test is
//! the client and the upstream, byte by byte); that variant and its connector exist only in
//! test builds.

use std::io::{self, IoSlice, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd};

use mio::event::Source;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

/// A connected (or connecting) non-blocking stream.
pub enum Socket {
    Tcp(TcpStream),
    /// An HTTP/3 connection's entry: the worker's UDP socket its datagrams come in on,
    /// shared with the QUIC owner (`worker/quic/`), which alone reads and writes it. Not
    /// readable or writable as a stream, and never registered for the connection.
    Quic(std::sync::Arc<mio::net::UdpSocket>),
    /// One end of a socketpair (worker tests).
    #[cfg(test)]
    Pair(mio::net::UnixStream),
}

impl Socket {
    /// The error a non-blocking connect ended with, if any (`SO_ERROR`).
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        match self {
            Socket::Tcp(s) => s.take_error(),
            Socket::Quic(s) => s.take_error(),
            #[cfg(test)]
            Socket::Pair(s) => s.take_error(),
        }
    }

    /// `Ok` once connected; `NotConnected` while a non-blocking connect is in progress.
    /// The address the peer connected to (a listener's, or its concrete IP for a
    /// wildcard listener).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Socket::Tcp(s) => s.local_addr(),
            Socket::Quic(s) => s.local_addr(),
            #[cfg(test)]
            Socket::Pair(_) => Err(io::ErrorKind::Unsupported.into()),
        }
    }

    pub fn connected(&self) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.peer_addr().map(drop),
            Socket::Quic(_) => Ok(()),
            #[cfg(test)]
            Socket::Pair(s) => s.peer_addr().map(drop),
        }
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.read(buf),
            Socket::Quic(_) => Err(io::ErrorKind::Unsupported.into()),
            #[cfg(test)]
            Socket::Pair(s) => s.read(buf),
        }
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write(buf),
            Socket::Quic(_) => Err(io::ErrorKind::Unsupported.into()),
            #[cfg(test)]
            Socket::Pair(s) => s.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write_vectored(bufs),
            Socket::Quic(_) => Err(io::ErrorKind::Unsupported.into()),
            #[cfg(test)]
            Socket::Pair(s) => s.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsFd for Socket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Socket::Tcp(s) => s.as_fd(),
            Socket::Quic(s) => s.as_fd(),
            #[cfg(test)]
            Socket::Pair(s) => s.as_fd(),
        }
    }
}

impl Source for Socket {
    fn register(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.register(registry, token, interests),
            Socket::Quic(_) => Ok(()),
            #[cfg(test)]
            Socket::Pair(s) => s.register(registry, token, interests),
        }
    }

    fn reregister(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.reregister(registry, token, interests),
            Socket::Quic(_) => Ok(()),
            #[cfg(test)]
            Socket::Pair(s) => s.reregister(registry, token, interests),
        }
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.deregister(registry),
            Socket::Quic(_) => Ok(()),
            #[cfg(test)]
            Socket::Pair(s) => s.deregister(registry),
        }
    }
}

/// Opens upstream connections: TCP, or (worker tests) a socketpair whose other end goes to
/// the test with the address the worker asked for.
#[derive(Default)]
pub enum Connector {
    #[default]
    Tcp,
    #[cfg(test)]
    Pairs(std::sync::mpsc::Sender<(SocketAddr, std::os::unix::net::UnixStream)>),
}

impl Connector {
    /// Starts a non-blocking connect to `addr`, with TCP_NODELAY, from the address `from`
    /// when given (a cache tier peer's connections come from this node's `self` address).
    pub fn connect(&self, addr: SocketAddr, from: Option<IpAddr>) -> io::Result<Socket> {
        match self {
            Connector::Tcp => {
                let sock = match from {
                    None => TcpStream::connect(addr)?,
                    Some(ip) => connect_from(addr, ip)?,
                };
                let _ = sock.set_nodelay(true);
                Ok(Socket::Tcp(sock))
            }
            #[cfg(test)]
            Connector::Pairs(to_test) => {
                let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
                ours.set_nonblocking(true)?;
                to_test
                    .send((addr, theirs))
                    .map_err(|_| io::Error::from(io::ErrorKind::ConnectionRefused))?;
                Ok(Socket::Pair(mio::net::UnixStream::from_std(ours)))
            }
        }
    }
}

/// A non-blocking connect to `addr` from `ip` (any port).
fn connect_from(addr: SocketAddr, ip: IpAddr) -> io::Result<TcpStream> {
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    sock.set_nonblocking(true)?;
    sock.bind(&SocketAddr::new(ip, 0).into())?;
    match sock.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => {}
        Err(e) => return Err(e),
    }
    Ok(TcpStream::from_std(sock.into()))
}
