//! Reading a QUIC socket: datagrams, who sent each and, on a wildcard listener (`0.0.0.0`,
//! `[::]`), the address it was sent to. That address is the connection's (quinn-proto's
//! `local_ip`), and its replies leave from it (`gso.rs`): a host with several addresses
//! otherwise answers from whichever its route to the client prefers, and the client, which
//! knows only the address it sent to, drops the reply. The socket asks the kernel for it
//! (IP_PKTINFO, IPV6_RECVPKTINFO: [`want_destination`]) and each read takes it from the
//! control message. A socket bound to one address replies from it anyway: its reads ask
//! for no control message. Both are read [`SLOTS`] datagrams per system call (`recvmmsg`).

use std::io::{self, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd};

use nix::sys::socket::{
    recvmmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, MultiHeaders, RecvMsg,
    SockaddrStorage,
};

/// A datagram read into a [`Batch`].
#[derive(Clone, Copy)]
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
fn control_buffer() -> Vec<u8> {
    nix::cmsg_space!(nix::libc::in6_pktinfo)
}

/// Datagrams read per system call at most (`recvmmsg`). A read that returns fewer found
/// the socket empty: no further call to learn it (the edge-triggered poll reports the next
/// datagram's arrival), where one `recvfrom` per datagram needed one more, EAGAIN, per round.
pub const SLOTS: usize = 16;

/// A slot holds the largest UDP payload (QUIC's own maximum is 65527; clients send up to
/// ~1500). Only the pages a datagram touches become resident.
const SLOT: usize = 1 << 16;

/// The receive buffers of one socket: [`SLOTS`] datagrams' worth, and what the last read
/// put in them.
pub struct Batch {
    buf: Vec<u8>,
    /// A wildcard socket's: each datagram's destination is read from its control message.
    control: bool,
    /// The datagrams of the last read, each with its slot (dropped ones left out).
    got: Vec<(usize, Datagram)>,
}

impl Batch {
    pub fn new(control: bool) -> Batch {
        Batch {
            buf: vec![0; SLOTS * SLOT],
            control,
            got: Vec::with_capacity(SLOTS),
        }
    }

    /// The `k`th datagram of the last read, with its bytes.
    pub fn datagram(&self, k: usize) -> Option<(Datagram, &[u8])> {
        let &(slot, d) = self.got.get(k)?;
        let bytes = self.buf.get(slot * SLOT..slot * SLOT + d.len)?;
        Some((d, bytes))
    }
}

/// Reads what `socket` has, up to [`SLOTS`] datagrams, in one system call. Returns how many
/// slots were filled (the socket was empty if fewer than [`SLOTS`]); `batch` holds the
/// datagrams to take, without those to drop (truncated, or sent to a multicast address:
/// QUIC has no such thing, and a multicast source cannot answer it).
pub fn recv_batch(socket: &mio::net::UdpSocket, batch: &mut Batch) -> io::Result<usize> {
    batch.got.clear();
    // Made for each read: nix's headers hold raw pointers (not `Send`, so not kept in the
    // worker), and the kernel shrinks each header's control length to what it wrote.
    let control = batch.control.then(control_buffer);
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(SLOTS, control);
    let mut slots = batch.buf.chunks_exact_mut(SLOT);
    let mut iovs: [[IoSliceMut; 1]; SLOTS] =
        std::array::from_fn(|_| [IoSliceMut::new(slots.next().unwrap_or_default())]);
    let read = recvmmsg(
        socket.as_raw_fd(),
        &mut headers,
        iovs.iter_mut(),
        MsgFlags::MSG_DONTWAIT,
        None,
    )?;
    let mut filled = 0;
    for (slot, msg) in read.enumerate() {
        filled += 1;
        let from = msg.address.as_ref().and_then(socket_addr);
        let (Some(from), false) = (from, msg.flags.contains(MsgFlags::MSG_TRUNC)) else {
            continue;
        };
        let Some(to) = destination(&msg, batch.control) else {
            continue;
        };
        let len = msg.bytes;
        batch.got.push((slot, Datagram { len, from, to }));
    }
    Ok(filled)
}

/// The address to answer a datagram from: on a wildcard socket (`control`) the one it was
/// sent to; `None` when it is to be dropped.
fn destination<S>(msg: &RecvMsg<'_, '_, S>, control: bool) -> Option<Option<IpAddr>> {
    if !control {
        return Some(None);
    }
    let mut to = None;
    for cmsg in msg.cmsgs().into_iter().flatten() {
        match cmsg {
            // The local address the datagram reached (for one sent to a broadcast address,
            // the receiving interface's own).
            ControlMessageOwned::Ipv4PacketInfo(info) => {
                to = Some(IpAddr::V4(Ipv4Addr::from(
                    info.ipi_spec_dst.s_addr.to_ne_bytes(),
                )));
            }
            ControlMessageOwned::Ipv6PacketInfo(info) => {
                let ip = Ipv6Addr::from(info.ipi6_addr.s6_addr);
                if ip.is_multicast() {
                    return None;
                }
                to = Some(IpAddr::V6(ip));
            }
            _ => {}
        }
    }
    Some(to)
}

fn socket_addr(addr: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = addr.as_sockaddr_in() {
        return Some(SocketAddr::V4(SocketAddrV4::from(*v4)));
    }
    let v6 = addr.as_sockaddr_in6()?;
    Some(SocketAddr::V6(SocketAddrV6::from(*v6)))
}
