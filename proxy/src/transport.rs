//! How a client connection's bytes travel after the handshake: plain TCP, OpenSSL's record
//! layer on the fd, the proxy's own record layer (keys only, no SSL object), or kernel TLS
//! (plain syscalls; the kernel holds the keys).
//!
//! The socket is the client's (`Client::sock`); a transport never keeps it. Each call lends
//! it (`as_fd()`) to the TLS layer for that call only, so no TLS state can outlive or
//! mistake its socket (ktls checks the descriptor it is lent is the one it was attached to).

use std::io::{self, Read, Write};
use std::os::fd::AsFd;

use ktls::offload::KtlsSocket;
use ktls::readiness::ReadReadiness;
use ktls::record::RecordSocket;
use ktls::{IoStatus, TlsError, TlsSession};

use crate::outbox::Outbox;
use crate::socket::Socket;

// The proxy's record layer is the common case on hosts without kTLS. Its state (256 bytes)
// lives inline, in the worker's connection slab: boxed, it would be a small long-lived
// allocation made at the hand-over, in the middle of the pages other handshakes are about to
// free, and it would keep them resident (about 2 KB per idle connection with 512 handshakes in
// flight; docs/KTLS.md). The slab's entries are larger for it, but they are contiguous.
#[allow(
    clippy::large_enum_variant,
    reason = "inline on purpose: a box would pin freed handshake pages"
)]
pub enum Transport {
    /// Plain TCP, and whether the socket may have bytes before its next event.
    Plain(ReadReadiness),
    /// User-space TLS, and the length of a write OpenSSL asked to retry (0: none): a retry
    /// must offer exactly the same bytes.
    Tls(Box<TlsSession>, usize),
    /// The proxy's record layer: several records sealed straight from the queued segments
    /// (a cache hit's stored body included) and written with one syscall.
    Records(RecordSocket),
    Kernel(KtlsSocket),
}

/// Bytes gathered from several queued segments into one TLS record (a record's payload).
const RECORD: usize = 16 * 1024;

/// Most segments handed to one writev.
const WRITEV_MAX: usize = 16;

impl Transport {
    pub fn read(&mut self, sock: &mut Socket, buf: &mut [u8]) -> IoStatus {
        match self {
            Transport::Plain(readiness) => {
                if !readiness.may_read() {
                    return IoStatus::WantRead;
                }
                let result = retry_eintr(|| sock.read(buf));
                readiness.after_read(buf.len(), &result);
                plain_status(result, IoStatus::WantRead)
            }
            Transport::Tls(session, _) => session.read(sock.as_fd(), buf),
            Transport::Records(r) => r.read(sock.as_fd(), buf),
            Transport::Kernel(k) => k.read(sock.as_fd(), buf),
        }
    }

    /// Writes as much of `out` as the socket takes. `Done(n)` reports bytes taken.
    pub fn write(&mut self, sock: &mut Socket, out: &mut Outbox) -> IoStatus {
        let mut total = 0;
        while !out.is_empty() {
            let mut room = [io::IoSlice::new(&[]); WRITEV_MAX];
            let status = match self {
                Transport::Plain(_) => {
                    let slices = out.slices(&mut room);
                    plain_status(
                        retry_eintr(|| sock.write_vectored(slices)),
                        IoStatus::WantWrite,
                    )
                }
                Transport::Tls(session, retry) => write_tls(session, sock, retry, out),
                // A `WantWrite` here leaves sealed records in the socket's own buffer; the
                // outbox keeps their plaintext until a later call reports it written.
                Transport::Records(r) => r.writev(sock.as_fd(), out.slices(&mut room)),
                Transport::Kernel(k) => k.writev(sock.as_fd(), out.slices(&mut room)),
            };
            match status {
                IoStatus::Done(0) => {
                    return IoStatus::Error(TlsError::Io(io::ErrorKind::WriteZero.into()))
                }
                IoStatus::Done(n) => {
                    out.advance(n);
                    total += n;
                }
                IoStatus::WantRead | IoStatus::WantWrite if total > 0 => {
                    return IoStatus::Done(total)
                }
                other => return other,
            }
        }
        IoStatus::Done(total)
    }

    /// The TLS records read so far in the current key epoch, where the proxy's record layer
    /// reads them (`None`: plain TCP, or records read by OpenSSL or the kernel).
    pub fn records_read(&self) -> Option<u64> {
        match self {
            Transport::Records(r) => Some(r.layer().sequences().0),
            _ => None,
        }
    }

    /// A readiness event for the socket. Reads are skipped while the socket is known to be
    /// empty (`ktls::readiness`), so every event must come through here before reading.
    pub fn on_readable(&mut self, read_closed: bool) {
        match self {
            Transport::Plain(readiness) => readiness.on_event(read_closed),
            Transport::Records(r) => r.on_readable(read_closed),
            Transport::Tls(..) | Transport::Kernel(_) => {}
        }
    }

    /// Says goodbye at the TLS level (close_notify), best effort.
    pub fn shutdown(&mut self, sock: &Socket) {
        match self {
            Transport::Plain(_) => {}
            Transport::Tls(session, _) => session.shutdown(sock.as_fd()),
            Transport::Records(r) => r.shutdown(sock.as_fd()),
            Transport::Kernel(k) => {
                let _ = k.shutdown(sock.as_fd());
            }
        }
    }
}

/// One SSL_write of the front of `out`. Small segments (a cached response's head and body)
/// are gathered so that they leave in one record and one syscall instead of one each.
fn write_tls(session: &mut TlsSession, sock: &Socket, retry: &mut usize, out: &Outbox) -> IoStatus {
    let want = if *retry > 0 {
        *retry
    } else {
        out.len().min(RECORD)
    };
    let front = out.front();
    let status = if front.len() >= want {
        session.write(sock.as_fd(), &front[..want])
    } else {
        GATHER.with(|g| {
            let mut g = g.borrow_mut();
            g.clear();
            out.copy_front(want, &mut g);
            session.write(sock.as_fd(), &g)
        })
    };
    *retry = match status {
        IoStatus::WantRead | IoStatus::WantWrite => want,
        _ => 0,
    };
    status
}

thread_local! {
    /// Per-worker staging buffer for gathered TLS writes.
    static GATHER: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(Vec::with_capacity(RECORD));
}

/// Repeats a socket call interrupted by a signal: EINTR says nothing about the connection
/// (reporting it as zero bytes would make a write look failed and a read look finished).
fn retry_eintr(mut call: impl FnMut() -> io::Result<usize>) -> io::Result<usize> {
    loop {
        match call() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

fn plain_status(result: io::Result<usize>, would_block: IoStatus) -> IoStatus {
    match result {
        Ok(0) if matches!(would_block, IoStatus::WantRead) => IoStatus::Closed,
        Ok(n) => IoStatus::Done(n),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => would_block,
        Err(e) => IoStatus::Error(TlsError::Io(e)),
    }
}
