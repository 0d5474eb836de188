//! The `cluster` extension end to end (docs/FLEET.md): Debian's redis-server on a free
//! loopback port, three proxies sharing it in front of one origin, and clients that move
//! between the proxies as an L4 balancer would send them; and `on_redis_failure closed`.

mod fleet_common;

use std::net::Ipv4Addr;
use std::thread::sleep;
use std::time::{Duration, Instant};

use e2e::metric_sum;
use e2e::rawclient::{get_with, Outcome, RawClient};

use fleet_common::*;

#[test]
fn a_client_alternating_between_nodes_meets_the_fleet_wide_request_rate() {
    let redis = Redis::start();
    let f = fleet("fleet-rate", redis.addr, RATE);
    f.wait_redis_up(1, FLEET_WAIT);
    let served = f.alternate(Ipv4Addr::new(127, 3, 0, 1), ATTEMPTS, PAUSE);
    assert!(
        (10..=10 + SLACK).contains(&served),
        "{served} of {ATTEMPTS} served by the fleet under request_rate 10 (a lone node each: 30)\n{}",
        f.logs()
    );
    // Another address has its own count.
    assert_eq!(
        f.request(Ipv4Addr::new(127, 3, 0, 2), 1, "/other").status(),
        Some(200)
    );
}

#[test]
fn connections_alternating_between_nodes_meet_the_fleet_wide_connection_rate() {
    let redis = Redis::start();
    let f = fleet("fleet-conn", redis.addr, "tcp_connection_rate 10 10;");
    f.wait_redis_up(1, FLEET_WAIT);
    let served = f.alternate(Ipv4Addr::new(127, 3, 4, 1), ATTEMPTS, PAUSE);
    assert!(
        (10..=10 + SLACK).contains(&served),
        "{served} of {ATTEMPTS} connections served under tcp_connection_rate 10 (lone nodes: 30)\n{}",
        f.logs()
    );
}

#[test]
fn an_ip_block_on_one_node_refuses_the_address_on_the_others() {
    let redis = Redis::start();
    // A limit that only node 0 sees broken (no shared count involved): only the block
    // itself can reach the other nodes.
    let f = fleet("fleet-block", redis.addr, "http_uri_len 64;\nip_block on;");
    f.wait_redis_up(1, FLEET_WAIT);
    let src = Ipv4Addr::new(127, 3, 1, 1);
    // A keep-alive connection to node 1, open before the block.
    let mut held = RawClient::connect_from(src, f.http[1]).expect("connect to node 1");
    let first = held.request(&get_with("/held", HOST, ""), T);
    assert_eq!(first.status(), Some(200), "{first}\n{}", f.logs());
    // Node 0 blocks the address for a URI over http_uri_len.
    let long = format!("/{}", "x".repeat(100));
    let over = f.request(src, 0, &long);
    assert_eq!(over.status(), Some(403), "{over}\n{}", f.logs());
    // Node 2 refuses a new connection from the address within a few intervals...
    let deadline = Instant::now() + FLEET_WAIT;
    loop {
        let outcome = f.request(src, 2, "/after");
        if outcome.is_dropped() || matches!(outcome, Outcome::Error(_)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 2 still serves the address blocked on node 0: {outcome}\n{}",
            f.logs()
        );
        sleep(Duration::from_millis(SYNC_MS / 2));
    }
    // ...node 1 has reset the connection opened before the block...
    let after = held.wait_closed(FLEET_WAIT);
    assert!(
        after.is_dropped(),
        "node 1 kept the blocked address's connection: {after}"
    );
    // ...and serves another address.
    let other = f.request(Ipv4Addr::new(127, 3, 1, 2), 1, "/other");
    assert_eq!(other.status(), Some(200), "{other}\n{}", f.logs());
    // The node that published the block still syncs: Redis's answer to XADD (the entry's
    // id) is a success. Before, it failed every turn from the block on, the gauge fell to 0
    // for good and `on_redis_failure closed` would have refused every new client.
    sleep(Duration::from_millis(10 * SYNC_MS));
    assert_eq!(
        metric_sum(f.stats, "ktls_proxy_fleet_redis_up"),
        1,
        "node 0 stopped syncing after its block\n{}",
        f.logs()
    );
}

#[test]
fn redis_down_means_local_limits_and_redis_back_means_fleet_limits() {
    let redis = Redis::start();
    let f = fleet("fleet-failure", redis.addr, RATE);
    f.wait_redis_up(1, FLEET_WAIT);
    let (dir, addr) = redis.kill();
    f.wait_redis_up(0, FLEET_WAIT);
    // Fail-open: every node judges alone, so all 30 are served (10 per node), none fails...
    let src = Ipv4Addr::new(127, 3, 2, 1);
    let served = f.alternate(src, ATTEMPTS, Duration::from_millis(10));
    assert_eq!(served, ATTEMPTS, "with Redis down\n{}", f.logs());
    // ...and each node's own limit still holds: an 11th request to node 0 is refused.
    assert_eq!(f.request(src, 0, "/eleventh").status(), Some(403));
    // Redis back (empty): the nodes reconnect (backoff at most 5 s) and share again.
    let redis = Redis::start_at(dir, addr);
    f.wait_redis_up(1, Duration::from_secs(10));
    let served = f.alternate(Ipv4Addr::new(127, 3, 2, 2), ATTEMPTS, PAUSE);
    assert!(
        (10..=10 + SLACK).contains(&served),
        "{served} of {ATTEMPTS} served after Redis came back\n{}",
        f.logs()
    );
    drop(redis);
}

#[test]
fn on_redis_failure_closed_refuses_new_connections_while_redis_is_away() {
    let redis = Redis::start();
    let f = fleet_of(
        1,
        "fleet-closed",
        redis.addr,
        RATE,
        "on_redis_failure closed;",
    );
    f.wait_redis_up(1, FLEET_WAIT);
    let src = Ipv4Addr::new(127, 3, 3, 1);
    let mut held = RawClient::connect_from(src, f.http[0]).expect("connect");
    let first = held.request(&get_with("/held", HOST, ""), T);
    assert_eq!(first.status(), Some(200), "{first}\n{}", f.logs());
    let (dir, addr) = redis.kill();
    f.wait_redis_up(0, FLEET_WAIT);
    let refused = f.request(src, 0, "/while-away");
    assert!(
        refused.is_dropped() || matches!(refused, Outcome::Error(_)),
        "a new connection while Redis is away: {refused}\n{}",
        f.logs()
    );
    // A connection accepted before goes on.
    let again = held.request(&get_with("/held-again", HOST, ""), T);
    assert_eq!(again.status(), Some(200), "{again}\n{}", f.logs());
    // Redis back: new connections are accepted, from the same address (not blocked).
    let redis = Redis::start_at(dir, addr);
    f.wait_redis_up(1, Duration::from_secs(10));
    let served = f.request(src, 0, "/back");
    assert_eq!(served.status(), Some(200), "{served}\n{}", f.logs());
    drop(redis);
}

#[test]
fn a_hung_redis_counts_as_down_and_no_request_waits_for_it() {
    let redis = Redis::start();
    let f = fleet_of(1, "fleet-hung", redis.addr, RATE, "");
    f.wait_redis_up(1, FLEET_WAIT);
    // Stopped, not dead: connections are still accepted by its kernel, nothing answers.
    redis.proc.signal(libc::SIGSTOP);
    f.wait_redis_up(0, FLEET_WAIT);
    let served = f.alternate(Ipv4Addr::new(127, 3, 5, 1), 10, Duration::ZERO);
    assert_eq!(served, 10, "with Redis hung\n{}", f.logs());
    redis.proc.signal(libc::SIGCONT);
    f.wait_redis_up(1, Duration::from_secs(10));
}

/// A burst of 3 per 125 ms slot and 20 per second; one request per 60 ms (16.7/s) never
/// puts more than 3 in a slot nor 17 in a second: under both limits.
const STEADY_LIMITS: &str = "request_burst 3;\nrequest_rate 20;";
const STEADY_PAUSE: Duration = Duration::from_millis(60);

#[test]
fn steady_traffic_under_the_limits_is_all_served_by_a_cluster_node() {
    // A lone proxy serves all of it; a node of a cluster must too (the fleet's count of a
    // slot is never judged as another slot's, nor this node's events counted twice).
    let redis = Redis::start();
    let f = fleet_of(1, "fleet-steady1", redis.addr, STEADY_LIMITS, "");
    f.wait_redis_up(1, FLEET_WAIT);
    let refused = f.steady(Ipv4Addr::new(127, 3, 6, 1), 60, STEADY_PAUSE);
    assert_eq!(refused, 0, "refused under the limits\n{}", f.logs());
}

#[test]
fn steady_traffic_under_the_limits_spread_over_three_nodes_is_all_served() {
    let redis = Redis::start();
    let f = fleet("fleet-steady3", redis.addr, STEADY_LIMITS);
    f.wait_redis_up(1, FLEET_WAIT);
    let refused = f.steady(Ipv4Addr::new(127, 3, 6, 2), 60, STEADY_PAUSE);
    assert_eq!(refused, 0, "refused under the limits\n{}", f.logs());
}

#[test]
fn steady_new_connections_under_the_limits_are_all_accepted_by_a_cluster_node() {
    // The same for tcp_connection_burst / _rate: one new connection per 60 ms.
    let redis = Redis::start();
    let limits = "tcp_connection_burst 3;\ntcp_connection_rate 20;";
    let f = fleet_of(1, "fleet-steadyc", redis.addr, limits, "");
    f.wait_redis_up(1, FLEET_WAIT);
    let served = f.alternate(Ipv4Addr::new(127, 3, 6, 3), 60, STEADY_PAUSE);
    assert_eq!(
        served,
        60,
        "connections refused under the limits\n{}",
        f.logs()
    );
}
