//! A connection's datagrams in one system call (generic segmentation offload): quinn-proto
//! lays up to [`SEGMENTS`] datagrams of one size end to end (`poll_transmit`), and one
//! `sendmsg` with UDP_SEGMENT hands them to the kernel, which cuts them apart. A socket the
//! kernel will not segment for (an old kernel, a device without it: EIO, EINVAL...) has GSO
//! turned off by its caller, and its datagrams go one by one as before.
//!
//! Each send leaves from the address its connection's client sent to when quinn-proto names
//! one (`Transmit::src_ip`: only on a wildcard listener, `recv.rs`): an IP_PKTINFO (or
//! IPV6_PKTINFO) control message beside UDP_SEGMENT. Without it a wildcard socket's reply
//! leaves from the address the kernel picks for the client's route, which the client does
//! not know and drops. A socket bound to one address needs none and sends as before.

use std::io::IoSlice;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

use nix::errno::Errno;
use nix::libc;
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, SockaddrStorage};
use quinn_proto::Transmit;

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

/// The source address of a send, as the kernel takes it (interface 0: routed as usual).
enum Source {
    V4(libc::in_pktinfo),
    V6(libc::in6_pktinfo),
}

impl Source {
    fn new(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(ip) => Source::V4(libc::in_pktinfo {
                ipi_ifindex: 0,
                ipi_spec_dst: libc::in_addr {
                    s_addr: u32::from_ne_bytes(ip.octets()),
                },
                ipi_addr: libc::in_addr { s_addr: 0 },
            }),
            IpAddr::V6(ip) => Source::V6(libc::in6_pktinfo {
                ipi6_addr: libc::in6_addr {
                    s6_addr: ip.octets(),
                },
                ipi6_ifindex: 0,
            }),
        }
    }

    fn cmsg(&self) -> ControlMessage<'_> {
        match self {
            Source::V4(info) => ControlMessage::Ipv4PacketInfo(info),
            Source::V6(info) => ControlMessage::Ipv6PacketInfo(info),
        }
    }
}

/// Sends `bytes`, datagrams of `segment` bytes each (the last one may be shorter), where
/// `t` says (its destination, from its source address if it names one).
pub fn send(socket: &mio::net::UdpSocket, bytes: &[u8], segment: usize, t: &Transmit) -> Sent {
    let Ok(size) = u16::try_from(segment) else {
        one_by_one(socket, bytes, segment, t);
        return Sent::Done;
    };
    let source = t.src_ip.map(Source::new);
    let gso = ControlMessage::UdpGsoSegments(&size);
    let both;
    let cmsgs = match &source {
        Some(source) => {
            both = [gso, source.cmsg()];
            &both[..]
        }
        None => std::slice::from_ref(&gso),
    };
    match send_msg(socket, bytes, cmsgs, t.destination) {
        Ok(()) | Err(Errno::EAGAIN) | Err(Errno::ENOBUFS) => Sent::Done,
        Err(Errno::EIO | Errno::EINVAL | Errno::EOPNOTSUPP | Errno::ENOPROTOOPT) => {
            // EINVAL may be the source's (an address removed from the host since the
            // client sent to it): GSO is refused only if the first datagram alone passes.
            let mut rest = bytes;
            if let Some(source) = &source {
                let (first, after) = bytes.split_at(segment.min(bytes.len()));
                if send_msg(socket, first, &[source.cmsg()], t.destination).is_err() {
                    return Sent::Done;
                }
                rest = after;
            }
            one_by_one(socket, rest, segment, t);
            Sent::Refused
        }
        // Anything else (an ICMP error of an earlier send, say) is the datagram's, not GSO's.
        Err(_) => Sent::Done,
    }
}

/// The datagrams of `bytes` in a system call each.
pub fn one_by_one(socket: &mio::net::UdpSocket, bytes: &[u8], segment: usize, t: &Transmit) {
    for datagram in bytes.chunks(segment.max(1)) {
        send_one(socket, datagram, t);
    }
}

/// Sends one datagram; a full socket buffer drops it (QUIC's loss recovery sends again).
/// With no source address to give, the plain `sendto` (a socket bound to one address).
pub fn send_one(socket: &mio::net::UdpSocket, datagram: &[u8], t: &Transmit) {
    match t.src_ip.map(Source::new) {
        Some(source) => {
            let _ = send_msg(socket, datagram, &[source.cmsg()], t.destination);
        }
        None => {
            let _ = socket.send_to(datagram, t.destination);
        }
    }
}

fn send_msg(
    socket: &mio::net::UdpSocket,
    bytes: &[u8],
    cmsgs: &[ControlMessage],
    to: SocketAddr,
) -> Result<(), Errno> {
    let addr = SockaddrStorage::from(to);
    let iov = [IoSlice::new(bytes)];
    sendmsg(
        socket.as_raw_fd(),
        &iov,
        cmsgs,
        MsgFlags::empty(),
        Some(&addr),
    )
    .map(|_| ())
}
