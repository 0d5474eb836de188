//! DNS questions asked of the `resolver`'s servers over UDP: a name's A and AAAA records, or a
//! service's SRV records (RFC 2782) and their targets' addresses. Blocking, with the
//! configured timeout: it runs at load and on the resolver's side thread, never on a worker.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use simple_dns::rdata::RData;
use simple_dns::{Name, Packet, PacketFlag, Question, CLASS, RCODE, TYPE};

/// The addresses of a name (sorted, without duplicates; never empty) and how long they hold
/// (the smallest TTL of the records that gave them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub addrs: Vec<IpAddr>,
    pub ttl: Duration,
}

/// One SRV record (RFC 2782).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrvRecord {
    /// Lower case, without the trailing dot.
    pub target: String,
    pub port: u16,
    pub priority: u16,
    pub weight: u16,
}

/// A service's records, the addresses the answer carried for their targets (RFC 2782 allows
/// them in the additional section), and the smallest TTL of the records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrvAnswer {
    pub records: Vec<SrvRecord>,
    pub carried: Vec<(String, IpAddr)>,
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
    /// A server answered, with no record of the kind asked for the name.
    NoAddress,
}

impl std::fmt::Display for DnsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DnsError::BadName => write!(f, "not a name a DNS question can carry"),
            DnsError::NoAnswer(why) => write!(f, "no DNS server answered ({why})"),
            DnsError::Refused(code) => write!(f, "the DNS server answered {code}"),
            DnsError::NoAddress => write!(f, "the DNS server has no record of it"),
        }
    }
}

/// What one answer held, owned (the parsed packet borrows the datagram).
#[derive(Debug, Default)]
pub struct Records {
    /// From the answer section.
    pub addrs: Vec<(String, IpAddr)>,
    /// From the additional section: a service's targets' addresses, or anything else (an
    /// answer about a name may carry its name servers' addresses there, which are no
    /// addresses of the name).
    pub additional: Vec<(String, IpAddr)>,
    pub srv: Vec<SrvRecord>,
    pub ttl: Option<u32>,
}

/// Asks `servers` in turn (each for at most `timeout`) for `host`'s A and AAAA records.
pub fn ask(servers: &[SocketAddr], timeout: Duration, host: &str) -> Result<Answer, DnsError> {
    in_turn(servers, |server| {
        let asked = ask_one(server, timeout, host, &[TYPE::A, TYPE::AAAA])?;
        let mut addrs: Vec<IpAddr> = asked.addrs.into_iter().map(|(_, ip)| ip).collect();
        addrs.sort();
        addrs.dedup();
        if addrs.is_empty() {
            return Err(DnsError::NoAddress);
        }
        Ok(Answer {
            addrs,
            ttl: secs(asked.ttl),
        })
    })
}

/// Asks `servers` in turn for the SRV records of `name` (`_service._tcp.host`).
pub fn ask_srv(
    servers: &[SocketAddr],
    timeout: Duration,
    name: &str,
) -> Result<SrvAnswer, DnsError> {
    in_turn(servers, |server| {
        let asked = ask_one(server, timeout, name, &[TYPE::SRV])?;
        if asked.srv.is_empty() {
            return Err(DnsError::NoAddress);
        }
        Ok(SrvAnswer {
            records: asked.srv,
            carried: asked.additional,
            ttl: secs(asked.ttl),
        })
    })
}

fn secs(ttl: Option<u32>) -> Duration {
    Duration::from_secs(u64::from(ttl.unwrap_or(0)))
}

/// `one` of each server until one answers. A name a server does not know is not asked of
/// the next one (they serve the same zone); a server that is down or failing is.
fn in_turn<T>(
    servers: &[SocketAddr],
    mut one: impl FnMut(SocketAddr) -> Result<T, DnsError>,
) -> Result<T, DnsError> {
    let mut last = DnsError::NoAnswer("no servers".into());
    for server in servers {
        match one(*server) {
            Ok(answer) => return Ok(answer),
            Err(e @ (DnsError::BadName | DnsError::NoAddress)) => return Err(e),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The records of `kinds` about `name` from `server`.
fn ask_one(
    server: SocketAddr,
    timeout: Duration,
    name: &str,
    kinds: &[TYPE],
) -> Result<Records, DnsError> {
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
    let mut all = Records::default();
    let mut refused = None;
    // A server may answer one type and refuse the other (dnsmasq without upstreams refuses
    // the AAAA question about a name its hosts file gives only an IPv4 address): the
    // records of either are the answer.
    for &kind in kinds {
        let id = random_id();
        sock.send(&question(id, name, kind)?).map_err(io)?;
        match answer(&sock, deadline, (id, name, kind), server) {
            Ok(mut got) => {
                all.addrs.append(&mut got.addrs);
                all.additional.append(&mut got.additional);
                all.srv.append(&mut got.srv);
                all.ttl = match (all.ttl, got.ttl) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            Err(e @ DnsError::Refused(_)) => refused = Some(e),
            Err(e) => return Err(e),
        }
    }
    match refused {
        Some(e) if all.addrs.is_empty() && all.srv.is_empty() => Err(e),
        _ => Ok(all),
    }
}

fn question(id: u16, name: &str, kind: TYPE) -> Result<Vec<u8>, DnsError> {
    let mut packet = Packet::new_query(id);
    packet.set_flags(PacketFlag::RECURSION_DESIRED);
    let qname = Name::new(name).map_err(|_| DnsError::BadName)?;
    packet
        .questions
        .push(Question::new(qname, kind.into(), CLASS::IN.into(), false));
    packet.build_bytes_vec().map_err(|_| DnsError::BadName)
}

/// Reads datagrams until the answer to question `id` comes (others are ignored: late
/// answers to an earlier question, or forged ones); what it held.
fn answer(
    sock: &UdpSocket,
    deadline: Instant,
    (id, name, kind): (u16, &str, TYPE),
    server: SocketAddr,
) -> Result<Records, DnsError> {
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
        match judge(buf.get(..n).unwrap_or(&[]), (id, name, kind)) {
            Some(verdict) => return verdict,
            None => continue,
        }
    }
}

/// The kinds of question asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    A,
    Aaaa,
    Srv,
}

/// What a datagram from a DNS server says to question `id` of `kind` about `name`: `None` if
/// it is not its answer (the fuzz target `dns_answer` feeds it any bytes).
pub fn judge_answer(
    datagram: &[u8],
    id: u16,
    name: &str,
    kind: Kind,
) -> Option<Result<Records, DnsError>> {
    let kind = match kind {
        Kind::A => TYPE::A,
        Kind::Aaaa => TYPE::AAAA,
        Kind::Srv => TYPE::SRV,
    };
    judge(datagram, (id, name, kind))
}

/// What a datagram says to question `id` about `name`: `None` if it is not its answer.
fn judge(
    datagram: &[u8],
    (id, name, kind): (u16, &str, TYPE),
) -> Option<Result<Records, DnsError>> {
    let packet = Packet::parse(datagram).ok()?;
    let asked = packet
        .questions
        .first()
        .is_some_and(|q| q.qname.to_string().eq_ignore_ascii_case(name) && q.qtype == kind.into());
    if packet.id() != id || !packet.has_flags(PacketFlag::RESPONSE) || !asked {
        return None;
    }
    if packet.rcode() != RCODE::NoError {
        return Some(Err(DnsError::Refused(format!("{:?}", packet.rcode()))));
    }
    Some(Ok(records(&packet)))
}

/// The A, AAAA and SRV records of an answer and its additional section (those of a CNAME
/// chain's end included: records of other kinds are skipped), and their smallest TTL.
fn records(packet: &Packet<'_>) -> Records {
    let mut out = Records::default();
    let answers = packet.answers.iter().map(|rr| (rr, false));
    let additional = packet.additional_records.iter().map(|rr| (rr, true));
    for (rr, extra) in answers.chain(additional) {
        let owner = || {
            rr.name
                .to_string()
                .trim_end_matches('.')
                .to_ascii_lowercase()
        };
        let addr = match &rr.rdata {
            RData::A(a) => IpAddr::V4(Ipv4Addr::from(a.address)),
            RData::AAAA(a) => IpAddr::V6(Ipv6Addr::from(a.address)),
            RData::SRV(s) if !extra => {
                out.srv.push(SrvRecord {
                    target: s
                        .target
                        .to_string()
                        .trim_end_matches('.')
                        .to_ascii_lowercase(),
                    port: s.port,
                    priority: s.priority,
                    weight: s.weight,
                });
                out.ttl = Some(out.ttl.map_or(rr.ttl, |t| t.min(rr.ttl)));
                continue;
            }
            _ => continue,
        };
        if extra {
            out.additional.push((owner(), addr));
        } else {
            out.addrs.push((owner(), addr));
            out.ttl = Some(out.ttl.map_or(rr.ttl, |t| t.min(rr.ttl)));
        }
    }
    out
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
