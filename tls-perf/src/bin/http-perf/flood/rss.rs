//! The server's memory (RSS + swap of its process tree) sampled while it is flooded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const INTERVAL: Duration = Duration::from_millis(100);

/// The samples of one run.
#[derive(Clone, Debug, Default)]
pub struct Memory {
    pub pid: u32,
    /// (milliseconds since the first sample, bytes), the first taken before any connection.
    pub samples: Vec<(u64, u64)>,
    /// CPU seconds the server's process tree spent from the first sample to the last.
    pub cpu_secs: f64,
    /// Wall seconds from the first sample to the last.
    pub wall_secs: f64,
}

impl Memory {
    pub fn start(&self) -> u64 {
        self.samples.first().map_or(0, |s| s.1)
    }
    pub fn peak(&self) -> u64 {
        self.samples.iter().map(|s| s.1).max().unwrap_or(0)
    }
    pub fn end(&self) -> u64 {
        self.samples.last().map_or(0, |s| s.1)
    }
    /// Peak over the start: what the flood cost the server at worst.
    pub fn growth(&self) -> u64 {
        self.peak().saturating_sub(self.start())
    }
    /// The server's process was gone at some sample (it died during the flood).
    pub fn vanished(&self) -> bool {
        self.samples.iter().any(|s| s.1 == 0)
    }
}

pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Memory>,
}

impl Sampler {
    /// Takes the first sample now, then one every 100 ms on its own thread.
    pub fn start(pid: u32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let t0 = Instant::now();
        let first = tls_perf::procstat::memory_bytes(pid).unwrap_or(0);
        let cpu0 = tls_perf::procstat::cpu_seconds(pid).unwrap_or(0.0);
        let handle = std::thread::spawn(move || {
            let mut m = Memory {
                pid,
                samples: vec![(0, first)],
                cpu_secs: 0.0,
                wall_secs: 0.0,
            };
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(INTERVAL);
                let bytes = tls_perf::procstat::memory_bytes(pid).unwrap_or(0);
                m.samples.push((t0.elapsed().as_millis() as u64, bytes));
            }
            m.cpu_secs = (tls_perf::procstat::cpu_seconds(pid).unwrap_or(cpu0) - cpu0).max(0.0);
            m.wall_secs = t0.elapsed().as_secs_f64();
            m
        });
        Sampler { stop, handle }
    }

    pub fn finish(self) -> Memory {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}
