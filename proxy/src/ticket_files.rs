//! Key ring files of `tls_tickets keys=FILE` (an extension; the format is in
//! `config::ticket_keys`): read when the contexts are built (start and reload), then watched.
//!
//! The platform rotates keys by rewriting the file in place or by renaming a new one over it,
//! on every node: a side thread looks at the file's identity (device, inode, size,
//! modification time) every [`POLL`] and, when it moved, reads the file again and replaces the
//! ring's keys, so the fleet turns to the new sealing key within one poll of the rotation.
//! A file that is bad at that moment (half written, emptied, gone) keeps the keys in force and
//! is logged once per change; a good file later is taken as usual. Workers never read files:
//! they only see the ring's keys swapped. The thread runs only while the configuration in
//! force names a key file.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::worker::Shared;

/// How often each watched file's identity is read: a `stat` per file, so cheap; the delay of
/// a rotation reaching this node.
pub const POLL: Duration = Duration::from_secs(2);

/// A file's identity as `stat` gives it: any rewrite or rename changes one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl Stamp {
    pub fn of(path: &Path) -> Option<Stamp> {
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        })
    }
}

/// One listed ticket key ring and the file it came from.
#[derive(Clone, Debug)]
pub struct Watched {
    pub ring: ktls::tickets::RingId,
    pub path: PathBuf,
    /// The file as it was when the ring was filled.
    pub loaded: Option<Stamp>,
}

/// Reads `path` and registers its keys as a ring (for a context being built).
pub fn register(path: &Path) -> Result<(Watched, ktls::tickets::RingHold), String> {
    // Stamped before reading: a change while reading is seen again by the next poll.
    let loaded = Stamp::of(path);
    let keys = read_keys(path)?;
    let ring = ktls::tickets::register_listed(keys).ok_or("holds no key")?;
    let watched = Watched {
        ring: ring.id(),
        path: path.to_path_buf(),
        loaded,
    };
    Ok((watched, ring))
}

fn read_keys(path: &Path) -> Result<Vec<ktls::tickets::TicketKey>, String> {
    let keys = config::ticket_keys::read(path)?;
    keys.iter()
        .map(|k| {
            ktls::tickets::TicketKey::listed(k.name, &k.aes, &k.hmac)
                .ok_or_else(|| "a key of an unknown size".to_string())
        })
        .collect()
}

/// Whether the watching thread runs. It runs only while the configuration in force names a
/// key file: [`start`] (at start and after each reload) starts it, and it stops itself
/// within a poll of a reload that removed the last one.
static RUNNING: Mutex<bool> = Mutex::new(false);

fn names_a_file(shared: &Shared) -> bool {
    shared
        .runtime()
        .tls
        .as_ref()
        .is_some_and(|tls| !tls.ticket_files.is_empty())
}

/// Starts the watching thread if the configuration in force names a key file and it is not
/// running. Call it after the runtime is installed.
pub fn start(shared: &Arc<Shared>) -> std::io::Result<()> {
    let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    if *running || !names_a_file(shared) {
        return Ok(());
    }
    let shared = shared.clone();
    thread::Builder::new()
        .name("ticket-keys".into())
        .spawn(move || watch(&shared))?;
    *running = true;
    Ok(())
}

fn watch(shared: &Shared) {
    let mut seen = Seen::default();
    loop {
        thread::sleep(POLL);
        let runtime = shared.runtime();
        match &runtime.tls {
            Some(tls) if !tls.ticket_files.is_empty() => seen.visit(&tls.ticket_files),
            _ => {
                // Decided under the lock `start` takes after a reload installed its runtime:
                // either this sees that runtime, or `start` sees the thread gone.
                let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
                if !names_a_file(shared) {
                    *running = false;
                    return;
                }
            }
        }
    }
}

/// What the thread last saw of each ring's file.
#[derive(Default)]
struct Seen {
    stamps: HashMap<ktls::tickets::RingId, Option<Stamp>>,
}

impl Seen {
    /// Re-reads every file of `watched` whose stamp moved since its ring was filled or last
    /// looked at; forgets rings a reload replaced.
    fn visit(&mut self, watched: &[Watched]) {
        self.stamps
            .retain(|ring, _| watched.iter().any(|w| w.ring == *ring));
        // Several rings (vhosts, the accept context) may share a file: read it once a turn.
        let mut read: HashMap<&Path, Result<Vec<ktls::tickets::TicketKey>, String>> =
            HashMap::new();
        for w in watched {
            let now = Stamp::of(&w.path);
            let last = self.stamps.entry(w.ring).or_insert(w.loaded);
            if *last == now {
                continue;
            }
            *last = now;
            let first_reader = !read.contains_key(w.path.as_path());
            let keys = read
                .entry(w.path.as_path())
                .or_insert_with(|| read_keys(&w.path));
            match keys {
                Ok(keys) => {
                    ktls::tickets::replace_listed(w.ring, keys.clone());
                    if first_reader {
                        crate::info!(
                            "tls_tickets: key file {} changed: {} key(s) in force, the first seals new tickets",
                            w.path.display(),
                            keys.len()
                        );
                    }
                }
                Err(problem) if first_reader => crate::warn!(
                    "tls_tickets: key file {} changed but {problem}: the previous keys stay in force",
                    w.path.display()
                ),
                Err(_) => {}
            }
        }
    }
}
