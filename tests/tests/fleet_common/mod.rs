//! Shared by the fleet suites (fleet.rs, fleet_faults.rs, fleet_scale.rs): redis-server on
//! a free loopback port, proxies sharing it in `cluster` mode in front of one origin, and the
//! clients and metrics the tests read.
#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::rawclient::{get_with, Outcome, RawClient};
use e2e::{free_port, metric_sum, wait_for_port, Proc, TempDir};

pub const T: Duration = Duration::from_secs(5);
pub const HOST: &str = "site.test";
/// The proxies' `sync_interval`.
pub const SYNC_MS: u64 = 100;
/// How long a test waits for something the fleet must do within one interval: many
/// intervals, so a loaded machine does not fail it, and still bounded.
pub const FLEET_WAIT: Duration = Duration::from_secs(3);

/// A redis-server of its own, on a free loopback port, persisting nothing.
pub struct Redis {
    pub proc: Proc,
    pub addr: SocketAddr,
    pub dir: TempDir,
}

impl Redis {
    pub fn start() -> Redis {
        let dir = TempDir::new("fleet-redis");
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        Redis::start_at(dir, addr)
    }

    pub fn start_at(dir: TempDir, addr: SocketAddr) -> Redis {
        let binary = "/usr/bin/redis-server";
        assert!(
            Path::new(binary).exists(),
            "{binary} is missing: tests/run.sh installs it (etc/need-packages.sh redis-server)"
        );
        let mut cmd = Command::new(binary);
        cmd.args(["--bind", "127.0.0.1", "--port", &addr.port().to_string()])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path());
        let proc = Proc::spawn("redis", cmd, dir.path());
        assert!(
            wait_for_port(addr, T),
            "redis-server did not listen on {addr}\n{}",
            proc.logs()
        );
        Redis { proc, addr, dir }
    }

    /// Kills the server (SIGKILL: as a crash) and starts another, empty, on the same port.
    pub fn kill(self) -> (TempDir, SocketAddr) {
        let Redis { proc, addr, dir } = self;
        drop(proc);
        (dir, addr)
    }
}

/// `count` proxies sharing `redis` (with `cluster_extra` in their `cluster` block), each with
/// `frang_limits { limits }`, in front of one origin; the first also serves its statistics.
pub struct Fleet {
    pub nodes: Vec<Proxy>,
    pub http: Vec<SocketAddr>,
    pub stats: SocketAddr,
    pub _origin: Origin,
}

pub fn fleet(tag: &str, redis: SocketAddr, limits: &str) -> Fleet {
    fleet_of(3, tag, redis, limits, "")
}

pub fn fleet_of(
    count: usize,
    tag: &str,
    redis: SocketAddr,
    limits: &str,
    cluster_extra: &str,
) -> Fleet {
    fleet_with(count, tag, redis, limits, cluster_extra, "")
}

/// As [`fleet_of`], with `top` (top-level directives) in every node's configuration.
pub fn fleet_with(
    count: usize,
    tag: &str,
    redis: SocketAddr,
    limits: &str,
    cluster_extra: &str,
    top: &str,
) -> Fleet {
    let origin = Origin::start(|_| Response::ok(Vec::new()));
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut nodes = Vec::new();
    let mut http = Vec::new();
    for n in 0..count {
        let setup = Setup::new(&format!("{tag}-{n}"));
        let stats_line = if n == 0 {
            format!("stats_listen {stats};\n")
        } else {
            String::new()
        };
        let extra = format!(
            "{top}\nfrang_limits {{\n{limits}\n}}\nblock_action attack reply;\n{stats_line}\
             cluster {{ redis {redis}; sync_interval {SYNC_MS}ms; {cluster_extra} }}\n"
        );
        let conf = setup.config(origin.addr(), "", &extra);
        http.push(setup.http);
        nodes.push(setup.start(&conf));
    }
    Fleet {
        nodes,
        http,
        stats,
        _origin: origin,
    }
}

impl Fleet {
    pub fn logs(&self) -> String {
        self.nodes.iter().map(|p| p.proc.logs()).collect()
    }

    /// One request on a new connection from `src` to node `n`.
    pub fn request(&self, src: Ipv4Addr, n: usize, path: &str) -> Outcome {
        let request = get_with(path, HOST, "Connection: close\r\n");
        match RawClient::connect_from(src, self.http[n % self.http.len()]) {
            Ok(mut c) => c.request(&request, T),
            Err(e) => Outcome::Error(format!("connect: {e}")),
        }
    }

    /// `count` requests from `src`, node after node, `pause` apart: how many were answered
    /// 200 (the others must be frang's refusals: 403, or a connection dropped at accept).
    pub fn alternate(&self, src: Ipv4Addr, count: usize, pause: Duration) -> usize {
        let mut served = 0;
        for i in 0..count {
            match self.request(src, i, &format!("/r{i}")) {
                Outcome::Response(r) if r.status == 200 => served += 1,
                Outcome::Response(r) if r.status == 403 => {}
                Outcome::Closed | Outcome::Reset => {}
                other => panic!("request {i} to node {}: {other}\n{}", i % 3, self.logs()),
            }
            sleep(pause);
        }
        served
    }

    /// Waits (bounded) until node 0's gauge says `up`.
    pub fn wait_redis_up(&self, up: u64, within: Duration) {
        let deadline = Instant::now() + within;
        while metric_sum(self.stats, "ktls_proxy_fleet_redis_up") != up {
            assert!(
                Instant::now() < deadline,
                "ktls_proxy_fleet_redis_up never became {up} within {within:?}\n{}",
                self.logs()
            );
            sleep(Duration::from_millis(50));
        }
    }
}

impl Fleet {
    /// `count` requests from `src` on keep-alive connections, node after node, each sent
    /// `pause` after the previous answer: how many were refused (a refused connection is
    /// closed by the node, and opened again for the next request).
    pub fn steady(&self, src: Ipv4Addr, count: usize, pause: Duration) -> usize {
        let mut conns: Vec<Option<RawClient>> = self.http.iter().map(|_| None).collect();
        let mut refused = 0;
        for i in 0..count {
            let n = i % self.http.len();
            let conn = match &mut conns[n] {
                Some(c) => c,
                slot => slot.insert(RawClient::connect_from(src, self.http[n]).expect("connect")),
            };
            match conn.request(&get_with(&format!("/s{i}"), HOST, ""), T) {
                Outcome::Response(r) if r.status == 200 => {}
                Outcome::Response(r) if r.status == 403 => {
                    refused += 1;
                    conns[n] = None;
                }
                other => panic!("request {i} to node {n}: {other}\n{}", self.logs()),
            }
            sleep(pause);
        }
        refused
    }
}

/// 10 requests per 10 s: a frame long enough that the whole test falls within one.
pub const RATE: &str = "request_rate 10 10;";
/// Requests a client sends, node after node: a lone proxy would serve all 30 (10 each).
pub const ATTEMPTS: usize = 30;
/// Two sync intervals between requests: each node has the others' counts before the next.
pub const PAUSE: Duration = Duration::from_millis(2 * SYNC_MS);
/// What the fleet may serve beyond the limit: what the other nodes admit in one interval
/// (about one request here), with room for a slow turn on a loaded machine.
pub const SLACK: usize = 5;
