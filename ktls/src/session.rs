//! User-space TLS on a socket fd: OpenSSL reads and writes the connection's own descriptor.

use std::fmt;
use std::io;
use std::os::fd::RawFd;

use openssl::ssl::{Ssl, SslRef};

use crate::ossl;

/// Where a non-blocking handshake stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Done,
    WantRead,
    WantWrite,
}

/// The outcome of one read or write attempt on a TLS connection (user space or kernel).
#[derive(Debug)]
pub enum IoStatus {
    /// This many bytes were read or written.
    Done(usize),
    /// Nothing more until the socket is readable.
    WantRead,
    /// Nothing more until the socket is writable.
    WantWrite,
    /// The peer closed: close_notify or end of stream.
    Closed,
    Error(TlsError),
}

/// Why a TLS connection failed.
#[derive(Debug)]
pub enum TlsError {
    /// The peer broke the protocol or the handshake failed (OpenSSL's reason).
    Protocol(String),
    /// The socket failed.
    Io(io::Error),
    /// The peer closed the TCP connection without close_notify in the middle of a record.
    UnexpectedEof,
    /// The peer asked for a KeyUpdate, which a kernel-offloaded connection cannot follow.
    KeyUpdate,
    /// The peer sent an alert other than close_notify.
    Alert(u8),
    /// OpenSSL could not be set up for this connection.
    Setup(String),
    /// The proxy's record layer closed the connection (after sending the matching alert).
    Record(crate::record::RecordError),
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::Protocol(reason) => write!(f, "TLS protocol error: {reason}"),
            TlsError::Io(e) => write!(f, "socket error: {e}"),
            TlsError::UnexpectedEof => f.write_str("peer closed without close_notify"),
            TlsError::KeyUpdate => f.write_str("peer sent KeyUpdate, which kTLS cannot follow"),
            TlsError::Alert(code) => write!(f, "peer sent TLS alert {code}"),
            TlsError::Setup(reason) => write!(f, "TLS setup failed: {reason}"),
            TlsError::Record(e) => write!(f, "TLS record layer: {e}"),
        }
    }
}

impl std::error::Error for TlsError {}

/// A server- or client-side TLS connection whose record layer runs in user space, on the
/// caller's socket fd. The fd stays owned by the caller and must outlive the session.
pub struct TlsSession {
    ssl: Ssl,
    fd: RawFd,
}

impl TlsSession {
    /// Attaches `ssl` to `fd` (`SSL_set_fd`). Call `set_accept_state` or `set_connect_state`
    /// on `ssl` first.
    pub fn new(mut ssl: Ssl, fd: RawFd) -> Result<TlsSession, TlsError> {
        ossl::set_fd(&mut ssl, fd).map_err(|e| TlsError::Setup(e.to_string()))?;
        Ok(TlsSession { ssl, fd })
    }

    /// Drives the handshake as far as the socket allows.
    pub fn handshake(&mut self) -> Result<Progress, TlsError> {
        match ossl::do_handshake(&mut self.ssl) {
            ossl::Outcome::Ok(_) => Ok(Progress::Done),
            ossl::Outcome::WantRead => Ok(Progress::WantRead),
            ossl::Outcome::WantWrite => Ok(Progress::WantWrite),
            ossl::Outcome::Closed => Err(TlsError::UnexpectedEof),
            ossl::Outcome::Failed(e) => Err(e),
        }
    }

    /// Reads decrypted application data.
    pub fn read(&mut self, buf: &mut [u8]) -> IoStatus {
        if buf.is_empty() {
            return IoStatus::Done(0);
        }
        into_status(ossl::read(&mut self.ssl, buf))
    }

    /// Encrypts and writes application data; a partial write is reported as `Done(n)`.
    pub fn write(&mut self, buf: &[u8]) -> IoStatus {
        if buf.is_empty() {
            return IoStatus::Done(0);
        }
        into_status(ossl::write(&mut self.ssl, buf))
    }

    /// Sends close_notify, best effort (the connection is being closed either way).
    pub fn shutdown(&mut self) {
        ossl::shutdown(&mut self.ssl);
    }

    /// Bytes OpenSSL has already read from the socket and not yet handed out.
    pub fn has_pending(&self) -> bool {
        ossl::has_pending(&self.ssl)
    }

    pub fn ssl(&self) -> &SslRef {
        &self.ssl
    }

    pub fn ssl_mut(&mut self) -> &mut SslRef {
        &mut self.ssl
    }

    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// Gives up the session's OpenSSL object. Freeing it leaves the fd open and sends nothing
    /// (the socket BIO does not own the fd).
    pub fn into_ssl(self) -> Ssl {
        self.ssl
    }
}

fn into_status(outcome: ossl::Outcome) -> IoStatus {
    match outcome {
        ossl::Outcome::Ok(n) => IoStatus::Done(n),
        ossl::Outcome::WantRead => IoStatus::WantRead,
        ossl::Outcome::WantWrite => IoStatus::WantWrite,
        ossl::Outcome::Closed => IoStatus::Closed,
        ossl::Outcome::Failed(e) => IoStatus::Error(e),
    }
}
