//! HTTP/3 to clients (issue 33): the owner of the worker's QUIC side. It owns one UDP
//! socket per `h3` listener (bound with SO_REUSEPORT by `server.rs`, one per worker) and
//! its `quinn_proto::Endpoint`, reads datagrams in bounded rounds and hands them to the
//! endpoint, which names the connection they are for. Each QUIC connection is a client
//! entry (`client::Client`, codec [`H3Codec`], socket `Socket::Quic`), so that its requests
//! become exchanges through the same pipeline as HTTP/1.1 and HTTP/2 ones (`client_token`,
//! `ClientId`, frang's per-address counts, the panic guard). `conn.rs` drives one
//! connection (datagrams in, streams read into the `h3` crate, its events returned as
//! [`Work`] for the loop, stream bytes out, datagrams sent, the timer armed), `body.rs`
//! passes request bodies upstream; nothing here calls into the exchange pipeline.

mod admit;
mod body;
mod budget;
pub mod codec;
mod conn;
mod gso;
mod heads;
mod recv;
pub mod reply;
pub mod route;

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use mio::{Interest, Registry, Token, Waker};
use quinn_proto::{ConnectionHandle, DatagramEvent};

use super::client::codec::Codec;
use super::client::{self, ClientId};
use crate::metrics::Metrics;
pub use body::{pump as pump_bodies, take_data};
pub use codec::H3Codec;
pub use conn::{close_blocked, closing, drive, flush, timeout, Work};

/// Poll tokens of the QUIC sockets: QUIC_BASE + index.
pub const QUIC_BASE: usize = 6 << 32;

/// Datagrams read per round at most (`recv::SLOTS` per system call). The poll is
/// edge-triggered: a full round is followed by another one in the next turn, which polls
/// without waiting (drive_h3.rs `quic_readable`); waiting for the next datagram's edge instead
/// left what the round did not read until a peer's retransmission timer sent one (seconds,
/// backing off: `h3_26k_rps` stalled 7 of 10 connections for 5 s that way).
const RECV_BATCH: usize = 256;

/// Kernel buffers of a QUIC socket each way (capped by net.core.rmem_max/wmem_max): at the
/// default ~208 KiB, one burst of a few connections' acknowledgements and requests overflows
/// it while the worker is busy, and each drop costs a retransmission.
const SOCKET_BUFFER: usize = 4 << 20;

/// The largest UDP payload written (QUIC's own maximum is 65527).
const MAX_DATAGRAM: usize = 65_535;

/// A UDP socket bound for one `h3` listener, before its worker takes it.
pub struct Bound {
    pub socket: std::net::UdpSocket,
    pub addr: SocketAddr,
}

/// Binds `addr` for QUIC: non-blocking, SO_REUSEPORT (each worker binds its own); a
/// wildcard address learns each datagram's destination, to reply from it (`recv.rs`).
pub fn bind(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    // Best effort: a smaller buffer than asked is still a working socket.
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER);
    if addr.ip().is_unspecified() {
        recv::want_destination(&socket, addr)?;
    }
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

struct Endpoint {
    socket: Arc<mio::net::UdpSocket>,
    endpoint: quinn_proto::Endpoint,
    /// The server configuration the endpoint accepts with (a reload may bring another).
    config: Option<Arc<quinn_proto::ServerConfig>>,
    /// Datagrams are sent several per system call (`gso.rs`) until the kernel refuses.
    gso: bool,
    /// Its receive buffers; on a wildcard address each read takes the datagram's
    /// destination, the address its replies leave from (`recv.rs`).
    batch: recv::Batch,
}

/// The worker's QUIC side.
#[derive(Default)]
pub struct Quic {
    endpoints: Vec<Endpoint>,
    /// Which client entry each connection is.
    conns: HashMap<(usize, ConnectionHandle), ClientId>,
    /// The connections whose handshake is in progress (`h3_max_handshakes`,
    /// `h3_retry_above` count them, all the worker's endpoints together).
    handshaking: HashSet<(usize, ConnectionHandle)>,
    metrics: Arc<Metrics>,
    /// This worker's index (the one its connection IDs carry), the process's key they are
    /// signed with, and the workers' queues of moved datagrams (`route.rs`).
    worker: usize,
    cid_key: u64,
    moves: Arc<route::Moves>,
    /// Datagrams written.
    send: Vec<u8>,
}

impl Quic {
    /// Takes this worker's bound sockets and registers them with its poll.
    pub fn new(
        bound: Vec<Bound>,
        registry: &Registry,
        config: Option<Arc<quinn_proto::ServerConfig>>,
        (worker, shared, waker): (usize, &super::shared::Shared, Arc<Waker>),
    ) -> io::Result<Quic> {
        let (metrics, moves) = (shared.metrics.clone(), shared.quic_moves.clone());
        moves.register(worker, waker);
        let cid_key = crate::tls_quic::cid_key();
        let mut endpoint_config = crate::tls_quic::endpoint_config();
        endpoint_config.cid_generator(move || {
            Box::new(route::WorkerCids {
                key: cid_key,
                worker,
            })
        });
        let endpoint_config = Arc::new(endpoint_config);
        let mut endpoints = Vec::with_capacity(bound.len());
        for (i, b) in bound.into_iter().enumerate() {
            let mut socket = mio::net::UdpSocket::from_std(b.socket);
            registry.register(&mut socket, Token(QUIC_BASE + i), Interest::READABLE)?;
            let endpoint =
                quinn_proto::Endpoint::new(endpoint_config.clone(), config.clone(), false, None);
            endpoints.push(Endpoint {
                socket: Arc::new(socket),
                endpoint,
                config: config.clone(),
                gso: true,
                batch: recv::Batch::new(b.addr.ip().is_unspecified()),
            });
        }
        Ok(Quic {
            endpoints,
            conns: HashMap::new(),
            handshaking: HashSet::new(),
            metrics,
            worker,
            cid_key,
            moves,
            send: Vec::with_capacity(MAX_DATAGRAM),
        })
    }

    /// The connection (client entry) `handle` on socket `i` is gone.
    fn forget(&mut self, i: usize, handle: ConnectionHandle) {
        self.conns.remove(&(i, handle));
        self.handshake_over(i, handle);
    }

    /// The handshake of `handle` on socket `i` completed or failed (once counted).
    fn handshake_over(&mut self, i: usize, handle: ConnectionHandle) {
        if self.handshaking.remove(&(i, handle)) {
            (self.metrics.quic.handshaking).fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Sends one datagram where `t` says; a full socket buffer drops it (QUIC's loss recovery
/// sends again).
fn send_to(socket: &mio::net::UdpSocket, bytes: &[u8], t: &quinn_proto::Transmit) {
    gso::send_one(socket, bytes, t);
}

/// What one round of [`recv`] did.
pub struct Received {
    /// The client entries to drive.
    pub touched: Vec<ClientId>,
    /// The round was full: the socket may hold more, for which no edge will come.
    pub more: bool,
}

/// Reads what QUIC socket `i` has (a bounded round) into its endpoint: new connections
/// become client entries, datagrams of known ones go to them; a datagram whose connection ID
/// names another worker is moved to it (`route.rs`).
pub fn recv(quic: &mut Quic, c: &mut client::Conns, i: usize) -> Received {
    let mut got = Received {
        touched: Vec::new(),
        more: false,
    };
    let Some(ep) = quic.endpoints.get_mut(i) else {
        return got;
    };
    if !same_config(&ep.config, &c.rt.quic) {
        ep.config = c.rt.quic.clone();
        ep.endpoint.set_server_config(ep.config.clone());
    }
    for _ in 0..RECV_BATCH / recv::SLOTS {
        let Some(ep) = quic.endpoints.get_mut(i) else {
            return got;
        };
        let filled = match recv::recv_batch(&ep.socket, &mut ep.batch) {
            Ok(filled) => filled,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return got,
            // An ICMP error of an earlier send, say: the datagrams behind it still wait.
            Err(_) => continue,
        };
        for k in 0.. {
            let Some((d, bytes)) = quic.endpoints.get(i).and_then(|ep| ep.batch.datagram(k)) else {
                break;
            };
            let data = bytes::BytesMut::from(bytes);
            take_or_move(quic, c, (i, (d.from, d.to), data), &mut got.touched);
        }
        if filled < recv::SLOTS {
            return got;
        }
    }
    got.more = true;
    got
}

/// A datagram read from socket `i`: into its endpoint, or to the worker its connection ID
/// names.
fn take_or_move(
    quic: &mut Quic,
    c: &mut client::Conns,
    (i, (from, to), data): (usize, (SocketAddr, Option<IpAddr>), bytes::BytesMut),
    touched: &mut Vec<ClientId>,
) {
    match route::owner(quic.cid_key, &data).filter(|&w| w != quic.worker) {
        Some(owner) => {
            let moved = route::Moved {
                socket: i,
                from,
                to,
                data,
            };
            move_to(quic, owner, moved);
        }
        None => take_in(quic, c, (i, (from, to), data), touched),
    }
}

/// The datagrams other workers moved here (this worker owns their connections).
pub fn recv_moved(quic: &mut Quic, c: &mut client::Conns) -> Received {
    let mut touched = Vec::new();
    for m in quic.moves.take(quic.worker) {
        take_in(quic, c, (m.socket, (m.from, m.to), m.data), &mut touched);
    }
    Received {
        touched,
        more: false,
    }
}

/// Hands `moved` to worker `owner`'s queue; counted, or dropped when the queue is full.
fn move_to(quic: &Quic, owner: usize, moved: route::Moved) {
    let m = &quic.metrics.quic;
    match quic.moves.send(owner, moved) {
        true => crate::metrics::bump(&m.moved),
        false => crate::metrics::bump(&m.moved_dropped),
    }
}

/// One datagram of socket `i` into its endpoint: from the client's address, to ours (a
/// wildcard socket's: the address the connection's replies leave from).
fn take_in(
    quic: &mut Quic,
    c: &mut client::Conns,
    (i, (from, to), data): (usize, (SocketAddr, Option<IpAddr>), bytes::BytesMut),
    touched: &mut Vec<ClientId>,
) {
    let Quic {
        endpoints,
        conns,
        handshaking,
        metrics,
        send,
        ..
    } = quic;
    let Some(ep) = endpoints.get_mut(i) else {
        return;
    };
    // The one answer quinn-proto makes to a short-header datagram (first bit 0) of a
    // connection it does not hold is a stateless reset.
    let short = data.first().is_some_and(|b| b & 0x80 == 0);
    send.clear();
    match ep
        .endpoint
        .handle(Instant::now(), from, to, None, data, send)
    {
        Some(DatagramEvent::ConnectionEvent(handle, event)) => {
            let Some(&ci) = conns.get(&(i, handle)) else {
                return;
            };
            // The entry is this connection's (a slot of a closed one may be reused).
            if let Some(Codec::H3(h3)) = c.clients.get_mut(ci).map(|cl| &mut cl.codec) {
                if (h3.endpoint, h3.handle) == (i, handle) {
                    h3.quic.handle_event(event);
                    touched.push(ci);
                }
            }
        }
        Some(DatagramEvent::NewConnection(incoming)) => {
            let busy = (handshaking.len(), &metrics.quic);
            if let Some(ci) = admit::admit(ep, (c, send), incoming, (i, busy)) {
                let key = (i, handle_of(c, ci));
                conns.insert(key, ci);
                handshaking.insert(key);
                touched.push(ci);
            }
        }
        Some(DatagramEvent::Response(t)) => {
            if short {
                crate::metrics::bump(&metrics.quic.stateless_resets);
            }
            send_to(&ep.socket, send.get(..t.size).unwrap_or_default(), &t);
        }
        None => {}
    }
}

fn handle_of(c: &client::Conns, ci: ClientId) -> ConnectionHandle {
    match c.clients.get(ci).map(|cl| &cl.codec) {
        Some(Codec::H3(h3)) => h3.handle,
        _ => ConnectionHandle(usize::MAX),
    }
}

fn same_config(
    a: &Option<Arc<quinn_proto::ServerConfig>>,
    b: &Option<Arc<quinn_proto::ServerConfig>>,
) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}
