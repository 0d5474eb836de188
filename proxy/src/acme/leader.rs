//! Which process orders and renews: the one holding an exclusive `flock` on
//! `state_dir/.order.lock`. Every process's ACME thread tries to take it (without waiting)
//! at each turn; the kernel releases it when its holder exits, however it exits, so another
//! process (of `worker_processes`, or the instance started with `--upgrade`) takes over
//! within a turn. A reload keeps it while `state_dir` stays the same.
//!
//! The others only answer challenges (`challenges`) and take in the certificates the holder
//! stores (`Stored`).

use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

const LOCK_FILE: &str = ".order.lock";

/// The order lock, held until dropped.
pub struct OrderLock {
    state_dir: PathBuf,
    _file: File,
}

impl OrderLock {
    /// The lock on `state_dir`'s orders, `None` while another process holds it.
    pub fn try_take(state_dir: &Path) -> Result<Option<OrderLock>, String> {
        let path = state_dir.join(LOCK_FILE);
        let file = open(&path)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(OrderLock {
                state_dir: state_dir.to_path_buf(),
                _file: file,
            })),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(format!("cannot lock {}: {e}", path.display())),
        }
    }

    pub fn is_for(&self, state_dir: &Path) -> bool {
        self.state_dir == state_dir
    }
}

/// Held while the certificate files are written (exclusive) or read into a runtime
/// (shared), so that no process loads a new key beside an old certificate.
pub struct FilesLock {
    _file: File,
}

impl FilesLock {
    pub fn take(state_dir: &Path, exclusive: bool) -> Result<FilesLock, String> {
        let path = state_dir.join(".files.lock");
        let file = open(&path)?;
        let locked = if exclusive {
            file.lock()
        } else {
            file.lock_shared()
        };
        locked.map_err(|e| format!("cannot lock {}: {e}", path.display()))?;
        Ok(FilesLock { _file: file })
    }
}

fn open(path: &Path) -> Result<File, String> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_the_next_takes_over_when_it_goes() {
        let dir = std::env::temp_dir().join(format!("acme-leader-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = OrderLock::try_take(&dir).unwrap().expect("free");
        assert!(first.is_for(&dir));
        assert!(OrderLock::try_take(&dir).unwrap().is_none());
        drop(first);
        assert!(OrderLock::try_take(&dir).unwrap().is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
