//! `worker_processes K` (an extension): the first process re-executes itself K times; each
//! child is a complete serving process with its own SO_REUSEPORT listeners, workers, cache
//! and counters. This is for hosts where one process's descriptor limit (20000 here) is
//! smaller than the connections to hold. The parent relays SIGHUP and stop signals.

use std::path::Path;
use std::process::{Child, Command};
use std::time::Instant;

use rustix::process::{kill_process, Pid, Signal};
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::server::CHILD_STOP_TIMEOUT;

/// Set in the environment of child processes.
pub const CHILD_ENV: &str = "KTLS_PROXY_WORKER_PROCESS";

pub fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// Starts `count` children running `proxy -c CONFIG` and supervises them until they exit.
pub fn supervise(config_path: &Path, count: u32) -> Result<(), String> {
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the proxy executable: {e}"))?;
    let mut children: Vec<Child> = Vec::with_capacity(count as usize);
    for i in 0..count {
        let child = Command::new(&exe)
            .arg("-c")
            .arg(config_path)
            .env(CHILD_ENV, i.to_string())
            .spawn()
            .map_err(|e| format!("cannot start worker process {i}: {e}"))?;
        children.push(child);
    }
    crate::info!(
        "supervising {count} worker processes: {:?}",
        children.iter().map(Child::id).collect::<Vec<_>>()
    );
    let mut signals = Signals::new([SIGHUP, SIGTERM, SIGQUIT, SIGINT])
        .map_err(|e| format!("cannot install signal handlers: {e}"))?;
    loop {
        for signal in signals.pending() {
            let relay = if signal == SIGHUP {
                Signal::HUP
            } else {
                Signal::TERM
            };
            send_all(&children, relay);
            if signal != SIGHUP {
                return stop_all(children);
            }
        }
        if let Some((i, status)) = children
            .iter_mut()
            .enumerate()
            .find_map(|(i, c)| c.try_wait().ok().flatten().map(|s| (i, s)))
        {
            crate::error!("worker process {i} exited ({status}); stopping the others");
            send_all(&children, Signal::TERM);
            stop_all(children)?;
            return Err(format!("worker process {i} exited: {status}"));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn send_all(children: &[Child], signal: Signal) {
    for c in children {
        if let Some(pid) = i32::try_from(c.id()).ok().and_then(Pid::from_raw) {
            let _ = kill_process(pid, signal);
        }
    }
}

fn stop_all(mut children: Vec<Child>) -> Result<(), String> {
    let deadline = Instant::now() + CHILD_STOP_TIMEOUT;
    while Instant::now() < deadline {
        if children
            .iter_mut()
            .all(|c| c.try_wait().ok().flatten().is_some())
        {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
    Ok(())
}
