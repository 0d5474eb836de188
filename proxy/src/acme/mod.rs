//! Automatic certificates (RFC 8555, an extension): vhosts written with
//! `tls_certificate acme;` get theirs from the `acme { ... }` block's server.
//!
//! - At load (`prepare`), the state directory is made private and each such vhost gets a
//!   temporary self-signed certificate if none was issued yet, so the TLS listener starts
//!   and every other vhost serves while the first order runs.
//! - Each serving process runs one side thread (`start`); the one holding the order lock
//!   (`leader`, a `flock` in `state_dir`: with `worker_processes` K one of the K; beside
//!   an instance started with `--upgrade`, the old one until it exits) orders each certificate that is
//!   temporary or past 2/3 of its lifetime, answering the first challenge type of
//!   `acme { challenges ...; }` the server offers. Workers never wait for it: the pending
//!   challenges are files in `state_dir` (`challenges`), read by whichever process the
//!   validation connection reaches: HTTP-01's (`challenge_answer`) when a request for
//!   `/.well-known/acme-challenge/` arrives on a plain listener, TLS-ALPN-01's
//!   (`tls_alpn::context_for`) when a ClientHello offers exactly `acme-tls/1`.
//! - A new certificate is written under `state_dir` and swapped in as a reload swaps
//!   configurations (`Runtime::build`, `Shared::replace_runtime`): new handshakes use it,
//!   connections already open keep theirs. The other processes see the file change
//!   (`Stored`) within a second and swap it in the same way.
//! - A failed order is logged and tried again after a backoff (5 s, doubling, at most an
//!   hour) while the current certificate keeps serving.

mod challenges;
mod client;
mod jws;
mod leader;
mod order;
mod state;
mod stored;
pub mod tls_alpn;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::runtime::Runtime;
use crate::ticket_files::Stamp;
use crate::worker::Shared;
pub use stored::Stored;

/// Where HTTP-01 asks for the key authorization.
const CHALLENGE_PREFIX: &[u8] = b"/.well-known/acme-challenge/";
/// First pause after a failed order; doubled after each failure up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// Longest sleep of the thread: how soon a certificate another process stored is taken in,
/// a process takes over the orders from one that exited, and a reload that adds an ACME
/// vhost is seen.
const TURN: Duration = Duration::from_secs(1);

/// The body to answer a plain-listener request for `path` with, while an order (of any
/// process using the same `state_dir`) waits for it.
pub fn challenge_answer(path: &[u8]) -> Option<Vec<u8>> {
    let token = std::str::from_utf8(path.strip_prefix(CHALLENGE_PREFIX)?).ok()?;
    challenges::read(config::AcmeChallenge::Http01, token).map(String::into_bytes)
}

/// Makes every process's listeners answer `challenge` (`on`) or stop answering it.
fn publish(state_dir: &Path, challenge: &order::Challenge<'_>, on: bool) -> Result<(), String> {
    let answer = on.then_some(challenge.key_authorization);
    match challenge.kind {
        config::AcmeChallenge::Http01 => {
            challenges::write(state_dir, challenge.kind, challenge.token, answer)
        }
        config::AcmeChallenge::TlsAlpn01 => tls_alpn::publish(state_dir, challenge.domain, answer),
    }
}

fn acme_vhosts(config: &config::Config) -> Vec<String> {
    config
        .vhosts
        .iter()
        .filter(|v| v.tls.acme)
        .map(|v| v.name.clone())
        .collect()
}

/// Held while a configuration's certificates load (`lib::load`): no process is writing them.
pub type Prepared = Option<leader::FilesLock>;

/// Before the certificates load: the private state directory, the account key and a
/// certificate file for each ACME vhost. An error stops the start (or the reload). The
/// files stay locked until the result is dropped: the caller loads them meanwhile.
pub fn prepare(config: &config::Config) -> Result<Prepared, String> {
    let Some(acme) = &config.acme else {
        return Ok(None);
    };
    state::private_dir(&acme.state_dir)?;
    // Exclusive: the processes of `worker_processes` reload together and would each write a
    // temporary certificate for a new vhost.
    let files = leader::FilesLock::take(&acme.state_dir, true)?;
    state::account_key(&acme.state_dir)?;
    for name in acme_vhosts(config) {
        state::ensure_vhost_files(acme, &name)?;
    }
    Ok(Some(files))
}

/// Whether the ACME thread runs: while the configuration in force has an `acme` block.
static RUNNING: Mutex<bool> = Mutex::new(false);

/// Starts the ACME thread if the configuration in force has an `acme` block and it is not
/// running (at start, and after a reload that may have added the block). The thread ends
/// at the first turn that finds none, releasing the order lock.
pub fn start(shared: &Arc<Shared>) -> std::io::Result<()> {
    let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    let Some(acme) = &shared.runtime().config.acme else {
        return Ok(());
    };
    if *running {
        return Ok(());
    }
    challenges::set_state_dir(Some(&acme.state_dir));
    let shared = shared.clone();
    std::thread::Builder::new()
        .name("acme".to_string())
        .spawn(move || run(&shared))?;
    *running = true;
    Ok(())
}

/// Per vhost: failures in a row, when to try again, and when the certificate file (as it
/// was then) is due, so that it is parsed again only when it changes.
#[derive(Default)]
struct Backoff {
    failures: u32,
    retry_at: Option<Instant>,
    due: Option<(Option<Stamp>, Instant)>,
}

fn run(shared: &Shared) {
    let mut orders = Orders::default();
    // The files a swap failed to load: not tried again until they change.
    let mut unloadable: Option<Stored> = None;
    loop {
        let rt = shared.runtime();
        let Some(acme) = rt.config.acme.as_ref() else {
            // Decided under the lock `start` takes after a reload installed its runtime:
            // either this sees that runtime, or `start` sees the thread gone.
            let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
            if shared.runtime().config.acme.is_none() {
                challenges::set_state_dir(None);
                *running = false;
                return;
            }
            continue;
        };
        challenges::set_state_dir(Some(&acme.state_dir));
        take_in_stored(shared, &rt, &mut unloadable);
        let mut sleep = TURN;
        if orders.lead(&acme.state_dir) {
            sleep = sleep.min(orders.turn(shared, acme, &rt.config));
        }
        drop(rt);
        std::thread::sleep(sleep.max(Duration::from_millis(100)));
    }
}

/// Swaps in the certificates stored since the runtime in force was built (by the process
/// that orders, when it is another one).
fn take_in_stored(shared: &Shared, rt: &Runtime, unloadable: &mut Option<Stored>) {
    let now = Stored::of(&rt.config);
    let changed = rt.acme_files.changed(&now);
    if changed.is_empty() || unloadable.as_ref() == Some(&now) {
        return;
    }
    match swap(shared) {
        Ok(()) => {
            *unloadable = None;
            crate::info!(
                "acme: stored certificate for {} taken into service",
                changed.join(", ")
            );
        }
        Err(e) => {
            crate::error!(
                "acme: stored certificate for {} not taken into service: {e}",
                changed.join(", ")
            );
            *unloadable = Some(now);
        }
    }
}

/// This process's part in ordering: the order lock when it holds it, the backoffs.
#[derive(Default)]
struct Orders {
    lock: Option<leader::OrderLock>,
    lock_error: Option<String>,
    backoff: HashMap<String, Backoff>,
}

impl Orders {
    /// Whether this process orders for `state_dir`: it holds the lock, or takes it now.
    fn lead(&mut self, state_dir: &Path) -> bool {
        if self.lock.as_ref().is_some_and(|l| l.is_for(state_dir)) {
            return true;
        }
        self.lock = None;
        match leader::OrderLock::try_take(state_dir) {
            Ok(Some(lock)) => {
                challenges::clear(state_dir);
                crate::info!(
                    "acme: this process (pid {}) orders and renews the certificates of {}",
                    std::process::id(),
                    state_dir.display()
                );
                self.lock = Some(lock);
                self.lock_error = None;
                true
            }
            Ok(None) => false,
            Err(e) => {
                if self.lock_error.as_ref() != Some(&e) {
                    crate::error!("acme: {e}; this process orders nothing");
                }
                self.lock_error = Some(e);
                false
            }
        }
    }

    /// Orders each certificate that is due and not backing off; how long until the next is.
    fn turn(&mut self, shared: &Shared, acme: &config::Acme, config: &config::Config) -> Duration {
        let mut sleep = TURN;
        for name in acme_vhosts(config) {
            let b = self.backoff.entry(name.clone()).or_default();
            let now = Instant::now();
            if let Some(at) = b.retry_at.filter(|at| *at > now) {
                sleep = sleep.min(at - now);
                continue;
            }
            let stamp = Stamp::of(&acme.certificate_paths(&name).certificate);
            let due_at = match b.due {
                Some((seen, at)) if seen == stamp => at,
                _ => {
                    let at = now + state::renewal_due_in(acme, &name);
                    b.due = Some((stamp, at));
                    at
                }
            };
            if due_at > now {
                sleep = sleep.min(due_at - now);
                continue;
            }
            match renew(shared, acme, &name) {
                Ok(()) => *b = Backoff::default(),
                Err(e) => {
                    b.failures += 1;
                    let wait = FIRST_BACKOFF
                        .saturating_mul(1 << b.failures.saturating_sub(1).min(12))
                        .min(MAX_BACKOFF);
                    b.retry_at = Some(Instant::now() + wait);
                    sleep = sleep.min(wait);
                    crate::error!(
                        "acme: certificate for {name} not obtained ({} failure(s) in a row): {e}; retrying in {} s, the current certificate keeps serving",
                        b.failures,
                        wait.as_secs()
                    );
                }
            }
        }
        sleep
    }
}

/// Orders `name`'s certificate, stores it and swaps it in.
fn renew(shared: &Shared, acme: &config::Acme, name: &str) -> Result<(), String> {
    crate::info!(
        "acme: ordering a certificate for {name} from {}",
        acme.directory
    );
    let client = client::Client::new(acme.ca_root.as_deref())?;
    let key = jws::AccountKey::new(state::account_key(&acme.state_dir)?)?;
    let mut session = order::Session::open(&client, &key, &acme.directory)?;
    session.account(&acme.contact)?;
    let state_dir = acme.state_dir.as_path();
    let publish = |c: &order::Challenge<'_>, on: bool| publish(state_dir, c, on);
    let (chain, cert_key) = session.order(name, acme.challenge_preference(), &publish)?;
    let pair = acme.certificate_paths(name);
    let key_pem = cert_key
        .private_key_to_pem_pkcs8()
        .map_err(|e| e.to_string())?;
    {
        // No process loads the pair while it is half written (`prepare`, `swap`); the key
        // first all the same, for a reader that does not lock.
        let _files = leader::FilesLock::take(&acme.state_dir, true)?;
        state::write_file(&pair.key, &key_pem, 0o600)?;
        state::write_file(&pair.certificate, chain.as_bytes(), 0o644)?;
    }
    swap(shared)?;
    crate::info!(
        "acme: new certificate for {name} in service; renewal in {} s",
        state::renewal_due_in(acme, name).as_secs()
    );
    Ok(())
}

/// Builds the running configuration again with the files now under `state_dir`, as a reload
/// does, keeping frang's per-client counts (the limits are the same).
fn swap(shared: &Shared) -> Result<(), String> {
    let _replacing = crate::runtime::REPLACING
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let old = shared.runtime();
    let _files = match &old.config.acme {
        Some(acme) => Some(leader::FilesLock::take(&acme.state_dir, false)?),
        None => None,
    };
    let new = Runtime::build(old.config.clone())
        .map_err(|e| format!("the new certificate does not load: {e}"))?;
    let new = match Arc::try_unwrap(new) {
        Ok(mut rt) => {
            rt.frang = old.frang.clone();
            rt.resolved = old.resolved.clone();
            Arc::new(rt)
        }
        Err(new) => new,
    };
    shared.replace_runtime(new);
    Ok(())
}
