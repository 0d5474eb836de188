//! The `cluster` block (an extension; Tempesta has none): instances of the proxy behind one
//! L4 balancer sharing frang's per-client counters and `ip_block` entries through Redis,
//! and caching as one tier (each cache key owned by one peer).

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `cluster { redis ADDR; sync_interval TIME; on_redis_failure open|closed; peer ADDR; ...
/// self ADDR; }`: Redis, the cache tier's peers, or both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Cluster {
    /// `redis IP[:PORT]`: the Redis (or Valkey) server the instances share (port 6379);
    /// `None`: no shared frang state (a cache tier only).
    pub redis: Option<SocketAddr>,
    /// `sync_interval 100ms`: how often local counts are flushed to Redis and the fleet's
    /// totals and blocks read back (the bound of the limits' error).
    #[serde(with = "millis")]
    pub sync_interval: Duration,
    /// `on_redis_failure open|closed`: what new connections meet while Redis is away.
    pub on_redis_failure: RedisFailure,
    /// `peer IP:PORT`, repeated: every node of the cache tier, this one included, each by
    /// the plain HTTP listener the others reach it on (the same list on every node).
    /// Empty: no cache tier.
    pub peers: Vec<SocketAddr>,
    /// `self IP:PORT`: which of `peers` this node is (one of its plain HTTP listeners).
    #[serde(rename = "self")]
    pub self_addr: Option<SocketAddr>,
    /// `peer_timeout 2s` (an extension): how long a peer may take to send the head of its
    /// answer (and to accept a connection, or a queued request to get one) before the
    /// request goes to the origin and the peer is taken out until its probe answers.
    #[serde(with = "millis")]
    pub peer_timeout: Duration,
}

/// Default `peer_timeout`.
pub const DEFAULT_PEER_TIMEOUT: Duration = Duration::from_secs(2);

/// Default `sync_interval`.
pub const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_millis(100);

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            redis: None,
            sync_interval: DEFAULT_SYNC_INTERVAL,
            on_redis_failure: RedisFailure::Open,
            peers: Vec::new(),
            self_addr: None,
            peer_timeout: DEFAULT_PEER_TIMEOUT,
        }
    }
}

impl Cluster {
    /// The cache tier's peers, this node among them; `None` without a tier.
    pub fn tier(&self) -> Option<(&[SocketAddr], SocketAddr)> {
        let me = self.self_addr?;
        (!self.peers.is_empty()).then_some((self.peers.as_slice(), me))
    }

    /// The health check each node makes of every other peer (the proxy's `fleet/tier.rs`):
    /// a request the peer answers `204` itself on its `self` listener (the hop field's
    /// value `probe`), within `peer_timeout`. Raw text, as a `health_check`'s `request`.
    pub fn peer_probe(&self) -> crate::HealthCheck {
        crate::HealthCheck {
            name: "cluster:probe".into(),
            request: "GET / HTTP/1.1\r\nHost: ktls-tier\r\nKtls-Tier: probe\r\n\
                      Connection: close\r\n\r\n"
                .into(),
            request_url: "/".into(),
            resp_codes: vec![204],
            resp_crc32: None,
            resp_crc32_auto: false,
            timeout: self.peer_timeout,
        }
    }

    /// Whether `other` differs from this block in what only a restart can change: the
    /// Redis side (the side thread and its connection are made once per process). The cache
    /// tier's `peer`, `self` and `peer_timeout` change with a reload.
    pub fn redis_side_differs(&self, other: &Cluster) -> bool {
        (self.redis, self.sync_interval, self.on_redis_failure)
            != (other.redis, other.sync_interval, other.on_redis_failure)
    }

    /// What is wrong with the block as a whole, given the node's listeners: (message, hint).
    /// The `.conf` reader reports it at the block, the TOML reader at the file.
    pub fn problem(&self, listeners: &[crate::Listener]) -> Option<(String, String)> {
        if self.redis.is_none() && self.peers.is_empty() && self.self_addr.is_none() {
            return Some((
                "`cluster` names neither a Redis server nor cache peers".into(),
                "add `redis IP[:PORT];` (shared frang limits), `peer IP:PORT;` lines and \
                 `self IP:PORT;` (a cache tier), or both"
                    .into(),
            ));
        }
        match (self.peers.is_empty(), self.self_addr) {
            (true, None) => return None,
            (false, None) => {
                return Some((
                    "`cluster` lists cache peers but not which one this node is".into(),
                    "add `self IP:PORT;` naming this node's entry of the `peer` list".into(),
                ))
            }
            (true, Some(me)) => {
                return Some((
                    format!("`self {me}` names this node of a cache tier with no `peer`"),
                    "list every node of the tier, this one included, with `peer IP:PORT;`".into(),
                ))
            }
            (false, Some(me)) if !self.peers.contains(&me) => {
                return Some((
                    format!("`self {me}` is not among the `peer` addresses"),
                    "list this node with the others (`peer` lines are the same on every node)"
                        .into(),
                ))
            }
            (false, Some(_)) => {}
        }
        let me = self.self_addr?;
        let plain = |l: &&crate::Listener| {
            !l.is_tls()
                && l.addr.port() == me.port()
                && (l.addr.ip() == me.ip() || l.addr.ip().is_unspecified())
        };
        if listeners.iter().any(|l| plain(&l)) {
            return None;
        }
        Some((
            format!("`self {me}` is not a plain HTTP listener of this node"),
            format!(
                "the other peers send their misses there in cleartext HTTP/1.1: add \
                 `listen {me};` (on the fleet's private network)"
            ),
        ))
    }
}

/// What the proxy does while Redis cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RedisFailure {
    /// Local limits only (each node judges alone, as a lone proxy would).
    Open,
    /// New connections are refused until Redis answers again.
    Closed,
}

/// Durations as whole milliseconds.
mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}
