//! User-space TLS on a socket fd: OpenSSL reads and writes the connection's own descriptor.
//!
//! The lifetime rule of every connection type of this crate (`TlsSession`, `KtlsSocket`,
//! `RecordSocket`): the value never owns or keeps the descriptor it runs on. Each call that
//! touches the socket borrows it (`BorrowedFd<'_>`), so the caller's socket is open for the
//! whole call by construction; the value only remembers the descriptor's number it was
//! attached to ([`AttachedFd`]) and refuses a call on any other descriptor.

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

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
    /// This many bytes were read or written. `Done(0)` from a read into a non-empty buffer
    /// is not the end of the stream (that is `Closed`): `RecordSocket::read` stopped after a
    /// run of records without data, and the caller reads again soon, without waiting for a
    /// readiness event.
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
    /// A call borrowed another descriptor than the one the connection was attached to: a bug
    /// in the caller. Nothing was read or written.
    WrongFd { attached: RawFd, given: RawFd },
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
            TlsError::WrongFd { attached, given } => write!(
                f,
                "connection attached to fd {attached} was driven on fd {given} (caller bug)"
            ),
        }
    }
}

impl std::error::Error for TlsError {}

/// The number of the descriptor a connection was attached to. Each call proves the socket is
/// open by borrowing it; this check proves it is the same socket (a number alone could name
/// a later socket after the first one closed, but not while the caller's borrow holds it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AttachedFd(RawFd);

impl AttachedFd {
    pub(crate) fn of(fd: BorrowedFd<'_>) -> AttachedFd {
        AttachedFd(fd.as_raw_fd())
    }

    /// `fd` itself when it is the attached descriptor.
    pub(crate) fn check<'fd>(self, fd: BorrowedFd<'fd>) -> Result<BorrowedFd<'fd>, TlsError> {
        if fd.as_raw_fd() == self.0 {
            Ok(fd)
        } else {
            Err(TlsError::WrongFd {
                attached: self.0,
                given: fd.as_raw_fd(),
            })
        }
    }

    pub(crate) fn raw(self) -> RawFd {
        self.0
    }
}

/// A server- or client-side TLS connection whose record layer runs in user space, on the
/// caller's socket. The caller keeps owning the socket: every call that reaches it borrows it
/// (OpenSSL's socket BIO holds the descriptor's number and uses it only inside those calls;
/// freeing the SSL object neither closes the descriptor nor writes to it).
pub struct TlsSession {
    ssl: Ssl,
    fd: AttachedFd,
}

impl TlsSession {
    /// Attaches `ssl` to the socket `fd` (`SSL_set_fd`). Call `set_accept_state` or
    /// `set_connect_state` on `ssl` first. Later calls must borrow the same socket.
    pub fn new(mut ssl: Ssl, fd: BorrowedFd<'_>) -> Result<TlsSession, TlsError> {
        ossl::set_fd(&mut ssl, fd).map_err(|e| TlsError::Setup(e.to_string()))?;
        Ok(TlsSession {
            ssl,
            fd: AttachedFd::of(fd),
        })
    }

    /// Drives the handshake as far as the socket `fd` allows.
    pub fn handshake(&mut self, fd: BorrowedFd<'_>) -> Result<Progress, TlsError> {
        self.fd.check(fd)?;
        match ossl::do_handshake(&mut self.ssl) {
            ossl::Outcome::Ok(_) => Ok(Progress::Done),
            ossl::Outcome::WantRead => Ok(Progress::WantRead),
            ossl::Outcome::WantWrite => Ok(Progress::WantWrite),
            ossl::Outcome::Closed => Err(TlsError::UnexpectedEof),
            ossl::Outcome::Failed(e) => Err(e),
        }
    }

    /// Reads decrypted application data from the socket `fd`.
    pub fn read(&mut self, fd: BorrowedFd<'_>, buf: &mut [u8]) -> IoStatus {
        if let Err(e) = self.fd.check(fd) {
            return IoStatus::Error(e);
        }
        if buf.is_empty() {
            return IoStatus::Done(0);
        }
        into_status(ossl::read(&mut self.ssl, buf))
    }

    /// Encrypts and writes application data to the socket `fd`; a partial write is reported
    /// as `Done(n)`.
    pub fn write(&mut self, fd: BorrowedFd<'_>, buf: &[u8]) -> IoStatus {
        if let Err(e) = self.fd.check(fd) {
            return IoStatus::Error(e);
        }
        if buf.is_empty() {
            return IoStatus::Done(0);
        }
        into_status(ossl::write(&mut self.ssl, buf))
    }

    /// Sends close_notify on the socket `fd`, best effort (the connection is being closed
    /// either way).
    pub fn shutdown(&mut self, fd: BorrowedFd<'_>) {
        if self.fd.check(fd).is_ok() {
            ossl::shutdown(&mut self.ssl);
        }
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

    /// The descriptor the session was attached to (for the hand-over, which checks it
    /// against the socket it is given).
    pub(crate) fn attached(&self) -> AttachedFd {
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
