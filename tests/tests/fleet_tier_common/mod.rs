//! Three proxies on 127.0.0.2-4 in front of one origin, each listing the peers of a cache
//! tier (docs/FLEET.md, "Cache tier"); each node names itself in the `Via` it adds
//! (`hdr_via`), so the origin tells which node fetched (the last `Via` entry) and through
//! which the request came. Used by tests/tests/fleet_tier*.rs.
#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use e2e::origin::{Origin, Request, Response};
use e2e::proxy::Proxy;
use e2e::rawclient::{get_with, Outcome, RawClient};
use e2e::{free_port, gen_cert, metric_sum, KeyKind, TempDir};

pub const T: Duration = Duration::from_secs(5);
pub const HOST: &str = "site.test";
/// Objects per test: enough that each node owns some (a third each, about).
pub const PATHS: usize = 30;
/// The clients' address (not a peer's).
pub const CLIENT: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);

pub struct Tier {
    pub nodes: Vec<Option<Proxy>>,
    /// Each node's `self` listener (the peers' and the clients').
    pub addrs: Vec<SocketAddr>,
    /// A second plain listener of each node, which is not `self`.
    pub public: Vec<SocketAddr>,
    /// Each node's HTTPS listener.
    pub tls: Vec<SocketAddr>,
    /// Each node's `stats_listen`.
    pub stats: Vec<SocketAddr>,
    pub origin: Origin,
}

/// Nodes `members` (indices into 127.0.0.2..) of a tier whose peer set is `peers`.
pub fn tier(tag: &str, peers: &[usize], members: &[usize]) -> Tier {
    tier_on(&ports(), tag, peers, members)
}

/// Ports for nodes 0..3 (a peer is named by its address and port: keep them to compare
/// two peer sets).
pub fn ports() -> Vec<u16> {
    (0..3).map(|_| free_port()).collect()
}

/// [`tier`] with node `i` listening on `ports[i]`.
pub fn tier_on(ports: &[u16], tag: &str, peers: &[usize], members: &[usize]) -> Tier {
    tier_with(ports, tag, (peers, "", ""), members)
}

/// The `peer` lines of the nodes `peers` listening on `ports`.
pub fn peer_lines(ports: &[u16], peers: &[usize]) -> String {
    peers
        .iter()
        .map(|&i| format!("peer {}; ", node_addr(ports, i)))
        .collect()
}

/// Node `i`'s `self` address.
pub fn node_addr(ports: &[u16], i: usize) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 2 + i as u8], ports[i]))
}

/// [`tier_on`] with `cluster_extra` in each node's `cluster` block and `vhost_extra` in
/// its vhost.
pub fn tier_with(
    ports: &[u16],
    tag: &str,
    peers_and_extras: (&[usize], &str, &str),
    members: &[usize],
) -> Tier {
    tier_top(ports, tag, peers_and_extras, members, "")
}

/// [`tier_with`] with `top` among each node's top-level directives (`frang_limits`).
pub fn tier_top(
    ports: &[u16],
    tag: &str,
    (peers, cluster_extra, vhost_extra): (&[usize], &str, &str),
    members: &[usize],
    top: &str,
) -> Tier {
    let origin =
        Origin::start(|_| Response::ok(b"object".to_vec()).header("Cache-Control", "max-age=60"));
    let addr = |i: usize| node_addr(ports, i);
    let peer_lines = peer_lines(ports, peers);
    let mut nodes = Vec::new();
    let mut public = Vec::new();
    let mut tls = Vec::new();
    let mut stats = Vec::new();
    for &i in members {
        let dir = TempDir::new(&format!("{tag}-{i}"));
        let (cert, key) = gen_cert(dir.path(), "site", KeyKind::EcdsaP256, &[HOST]);
        let other = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let https = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let stats_at = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let conf = format!(
            "listen {me};\nlisten {other};\nlisten {https} proto=https;\nstats_listen {stats_at};\n\
             srv_group default {{ server {origin}; }}\n\
             cache 1;\ncache_fulfill * *;\nhdr_via node{i};\ntls_match_any_server_name;\n{top}\n\
             cluster {{ {peer_lines} self {me}; {cluster_extra} }}\n\
             vhost site {{ proxy_pass default; tls_certificate {cert}; tls_certificate_key {key}; {vhost_extra} }}\n\
             http_chain {{ -> site; }}\n",
            me = addr(i),
            origin = origin.addr(),
            cert = cert.display(),
            key = key.display(),
        );
        nodes.push(Some(Proxy::start(dir, &conf, addr(i))));
        public.push(other);
        tls.push(https);
        stats.push(stats_at);
    }
    Tier {
        nodes,
        addrs: members.iter().map(|&i| addr(i)).collect(),
        public,
        tls,
        stats,
        origin,
    }
}

impl Tier {
    /// `ktls_proxy_cache_tier_total{kind}` summed over the nodes still running.
    pub fn tier_count(&self, kind: &str) -> u64 {
        let name = format!("ktls_proxy_cache_tier_total{{kind=\"{kind}\"}}");
        let running = self
            .nodes
            .iter()
            .zip(&self.stats)
            .filter(|(n, _)| n.is_some());
        running.map(|(_, s)| metric_sum(*s, &name)).sum()
    }

    pub fn logs(&self) -> String {
        self.nodes.iter().flatten().map(|p| p.proc.logs()).collect()
    }

    /// GET `path` through `to` with `extra` fields, on a new connection.
    pub fn get(&self, to: SocketAddr, path: &str, extra: &str) -> Outcome {
        self.get_from(CLIENT, to, path, extra)
    }

    /// As [`Tier::get`], from the address `from`.
    pub fn get_from(&self, from: Ipv4Addr, to: SocketAddr, path: &str, extra: &str) -> Outcome {
        let request = get_with(path, HOST, &format!("Connection: close\r\n{extra}"));
        match RawClient::connect_from(from, to) {
            Ok(mut c) => c.request(&request, T),
            Err(e) => Outcome::Error(format!("connect: {e}")),
        }
    }

    pub fn get_ok(&self, to: SocketAddr, path: &str, extra: &str) {
        self.get_ok_from(CLIENT, to, path, extra)
    }

    /// As [`Tier::get_ok`], from the address `from`.
    pub fn get_ok_from(&self, from: Ipv4Addr, to: SocketAddr, path: &str, extra: &str) {
        let got = self.get_from(from, to, path, extra);
        let body = got.response().map(|r| r.body.clone());
        assert!(
            got.status() == Some(200) && body.as_deref() == Some(&b"object"[..]),
            "{path} through {to}: {got}\n{}",
            self.logs()
        );
    }

    /// What reached the origin for `path`.
    pub fn at_origin(&self, path: &str) -> Vec<Request> {
        self.origin
            .requests()
            .into_iter()
            .filter(|r| r.path() == path)
            .collect()
    }
}

/// The node that fetched `request` from the origin (its `hdr_via` pseudonym, the last entry).
pub fn fetcher(request: &Request) -> String {
    let via = request.header("via").unwrap_or_default();
    let last = via.rsplit(',').next().unwrap_or_default().trim();
    last.trim_start_matches("1.1 ").to_string()
}

pub fn paths(tag: &str) -> Vec<String> {
    (0..PATHS).map(|i| format!("/{tag}/{i}")).collect()
}
