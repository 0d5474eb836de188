//! Socket options of TLS listeners that neither socket2 nor rustix names. Each saves work per
//! connection before the first TLS byte.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::Duration;

/// Makes the kernel complete `accept` on listener `fd` only once the client has sent data (its
/// ClientHello) or after `wait`, whichever is first (`TCP_DEFER_ACCEPT`). A TLS server can do
/// nothing with a connection before the ClientHello: without this, every connection costs a
/// wake-up, an `SSL_do_handshake` that reads nothing (`EAGAIN`) and an epoll round before the
/// first useful call. Connections that never send stay in the kernel's SYN queue instead of
/// the proxy's tables. Linux only; elsewhere a no-op.
pub fn defer_accept(fd: BorrowedFd<'_>, wait: Duration) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let secs = libc::c_int::try_from(wait.as_secs().max(1)).unwrap_or(libc::c_int::MAX);
        use std::os::fd::AsRawFd;
        // SAFETY: `fd` is open for the duration of the call (borrowed); the option value is a
        // c_int on the stack whose size is passed along; setsockopt reads only it.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_DEFER_ACCEPT,
                std::ptr::addr_of!(secs).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (fd, wait);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    /// A connection that has sent nothing is not accepted; one that has sent is, with its
    /// bytes already readable.
    #[test]
    fn accept_waits_for_the_first_bytes() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        defer_accept(listener.as_fd(), Duration::from_secs(5)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let _silent = TcpStream::connect(addr).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let err = listener
            .accept()
            .expect_err("a silent connection was accepted");
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        let mut talker = TcpStream::connect(addr).unwrap();
        talker.write_all(b"\x16\x03\x01").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let (mut accepted, _) = loop {
            match listener.accept() {
                Ok(pair) => break pair,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    assert!(std::time::Instant::now() < deadline, "never accepted");
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("accept: {e}"),
            }
        };
        assert_eq!(accepted.peer_addr().unwrap(), talker.local_addr().unwrap());
        accepted.set_nonblocking(false).unwrap();
        let mut first = [0u8; 3];
        accepted.read_exact(&mut first).unwrap();
        assert_eq!(&first, b"\x16\x03\x01");
    }
}
