//! A connection whose TLS records the kernel encrypts and decrypts in both directions: plain
//! syscalls on the fd, plus the handling of the control records the kernel hands up.

use std::io::{self, IoSlice};
use std::os::fd::BorrowedFd;

use crate::kernel::{self, record_type, KernelCipher, TlsVersion};
use crate::session::{AttachedFd, IoStatus, TlsError};

/// Alert level "warning" and description close_notify (RFC 8446 §6.1).
const ALERT_LEVEL_WARNING: u8 = 1;
const ALERT_CLOSE_NOTIFY: u8 = 0;
/// Handshake message type of a KeyUpdate (RFC 8446 §4.6.3).
const HANDSHAKE_KEY_UPDATE: u8 = 24;
const HANDSHAKE_NEW_SESSION_TICKET: u8 = 4;
/// Enough of a control record to classify it: alerts are 2 bytes, a handshake header 4.
const CONTROL_PEEK: usize = 64;

/// Both directions in the kernel; the SSL object is gone. The socket stays owned by the
/// caller: every call borrows it, and must borrow the one whose kernel state this value
/// describes (checked: a call on another descriptor would read and write plaintext).
#[derive(Debug)]
pub struct KtlsSocket {
    fd: AttachedFd,
    version: TlsVersion,
    cipher: KernelCipher,
    /// The peer's close_notify was seen: reads report `Closed` from now on.
    peer_closed: bool,
}

impl KtlsSocket {
    pub(crate) fn new(fd: AttachedFd, version: TlsVersion, cipher: KernelCipher) -> KtlsSocket {
        KtlsSocket {
            fd,
            version,
            cipher,
            peer_closed: false,
        }
    }

    pub fn version(&self) -> TlsVersion {
        self.version
    }

    pub fn cipher(&self) -> KernelCipher {
        self.cipher
    }

    /// Reads decrypted application data. `Closed` on close_notify or TCP end of stream; an
    /// error for any other alert, a KeyUpdate (the kernel cannot rekey) or a record that fails
    /// authentication. After an error the connection must be closed.
    pub fn read(&mut self, fd: BorrowedFd<'_>, buf: &mut [u8]) -> IoStatus {
        let fd = match self.fd.check(fd) {
            Ok(fd) => fd,
            Err(e) => return IoStatus::Error(e),
        };
        if buf.is_empty() {
            return IoStatus::Done(0);
        }
        if self.peer_closed {
            return IoStatus::Closed;
        }
        match kernel::recv(fd, buf) {
            Ok(0) => IoStatus::Closed,
            Ok(n) => IoStatus::Done(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => IoStatus::WantRead,
            // EIO: a record other than application data is next; see which.
            Err(e) if e.raw_os_error() == Some(libc::EIO) => self.read_control_record(fd, buf),
            Err(e) => IoStatus::Error(read_error(e)),
        }
    }

    fn read_control_record(&mut self, fd: BorrowedFd<'_>, buf: &mut [u8]) -> IoStatus {
        let mut scratch = [0u8; CONTROL_PEEK];
        let record = match kernel::recv_record(fd, &mut scratch) {
            Ok(record) => record,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return IoStatus::WantRead,
            Err(e) => return IoStatus::Error(read_error(e)),
        };
        let data = &scratch[..record.len.min(CONTROL_PEEK)];
        match record.record_type {
            record_type::ALERT => match data {
                [_, ALERT_CLOSE_NOTIFY] => {
                    self.peer_closed = true;
                    IoStatus::Closed
                }
                [_, description] => IoStatus::Error(TlsError::Alert(*description)),
                _ => IoStatus::Error(TlsError::Protocol(format!(
                    "alert record of {} bytes",
                    record.len
                ))),
            },
            record_type::HANDSHAKE => match data.first() {
                Some(&HANDSHAKE_KEY_UPDATE) => IoStatus::Error(TlsError::KeyUpdate),
                Some(&HANDSHAKE_NEW_SESSION_TICKET) => IoStatus::Error(TlsError::Protocol(
                    "NewSessionTicket from a client".to_string(),
                )),
                Some(kind) => IoStatus::Error(TlsError::Protocol(format!(
                    "post-handshake message type {kind} not supported on kTLS"
                ))),
                None => IoStatus::Error(TlsError::Protocol("empty handshake record".to_string())),
            },
            // EIO is only raised for non-data records, but a data record here is not lost:
            // hand over what fits (the kernel keeps the rest of a data record queued).
            record_type::APPLICATION_DATA => {
                let n = data.len().min(buf.len());
                buf[..n].copy_from_slice(&data[..n]);
                if n < data.len() {
                    IoStatus::Error(TlsError::Protocol("data record after EIO".to_string()))
                } else {
                    IoStatus::Done(n)
                }
            }
            other => IoStatus::Error(TlsError::Protocol(format!(
                "unexpected record type {other}"
            ))),
        }
    }

    /// Writes application data to the socket `fd`; the kernel frames and encrypts it.
    pub fn write(&mut self, fd: BorrowedFd<'_>, buf: &[u8]) -> IoStatus {
        let fd = match self.fd.check(fd) {
            Ok(fd) => fd,
            Err(e) => return IoStatus::Error(e),
        };
        if buf.is_empty() {
            return IoStatus::Done(0);
        }
        write_status(kernel::write(fd, buf))
    }

    /// Gathered write: a whole response (head + body) in one syscall.
    pub fn writev(&mut self, fd: BorrowedFd<'_>, bufs: &[IoSlice<'_>]) -> IoStatus {
        let fd = match self.fd.check(fd) {
            Ok(fd) => fd,
            Err(e) => return IoStatus::Error(e),
        };
        if bufs.iter().all(|b| b.is_empty()) {
            return IoStatus::Done(0);
        }
        write_status(kernel::writev(fd, bufs))
    }

    /// Sends up to `len` bytes of `in_fd` from `*offset` (advanced by what was sent): file
    /// pages go to the kernel's TLS layer without a copy through user space.
    pub fn sendfile(
        &mut self,
        fd: BorrowedFd<'_>,
        in_fd: BorrowedFd<'_>,
        offset: &mut u64,
        len: usize,
    ) -> IoStatus {
        let fd = match self.fd.check(fd) {
            Ok(fd) => fd,
            Err(e) => return IoStatus::Error(e),
        };
        if len == 0 {
            return IoStatus::Done(0);
        }
        write_status(kernel::sendfile(fd, in_fd, offset, len))
    }

    /// Sends close_notify. `Done(0)` when sent, `WantWrite` if the socket buffer is full.
    pub fn shutdown(&mut self, fd: BorrowedFd<'_>) -> IoStatus {
        let fd = match self.fd.check(fd) {
            Ok(fd) => fd,
            Err(e) => return IoStatus::Error(e),
        };
        match kernel::send_alert(fd, ALERT_LEVEL_WARNING, ALERT_CLOSE_NOTIFY) {
            Ok(()) => IoStatus::Done(0),
            Err(e) => write_status(Err(e)),
        }
    }
}

fn read_error(e: io::Error) -> TlsError {
    // EBADMSG: a record failed authentication, e.g. the first record under a key the peer
    // switched to with KeyUpdate, or a forged/corrupted record.
    if e.raw_os_error() == Some(libc::EBADMSG) {
        TlsError::Protocol("record failed authentication (EBADMSG)".to_string())
    } else {
        TlsError::Io(e)
    }
}

fn write_status(result: io::Result<usize>) -> IoStatus {
    match result {
        Ok(n) => IoStatus::Done(n),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => IoStatus::WantWrite,
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPIPE) | Some(libc::ECONNRESET)) => {
            IoStatus::Closed
        }
        Err(e) => IoStatus::Error(TlsError::Io(e)),
    }
}
