//! Issue 38, descriptor exhaustion: a worker whose `accept` fails (EMFILE) tries the listener
//! again 100 ms later, since its edge-triggered poll would not report the waiting connections
//! again. One retry is queued per listener: on the previous binary every readiness event that
//! failed queued one more, each re-queued every 100 ms until an `accept` succeeded, so the
//! failing `accept4` calls grew with the connections that arrived meanwhile (strace in the
//! bench's `fd_exhaustion`: 12 380 calls, 12 251 failed, in 15 s with about 80 connections
//! waiting). Counted here from the proxy's log, whose warning is rate-limited and reports
//! each second how many lines it suppressed.

use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::thread;
use std::time::Duration;

use e2e::faults::fault_origin::FaultOrigin;
use e2e::faults::server::{Kind, Server, Spec, HOST};

/// Sets the soft descriptor limit of `pid` (its hard limit is left alone).
fn set_soft_nofile(pid: u32, soft: &str) {
    let status = Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--nofile={soft}:"))
        .status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "prlimit --nofile={soft}: on {pid}"
    );
}

fn soft_nofile(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3).map(str::to_string))
        .unwrap_or_else(|| "1024".into())
}

/// Failed `accept` calls the log tells of: the lines written and the ones it says it
/// suppressed at that call site.
fn accept_failures(logs: &str) -> u64 {
    let written = logs
        .lines()
        .filter(|l| l.contains("accept on") && l.contains("failed"))
        .count() as u64;
    let suppressed: u64 = logs
        .lines()
        .filter(|l| l.contains("suppressed") && l.contains("worker/mod.rs:"))
        .filter_map(|l| l.split_whitespace().find_map(|w| w.parse::<u64>().ok()))
        .sum();
    written + suppressed
}

fn status_of_one_request(addr: SocketAddr) -> u16 {
    let request = format!("GET / HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n");
    let answer =
        e2e::raw_exchange(addr, request.as_bytes(), Duration::from_secs(5)).unwrap_or_default();
    String::from_utf8_lossy(&answer)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_listener_out_of_descriptors_is_retried_once_per_interval_not_once_per_connection() {
    let origin = FaultOrigin::start(SocketAddr::from(([127, 0, 0, 1], 0)));
    let server = Server::start(&Spec::new(Kind::Proxy, origin.addr()));
    let pid = server.pid();
    let before = soft_nofile(pid);
    set_soft_nofile(pid, &(server.sample().fds + 4).to_string());
    // Four are accepted; the others wait in the accept queues, each arriving as a readiness
    // event of its worker's listener whose `accept` fails.
    let waiting = 200;
    let held: Vec<TcpStream> = (0..waiting)
        .filter_map(|_| {
            thread::sleep(Duration::from_millis(2));
            TcpStream::connect_timeout(&server.http, Duration::from_secs(2)).ok()
        })
        .collect();
    assert_eq!(
        held.len(),
        waiting,
        "connections refused\n{}",
        server.logs()
    );
    thread::sleep(Duration::from_secs(2));
    set_soft_nofile(pid, &before);
    drop(held);
    // The suppressed lines are reported just after each second of the clock.
    thread::sleep(Duration::from_millis(1300));
    let failures = accept_failures(&server.logs());
    eprintln!("{failures} failed accepts for {waiting} waiting connections");
    // One failure per readiness event (200) and, per worker, one retry every 100 ms for about
    // 2.5 s (50 with two workers). The previous binary: 200 retries every 100 ms, ~4000.
    assert!(
        (1..=600).contains(&failures),
        "{failures} failed accepts for {waiting} waiting connections over ~2.5 s\n{}",
        server.logs()
    );
    // And the listener serves again once descriptors are free.
    assert_eq!(status_of_one_request(server.http), 200, "{}", server.logs());
}
