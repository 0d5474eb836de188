//! The `cluster` block (an extension): the Redis server the instances share, how often they
//! reconcile through it, and what happens while it is away; the cache tier's peers and
//! which of them this node is.

use std::net::SocketAddr;
use std::time::Duration;

use super::once::Seen;
use super::unknown_here;
use super::values::Checker;
use crate::diag::Pos;
use crate::directives::CLUSTER_LEVEL;
use crate::model::{Cluster, Config, RedisFailure};
use crate::tree::{Directive, Node, Value};

const USAGE: &str = "cluster { redis IP[:PORT]; sync_interval 100ms; on_redis_failure open; \
                     peer IP:PORT; ...; self IP:PORT; peer_timeout 2s; }";

/// Directives given once in the block (`peer` repeats).
const SINGLE: &[&str] = &[
    "redis",
    "sync_interval",
    "on_redis_failure",
    "self",
    "peer_timeout",
];

/// Shortest and longest `peer_timeout`: below 100 ms a busy peer on a loaded network would
/// be taken out; above a minute it is no shorter than the origins' own timeout.
const PEER_TIMEOUT_MS: (u64, u64) = (100, 60_000);

/// Shortest and longest `sync_interval`: below 10 ms Redis does more work than the limits
/// gain; the longest is the time slot of the shared rate limits (their one-second frame cut
/// into Tempesta's 8 slots: 125 ms). A longer interval would let the events of one turn
/// span several slots and the fleet's counts lag a slot behind the time they are judged at:
/// the limit would no longer bound the fleet's burst.
const INTERVAL_MS: (u64, u64) = (10, 125);

/// `cluster { ... }` at top level: `None` after an error (reported). The checks that need
/// the listeners are made by [`check_whole`] once the file is read.
pub fn apply(c: &mut Checker<'_>, d: &Directive) -> Option<Cluster> {
    c.attrs_only(d, &[]);
    let Some(children) = d.children.as_ref().filter(|_| d.args.is_empty()) else {
        c.error(&d.pos, "`cluster` takes a block and no arguments", USAGE);
        return None;
    };
    let mut cluster = Cluster::default();
    let mut ok = true;
    let mut seen = Seen::default();
    for node in children {
        let Node::Directive(x) = node else {
            c.error(
                node_pos(node),
                "http_chain rules are not allowed in `cluster`",
                USAGE,
            );
            ok = false;
            continue;
        };
        if !seen.check(c, x, SINGLE) {
            ok = false;
            continue;
        }
        ok &= match x.name.as_str() {
            "redis" => set(
                &mut cluster.redis,
                c.single(x, "redis IP[:PORT]")
                    .and_then(|v| c.socket_addr(v, 6379))
                    .map(Some),
            ),
            "peer" => match c.single(x, "peer IP:PORT").and_then(|v| peer_addr(c, v)) {
                Some((addr, pos)) if cluster.peers.contains(&addr) => {
                    c.error(
                        &pos,
                        format!("peer {addr} is listed twice"),
                        "list each node of the cache tier once",
                    );
                    false
                }
                Some((addr, _)) => {
                    cluster.peers.push(addr);
                    true
                }
                None => false,
            },
            "self" => set(
                &mut cluster.self_addr,
                c.single(x, "self IP:PORT")
                    .and_then(|v| peer_addr(c, v))
                    .map(|(addr, _)| Some(addr)),
            ),
            "sync_interval" => set(
                &mut cluster.sync_interval,
                c.single(x, "sync_interval 100ms")
                    .and_then(|v| interval(c, v)),
            ),
            "peer_timeout" => set(
                &mut cluster.peer_timeout,
                c.single(x, "peer_timeout 2s")
                    .and_then(|v| peer_timeout(c, v)),
            ),
            "on_redis_failure" => set(
                &mut cluster.on_redis_failure,
                c.single(x, "on_redis_failure open|closed")
                    .and_then(|v| failure(c, v)),
            ),
            _ => {
                unknown_here(c, x, "`cluster`", CLUSTER_LEVEL);
                false
            }
        };
    }
    ok.then_some(cluster)
}

/// The block as a whole, once the listeners are known (`Cluster::problem`), reported at the
/// block's position.
pub fn check_whole(
    c: &mut Checker<'_>,
    cluster: Option<&Cluster>,
    pos: Option<&Pos>,
    cfg: &Config,
) {
    let (Some(cluster), Some(pos)) = (cluster, pos) else {
        return;
    };
    if let Some((message, hint)) = cluster.problem(&cfg.effective_listeners()) {
        c.error(pos, message, hint);
    }
}

/// A peer's address: an IP and a port another node can connect to (no wildcard, no port 0;
/// port 80 when none is given).
fn peer_addr(c: &mut Checker<'_>, v: &Value) -> Option<(SocketAddr, Pos)> {
    let addr = c.socket_addr(v, 80)?;
    if addr.ip().is_unspecified() || addr.port() == 0 {
        c.error(
            &v.pos,
            format!("`{}` is not an address another node can reach", v.text),
            "name the node's own IP and port on the fleet's network, e.g. `10.0.0.2:8081`",
        );
        return None;
    }
    Some((addr, v.pos.clone()))
}

fn set<T>(field: &mut T, value: Option<T>) -> bool {
    match value {
        Some(v) => {
            *field = v;
            true
        }
        None => false,
    }
}

fn node_pos(node: &Node) -> &crate::diag::Pos {
    match node {
        Node::Directive(d) => &d.pos,
        Node::Rule(r) => &r.pos,
    }
}

/// `100ms` or `1s` as milliseconds: the unit is required, a bare number could mean either.
fn millis(text: &str) -> Option<u64> {
    let (digits, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1000)
    } else {
        return None;
    };
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

/// `peer_timeout 2s`, between [`PEER_TIMEOUT_MS`].
fn peer_timeout(c: &mut Checker<'_>, v: &Value) -> Option<Duration> {
    let (low, high) = PEER_TIMEOUT_MS;
    match millis(&v.text) {
        Some(ms) if (low..=high).contains(&ms) => Some(Duration::from_millis(ms)),
        _ => {
            c.error(
                &v.pos,
                format!("`{}` is not a peer timeout", v.text),
                format!("expected a time with its unit between {low}ms and {high}ms, e.g. `2s`"),
            );
            None
        }
    }
}

/// `100ms` or `1s`: the unit is required, a bare number could mean either.
fn interval(c: &mut Checker<'_>, v: &Value) -> Option<Duration> {
    let text = v.text.as_str();
    match millis(text) {
        Some(ms) if (INTERVAL_MS.0..=INTERVAL_MS.1).contains(&ms) => {
            Some(Duration::from_millis(ms))
        }
        Some(ms) if ms > INTERVAL_MS.1 => {
            c.error(
                &v.pos,
                format!(
                    "sync interval `{text}` is longer than a rate slot ({}ms)",
                    INTERVAL_MS.1
                ),
                "the shared request and connection rates count in slots of 125ms (1s / 8): \
                 a longer interval lets a node judge one slot with another's counts; use \
                 `100ms` (the default) or less",
            );
            None
        }
        _ => {
            c.error(
                &v.pos,
                format!("`{text}` is not a sync interval"),
                format!(
                    "expected a time with its unit between {}ms and {}ms, e.g. `100ms`",
                    INTERVAL_MS.0, INTERVAL_MS.1
                ),
            );
            None
        }
    }
}

fn failure(c: &mut Checker<'_>, v: &Value) -> Option<RedisFailure> {
    match v.text.as_str() {
        "open" => Some(RedisFailure::Open),
        "closed" => Some(RedisFailure::Closed),
        other => {
            c.error(
                &v.pos,
                format!("`{other}` is not a Redis failure mode"),
                "expected `open` (local limits only) or `closed` (refuse new connections)",
            );
            None
        }
    }
}
