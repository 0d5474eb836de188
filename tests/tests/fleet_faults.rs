//! The `cluster` extension when Redis misbehaves or the nodes restart: a Redis that trickles
//! or floods its replies, nodes reloaded after a fleet block, and blocks from the stream
//! beyond the client table.

mod fleet_common;

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use e2e::rawclient::Outcome;
use e2e::{free_port, wait_for_port, Proc, TempDir};

use fleet_common::*;
/// tests/py/fake_redis.py on a free port: a Redis that answers `good_turns` pipelines, then
/// misbehaves (`mode`); killed by pid when dropped, and gone by itself after a minute.
struct FakeRedis {
    proc: Proc,
    addr: SocketAddr,
    _dir: TempDir,
}

impl FakeRedis {
    fn start(mode: &str, good_turns: u32, cap_bytes: usize) -> FakeRedis {
        let dir = TempDir::new("fleet-fake-redis");
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/fake_redis.py");
        let mut cmd = Command::new("python3");
        cmd.arg(script).arg(addr.port().to_string()).args([
            mode,
            &good_turns.to_string(),
            &cap_bytes.to_string(),
            "60",
        ]);
        let proc = Proc::spawn("fake-redis", cmd, dir.path());
        assert!(
            wait_for_port(addr, T),
            "the fake Redis did not listen on {addr}\n{}",
            proc.logs()
        );
        FakeRedis {
            proc,
            addr,
            _dir: dir,
        }
    }
}

#[test]
fn a_redis_trickling_its_replies_counts_as_down_and_closed_refuses_meanwhile() {
    // 20 turns (2 s) answered well, then every reply sent a byte per 30 ms: each byte comes
    // well within a read timeout, but no turn ends within its deadline.
    let fake = FakeRedis::start("trickle", 20, 0);
    let f = fleet_of(
        1,
        "fleet-trickle",
        fake.addr,
        RATE,
        "on_redis_failure closed;",
    );
    f.wait_redis_up(1, FLEET_WAIT);
    f.wait_redis_up(0, FLEET_WAIT);
    let refused = f.request(Ipv4Addr::new(127, 3, 7, 1), 0, "/while-trickling");
    assert!(
        refused.is_dropped() || matches!(refused, Outcome::Error(_)),
        "a new connection while Redis trickles: {refused}\n{}\n{}",
        f.logs(),
        fake.proc.logs()
    );
}

#[test]
fn a_redis_flooding_its_replies_cannot_grow_the_proxy_s_memory() {
    // 10 turns answered well, then XREAD answered by arrays of a million items each,
    // nested, and 48 MiB of integers per connection: far beyond any turn's budget.
    let fake = FakeRedis::start("flood", 10, 48 << 20);
    let f = fleet_of(1, "fleet-flood", fake.addr, RATE, "");
    let pid = f.nodes[0].proc.pid();
    f.wait_redis_up(1, FLEET_WAIT);
    let (before, _) = e2e::rss_kib(pid);
    // The flood starts within a second; several reconnections (and floods) later:
    sleep(Duration::from_secs(4));
    let (_, peak) = e2e::rss_kib(pid);
    let grown_mib = peak.saturating_sub(before) / 1024;
    assert!(
        grown_mib < 32,
        "the proxy's peak memory grew {grown_mib} MiB under a flooding Redis\n{}\n{}",
        f.logs(),
        fake.proc.logs()
    );
    f.wait_redis_up(0, FLEET_WAIT);
    assert_eq!(
        f.request(Ipv4Addr::new(127, 3, 8, 1), 0, "/served")
            .status(),
        Some(200)
    );
}

#[test]
fn nodes_reloaded_still_refuse_an_address_the_fleet_blocked() {
    let redis = Redis::start();
    let f = fleet_of(
        2,
        "fleet-reload",
        redis.addr,
        "http_uri_len 64;\nip_block on;",
        "",
    );
    f.wait_redis_up(1, FLEET_WAIT);
    let src = Ipv4Addr::new(127, 3, 9, 1);
    let long = format!("/{}", "x".repeat(100));
    assert_eq!(f.request(src, 0, &long).status(), Some(403), "{}", f.logs());
    let refused_by_node_1 = || {
        let outcome = f.request(src, 1, "/after");
        outcome.is_dropped() || matches!(outcome, Outcome::Error(_))
    };
    let deadline = Instant::now() + FLEET_WAIT;
    while !refused_by_node_1() {
        assert!(
            Instant::now() < deadline,
            "node 1 never learnt the block\n{}",
            f.logs()
        );
        sleep(Duration::from_millis(SYNC_MS / 2));
    }
    // The same configuration again, on both nodes: a new frang, which must learn the fleet's
    // blocks anew, node 0's own block included (before that fix, node 0 skipped its own
    // entries of the stream and served the address again after its reload).
    for node in &f.nodes {
        node.proc.signal(libc::SIGHUP);
        let reloaded = Instant::now() + Duration::from_secs(15);
        while !node.proc.stderr().contains("reloaded") && !node.proc.stdout().contains("reloaded") {
            assert!(Instant::now() < reloaded, "no reload\n{}", node.proc.logs());
            sleep(Duration::from_millis(50));
        }
    }
    // Ten intervals for the side thread to read the stream again, then refused every time.
    sleep(Duration::from_millis(10 * SYNC_MS));
    for attempt in 0..3 {
        for n in 0..2 {
            let outcome = f.request(src, n, "/after");
            assert!(
                outcome.is_dropped() || matches!(outcome, Outcome::Error(_)),
                "attempt {attempt}: node {n} serves the blocked address after its reload: \
                 {outcome}\n{}",
                f.logs()
            );
        }
        sleep(Duration::from_millis(SYNC_MS));
    }
    assert_eq!(
        f.request(Ipv4Addr::new(127, 3, 9, 2), 1, "/other").status(),
        Some(200)
    );
}

#[test]
fn blocks_from_the_stream_beyond_the_client_table_leave_room_for_new_clients() {
    // 40 blocks for ever from another node, in the stream before this node starts: more
    // than its client table (client_lru_size 16) holds.
    let redis = Redis::start();
    let port = redis.addr.port().to_string();
    let blocked = Ipv4Addr::new(127, 3, 10, 1);
    for n in 0..40 {
        let ip = if n == 0 {
            blocked.to_string()
        } else {
            format!("10.9.0.{n}")
        };
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port, "XADD", "ktls:blocks", "*"])
            .args(["ip", &ip, "until", "0", "node", "another-node"])
            .output()
            .expect("redis-cli");
        assert!(out.status.success(), "XADD: {out:?}");
    }
    let f = fleet_with(
        1,
        "fleet-replay",
        redis.addr,
        "http_uri_len 64;\nip_block on;",
        "",
        "client_lru_size 16;",
    );
    f.wait_redis_up(1, FLEET_WAIT);
    // A few turns: the stream is read.
    let deadline = Instant::now() + FLEET_WAIT;
    loop {
        let outcome = f.request(blocked, 0, "/blocked");
        if outcome.is_dropped() || matches!(outcome, Outcome::Error(_)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the block from the stream was not applied: {outcome}\n{}",
            f.logs()
        );
        sleep(Duration::from_millis(SYNC_MS));
    }
    for n in 100..103 {
        let outcome = f.request(Ipv4Addr::new(127, 3, 10, n), 0, "/new");
        assert_eq!(
            outcome.status(),
            Some(200),
            "new client {n}: {outcome}\n{}",
            f.logs()
        );
    }
}
