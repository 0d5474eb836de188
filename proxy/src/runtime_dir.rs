//! The supervisor's private directory for the Unix sockets of `worker_processes`: the
//! readiness socket its children report to, and the sockets on which the children answer the
//! first one's statistics scrapes (`stats_merge`).
//!
//! Why a directory of its own: sockets with predictable names in a shared temporary
//! directory can be taken first by another local user (a path created before ours makes
//! our `bind` fail, and a listener of theirs would be asked for our counters). A directory
//! made with mode 0700 under a name nobody can guess (`ktls-proxy-<16 random hex digits>`), which `mkdir` refuses to reuse, cannot
//! be entered or pre-filled by anyone else. It goes under `$RUNTIME_DIRECTORY` when systemd
//! gives one (`RuntimeDirectory=`), else under the temporary directory, and is removed with
//! everything in it when the supervisor ends.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Set in the environment of worker processes: the supervisor's directory.
pub const RUNTIME_DIR_ENV: &str = "KTLS_PROXY_RUNTIME_DIR";

/// Names tried before giving up: a clash needs another `mkdir` of the same random name.
const ATTEMPTS: usize = 8;

/// The supervisor's directory, removed (with its sockets) on drop.
pub struct RuntimeDir {
    path: PathBuf,
}

impl RuntimeDir {
    /// Makes a new private directory under `$RUNTIME_DIRECTORY` or the temporary directory.
    pub fn create() -> Result<RuntimeDir, String> {
        RuntimeDir::create_in(&base_dir())
    }

    fn create_in(base: &Path) -> Result<RuntimeDir, String> {
        let mut last_error = None;
        for _ in 0..ATTEMPTS {
            let mut random = [0u8; 8];
            openssl::rand::rand_bytes(&mut random)
                .map_err(|e| format!("cannot make a random directory name: {e}"))?;
            let suffix: String = random.iter().map(|b| format!("{b:02x}")).collect();
            let path = base.join(format!("ktls-proxy-{suffix}"));
            if socket_path_too_long(&path) {
                return Err(runtime_dir_error(
                    base,
                    &std::io::Error::other("the path is too long for a Unix socket in it"),
                ));
            }
            // `mkdir` fails on an existing path, whoever made it: the directory is ours.
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(RuntimeDir { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last_error = Some(e),
                Err(e) => return Err(runtime_dir_error(base, &e)),
            }
        }
        let e = last_error.unwrap_or_else(|| std::io::Error::other("no attempt made"));
        Err(runtime_dir_error(base, &e))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Whether the longest socket name in `dir` would exceed a Unix socket address (108 bytes
/// with its terminating NUL); `bind` would refuse it later, with a less helpful message.
fn socket_path_too_long(dir: &Path) -> bool {
    const SUN_PATH_MAX: usize = 108;
    let longest = stats_socket(dir, u32::MAX);
    longest.as_os_str().len() >= SUN_PATH_MAX
}

fn runtime_dir_error(base: &Path, e: &std::io::Error) -> String {
    format!(
        "cannot create a private directory for the worker processes' sockets in {}: {e}; \
         make it writable or set TMPDIR (or systemd's RuntimeDirectory=) to a directory that is",
        base.display()
    )
}

/// `$RUNTIME_DIRECTORY` (its first entry: systemd separates several with colons), else the
/// temporary directory.
fn base_dir() -> PathBuf {
    std::env::var_os("RUNTIME_DIRECTORY")
        .and_then(|v| {
            // Bytes, not text: a path need not be UTF-8.
            let first = v.as_bytes().split(|&b| b == b':').next()?;
            (!first.is_empty()).then(|| PathBuf::from(OsStr::from_bytes(first)))
        })
        .unwrap_or_else(std::env::temp_dir)
}

/// In a worker process: the directory its supervisor made, if it is one.
pub fn of_supervisor() -> Option<PathBuf> {
    std::env::var_os(RUNTIME_DIR_ENV).map(PathBuf::from)
}

/// The supervisor's readiness socket in `dir`.
pub fn notify_socket(dir: &Path) -> PathBuf {
    dir.join("notify")
}

/// The socket on which worker process `index` answers statistics scrapes.
pub fn stats_socket(dir: &Path, index: u32) -> PathBuf {
    dir.join(format!("stats.{index}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("runtime-dir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn private_unique_and_removed_with_its_contents() {
        let base = scratch("private");
        let a = RuntimeDir::create_in(&base).unwrap();
        let b = RuntimeDir::create_in(&base).unwrap();
        assert_ne!(a.path(), b.path());
        let mode = std::fs::metadata(a.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "mode {mode:o}");
        std::fs::write(stats_socket(a.path(), 1), b"x").unwrap();
        let kept = a.path().to_path_buf();
        drop(a);
        assert!(!kept.exists());
        assert!(b.path().exists());
        drop(b);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_base_too_long_for_socket_names_is_a_clear_error() {
        let base = PathBuf::from(format!("/tmp/{}", "d".repeat(70)));
        let e = RuntimeDir::create_in(&base).err().unwrap();
        assert!(e.contains("too long") && e.contains("TMPDIR"), "{e}");
    }

    #[test]
    fn an_unwritable_base_is_a_clear_error() {
        let base = scratch("missing").join("not-there");
        let e = RuntimeDir::create_in(&base).err().unwrap();
        assert!(e.contains("not-there") && e.contains("TMPDIR"), "{e}");
    }
}
