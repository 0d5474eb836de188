//! A connection's datagrams in one system call (generic segmentation offload): quinn-proto
//! lays up to [`SEGMENTS`] datagrams of one size end to end (`poll_transmit`), and one
//! `sendmsg` with UDP_SEGMENT hands them to the kernel, which cuts them apart. A socket the
//! kernel will not segment for (an old kernel, a device without it: EIO, EINVAL...) has GSO
//! turned off by its caller, and its datagrams go one by one as before.

use std::io::IoSlice;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use nix::errno::Errno;
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, SockaddrStorage};

/// Datagrams per system call at most: 32 of QUIC's at most 1452 bytes stay under the 64 KiB
/// a UDP send may carry (the kernel's own limit is 64 segments).
pub const SEGMENTS: usize = 32;

/// What [`send`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Sent {
    /// Sent, or dropped because the socket buffer is full (QUIC's loss recovery sends again).
    Done,
    /// The kernel refused to segment: sent one by one instead; turn GSO off for the socket.
    Refused,
}

/// Sends `bytes`, datagrams of `segment` bytes each (the last one may be shorter), to `to`.
pub fn send(socket: &mio::net::UdpSocket, bytes: &[u8], segment: usize, to: SocketAddr) -> Sent {
    let Ok(size) = u16::try_from(segment) else {
        one_by_one(socket, bytes, segment, to);
        return Sent::Done;
    };
    let cmsg = [ControlMessage::UdpGsoSegments(&size)];
    let addr = SockaddrStorage::from(to);
    let iov = [IoSlice::new(bytes)];
    match sendmsg(
        socket.as_raw_fd(),
        &iov,
        &cmsg,
        MsgFlags::empty(),
        Some(&addr),
    ) {
        Ok(_) | Err(Errno::EAGAIN) | Err(Errno::ENOBUFS) => Sent::Done,
        Err(Errno::EIO | Errno::EINVAL | Errno::EOPNOTSUPP | Errno::ENOPROTOOPT) => {
            one_by_one(socket, bytes, segment, to);
            Sent::Refused
        }
        // Anything else (an ICMP error of an earlier send, say) is the datagram's, not GSO's.
        Err(_) => Sent::Done,
    }
}

/// The datagrams of `bytes` in a system call each.
pub fn one_by_one(socket: &mio::net::UdpSocket, bytes: &[u8], segment: usize, to: SocketAddr) {
    for datagram in bytes.chunks(segment.max(1)) {
        let _ = socket.send_to(datagram, to);
    }
}
