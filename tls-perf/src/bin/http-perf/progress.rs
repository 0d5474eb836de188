//! What the load threads have done so far, shared with the main thread: a progress line once
//! a second (on a terminal, or with `--progress`), and the stop that Ctrl-C (SIGINT) asks
//! for, after which the report covers what was measured until then.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Counts the threads add to as they go (every 100 ms tick), and the stop flag.
#[derive(Default)]
pub struct Live {
    /// Set by SIGINT: the threads end their run at their next wake-up (100 ms at most).
    pub stop: Arc<AtomicBool>,
    pub requests: AtomicU64,
    pub errors: AtomicU64,
}

impl Live {
    /// A thread's counts grew by `requests` and `errors` since its last report.
    pub fn add(&self, requests: u64, errors: u64) {
        self.requests.fetch_add(requests, Ordering::Relaxed);
        self.errors.fetch_add(errors, Ordering::Relaxed);
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Makes SIGINT set the stop flag instead of killing the process. A second SIGINT after
    /// the first one still kills it (signal-hook's conditional default), for a stuck run.
    pub fn stop_on_sigint(&self) -> std::io::Result<()> {
        let sig = signal_hook::consts::SIGINT;
        signal_hook::flag::register_conditional_default(sig, Arc::clone(&self.stop))?;
        signal_hook::flag::register(sig, Arc::clone(&self.stop))?;
        Ok(())
    }
}

/// Waits for every thread, printing a progress line to stderr once a second when `show`.
pub fn wait<T>(handles: &[JoinHandle<T>], live: &Live, started: Instant, show: bool) {
    let mut next = started + Duration::from_secs(1);
    let mut last = (started, 0u64);
    while !handles.iter().all(JoinHandle::is_finished) {
        std::thread::sleep(Duration::from_millis(50));
        let now = Instant::now();
        if !show || now < next {
            continue;
        }
        next += Duration::from_secs(1);
        let requests = live.requests.load(Ordering::Relaxed);
        let secs = now.duration_since(last.0).as_secs_f64().max(1e-9);
        let rate = (requests - last.1) as f64 / secs;
        last = (now, requests);
        let line = format!(
            "  {:>4}s  {requests} requests  {} req/s  {} errors\n",
            now.duration_since(started).as_secs(),
            crate::units::metric(rate),
            live.errors.load(Ordering::Relaxed),
        );
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}
