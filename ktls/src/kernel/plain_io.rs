//! The plain syscalls a kTLS socket is driven with once its crypto state is installed
//! (`read`, `recv`, `send`, `sendmsg`, `sendfile`): the kernel encrypts and decrypts behind
//! them. Each is retried on EINTR.

use std::io::{self, IoSlice};
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd};

use libc::c_void;

use super::check_len;

/// The most iovecs one `sendmsg` takes (`UIO_MAXIOV`); more are written by a later call.
const IOV_MAX: usize = 1024;

/// `read(2)`, retried on EINTR. On a kTLS RX socket it returns decrypted application data
/// and fails with EIO when a control record is next.
pub fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for buf.len() writable bytes for the duration of the call.
        let ret =
            unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast::<c_void>(), buf.len()) };
        match check_len(ret) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// `recv(2)` without flags, retried on EINTR: what [`read`] does on a socket, without the
/// part of `read(2)` that is for files (the position lock look-up, `rw_verify_area`, the
/// fsnotify hook). On a kTLS RX socket it is the same as `read`: both end in the socket's
/// `recvmsg` with the same flags (MSG_DONTWAIT from O_NONBLOCK), so it returns decrypted
/// application data and fails with EIO when a control record is next. Sockets only.
pub fn recv(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for buf.len() writable bytes for the duration of the call.
        let ret = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast::<c_void>(),
                buf.len(),
                0,
            )
        };
        match check_len(ret) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// `send(2)` with MSG_NOSIGNAL (a closed peer gives EPIPE, never SIGPIPE), retried on EINTR.
pub fn write(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for buf.len() readable bytes for the duration of the call.
        let ret = unsafe {
            libc::send(
                fd.as_raw_fd(),
                buf.as_ptr().cast::<c_void>(),
                buf.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        match check_len(ret) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Gathered write (`sendmsg(2)`, MSG_NOSIGNAL) of at most IOV_MAX slices, retried on EINTR.
pub fn writev(fd: BorrowedFd<'_>, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    let bufs = &bufs[..bufs.len().min(IOV_MAX)];
    loop {
        // SAFETY: an all-zero msghdr is a valid empty header.
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        // IoSlice is documented to be ABI-compatible with `struct iovec` on Unix; the kernel
        // only reads through msg_iov for a send.
        msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = bufs.len() as _;
        // SAFETY: `msg` points at `bufs.len()` live iovecs, each valid for its length.
        let ret = unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        match check_len(ret) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// `sendfile(2)` of up to `count` bytes of `in_fd` from `*offset`, which advances by what
/// was sent. On a kTLS TX socket the kernel encrypts the file pages itself.
pub fn sendfile(
    out_fd: BorrowedFd<'_>,
    in_fd: BorrowedFd<'_>,
    offset: &mut u64,
    count: usize,
) -> io::Result<usize> {
    let mut off: libc::off_t = libc::off_t::try_from(*offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "sendfile offset too large"))?;
    loop {
        // SAFETY: `off` is a valid in/out offset; the kernel reads `in_fd` and writes `out_fd`
        // without touching our memory otherwise.
        let ret = unsafe { libc::sendfile(out_fd.as_raw_fd(), in_fd.as_raw_fd(), &mut off, count) };
        match check_len(ret) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Ok(sent) => {
                *offset = off as u64;
                return Ok(sent);
            }
            Err(e) => return Err(e),
        }
    }
}
