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
        let handle = std::thread::spawn(move || {
            let mut m = Memory {
                pid,
                samples: vec![(0, first)],
            };
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(INTERVAL);
                let bytes = tls_perf::procstat::memory_bytes(pid).unwrap_or(0);
                m.samples.push((t0.elapsed().as_millis() as u64, bytes));
            }
            m
        });
        Sampler { stop, handle }
    }

    pub fn finish(self) -> Memory {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}
