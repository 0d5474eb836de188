//! One DNS question, A and AAAA, asked of the `resolver`'s servers over UDP: the addresses a
//! name stands for and how long the answer holds. Blocking, with the configured timeout: it
//! runs at load and on the resolver's side thread, never on a worker.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use simple_dns::rdata::RData;
use simple_dns::{Name, Packet, PacketFlag, Question, CLASS, RCODE, TYPE};

/// What the DNS servers said about a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Sorted, without duplicates; never empty.
    pub addrs: Vec<IpAddr>,
    /// The smallest TTL of the records that gave them.
    pub ttl: Duration,
}

/// Why no addresses came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DnsError {
    /// The name is not one a DNS question can carry.
    BadName,
    /// No server answered in time (each got `timeout`), or a socket failed.
    NoAnswer(String),
    /// A server answered with an error code (NXDOMAIN, SERVFAIL, REFUSED ...).
    Refused(String),
    /// A server answered, with neither an A nor an AAAA record for the name.
    NoAddress,
}

impl std::fmt::Display for DnsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DnsError::BadName => write!(f, "not a name a DNS question can carry"),
            DnsError::NoAnswer(why) => write!(f, "no DNS server answered ({why})"),
            DnsError::Refused(code) => write!(f, "the DNS server answered {code}"),
            DnsError::NoAddress => write!(f, "the DNS server knows no address for it"),
        }
    }
}

/// Asks `servers` in turn (each for at most `timeout`) for `host`'s A and AAAA records.
pub fn ask(servers: &[SocketAddr], timeout: Duration, host: &str) -> Result<Answer, DnsError> {
    let mut last = DnsError::NoAnswer("no servers".into());
    for server in servers {
        match ask_one(*server, timeout, host) {
            Ok(answer) => return Ok(answer),
            // A name the server does not know is not asked of the next one: they serve the
            // same zone; a server that is down or failing is.
            Err(e @ (DnsError::BadName | DnsError::NoAddress)) => return Err(e),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn ask_one(server: SocketAddr, timeout: Duration, host: &str) -> Result<Answer, DnsError> {
    let io = |e: std::io::Error| DnsError::NoAnswer(format!("{server}: {e}"));
    let local: SocketAddr = if server.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    // Connected: datagrams from any other address are not delivered to it.
    let sock = UdpSocket::bind(local).map_err(io)?;
    sock.connect(server).map_err(io)?;
    let deadline = Instant::now() + timeout;
    let mut addrs = Vec::new();
    let mut ttl = u32::MAX;
    let mut refused = None;
    // A server may answer one type and refuse the other (dnsmasq without upstreams refuses
    // the AAAA question about a name its hosts file gives only an IPv4 address): the
    // addresses of either are the answer.
    for kind in [TYPE::A, TYPE::AAAA] {
        let id = random_id();
        sock.send(&question(id, host, kind)?).map_err(io)?;
        match answer(&sock, deadline, (id, host, kind), server) {
            Ok((mut got, rr_ttl)) => {
                ttl = ttl.min(rr_ttl);
                addrs.append(&mut got);
            }
            Err(e @ DnsError::Refused(_)) => refused = Some(e),
            Err(e) => return Err(e),
        }
    }
    addrs.sort();
    addrs.dedup();
    if addrs.is_empty() {
        return Err(refused.unwrap_or(DnsError::NoAddress));
    }
    Ok(Answer {
        addrs,
        ttl: Duration::from_secs(u64::from(ttl)),
    })
}

fn question(id: u16, host: &str, kind: TYPE) -> Result<Vec<u8>, DnsError> {
    let mut packet = Packet::new_query(id);
    packet.set_flags(PacketFlag::RECURSION_DESIRED);
    let name = Name::new(host).map_err(|_| DnsError::BadName)?;
    packet
        .questions
        .push(Question::new(name, kind.into(), CLASS::IN.into(), false));
    packet.build_bytes_vec().map_err(|_| DnsError::BadName)
}

/// Reads datagrams until the answer to question `id` comes (others are ignored: late
/// answers to an earlier question, or forged ones); its addresses and smallest TTL.
fn answer(
    sock: &UdpSocket,
    deadline: Instant,
    (id, host, kind): (u16, &str, TYPE),
    server: SocketAddr,
) -> Result<(Vec<IpAddr>, u32), DnsError> {
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(DnsError::NoAnswer(format!("{server}: timed out")));
        }
        sock.set_read_timeout(Some(left))
            .map_err(|e| DnsError::NoAnswer(e.to_string()))?;
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(DnsError::NoAnswer(format!("{server}: timed out")))
            }
            Err(e) => return Err(DnsError::NoAnswer(format!("{server}: {e}"))),
        };
        let Ok(packet) = Packet::parse(buf.get(..n).unwrap_or(&[])) else {
            continue;
        };
        let asked = packet.questions.first().is_some_and(|q| {
            q.qname.to_string().eq_ignore_ascii_case(host) && q.qtype == kind.into()
        });
        if packet.id() != id || !packet.has_flags(PacketFlag::RESPONSE) || !asked {
            continue;
        }
        if packet.rcode() != RCODE::NoError {
            return Err(DnsError::Refused(format!("{:?}", packet.rcode())));
        }
        return Ok(addresses(&packet));
    }
}

/// The A/AAAA records of an answer (those of a CNAME chain's end included: the records of
/// other types are skipped) and their smallest TTL.
fn addresses(packet: &Packet<'_>) -> (Vec<IpAddr>, u32) {
    let mut ttl = u32::MAX;
    let mut addrs = Vec::new();
    for rr in &packet.answers {
        let addr = match &rr.rdata {
            RData::A(a) => IpAddr::V4(Ipv4Addr::from(a.address)),
            RData::AAAA(a) => IpAddr::V6(Ipv6Addr::from(a.address)),
            _ => continue,
        };
        addrs.push(addr);
        ttl = ttl.min(rr.ttl);
    }
    (addrs, ttl)
}

/// A question id an off-path sender has to guess (with the socket's random port).
fn random_id() -> u16 {
    let mut b = [0u8; 2];
    if openssl::rand::rand_bytes(&mut b).is_err() {
        // Unreachable in practice; the connected socket still filters senders.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        return t.subsec_nanos() as u16;
    }
    u16::from_be_bytes(b)
}
