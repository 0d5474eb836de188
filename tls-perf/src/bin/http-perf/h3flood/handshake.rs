//! `--h3-flood handshake`: -c UDP sockets, each sending the first flight (a padded Initial)
//! of a new QUIC connection every round and never answering what comes back, for -d. A
//! socket stands for an address that never proves it is there (a spoofed source): what
//! the server sends to it is bounded by RFC 9000 §8.1 (three times what it received,
//! until the address is validated), and a server under load answers with a Retry instead.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn_proto::{Endpoint, EndpointConfig};

use super::Tally;
use crate::cli::Args;
use crate::h3::H3Plan;

/// Rounds of one Initial per socket are this far apart.
const ROUND: Duration = Duration::from_millis(20);
/// After the last round, what the server still sends (its retransmissions, within its
/// budget) is read for this long.
const LINGER: Duration = Duration::from_secs(3);

struct Source {
    socket: UdpSocket,
    sent: u64,
    received: u64,
}

pub fn run(addr: SocketAddr, plan: &H3Plan, args: &Args) -> io::Result<Tally> {
    let local: SocketAddr = match addr {
        SocketAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let mut sources = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        let socket = UdpSocket::bind(local)?;
        socket.connect(addr)?;
        socket.set_nonblocking(true)?;
        sources.push(Source {
            socket,
            sent: 0,
            received: 0,
        });
    }
    let mut tally = Tally::default();
    let mut scratch = vec![0u8; 65_535];
    let mut first_flight = Vec::with_capacity(1500);
    let end = Instant::now() + args.duration;
    while Instant::now() < end {
        for s in sources.iter_mut() {
            first_flight.clear();
            initial(addr, plan, &mut first_flight)?;
            if s.socket.send(&first_flight).is_ok() {
                s.sent += first_flight.len() as u64;
                tally.initials += 1;
            }
        }
        let next = Instant::now() + ROUND;
        read_until(&mut sources, &mut tally, &mut scratch, next);
    }
    read_until(
        &mut sources,
        &mut tally,
        &mut scratch,
        Instant::now() + LINGER,
    );
    for s in &sources {
        tally.bytes_sent += s.sent;
        tally.bytes_received += s.received;
        if s.sent > 0 {
            tally.worst_ratio = tally.worst_ratio.max(s.received as f64 / s.sent as f64);
        }
    }
    Ok(tally)
}

/// The first datagram of a new client connection to `addr` (its Initial, padded to 1200
/// bytes as RFC 9000 §14.1 requires).
fn initial(addr: SocketAddr, plan: &H3Plan, out: &mut Vec<u8>) -> io::Result<()> {
    let mut endpoint = Endpoint::new(Arc::new(EndpointConfig::default()), None, true, None);
    let now = Instant::now();
    let (_, mut conn) = endpoint
        .connect(now, plan.config.clone(), addr, &plan.server_name)
        .map_err(io::Error::other)?;
    let _ = conn.poll_transmit(now, 1, out);
    Ok(())
}

/// Reads every socket until `until`, counting bytes and Retry packets (a long header of
/// type Retry: the first byte's top four bits all set, in QUIC version 1).
fn read_until(sources: &mut [Source], tally: &mut Tally, scratch: &mut [u8], until: Instant) {
    while Instant::now() < until {
        let mut any = false;
        for s in sources.iter_mut() {
            while let Ok(n) = s.socket.recv(scratch) {
                any = true;
                s.received += n as u64;
                if scratch.first().is_some_and(|b| b & 0xf0 == 0xf0) {
                    tally.retries += 1;
                }
            }
        }
        if !any {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
