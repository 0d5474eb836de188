//! The side thread that asks the `resolve` names again when their answers run out, and swaps
//! in a running configuration built from the new answers when one changed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::{ask, expand, Resolved, Target, CHANGES};
use crate::runtime::Runtime;
use crate::worker::Shared;

/// How often the thread looks at the clock and the running configuration.
const TURN: Duration = Duration::from_millis(250);
/// How soon a failed question is asked again.
const RETRY: Duration = Duration::from_secs(5);

static RUNNING: Mutex<bool> = Mutex::new(false);

fn has_resolve_names(shared: &Shared) -> bool {
    shared
        .runtime()
        .resolved
        .as_ref()
        .is_some_and(|r| !r.resolve_names().is_empty())
}

/// Starts the thread if the running configuration has `resolve` names and none runs (at
/// the start, and after each reload, which may add the first).
pub fn start(shared: &Arc<Shared>) -> std::io::Result<()> {
    let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    if *running || !has_resolve_names(shared) {
        return Ok(());
    }
    let shared = shared.clone();
    thread::Builder::new()
        .name("resolver".into())
        .spawn(move || run(&shared))?;
    *running = true;
    Ok(())
}

fn run(shared: &Shared) {
    // When each name is to be asked again; a name first seen is due when its hold, counted
    // from now, runs out (the load or swap that made the runtime has just asked).
    let mut due: HashMap<String, Instant> = HashMap::new();
    // Names whose last question failed, so that a failure streak is logged once.
    let mut failing: HashSet<String> = HashSet::new();
    loop {
        thread::sleep(TURN);
        let runtime = shared.runtime();
        let Some(resolved) = runtime
            .resolved
            .clone()
            .filter(|r| !r.resolve_names().is_empty())
        else {
            // Decided under the lock `start` takes after a reload installed its runtime.
            let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
            if !has_resolve_names(shared) {
                *running = false;
                return;
            }
            continue;
        };
        let now = Instant::now();
        let mut changed: BTreeMap<String, (Vec<Target>, Duration)> = BTreeMap::new();
        for server_name in resolved.resolve_names() {
            let name = server_name.question();
            // ZERO: the name had no answer when the runtime was made: ask now.
            let hold = resolved.holds.get(&name).copied().unwrap_or(Duration::ZERO);
            let when = *due.entry(name.clone()).or_insert(now + hold);
            if when > now {
                continue;
            }
            match ask(runtime.config.resolver.as_ref(), &server_name) {
                Ok((addrs, hold)) => {
                    if failing.remove(&name) {
                        crate::info!("server name `{name}` resolves again");
                    }
                    due.insert(name.clone(), now + hold);
                    if resolved.answers.get(&name) != Some(&addrs) {
                        changed.insert(name, (addrs, hold));
                    }
                }
                Err(e) => {
                    if failing.insert(name.clone()) {
                        crate::warn!(
                            "server name `{name}` did not resolve ({e}); keeping its last addresses, asking again every {} s",
                            RETRY.as_secs()
                        );
                    }
                    due.insert(name, now + RETRY);
                }
            }
        }
        if !changed.is_empty() && !swap(shared, &runtime, &resolved, &changed) {
            // A reload replaced the runtime meanwhile: ask again on the next turn, against it.
            for name in changed.keys() {
                due.insert(name.clone(), now);
            }
        }
    }
}

/// Installs a runtime built from `resolved` with the `changed` answers, if `runtime` is still
/// the running one; false if a reload replaced it meanwhile.
fn swap(
    shared: &Shared,
    runtime: &Arc<Runtime>,
    resolved: &Resolved,
    changed: &BTreeMap<String, (Vec<Target>, Duration)>,
) -> bool {
    let _replacing = crate::runtime::REPLACING
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if !Arc::ptr_eq(&shared.runtime(), runtime) {
        return false;
    }
    let mut next = resolved.clone();
    for (name, (addrs, hold)) in changed {
        let was = next.answers.insert(name.clone(), addrs.clone());
        next.holds.insert(name.clone(), *hold);
        crate::info!(
            "server name `{name}` now stands for {} (was {})",
            list(addrs),
            was.as_deref().map_or_else(|| "nothing".into(), list)
        );
    }
    let built = match Runtime::build(expand(&next)) {
        Ok(rt) => rt,
        Err(e) => {
            crate::error!(
                "the configuration with the new addresses does not build: {e}; keeping the old"
            );
            return true;
        }
    };
    let built = match Arc::try_unwrap(built) {
        Ok(mut rt) => {
            // The limits are the same: the clients' counts go on.
            rt.frang = runtime.frang.clone();
            rt.fingerprints = runtime.fingerprints.clone();
            rt.resolved = Some(Arc::new(next));
            Arc::new(rt)
        }
        Err(_) => return true,
    };
    shared.replace_runtime(built);
    CHANGES.fetch_add(1, Ordering::Relaxed);
    true
}

fn list(addrs: &[Target]) -> String {
    if addrs.is_empty() {
        return "nothing".into();
    }
    addrs
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
