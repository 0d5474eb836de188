//! Shared by the HTTP/3 attack suites (h3_floods.rs): a proxy with an h3 listener and a
//! stats listener in front of a test origin, a normal aioquic client, the misbehaving one
//! (tests/py/h3_attack.py), and what the proxy process spent.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{free_port, metric_sum, wait_for_port};

/// The most a flood may grow the proxy's memory here (short runs of a few connections).
pub const RSS_BOUND: u64 = 32 * 1024 * 1024;

pub struct Site {
    pub proxy: Proxy,
    /// `proto="h2,h3"`: UDP for QUIC, TCP to know it listens.
    pub h3: SocketAddr,
    pub stats: SocketAddr,
}

/// `/slow` answers in 1.5 s, `/big` is 3 MB (about 2 500 packets from the proxy), `/upload`
/// the length of the request body it received, the rest is `ok`.
pub fn origin() -> Origin {
    Origin::start(|r| match r.path() {
        "/slow" => Response::ok("slow").delay(Duration::from_millis(1500)),
        "/big" => Response::pattern(3_000_000),
        "/upload" => Response::ok(r.body.len().to_string()),
        _ => Response::ok("ok"),
    })
}

pub fn start(origin: &Origin, tag: &str, extra: &str) -> Site {
    let setup = Setup::new(tag);
    let addr = || SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (h3, stats) = (addr(), addr());
    let conf = setup.config(
        origin.addr(),
        "",
        &format!("listen {h3} proto=\"h2,h3\";\nstats_listen {stats};\n{extra}\n"),
    );
    let proxy = setup.start(&conf);
    for a in [h3, stats] {
        assert!(wait_for_port(a, Duration::from_secs(10)), "{a} listens");
    }
    Site { proxy, h3, stats }
}

/// One GET with aioquic (tests/py/h3_fetch.py): the proxy still serves a normal client.
pub fn served(site: &Site) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/h3_fetch.py");
    let out_file = site.proxy.dir.join("fetched");
    let out = Command::new("timeout")
        .args(["30", "python3", script, &site.h3.port().to_string(), "/"])
        .arg(&out_file)
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("status 200 length 2"),
        "aioquic was not served ({}): {stdout}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        site.proxy.proc.logs()
    );
}

pub fn metric(site: &Site, name: &str) -> u64 {
    metric_sum(site.stats, name)
}

pub fn no_panic(site: &Site) {
    let logs = site.proxy.proc.logs();
    assert!(!logs.contains("panic"), "{logs}");
}

/// What one run of the misbehaving client did, and what the proxy spent meanwhile.
pub struct Attack {
    /// h3_attack.py's report.
    pub report: serde_json::Value,
    /// The proxy's CPU time (user and system) during the run, in seconds.
    pub cpu: f64,
    /// The proxy's resident memory after the run less before, in bytes.
    pub growth: i64,
}

impl Attack {
    /// The close the client saw (QUIC or HTTP/3 error code), if any.
    pub fn close_code(&self) -> Option<u64> {
        self.report["close"]["code"].as_u64()
    }

    pub fn count(&self, key: &str) -> u64 {
        self.report[key].as_u64().unwrap_or(0)
    }

    /// Microseconds of the proxy's CPU per datagram the client sent.
    pub fn cpu_per_datagram_us(&self) -> f64 {
        self.cpu * 1e6 / self.count("datagrams_sent").max(1) as f64
    }
}

/// Runs `h3_attack.py PORT KIND SECS PATH` against the site (bounded by `timeout`).
pub fn attack(site: &Site, kind: &str, secs: u32, path: &str) -> Attack {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/h3_attack.py");
    let pid = site.proxy.proc.pid();
    let (cpu0, rss0) = (cpu_seconds(pid), rss_bytes(pid));
    let out = Command::new("timeout")
        .arg((secs + 40).to_string())
        .args(["python3", script, &site.h3.port().to_string(), kind])
        .args([&secs.to_string(), path])
        .output()
        .expect("python3");
    let (cpu1, rss1) = (cpu_seconds(pid), rss_bytes(pid));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "h3_attack.py {kind} failed: {stdout}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        site.proxy.proc.logs()
    );
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("JSON report");
    let attack = Attack {
        report,
        cpu: cpu1 - cpu0,
        growth: rss1 as i64 - rss0 as i64,
    };
    eprintln!(
        "{kind}: {} | proxy CPU {:.3} s ({:.1} us per datagram), RSS {:+} bytes",
        attack.report,
        attack.cpu,
        attack.cpu_per_datagram_us(),
        attack.growth
    );
    attack
}

/// The process's CPU time so far (utime + stime), in seconds (clock ticks of 10 ms).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may contain spaces) start at ") ".
    let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
    (get(11).unwrap_or(0) + get(12).unwrap_or(0)) as f64 / 100.0
}

pub fn rss_bytes(pid: u32) -> u64 {
    e2e::rss_kib(pid).0 * 1024
}
