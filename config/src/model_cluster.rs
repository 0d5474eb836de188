//! The `cluster` block (an extension; Tempesta has none): instances of the proxy behind one
//! L4 balancer sharing frang's per-client counters and `ip_block` entries through Redis.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `cluster { redis ADDR; sync_interval TIME; on_redis_failure open|closed; }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Cluster {
    /// `redis IP[:PORT]`: the Redis (or Valkey) server the instances share (port 6379).
    pub redis: SocketAddr,
    /// `sync_interval 100ms`: how often local counts are flushed to Redis and the fleet's
    /// totals and blocks read back (the bound of the limits' error).
    #[serde(with = "millis")]
    pub sync_interval: Duration,
    /// `on_redis_failure open|closed`: what new connections meet while Redis is away.
    pub on_redis_failure: RedisFailure,
}

/// Default `sync_interval`.
pub const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_millis(100);

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            redis: SocketAddr::from(([127, 0, 0, 1], 6379)),
            sync_interval: DEFAULT_SYNC_INTERVAL,
            on_redis_failure: RedisFailure::Open,
        }
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
