//! What the workers of one process share: the configuration in force (and its generation,
//! so a worker notices a reload without the lock), the stop flag, the metrics, the cache.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::metrics::Metrics;
use crate::runtime::Runtime;

/// What the workers of one process share.
pub struct Shared {
    pub(super) runtime: RwLock<Arc<Runtime>>,
    /// Bumped on every successful reload, so workers notice without taking the lock.
    pub(super) generation: AtomicU64,
    pub(super) stopping: AtomicBool,
    pub metrics: Arc<Metrics>,
    /// The response cache of this process, shared by all workers.
    pub cache: cache::Cache,
    /// Every worker's waker, for `ip_block`'s resets (ip_block.rs).
    pub(super) block_wake: super::ip_block::BlockWake,
    /// QUIC datagrams moved to the worker that owns their connection (quic/route.rs).
    pub(super) quic_moves: Arc<super::quic::route::Moves>,
}

impl Shared {
    pub fn new(runtime: Arc<Runtime>, metrics: Arc<Metrics>) -> Shared {
        let total_bytes = usize::try_from(runtime.config.cache.size).unwrap_or(usize::MAX);
        let max_object = usize::try_from(runtime.config.cache.max_object_size).unwrap_or(1);
        let limits = cache::CacheLimits {
            total_bytes,
            // One object is at most a shard's share: fewer shards when the largest object
            // would not fit one, so `cache_max_object_size` is what decides (with the
            // defaults, 64 shards of 4 MiB never stored a body of 4 to 8 MiB).
            shards: (total_bytes / max_object.max(1))
                .clamp(1, cache::CacheLimits::default().shards),
        };
        Shared {
            runtime: RwLock::new(runtime),
            generation: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
            metrics,
            cache: cache::Cache::new(limits),
            block_wake: super::ip_block::BlockWake::default(),
            quic_moves: Arc::default(),
        }
    }

    pub fn runtime(&self) -> Arc<Runtime> {
        self.runtime
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Installs a new configuration: new connections and requests use it.
    pub fn replace_runtime(&self, runtime: Arc<Runtime>) {
        *self.runtime.write().unwrap_or_else(|e| e.into_inner()) = runtime;
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub fn begin_stop(&self) {
        self.stopping.store(true, Ordering::Release);
    }
}
