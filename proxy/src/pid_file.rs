//! The pid file as the claim of one running instance on its configuration: the process that
//! serves a configuration holds an exclusive lock (`flock`) on its pid file for its whole
//! life. A second start of the same configuration finds the file locked before it binds
//! anything and is refused, because beside a live instance on the same ports
//! (`SO_REUSEPORT`) the kernel would split the clients between two configurations. Started
//! with `--upgrade` it serves anyway and takes the file over once the old instance is gone:
//! `proxy -s quit` keeps signalling the old one until then. The lock goes with the process,
//! so a crash leaves a stale file that the next start simply takes.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use config::PidFile;

use crate::service::{read_pid, ServiceError};

/// How often an instance started with `--upgrade` looks whether the old one has gone.
const TAKE_OVER_POLL: Duration = Duration::from_millis(100);

/// This process's pid file: locked from the start, written once the process serves
/// ([`PidFileGuard::publish`]), removed on drop if it still names this process.
#[derive(Debug)]
pub struct PidFileGuard {
    path: Option<PathBuf>,
    /// The locked file; `None` while an older instance still holds it (`--upgrade`).
    held: Arc<Mutex<Option<File>>>,
}

/// Claims the pid file of the configuration at `config`. Without a `pid` directive a file
/// that cannot be opened (no permission on /run) is only a warning, so unprivileged runs
/// still work (without the check). A file locked by a live instance fails the claim unless
/// `upgrade`.
pub fn claim(pid: &PidFile, config: &Path, upgrade: bool) -> Result<PidFileGuard, ServiceError> {
    let none = || PidFileGuard {
        path: None,
        held: Arc::default(),
    };
    let Some(path) = pid.path_for(config) else {
        return Ok(none());
    };
    match lock_at(&path) {
        Ok(Some(file)) => Ok(PidFileGuard {
            path: Some(path),
            held: Arc::new(Mutex::new(Some(file))),
        }),
        Ok(None) if upgrade => {
            crate::info!(
                "--upgrade: the instance of pid {} serves this configuration too; this one takes \
                 the pid file {} when it stops (`proxy -s quit -c {}`)",
                describe_pid(&path),
                path.display(),
                config.display()
            );
            Ok(PidFileGuard {
                path: Some(path),
                held: Arc::default(),
            })
        }
        Ok(None) => Err(ServiceError::AlreadyRunning {
            pid: read_pid(&path).ok(),
            path,
        }),
        Err(reason) if *pid == PidFile::Default => {
            crate::warn!(
                "no pid file ({}: {reason}); `proxy -s` needs one and a second start of this \
                 configuration will not be refused: set `pid PATH;`",
                path.display()
            );
            Ok(none())
        }
        Err(reason) => Err(ServiceError::WritePid { path, reason }),
    }
}

fn describe_pid(path: &Path) -> String {
    read_pid(path).map_or_else(|_| "unknown".to_string(), |p| p.to_string())
}

/// Opens (creating it) and locks the file at `path`. `Ok(None)`: another process holds the
/// lock. The lock is only taken on the file the path names when it is taken: one that an
/// exiting instance removed in between is let go and the path opened again.
fn lock_at(path: &Path) -> io::Result<Option<File>> {
    loop {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Ok(None),
            Err(fs::TryLockError::Error(e)) => return Err(e),
        }
        let still_there = fs::metadata(path).is_ok_and(|m| {
            file.metadata()
                .is_ok_and(|f| f.ino() == m.ino() && f.dev() == m.dev())
        });
        if still_there {
            return Ok(Some(file));
        }
    }
}

/// Writes this process's id into the locked file.
fn write_pid(mut file: &File) -> io::Result<()> {
    let text = format!("{}\n", std::process::id());
    // In place (the lock is on this inode): the number first, then the length, so that a
    // reader sees at worst the end of a longer stale number for an instant.
    file.rewind()?;
    file.write_all(text.as_bytes())?;
    file.set_len(text.len() as u64)
}

impl PidFileGuard {
    /// Writes this process's id into the pid file, now that it serves; an instance started
    /// with `--upgrade` beside a live one does so once the old instance has gone.
    pub fn publish(&self) -> Result<(), ServiceError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let Ok(held) = self.held.lock() else {
            return Ok(());
        };
        if let Some(file) = held.as_ref() {
            return write_pid(file).map_err(|reason| ServiceError::WritePid {
                path: path.clone(),
                reason,
            });
        }
        let (path, held) = (path.clone(), self.held.clone());
        let spawned = std::thread::Builder::new()
            .name("pid-file".into())
            .spawn(move || take_over(&path, &held));
        if let Err(e) = spawned {
            crate::warn!("cannot wait for the pid file: {e}");
        }
        Ok(())
    }
}

/// Waits until the older instance lets its pid file go, then takes it.
fn take_over(path: &Path, held: &Mutex<Option<File>>) {
    loop {
        std::thread::sleep(TAKE_OVER_POLL);
        match lock_at(path) {
            Ok(Some(file)) => {
                if let Err(e) = write_pid(&file) {
                    crate::warn!("cannot write the pid file {}: {e}", path.display());
                }
                crate::info!(
                    "the previous instance has stopped: {} names this one",
                    path.display()
                );
                if let Ok(mut slot) = held.lock() {
                    *slot = Some(file);
                }
                return;
            }
            Ok(None) => {}
            Err(e) => {
                crate::warn!("cannot take over the pid file {}: {e}", path.display());
                return;
            }
        }
    }
}

impl Drop for PidFileGuard {
    fn drop(&mut self) {
        let held = self.held.lock().ok().and_then(|mut h| h.take());
        if let (Some(path), Some(_file)) = (&self.path, held) {
            // Removed while still locked, so that a waiting instance never locks a file
            // that is about to go; one that names another process is left alone.
            if read_pid(path).ok() == Some(std::process::id() as i32) {
                let _ = fs::remove_file(path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_file_is_locked_written_and_removed() {
        let path = std::env::temp_dir().join(format!("ktls-pid-{}.pid", std::process::id()));
        let config = Path::new("/nonexistent/proxy.conf");
        let pid = PidFile::Path(path.clone());
        let guard = claim(&pid, config, false).unwrap();
        guard.publish().unwrap();
        assert_eq!(read_pid(&path).unwrap(), std::process::id() as i32);
        // The lock is per open file: a second claim, even from this process, finds it taken.
        assert!(matches!(
            claim(&pid, config, false),
            Err(ServiceError::AlreadyRunning { pid: Some(p), .. }) if p == std::process::id() as i32
        ));
        drop(guard);
        assert!(!path.exists());
        let missing = PidFile::Path("/nonexistent-dir/x.pid".into());
        assert!(matches!(
            claim(&missing, config, false),
            Err(ServiceError::WritePid { .. })
        ));
    }
}
