//! Reading a QUIC socket: one datagram, who sent it and, on a wildcard listener (`0.0.0.0`,
//! `[::]`), the address it was sent to. That address is the connection's (quinn-proto's
//! `local_ip`), and its replies leave from it (`gso.rs`): a host with several addresses
//! otherwise answers from whichever its route to the client prefers, and the client, which
//! knows only the address it sent to, drops the reply. The socket asks the kernel for it
//! (IP_PKTINFO, IPV6_RECVPKTINFO: [`want_destination`]) and each read takes it from the
//! control message (`recvmsg`). A socket bound to one address replies from it anyway: it
//! is read with `recvfrom` as before, no control message to make or parse.

use std::io::{self, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd};

use nix::sys::socket::{
    recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, SockaddrStorage,
};

/// A datagram read into the caller's buffer.
pub struct Datagram {
    pub len: usize,
    pub from: SocketAddr,
    /// The address the client sent to (a wildcard socket's only; None otherwise).
    pub to: Option<IpAddr>,
}

/// Asks the kernel for each datagram's destination address on `socket`, bound to `addr`
/// (a wildcard address: the sockets that need it).
pub fn want_destination(socket: &impl AsFd, addr: SocketAddr) -> io::Result<()> {
    match addr {
        SocketAddr::V4(_) => setsockopt(socket, sockopt::Ipv4PacketInfo, &true)?,
        SocketAddr::V6(_) => setsockopt(socket, sockopt::Ipv6RecvPacketInfo, &true)?,
    }
    Ok(())
}

/// The control message space a read with the destination address needs (the larger of
/// `in_pktinfo` and `in6_pktinfo`, with its header).
pub fn control_buffer() -> Vec<u8> {
    nix::cmsg_space!(nix::libc::in6_pktinfo)
}

/// Reads one datagram into `buf`; with `control` (a wildcard socket), its destination too.
/// `Ok(None)`: a datagram to drop (sent to a multicast address: QUIC has no such thing, and
/// a multicast source cannot answer it).
pub fn recv_one(
    socket: &mio::net::UdpSocket,
    buf: &mut [u8],
    control: Option<&mut Vec<u8>>,
) -> io::Result<Option<Datagram>> {
    let Some(control) = control else {
        let (len, from) = socket.recv_from(buf)?;
        return Ok(Some(Datagram {
            len,
            from,
            to: None,
        }));
    };
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<SockaddrStorage>(
        socket.as_raw_fd(),
        &mut iov,
        Some(control),
        MsgFlags::empty(),
    )?;
    let Some(from) = msg.address.as_ref().and_then(socket_addr) else {
        return Ok(None);
    };
    let mut to = None;
    for cmsg in msg.cmsgs().into_iter().flatten() {
        match cmsg {
            // The address to answer from: the local address the datagram reached (for one
            // sent to a broadcast address, the receiving interface's own).
            ControlMessageOwned::Ipv4PacketInfo(info) => {
                let ip = Ipv4Addr::from(info.ipi_spec_dst.s_addr.to_ne_bytes());
                to = Some(IpAddr::V4(ip));
            }
            ControlMessageOwned::Ipv6PacketInfo(info) => {
                let ip = Ipv6Addr::from(info.ipi6_addr.s6_addr);
                if ip.is_multicast() {
                    return Ok(None);
                }
                to = Some(IpAddr::V6(ip));
            }
            _ => {}
        }
    }
    Ok(Some(Datagram {
        len: msg.bytes,
        from,
        to,
    }))
}

fn socket_addr(addr: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = addr.as_sockaddr_in() {
        return Some(SocketAddr::V4(SocketAddrV4::from(*v4)));
    }
    let v6 = addr.as_sockaddr_in6()?;
    Some(SocketAddr::V6(SocketAddrV6::from(*v6)))
}
