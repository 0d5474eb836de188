//! The challenges in progress, shared by every process of `worker_processes` (and by an
//! instance started beside this one with `--upgrade`) through files under
//! `state_dir/.challenges/` (0700; files 0600). The process that orders writes a challenge's
//! key authorization there before it tells the ACME server to validate, and removes it
//! after; SO_REUSEPORT may hand the validation connection to any process, and that process
//! reads the file when the request (HTTP-01) or the ClientHello (TLS-ALPN-01) arrives. A
//! file is renamed into place whole, so a reader finds all of it or nothing.
//!
//! A lookup costs a worker one `open` of a small file in a private directory, and only for a
//! request under `/.well-known/acme-challenge/` on a plain listener or a ClientHello offering
//! exactly `acme-tls/1`, and only while the configuration has an `acme` block.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use config::AcmeChallenge;

/// The directory under `state_dir` (a vhost's directory is its name, which never starts
/// with a dot).
const DIR: &str = ".challenges";
/// A key authorization is a token, a dot and a thumbprint: far shorter than this.
const MAX_FILE: u64 = 4096;

/// The state directory of the configuration in force, `None` without an `acme` block; kept
/// by the ACME thread.
static STATE_DIR: RwLock<Option<PathBuf>> = RwLock::new(None);

/// Where lookups read from now on.
pub fn set_state_dir(dir: Option<&Path>) {
    let mut current = STATE_DIR.write().unwrap_or_else(|e| e.into_inner());
    if current.as_deref() != dir {
        *current = dir.map(Path::to_path_buf);
    }
}

fn kind_dir(kind: AcmeChallenge) -> &'static str {
    match kind {
        AcmeChallenge::Http01 => "http-01",
        AcmeChallenge::TlsAlpn01 => "tls-alpn-01",
    }
}

/// Whether `name` (an HTTP-01 token, base64url; a TLS-ALPN-01 domain, lowercase) can name a
/// file here: letters, digits, `-`, `_`, `.`, not starting with a dot (no `..`, no `/`).
fn safe_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn file(state_dir: &Path, kind: AcmeChallenge, name: &str) -> Option<PathBuf> {
    safe_name(name).then(|| state_dir.join(DIR).join(kind_dir(kind)).join(name))
}

/// Publishes `key_authorization` for `name` (Some) or withdraws it (None).
pub fn write(
    state_dir: &Path,
    kind: AcmeChallenge,
    name: &str,
    key_authorization: Option<&str>,
) -> Result<(), String> {
    let path = file(state_dir, kind, name).ok_or_else(|| {
        format!(
            "{} challenge for {name:?}: not a name a file can have",
            kind.as_str()
        )
    })?;
    let Some(answer) = key_authorization else {
        return match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(format!("cannot remove {}: {e}", path.display()))
            }
            _ => Ok(()),
        };
    };
    let challenges = state_dir.join(DIR);
    super::state::private_dir(&challenges)?;
    super::state::private_dir(&challenges.join(kind_dir(kind)))?;
    super::state::write_file(&path, answer.as_bytes(), 0o600)
}

/// The key authorization some process published for `name`, if any.
pub fn read(kind: AcmeChallenge, name: &str) -> Option<String> {
    let path = {
        let dir = STATE_DIR.read().unwrap_or_else(|e| e.into_inner());
        file(dir.as_deref()?, kind, name)?
    };
    use std::io::Read;
    let mut text = String::new();
    fs::File::open(path)
        .ok()?
        .take(MAX_FILE)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// Removes what an orderer that stopped mid-order left behind (called by the process that
/// takes the order lock, the only writer from then on).
pub fn clear(state_dir: &Path) {
    let _ = fs::remove_dir_all(state_dir.join(DIR));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_names_become_files() {
        for good in ["site.example", "xkq-_Z09", "a"] {
            assert!(safe_name(good), "{good}");
        }
        for bad in ["", ".", "..", "../x", "a/b", ".hidden", "a b", "é"] {
            assert!(!safe_name(bad), "{bad}");
        }
    }
}
