//! QUIC replies leave from the address the client sent to (issue 33; docs/HTTP3.md,
//! "Workers"): on a wildcard h3 listener (`0.0.0.0`, `[::]`) of a host with several
//! addresses, a client of 127.0.0.2 (sending from 127.0.0.1) must be answered from
//! 127.0.0.2, not from the address the kernel would pick for the route back (127.0.0.1),
//! which the client, knowing only the address it sent to, drops
//! (`tests/py/h3_reply_source.py` counts the replies by their source and takes only the
//! right ones, as a connected UDP socket does). Also with 2 workers and a client changing
//! its source port, so that datagrams are moved between the workers (`route.rs`): the
//! owner answers from the address the mover read them on.

use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{free_port, metric_sum, wait_for_port};

/// A proxy with an h3 listener on `h3` (TCP too: `proto="h2,h3"`) and a stats listener.
fn start(origin: &Origin, tag: &str, h3: SocketAddr, extra: &str) -> (Proxy, SocketAddr) {
    let setup = Setup::new(tag);
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = setup.config(
        origin.addr(),
        "",
        &format!("listen {h3} proto=\"h2,h3\";\nstats_listen {stats};\n{extra}\n"),
    );
    let proxy = setup.start(&conf);
    let reach = match h3.ip() {
        IpAddr::V4(_) => SocketAddr::from(([127, 0, 0, 1], h3.port())),
        IpAddr::V6(_) => SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, h3.port())),
    };
    for a in [reach, stats] {
        assert!(wait_for_port(a, Duration::from_secs(10)), "{a} listens");
    }
    (proxy, stats)
}

/// h3_reply_source.py against `host`: every GET answered, every reply from `host`.
fn served_from(proxy: &Proxy, host: &str, port: u16, (moves, bind): (u32, Option<&str>)) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/h3_reply_source.py");
    let mut cmd = Command::new("timeout");
    cmd.args(["60", "python3", script, host, &port.to_string()]);
    cmd.arg(moves.to_string()).args(bind);
    let out = cmd.output().expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let all = format!("answered {} of {}", moves + 1, moves + 1);
    assert!(
        out.status.success() && stdout.contains(&all) && stdout.contains("from elsewhere 0 "),
        "{host}:{port}: {stdout}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        proxy.proc.logs()
    );
}

#[test]
fn h3_wildcard_v4_listener_answers_from_each_address() {
    let origin = Origin::start(|_| Response::ok("ok"));
    let port = free_port();
    let (proxy, _) = start(
        &origin,
        "h3-source-v4",
        SocketAddr::from(([0, 0, 0, 0], port)),
        "",
    );
    for host in ["127.0.0.1", "127.0.0.2", "127.0.0.3"] {
        served_from(&proxy, host, port, (0, None));
    }
    // aioquic's own client (its asyncio socket, which takes replies from any address).
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/h3_fetch.py");
    let fetched = proxy.dir.join("fetched");
    let out = Command::new("timeout")
        .args(["30", "python3", script, &port.to_string(), "/"])
        .arg(&fetched)
        .arg("127.0.0.2")
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("status 200 length 2"), "{stdout}");
    assert!(!proxy.proc.logs().contains("panic"));
}

/// A global IPv6 address of this host, if it has one (a second address besides ::1).
fn other_v6_address() -> Option<String> {
    let table = std::fs::read_to_string("/proc/net/if_inet6").unwrap_or_default();
    table.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let hex = fields.next()?;
        let scope = fields.nth(2)?;
        let bytes: Vec<u8> = (0..16)
            .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
            .collect::<Option<_>>()?;
        let ip = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?);
        (scope == "00" && !ip.is_loopback()).then(|| ip.to_string())
    })
}

#[test]
fn h3_wildcard_v6_listener_answers_from_each_address() {
    if !std::path::Path::new("/proc/net/if_inet6").exists() {
        eprintln!("no IPv6 here: not run");
        return;
    }
    let origin = Origin::start(|_| Response::ok("ok"));
    let port = free_port();
    let h3 = SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port));
    let (proxy, _) = start(&origin, "h3-source-v6", h3, "");
    served_from(&proxy, "::1", port, (0, None));
    // Sent from ::1 to another address of the host: the kernel's route back to ::1 would
    // answer from ::1.
    match other_v6_address() {
        Some(other) => served_from(&proxy, &other, port, (0, Some("::1"))),
        None => eprintln!("no second IPv6 address here: only ::1 was tested"),
    }
}

#[test]
fn h3_wildcard_listener_moved_datagrams_keep_their_address() {
    let origin = Origin::start(|_| Response::ok("ok"));
    let port = free_port();
    let (proxy, stats) = start(
        &origin,
        "h3-source-moves",
        SocketAddr::from(([0, 0, 0, 0], port)),
        "worker_threads 2;",
    );
    // 12 new source ports: the chance that none reaches the other worker is 1 in 4096.
    served_from(&proxy, "127.0.0.2", port, (12, None));
    let moved = metric_sum(
        stats,
        "ktls_proxy_quic_datagrams_moved_total{result=\"moved\"}",
    );
    assert!(moved > 0, "no datagram reached the other worker");
    assert_eq!(
        metric_sum(stats, "ktls_proxy_quic_handshakes_total{state=\"done\"}"),
        1
    );
    // Stateless resets for a closed connection's IDs, sent to 127.0.0.2 from 12 new ports
    // over both workers on sockets connected to 127.0.0.2: each answered from it (a reset
    // is made from the datagram's own addresses, moved or not).
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/h3_reset_token.py");
    let out = Command::new("timeout")
        .args([
            "60",
            "python3",
            script,
            &port.to_string(),
            "12",
            "127.0.0.2",
        ])
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("resets 12 matched 12 of 12"),
        "{stdout}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        proxy.proc.logs()
    );
    let moved_after = metric_sum(
        stats,
        "ktls_proxy_quic_datagrams_moved_total{result=\"moved\"}",
    );
    assert!(
        moved_after > moved,
        "no reset's datagram reached the other worker"
    );
}
