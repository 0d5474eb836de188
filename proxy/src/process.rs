//! `worker_processes K` (an extension): the first process re-executes itself K times; each
//! child is a complete serving process with its own SO_REUSEPORT listeners, workers, cache
//! and counters. This is for hosts where one process's descriptor limit (20000 here) is
//! smaller than the connections to hold. The parent owns the pid file, relays SIGHUP,
//! SIGUSR1 and stop signals, and tells systemd it is ready once every child has said so:
//! each child is given a private notification socket of the parent's as `$NOTIFY_SOCKET`,
//! in the supervisor's private directory (`runtime_dir`).

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::pid_file::PidFileGuard;
use rustix::process::{getppid, kill_process, set_parent_process_death_signal, Pid, Signal};
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1};
use signal_hook::iterator::Signals;

use crate::runtime_dir::{RuntimeDir, RUNTIME_DIR_ENV};
use crate::server::CHILD_STOP_TIMEOUT;

/// Set in the environment of child processes.
pub const CHILD_ENV: &str = "KTLS_PROXY_WORKER_PROCESS";

pub fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// Set in the environment of child processes: the supervisor's pid.
const SUPERVISOR_ENV: &str = "KTLS_PROXY_SUPERVISOR_PID";

/// In a child: have the kernel send it SIGTERM (a graceful stop) when the supervisor dies,
/// however it dies (SIGKILL, the OOM killer). An orphaned child would go on serving on its
/// SO_REUSEPORT listeners, unseen beside the next instance started on the same port. Fails
/// when the supervisor is already gone (the child was re-parented before this call).
pub fn stop_with_supervisor() -> Result<(), String> {
    set_parent_process_death_signal(Some(Signal::TERM))
        .map_err(|e| format!("cannot ask to be stopped with the supervisor: {e}"))?;
    let supervisor = std::env::var(SUPERVISOR_ENV)
        .ok()
        .and_then(|v| v.parse::<i32>().ok());
    let parent = getppid().map(Pid::as_raw_nonzero).map(|p| p.get());
    if supervisor.is_none() || supervisor != parent {
        return Err(format!(
            "the supervisor ({}) is gone; this worker process stops",
            supervisor.map_or_else(|| "pid unknown".to_string(), |p| p.to_string())
        ));
    }
    Ok(())
}

/// How long children may take to bind and report ready before the start counts as failed.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Starts `count` children running `proxy -c CONFIG` and supervises them until they exit.
pub fn supervise(config_path: &Path, count: u32, pid_file: &PidFileGuard) -> Result<(), String> {
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the proxy executable: {e}"))?;
    // Handlers before children: a signal early in the start must not kill the supervisor.
    let mut signals = Signals::new([SIGHUP, SIGTERM, SIGQUIT, SIGINT, SIGUSR1])
        .map_err(|e| format!("cannot install signal handlers: {e}"))?;
    // The readiness socket and the children's statistics sockets (`stats_merge`) live in
    // it; it goes, with them, when the supervisor does.
    let runtime_dir = RuntimeDir::create()?;
    let readiness = ReadinessSocket::bind(runtime_dir.path())?;
    let mut children: Vec<Child> = Vec::with_capacity(count as usize);
    // Started from this (the main) thread: the kernel's parent-death signal
    // (`stop_with_supervisor`) follows the thread that forked, and this one lives as long as
    // the process.
    for i in 0..count {
        let child = Command::new(&exe)
            .arg("-c")
            .arg(config_path)
            .env(CHILD_ENV, i.to_string())
            .env(SUPERVISOR_ENV, std::process::id().to_string())
            .env("NOTIFY_SOCKET", &readiness.path)
            .env(RUNTIME_DIR_ENV, runtime_dir.path())
            .spawn()
            .map_err(|e| format!("cannot start worker process {i}: {e}"))?;
        children.push(child);
    }
    crate::info!(
        "supervising {count} worker processes: {:?}",
        children.iter().map(Child::id).collect::<Vec<_>>()
    );
    if let Err(e) = readiness.wait_for(&mut children) {
        send_all(&children, Signal::TERM);
        stop_all(children)?;
        return Err(e);
    }
    drop(readiness);
    pid_file.publish().map_err(|e| e.to_string())?;
    crate::service::notify(&format!(
        "READY=1\nMAINPID={}\nSTATUS=supervising {count} worker processes",
        std::process::id()
    ));
    loop {
        for signal in signals.pending() {
            let relay = match signal {
                SIGHUP => Signal::HUP,
                SIGUSR1 => Signal::USR1,
                _ => Signal::TERM,
            };
            send_all(&children, relay);
            if signal != SIGHUP && signal != SIGUSR1 {
                crate::service::notify("STOPPING=1");
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

/// The supervisor's end of its children's readiness notifications (removed on drop).
struct ReadinessSocket {
    path: PathBuf,
    socket: UnixDatagram,
}

impl ReadinessSocket {
    fn bind(dir: &Path) -> Result<Self, String> {
        let path = crate::runtime_dir::notify_socket(dir);
        let socket = UnixDatagram::bind(&path)
            .map_err(|e| format!("cannot bind {}: {e}", path.display()))?;
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .map_err(|e| format!("cannot set a timeout on {}: {e}", path.display()))?;
        Ok(ReadinessSocket { path, socket })
    }

    /// Waits until every child has sent `READY=1`; fails when one exits first or time runs
    /// out. Children send nothing after that (see `server::notify_manager`).
    fn wait_for(&self, children: &mut [Child]) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut ready = 0;
        let mut buf = [0u8; 512];
        while ready < children.len() {
            if let Ok(n) = self.socket.recv(&mut buf) {
                let text = String::from_utf8_lossy(&buf[..n]);
                ready += usize::from(text.lines().any(|l| l == "READY=1"));
            }
            if let Some((i, status)) = children
                .iter_mut()
                .enumerate()
                .find_map(|(i, c)| c.try_wait().ok().flatten().map(|s| (i, s)))
            {
                return Err(format!(
                    "worker process {i} exited while starting: {status}"
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "worker processes not ready after {} s",
                    READY_TIMEOUT.as_secs()
                ));
            }
        }
        Ok(())
    }
}

impl Drop for ReadinessSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
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
