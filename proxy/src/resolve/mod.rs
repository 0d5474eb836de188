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

pub mod dns;
mod thread;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use config::{Config, Server, ServerName};

pub use thread::start;

/// The names of a running configuration and what they stand for.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The configuration as written, the names unexpanded.
    pub template: Config,
    /// The servers each question (`ServerName::question`) stands for (sorted), from the
    /// last answer that gave any.
    pub answers: BTreeMap<String, Vec<Target>>,
    /// How long each `resolve` question's answer holds (`valid`, else its TTL, at least 1 s).
    pub holds: BTreeMap<String, Duration>,
}

/// One server an answer names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    pub ip: IpAddr,
    /// For an SRV record's target: its port, weight (1 to 100) and whether it is a backup
    /// (a priority above the lowest).
    pub srv: Option<(u16, u32, bool)>,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.srv {
            None => write!(f, "{}", self.ip),
            Some((port, weight, backup)) => {
                write!(f, "{}", SocketAddr::new(self.ip, port))?;
                write!(f, " weight={weight}{}", if backup { " backup" } else { "" })
            }
        }
    }
}

impl Resolved {
    /// The `resolve` names of the template, one for each question.
    pub fn resolve_names(&self) -> Vec<ServerName> {
        let mut names: Vec<ServerName> = servers(&self.template)
            .filter_map(|s| s.name.as_ref())
            .filter(|n| n.resolve)
            .cloned()
            .collect();
        names.sort_by_key(ServerName::question);
        names.dedup_by_key(|n| n.question());
        names
    }
}

/// The most servers one `resolve` name stands for: an answer decides how many servers (and
/// connection pools) a group gets, and that is the configuration's to bound, not the DNS
/// server's. A 4 KiB answer can carry ~250 addresses.
const MAX_TARGETS: usize = 64;

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
        let question = name.question();
        if answers.contains_key(&question) || holds.contains_key(&question) {
            continue;
        }
        if name.resolve {
            match ask(template.resolver.as_ref(), name) {
                Ok((targets, hold)) => {
                    answers.insert(question.clone(), targets);
                    holds.insert(question, hold);
                }
                Err(e) => {
                    crate::warn!(
                        "{}: server name `{question}` did not resolve ({e}); it has no address until it does",
                        name.at,
                    );
                    holds.insert(question, Duration::ZERO);
                }
            }
            continue;
        }
        match (name.host.as_str(), name.port).to_socket_addrs() {
            Ok(found) => {
                let mut targets: Vec<Target> =
                    found.map(|a| Target { ip: a.ip(), srv: None }).collect();
                targets.sort();
                targets.dedup();
                if targets.is_empty() {
                    errors.push(format!(
                        "{}: error: server name `{}` has no address",
                        name.at, name.host
                    ));
                }
                answers.insert(question, targets);
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

/// Asks the `resolver` about `name`: the servers it stands for (sorted), and how long they
/// hold.
fn ask(
    resolver: Option<&config::Resolver>,
    name: &ServerName,
) -> Result<(Vec<Target>, Duration), dns::DnsError> {
    let Some(r) = resolver else {
        // Refused at validation: `resolve` needs a `resolver`.
        return Err(dns::DnsError::NoAnswer("no resolver".into()));
    };
    let answer = match name.service {
        None => dns::ask(&r.servers, r.timeout, &name.host).map(|a| {
            let targets = a.addrs.iter().map(|&ip| Target { ip, srv: None });
            (targets.collect(), a.ttl)
        }),
        Some(_) => srv_targets(r, &name.question()),
    };
    let counter = if answer.is_ok() {
        &QUERIES_OK
    } else {
        &QUERIES_FAILED
    };
    counter.fetch_add(1, Ordering::Relaxed);
    let (mut targets, ttl) = answer?;
    targets.sort();
    targets.dedup();
    if targets.len() > MAX_TARGETS {
        crate::warn!(
            "server name `{}` stands for {} servers; the first {MAX_TARGETS} are used",
            name.question(),
            targets.len()
        );
        targets.truncate(MAX_TARGETS);
    }
    let hold = r.valid.unwrap_or(ttl).max(Duration::from_secs(1));
    Ok((targets, hold))
}

/// The servers of a service's SRV records: each target's addresses (those the answer carried,
/// else asked), with the record's port and weight, backups beyond the lowest priority
/// (RFC 2782: a lower priority is tried first). A target without an address is skipped.
fn srv_targets(
    r: &config::Resolver,
    question: &str,
) -> Result<(Vec<Target>, Duration), dns::DnsError> {
    let answer = dns::ask_srv(&r.servers, r.timeout, question)?;
    let first = answer.records.iter().map(|x| x.priority).min().unwrap_or(0);
    let mut ttl = answer.ttl;
    let mut targets = Vec::new();
    // Each target without a carried address costs a question of its own (blocking, up to the
    // timeout): as many as the servers kept.
    for record in answer.records.iter().take(MAX_TARGETS) {
        let mut ips: Vec<IpAddr> = answer
            .carried
            .iter()
            .filter(|(owner, _)| *owner == record.target)
            .map(|(_, ip)| *ip)
            .collect();
        if ips.is_empty() {
            match dns::ask(&r.servers, r.timeout, &record.target) {
                Ok(a) => {
                    ttl = ttl.min(a.ttl);
                    ips = a.addrs;
                }
                Err(e) => {
                    crate::warn!(
                        "SRV target `{}` of `{question}` did not resolve ({e})",
                        record.target
                    );
                    continue;
                }
            }
        }
        let facts = (
            record.port,
            u32::from(record.weight).clamp(1, 100),
            record.priority > first,
        );
        targets.extend(ips.into_iter().map(|ip| Target {
            ip,
            srv: Some(facts),
        }));
    }
    if targets.is_empty() {
        return Err(dns::DnsError::NoAddress);
    }
    Ok((targets, ttl))
}

/// The running configuration: `resolved`'s template with each named server replaced by one
/// server per address of its name (none while it has none); an address already in the group
/// is not added twice.
pub fn expand(resolved: &Resolved) -> Config {
    let mut config = resolved.template.clone();
    for group in &mut config.server_groups {
        let mut servers: Vec<Server> = Vec::with_capacity(group.servers.len());
        for s in &group.servers {
            let named = match &s.name {
                None => vec![s.clone()],
                Some(n) => resolved
                    .answers
                    .get(&n.question())
                    .map(|targets| targets.iter().map(|t| server_at(s, n, t)).collect())
                    .unwrap_or_default(),
            };
            for server in named {
                if servers.iter().all(|x| x.addr != server.addr) {
                    servers.push(server);
                }
            }
        }
        group.servers = servers;
    }
    config
}

/// The server `line` (given by `name`) makes for `target`.
fn server_at(line: &Server, name: &ServerName, target: &Target) -> Server {
    match target.srv {
        None => Server {
            addr: SocketAddr::new(target.ip, name.port),
            ..line.clone()
        },
        Some((port, weight, backup)) => Server {
            addr: SocketAddr::new(target.ip, port),
            weight,
            backup: backup || line.backup,
            ..line.clone()
        },
    }
}
