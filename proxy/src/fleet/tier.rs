//! The cache tier of `cluster { peer ...; self ...; }` (docs/FLEET.md, "Cache tier"): which
//! peer owns a request's object, the internal server group that reaches each other peer, and
//! the hop field that keeps a request from being sent on twice. No I/O: the worker forwards
//! (`worker/route.rs`, `serve`) and falls back (`worker/forward.rs`, `fail_exchange`).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::owners::Owners;
use crate::health_monitor::HealthMonitor;
use crate::runtime::{GroupRt, ServerRt};

/// The hop field a node adds to a request it sends to the key's owner. Its value is the
/// scheme the client used (`http` or `https`), so the owner keys and forwards the object as
/// the first node would have. Removed from every request that goes to an origin.
pub const HOP_FIELD: &str = "ktls-tier";

/// The hop field's value of a peer's probe: answered `204` by the peer itself on its `self`
/// listener (`worker/route.rs`), never forwarded, not counted by frang.
pub const PROBE: &[u8] = b"probe";

/// Connections kept to each peer by each worker at most.
const PEER_CONNS: usize = 32;
/// Requests that may wait for a peer connection, per connection (`server_queue_size`'s
/// default).
const PEER_QUEUE: usize = 1000;

/// The tier as the workers use it: built with the runtime, again at each reload (the peer
/// groups are carried over by name, `cluster:peer:IP:PORT`, as any group).
pub struct Tier {
    owners: Owners,
    /// For each peer in `owners`' order: the runtime group that reaches it, `None` for this
    /// node.
    groups: Vec<Option<usize>>,
    /// This node's `self` address: the listener the peers send their requests to, and the
    /// address this node's connections to the peers come from.
    pub me: SocketAddr,
    /// The other peers' addresses: the only sources whose hop field is honoured.
    peer_ips: Vec<IpAddr>,
    /// How long a peer may go quiet once the head of its answer came: the slowest origin
    /// group's `server_forward_timeout` (the owner relays its origin's body). Before the
    /// head, the peer groups' own `forward_timeout`, `peer_timeout`, applies.
    pub relay_timeout: Duration,
}

impl Tier {
    /// The tier of `peers` with this node at `me`, and the internal server group of each
    /// other peer, to be appended to the runtime's groups from index `first_group`.
    /// `(probe, relay_timeout)`: the peers' health check, whose `timeout` is `peer_timeout`
    /// (how long a peer may take to send the head of its answer), and how long it may go
    /// quiet after it (see [`Tier::relay_timeout`]).
    pub fn build(
        (peers, me): (&[SocketAddr], SocketAddr),
        first_group: usize,
        (probe, relay_timeout): (&config::HealthCheck, Duration),
    ) -> (Tier, Vec<GroupRt>) {
        let owners = Owners::new(peers.iter().map(|p| p.to_string()));
        let mut groups = Vec::new();
        let mut index = Vec::with_capacity(owners.len());
        for name in owners.names() {
            let addr = peers.iter().copied().find(|p| p.to_string() == name);
            match addr.filter(|a| *a != me) {
                Some(addr) => {
                    index.push(Some(first_group + groups.len()));
                    groups.push(peer_group(addr, probe));
                }
                None => index.push(None),
            }
        }
        let peer_ips = peers
            .iter()
            .filter(|p| **p != me)
            .map(SocketAddr::ip)
            .collect();
        let tier = Tier {
            owners,
            groups: index,
            me,
            peer_ips,
            relay_timeout: relay_timeout.max(probe.timeout),
        };
        (tier, groups)
    }

    /// The group of the peer that owns the object at `authority` and `path`; `None` when
    /// this node owns it. The key is the Host and the target: the start of the cache key
    /// (the fields a response varies on are not known before a lookup, so all the variants
    /// of one target live at one owner).
    pub fn owner_group(&self, authority: &[u8], path: &[u8]) -> Option<usize> {
        let i = self.owners.owner_index(&[authority, path])?;
        self.groups.get(i).copied().flatten()
    }

    /// Whether a connection from `from` to `local` is a peer's: it reached this node's
    /// `self` listener from another peer's address (the peers connect from theirs).
    pub fn is_peer_connection(&self, from: IpAddr, local: Option<SocketAddr>) -> bool {
        local == Some(self.me) && self.peer_ips.contains(&from)
    }

    /// Whether `group` is a peer's internal group.
    pub fn is_peer_group(&self, group: usize) -> bool {
        self.groups.contains(&Some(group))
    }
}

/// The internal server group of one peer: its name cannot be a configured group's (`:`),
/// `peer_timeout` for a connection, a place in the queue and the head of the answer; a
/// health monitor that sends `check` (`config::Cluster::peer_probe`) every `peer_timeout`
/// (at least 1 s) and wants `204` within it, so a peer that accepts connections and never
/// answers it (stopped, hung) is out, and back when it answers; no connect retries and one retry of a request whose
/// connection was reset: the origin is the fallback, so there is no point insisting.
fn peer_group(addr: SocketAddr, check: &config::HealthCheck) -> GroupRt {
    let peer_timeout = check.timeout;
    GroupRt {
        name: format!("cluster:peer:{addr}"),
        servers: vec![ServerRt {
            addr,
            weight: 1,
            conns_n: PEER_CONNS,
            backup: false,
            failover: None,
        }],
        hash: false,
        forward_timeout: peer_timeout,
        forward_retries: 1,
        connect_retries: 0,
        queue_limit: PEER_CONNS * PEER_QUEUE,
        health: Some(std::sync::Arc::new(HealthMonitor::new(
            check.clone(),
            false,
        ))),
        tls: None,
        h2: false,
    }
}

/// Requests sent to their owner, and of those sent to the origin after all
/// (`ktls_proxy_cache_tier_total`; per process, summed by the scrape).
static TO_OWNER: AtomicU64 = AtomicU64::new(0);
static FALLBACK: AtomicU64 = AtomicU64::new(0);

/// A request was sent to its owner.
pub fn count_to_owner() {
    TO_OWNER.fetch_add(1, Ordering::Relaxed);
}

/// A request sent to its owner went to the origin after all.
pub fn count_fallback() {
    FALLBACK.fetch_add(1, Ordering::Relaxed);
}

/// (sent to the owner, fallen back to the origin) so far.
pub fn counts() -> (u64, u64) {
    (
        TO_OWNER.load(Ordering::Relaxed),
        FALLBACK.load(Ordering::Relaxed),
    )
}

/// Whether a request head refused for `e` may have been grown past a limit by the fields a
/// node adds when it sends a request to its owner (the hop field, `X-Forwarded-For`, `Via`,
/// `X-Forwarded-Proto`): too many fields, or a field too long.
pub fn grown_by_hop(e: &http1::ParseError) -> bool {
    matches!(
        e,
        http1::ParseError::TooManyHeaders | http1::ParseError::HeaderFieldTooLong
    )
}

/// The parser limits of a peer's hop request: this node's, except the number of fields and
/// a field's length, which are those the asking node's writer held the request to
/// (`Limits::for_forwarding`, this node's raised to the parser's defaults). The client's
/// head was judged against the configured limits at the node it reached; the fields that
/// node added must not turn it into a 431 here (with `http_header_cnt 50`, a client's 50
/// fields are 53 at the owner). Anything else (the target, the body, the byte ranges) is
/// judged as the client's own request is.
pub fn hop_limits(limits: &http1::Limits, forward: &http1::Limits) -> http1::Limits {
    http1::Limits {
        max_headers: limits.max_headers.max(forward.max_headers),
        max_field_bytes: limits.max_field_bytes.max(forward.max_field_bytes),
        ..limits.clone()
    }
}

/// The scheme a hop field names, `None` for anything else.
pub fn hop_scheme(value: &[u8]) -> Option<&'static str> {
    match value {
        v if v.eq_ignore_ascii_case(b"https") => Some("https"),
        v if v.eq_ignore_ascii_case(b"http") => Some("http"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(secs: u64) -> config::HealthCheck {
        let cluster = config::Cluster {
            peer_timeout: Duration::from_secs(secs),
            ..Default::default()
        };
        cluster.peer_probe()
    }

    #[test]
    fn only_the_other_peers_addresses_on_the_self_listener_are_peers() {
        let peers = addrs(3);
        let (tier, _) = Tier::build((&peers, peers[0]), 0, (&probe(2), Duration::from_secs(60)));
        let me = Some(peers[0]);
        assert!(tier.is_peer_connection(peers[1].ip(), me));
        assert!(tier.is_peer_connection(peers[2].ip(), me));
        // Not from this node's own address, not from a client's, not on another listener.
        assert!(!tier.is_peer_connection(peers[0].ip(), me));
        assert!(!tier.is_peer_connection("192.0.2.7".parse().unwrap(), me));
        let other = SocketAddr::new(peers[0].ip(), peers[0].port().wrapping_add(1));
        assert!(!tier.is_peer_connection(peers[1].ip(), Some(other)));
        assert!(!tier.is_peer_connection(peers[1].ip(), None));
    }

    fn addrs(n: u8) -> Vec<SocketAddr> {
        (1..=n)
            .map(|i| SocketAddr::from(([127, 0, 0, i], 8080)))
            .collect()
    }

    #[test]
    fn every_other_peer_gets_a_group_and_this_node_none() {
        let peers = addrs(3);
        let (tier, groups) =
            Tier::build((&peers, peers[1]), 4, (&probe(2), Duration::from_secs(60)));
        assert_eq!(groups.len(), 2);
        assert!(groups.iter().all(|g| g.name.starts_with("cluster:peer:")));
        assert!(groups.iter().all(|g| g.servers[0].addr != peers[1]));
        assert!(tier.is_peer_group(4) && tier.is_peer_group(5) && !tier.is_peer_group(3));
        let mut mine = 0;
        for i in 0..3000 {
            let path = format!("/o/{i}");
            match tier.owner_group(b"site.test", path.as_bytes()) {
                None => mine += 1,
                Some(g) => assert!(g == 4 || g == 5, "{g}"),
            }
        }
        // About a third of the keys are this node's.
        assert!((800..=1200).contains(&mine), "{mine}");
    }

    /// Issue 37: "a node removed from the peer set moves only its keys", through the
    /// groups the worker forwards to.
    #[test]
    fn a_peer_removed_from_the_set_moves_only_its_keys() {
        let peers = addrs(4);
        let me = peers[0];
        let gone = peers[2];
        let kept: Vec<SocketAddr> = peers.iter().copied().filter(|p| *p != gone).collect();
        let (before, bg) = Tier::build((&peers, me), 0, (&probe(1), Duration::from_secs(1)));
        let (after, ag) = Tier::build((&kept, me), 0, (&probe(1), Duration::from_secs(1)));
        let addr = |groups: &[GroupRt], g: Option<usize>| g.map(|g| groups[g].servers[0].addr);
        let mut moved = 0;
        for i in 0..20_000 {
            let path = format!("/object/{i}");
            let was = addr(&bg, before.owner_group(b"h", path.as_bytes())).unwrap_or(me);
            let is = addr(&ag, after.owner_group(b"h", path.as_bytes())).unwrap_or(me);
            if was == gone {
                moved += 1;
                assert_ne!(is, gone);
            } else {
                assert_eq!(was, is, "{path} moved though its owner stayed");
            }
        }
        assert!(
            (4_500..=5_500).contains(&moved),
            "{moved} of 20000 (1/4: 5000)"
        );
    }

    #[test]
    fn a_hop_request_gets_the_forwarded_share_of_fields_and_length_only() {
        let configured = http1::Limits {
            max_headers: 6,
            max_field_bytes: 64,
            max_uri_bytes: 100,
            ..http1::Limits::default()
        };
        let hop = hop_limits(&configured, &configured.for_forwarding());
        assert_eq!((hop.max_headers, hop.max_field_bytes), (100, 8 * 1024));
        assert_eq!(hop.max_uri_bytes, 100);
        assert!(grown_by_hop(&http1::ParseError::TooManyHeaders));
        assert!(!grown_by_hop(&http1::ParseError::UriTooLong));
    }

    #[test]
    fn the_hop_field_names_a_scheme() {
        assert_eq!(hop_scheme(b"https"), Some("https"));
        assert_eq!(hop_scheme(b"HTTP"), Some("http"));
        assert_eq!(hop_scheme(b"ftp"), None);
        assert_eq!(hop_scheme(b""), None);
    }
}
