//! Servers named by DNS names (extension: `server NAME[:PORT] [resolve]`, `resolver`;
//! docs/PROXY.md "Servers by name").
//!
//! The configuration keeps the names as written (`Resolved::template`); the running
//! configuration has one server per address each name stands for, with the line's options.
//! At load every name is looked up: through the `resolver` when the line says `resolve`,
//! else by the system (getaddrinfo, as nginx does for its `server` names); a name that does
//! not resolve refuses the configuration, but for `resolve` ones, which start without
//! addresses and are asked again. The side thread (`thread.rs`) asks again each `resolve`
//! name when its answer's TTL (or the `resolver`'s `valid`) runs out, and swaps in a running
//! configuration built again from the template when an answer changed, as a reload does:
//! exchanges in flight finish where they are, connections to an address no longer named
//! retire after `grace_shutdown_time`. A failed question keeps the last good addresses.

mod dns;
mod thread;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use config::{Config, Server};

pub use thread::start;

/// The names of a running configuration and what they stand for.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The configuration as written, the names unexpanded.
    pub template: Config,
    /// The addresses of each name (sorted), from the last answer that gave any.
    pub answers: BTreeMap<String, Vec<IpAddr>>,
    /// How long each `resolve` name's answer holds (`valid`, else its TTL, at least 1 s).
    pub holds: BTreeMap<String, Duration>,
}

impl Resolved {
    /// The `resolve` names of the template, each once.
    pub fn resolve_names(&self) -> Vec<String> {
        let mut names: Vec<String> = servers(&self.template)
            .filter_map(|s| s.name.as_ref())
            .filter(|n| n.resolve)
            .map(|n| n.host.clone())
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

static QUERIES_OK: AtomicU64 = AtomicU64::new(0);
static QUERIES_FAILED: AtomicU64 = AtomicU64::new(0);
static CHANGES: AtomicU64 = AtomicU64::new(0);

/// The resolver's counts for the metrics: questions answered, failed, and answers that
/// changed a running configuration.
pub fn counts() -> (u64, u64, u64) {
    (
        QUERIES_OK.load(Ordering::Relaxed),
        QUERIES_FAILED.load(Ordering::Relaxed),
        CHANGES.load(Ordering::Relaxed),
    )
}

fn servers(config: &Config) -> impl Iterator<Item = &Server> {
    config.server_groups.iter().flat_map(|g| g.servers.iter())
}

/// Looks up every name of `template` (see the module's text); the running configuration and
/// what the names stand for, or every name that did not resolve, one line each.
pub fn at_load(template: Config) -> Result<(Config, Option<Resolved>), String> {
    if servers(&template).all(|s| s.name.is_none()) {
        return Ok((template, None));
    }
    let mut answers = BTreeMap::new();
    let mut holds = BTreeMap::new();
    let mut errors = Vec::new();
    for name in servers(&template).filter_map(|s| s.name.as_ref()) {
        if answers.contains_key(&name.host) || holds.contains_key(&name.host) {
            continue;
        }
        if name.resolve {
            let resolver = template.resolver.as_ref();
            match ask(resolver, &name.host) {
                Ok((addrs, hold)) => {
                    answers.insert(name.host.clone(), addrs);
                    holds.insert(name.host.clone(), hold);
                }
                Err(e) => {
                    crate::warn!(
                        "{}: server name `{}` did not resolve ({e}); it has no address until it does",
                        name.at,
                        name.host
                    );
                    holds.insert(name.host.clone(), Duration::ZERO);
                }
            }
            continue;
        }
        match (name.host.as_str(), name.port).to_socket_addrs() {
            Ok(found) => {
                let mut addrs: Vec<IpAddr> = found.map(|a| a.ip()).collect();
                addrs.sort();
                addrs.dedup();
                if addrs.is_empty() {
                    errors.push(format!(
                        "{}: error: server name `{}` has no address",
                        name.at, name.host
                    ));
                }
                answers.insert(name.host.clone(), addrs);
            }
            Err(e) => errors.push(format!(
                "{}: error: server name `{}` does not resolve: {e} (hint: fix the name or the system's resolver, or give an address)",
                name.at, name.host
            )),
        }
    }
    if !errors.is_empty() {
        return Err(errors.join("\n"));
    }
    let resolved = Resolved {
        template,
        answers,
        holds,
    };
    Ok((expand(&resolved), Some(resolved)))
}

/// Asks the `resolver` about `host`: the sorted addresses, and how long they hold.
fn ask(
    resolver: Option<&config::Resolver>,
    host: &str,
) -> Result<(Vec<IpAddr>, Duration), dns::DnsError> {
    let Some(r) = resolver else {
        // Refused at validation: `resolve` needs a `resolver`.
        return Err(dns::DnsError::NoAnswer("no resolver".into()));
    };
    let answer = dns::ask(&r.servers, r.timeout, host);
    let counter = if answer.is_ok() {
        &QUERIES_OK
    } else {
        &QUERIES_FAILED
    };
    counter.fetch_add(1, Ordering::Relaxed);
    let answer = answer?;
    let hold = r.valid.unwrap_or(answer.ttl).max(Duration::from_secs(1));
    Ok((answer.addrs, hold))
}

/// The running configuration: `resolved`'s template with each named server replaced by one
/// server per address of its name (none while it has none); an address already in the group
/// is not added twice.
pub fn expand(resolved: &Resolved) -> Config {
    let mut config = resolved.template.clone();
    for group in &mut config.server_groups {
        let mut servers: Vec<Server> = Vec::with_capacity(group.servers.len());
        for s in &group.servers {
            let addrs = match &s.name {
                None => vec![s.addr],
                Some(n) => resolved
                    .answers
                    .get(&n.host)
                    .map(|ips| ips.iter().map(|ip| SocketAddr::new(*ip, n.port)).collect())
                    .unwrap_or_default(),
            };
            for addr in addrs {
                if servers.iter().all(|x| x.addr != addr) {
                    servers.push(Server { addr, ..s.clone() });
                }
            }
        }
        group.servers = servers;
    }
    config
}
