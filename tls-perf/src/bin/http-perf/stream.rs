//! A non-blocking byte stream that is either plain TCP or TLS over TCP, shared by `http-perf`
//! (client side) and `origin` (server side, included with `#[path]`).
//!
//! TLS uses the `openssl` crate's `SslStream` over a mio socket: on a non-blocking socket,
//! OpenSSL's WANT_READ/WANT_WRITE surface as `io::ErrorKind::WouldBlock`, so callers treat both
//! kinds of stream alike and simply read and write until WouldBlock (mio is edge-triggered).

use std::io::{self, Read, Write};

use mio::net::TcpStream;
use openssl::ssl::{ErrorCode, Ssl, SslStream};

/// A connected socket, with or without TLS.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<SslStream<TcpStream>>),
}

/// What one handshake step achieved.
pub enum Handshake {
    Done,
    /// OpenSSL waits for the socket; call again on the next readiness event.
    Pending,
}

impl Stream {
    /// Wraps `tcp` in TLS; `ssl` must already be in connect or accept state.
    pub fn tls(ssl: Ssl, tcp: TcpStream) -> io::Result<Stream> {
        let stream = SslStream::new(ssl, tcp).map_err(io::Error::other)?;
        Ok(Stream::Tls(Box::new(stream)))
    }

    /// The underlying socket, to register it with mio.
    pub fn tcp(&mut self) -> &mut TcpStream {
        match self {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => tls.get_mut(),
        }
    }

    /// Advances the TLS handshake as far as the socket allows (plain streams are always done).
    pub fn handshake(&mut self) -> io::Result<Handshake> {
        let Stream::Tls(tls) = self else {
            return Ok(Handshake::Done);
        };
        match tls.do_handshake() {
            Ok(()) => Ok(Handshake::Done),
            Err(e) if e.code() == ErrorCode::WANT_READ || e.code() == ErrorCode::WANT_WRITE => {
                Ok(Handshake::Pending)
            }
            Err(e) => Err(e
                .into_io_error()
                .unwrap_or_else(|e| io::Error::new(io::ErrorKind::InvalidData, e))),
        }
    }

    /// Sends a TLS close_notify alert (best effort: the socket may be gone already), as a
    /// polite peer does before closing; nothing for plain TCP.
    pub fn close_notify(&mut self) {
        if let Stream::Tls(tls) = self {
            let _ = tls.shutdown();
        }
    }

    /// The TLS object (origin counts resumed sessions with it; http-perf's floods check
    /// the protocol ALPN selected).
    pub fn ssl(&self) -> Option<&openssl::ssl::SslRef> {
        match self {
            Stream::Plain(_) => None,
            Stream::Tls(tls) => Some(tls.ssl()),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(tcp) => tcp.read(buf),
            Stream::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(tcp) => tcp.write(buf),
            Stream::Tls(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
