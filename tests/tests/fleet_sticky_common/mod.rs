//! What the fleet sticky suites (fleet_sticky.rs, fleet_sticky_ops.rs) share: origin
//! processes that say which server answered, proxies sharing one Redis with sticky settings,
//! sessions pinned through them, and `redis-cli`.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::fleet_common::SYNC_MS;
use crate::sticky_common::{Got, Req, Site};
use e2e::{free_port, wait_for_port, workspace_root, Proc, TempDir};

/// Origin processes (tests/py/sticky_origin.py), each answering `server PORT`.
pub struct Backends {
    pub ports: Vec<u16>,
    _procs: Vec<Proc>,
    _dir: TempDir,
}

impl Backends {
    pub fn start(n: usize) -> Backends {
        let dir = TempDir::new("fleet-sticky-origins");
        let script = workspace_root().join("tests/py/sticky_origin.py");
        let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let procs = ports
            .iter()
            .map(|port| {
                let mut cmd = Command::new("python3");
                cmd.arg(&script).arg(port.to_string());
                Proc::spawn("origin", cmd, dir.path())
            })
            .collect();
        for &port in &ports {
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            assert!(
                wait_for_port(addr, Duration::from_secs(10)),
                "origin {port}"
            );
        }
        Backends {
            ports,
            _procs: procs,
            _dir: dir,
        }
    }

    pub fn group(&self, extra: &str) -> String {
        let servers: String = self
            .ports
            .iter()
            .map(|p| format!("server 127.0.0.1:{p}; "))
            .collect();
        format!("srv_group default {{ {servers}{extra} }}")
    }
}

pub fn server_of(got: &Got) -> u16 {
    got.body
        .trim()
        .strip_prefix("server ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("not an origin answer: {got:?}"))
}

/// One node sharing `redis`, with `group` and `sticky`.
pub fn node(tag: &str, redis: SocketAddr, group: &str, sticky: &str) -> Site {
    let cluster = format!("cluster {{ redis {redis}; sync_interval {SYNC_MS}ms; }}");
    Site::start(tag, group, &format!("{sticky}\n{cluster}"))
}

/// `count` nodes sharing `redis`, each with `group` and `sticky`.
pub fn nodes(count: usize, tag: &str, redis: SocketAddr, group: &str, sticky: &str) -> Vec<Site> {
    (0..count)
        .map(|n| node(&format!("{tag}-{n}"), redis, group, sticky))
        .collect()
}

pub fn logs(sites: &[Site]) -> String {
    sites.iter().map(Site::logs).collect()
}

/// Waits (bounded by `within`) until every node's last sync reached Redis, then a few
/// intervals more: the first turns agree the cookie key.
pub fn wait_joined(sites: &[Site], within: Duration) {
    let deadline = Instant::now() + within;
    for s in sites {
        while s.metric("ktls_proxy_fleet_redis_up") != 1 {
            assert!(Instant::now() < deadline, "Redis never up\n{}", logs(sites));
            sleep(Duration::from_millis(50));
        }
    }
    sleep(Duration::from_millis(3 * SYNC_MS));
}

pub fn with_cookie(cookie: &str) -> Req<'_> {
    Req {
        cookie: Some(cookie),
        ..Req::default()
    }
}

/// A browser's session: its User-Agent (the cookie is bound to it), its sticky cookie and
/// the server it was pinned to.
#[derive(Debug, Clone)]
pub struct Session {
    pub ua: String,
    pub cookie: String,
    pub home: u16,
}

impl Session {
    /// A new session's first request through `site`: issued a cookie and pinned.
    pub fn pin(site: &Site, ua: &str) -> Session {
        let first = site.get(
            "/",
            Req {
                user_agent: Some(ua),
                ..Req::default()
            },
        );
        let value = first
            .sticky_value()
            .unwrap_or_else(|| panic!("no cookie for {ua}: {first:?}\n{}", site.logs()));
        Session {
            ua: ua.to_owned(),
            cookie: format!("__tfw={value}"),
            home: server_of(&first),
        }
    }

    /// One request of the session through `site`: the server that answered.
    pub fn server_through(&self, site: &Site) -> u16 {
        let got = site.get(
            "/",
            Req {
                cookie: Some(&self.cookie),
                user_agent: Some(&self.ua),
                ..Req::default()
            },
        );
        server_of(&got)
    }
}

/// `redis-cli -p PORT ARGS...`: its output.
pub fn redis_cli(redis: SocketAddr, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &redis.port().to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Entries in the sticky stream (pins and passes, every node's).
pub fn stream_len(redis: SocketAddr) -> usize {
    let len = redis_cli(redis, &["XLEN", "ktls:sticky"]);
    len.parse()
        .unwrap_or_else(|_| panic!("XLEN answered {len:?}"))
}
