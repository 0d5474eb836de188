//! Automatic certificates (RFC 8555, an extension): vhosts written with
//! `tls_certificate acme;` get theirs from the `acme { ... }` block's server.
//!
//! - At load (`prepare`), the state directory is made private and each such vhost gets a
//!   temporary self-signed certificate if none was issued yet, so the TLS listener starts
//!   and every other vhost serves while the first order runs.
//! - One side thread (`start`) orders each certificate that is temporary or past 2/3 of its
//!   lifetime, answering the first challenge type of `acme { challenges ...; }` the server
//!   offers. Workers never wait for it: they only read the challenge tables, HTTP-01's
//!   (`challenge_answer`) when a request for `/.well-known/acme-challenge/` arrives on a
//!   plain listener, TLS-ALPN-01's (`tls_alpn::context_for`) when a ClientHello offers
//!   exactly `acme-tls/1`.
//! - A new certificate is written under `state_dir` and swapped in as a reload swaps
//!   configurations (`Runtime::build`, `Shared::replace_runtime`): new handshakes use it,
//!   connections already open keep theirs.
//! - A failed order is logged and tried again after a backoff (5 s, doubling, at most an
//!   hour) while the current certificate keeps serving.

mod client;
mod jws;
mod order;
mod state;
pub mod tls_alpn;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::runtime::Runtime;
use crate::worker::Shared;

/// Where HTTP-01 asks for the key authorization.
const CHALLENGE_PREFIX: &[u8] = b"/.well-known/acme-challenge/";
/// First pause after a failed order; doubled after each failure up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// Longest sleep of the thread: a reload that adds an ACME vhost is seen within it.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// Tokens of the challenges in progress and their key authorizations.
static CHALLENGES: RwLock<Vec<(String, String)>> = RwLock::new(Vec::new());

/// The body to answer a plain-listener request for `path` with, while an order waits for it.
pub fn challenge_answer(path: &[u8]) -> Option<Vec<u8>> {
    let token = path.strip_prefix(CHALLENGE_PREFIX)?;
    let table = CHALLENGES.read().unwrap_or_else(|e| e.into_inner());
    table
        .iter()
        .find(|(t, _)| t.as_bytes() == token)
        .map(|(_, answer)| answer.clone().into_bytes())
}

/// Makes the listeners answer `challenge` (`on`) or stop answering it.
fn publish(challenge: &order::Challenge<'_>, on: bool) -> Result<(), String> {
    match challenge.kind {
        config::AcmeChallenge::Http01 => {
            publish_http01(
                challenge.token,
                on.then(|| challenge.key_authorization.to_string()),
            );
            Ok(())
        }
        config::AcmeChallenge::TlsAlpn01 => {
            tls_alpn::publish(challenge.domain, on.then_some(challenge.key_authorization))
        }
    }
}

fn publish_http01(token: &str, answer: Option<String>) {
    let mut table = CHALLENGES.write().unwrap_or_else(|e| e.into_inner());
    table.retain(|(t, _)| t != token);
    if let Some(answer) = answer {
        table.push((token.to_string(), answer));
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

/// Before the certificates load: the private state directory, the account key and a
/// certificate file for each ACME vhost. An error stops the start (or the reload).
pub fn prepare(config: &config::Config) -> Result<(), String> {
    let Some(acme) = &config.acme else {
        return Ok(());
    };
    if config.worker_processes > 1 {
        return Err("acme: with worker_processes above 1 each process would order the same certificates; use worker_threads".to_string());
    }
    state::private_dir(&acme.state_dir)?;
    state::account_key(&acme.state_dir)?;
    for name in acme_vhosts(config) {
        state::ensure_vhost_files(acme, &name)?;
    }
    Ok(())
}

/// Starts the ACME thread when the configuration has an `acme` block.
pub fn start(shared: Arc<Shared>) -> std::io::Result<()> {
    if shared.runtime().config.acme.is_none() {
        return Ok(());
    }
    std::thread::Builder::new()
        .name("acme".to_string())
        .spawn(move || run(&shared))
        .map(|_| ())
}

/// Per vhost: failures in a row, and when to try again.
#[derive(Default)]
struct Backoff {
    failures: u32,
    retry_at: Option<Instant>,
}

fn run(shared: &Shared) {
    let mut backoff: HashMap<String, Backoff> = HashMap::new();
    loop {
        let rt = shared.runtime();
        let mut sleep = MAX_SLEEP;
        if let Some(acme) = &rt.config.acme {
            for name in acme_vhosts(&rt.config) {
                let b = backoff.entry(name.clone()).or_default();
                let now = Instant::now();
                if let Some(at) = b.retry_at.filter(|at| *at > now) {
                    sleep = sleep.min(at - now);
                    continue;
                }
                let due = state::renewal_due_in(acme, &name);
                if !due.is_zero() {
                    sleep = sleep.min(due);
                    continue;
                }
                match renew(shared, acme, &name) {
                    Ok(()) => {
                        *b = Backoff::default();
                        sleep = sleep.min(state::renewal_due_in(acme, &name));
                    }
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
        }
        drop(rt);
        std::thread::sleep(sleep.max(Duration::from_millis(100)));
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
    let (chain, cert_key) = session.order(name, acme.challenge_preference(), &publish)?;
    let pair = acme.certificate_paths(name);
    let key_pem = cert_key
        .private_key_to_pem_pkcs8()
        .map_err(|e| e.to_string())?;
    // The key first: a reload between the two writes loads the old pair or fails on a
    // mismatch (and keeps serving), never a new certificate with an old key.
    state::write_file(&pair.key, &key_pem, 0o600)?;
    state::write_file(&pair.certificate, chain.as_bytes(), 0o644)?;
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
    let new = Runtime::build(old.config.clone())
        .map_err(|e| format!("the new certificate does not load: {e}"))?;
    let new = match Arc::try_unwrap(new) {
        Ok(mut rt) => {
            rt.frang = old.frang.clone();
            Arc::new(rt)
        }
        Err(new) => new,
    };
    shared.replace_runtime(new);
    Ok(())
}
