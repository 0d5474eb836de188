//! Turns the syntax tree into the typed [`Config`], enforcing Tempesta's
//! ordering and cross-reference rules and reporting every problem found.

mod acme;
mod brange;
mod chain;
mod chain_action;
mod chain_condition;
mod cluster;
mod fingerprint;
mod frang;
mod global;
mod global_cache;
mod global_h3;
mod global_health;
mod global_limits;
mod global_log;
mod inherit;
pub mod once;
mod resolver;
mod server_proto;
mod server_tls;
mod servers;
mod stale;
mod sticky;
mod tempesta_regex;
pub mod values;
mod vhost;
mod vhost_cache;

use std::collections::HashSet;
use std::path::Path;

use crate::diag::{did_you_mean, Diagnostic, Pos, Sink};
use crate::directives::{self, is_known, UNSUPPORTED};
use crate::model::{Action, Config, HttpChain, HttpTables, ProxyPass, Rule, Vhost, DEFAULT_NAME};
use crate::tree::{Directive, Node};
use chain::{ChainState, Targets};
use servers::GroupDraft;
use values::Checker;
use vhost::{Draft, Level, Scope};

/// Reports a directive not handled in `context`: a warning if it is a
/// Tempesta directive we ignore, else an error saying where it belongs or
/// what was probably meant.
pub(crate) fn unknown_here(c: &mut Checker<'_>, d: &Directive, context: &str, allowed: &[&str]) {
    let name = d.name.as_str();
    if UNSUPPORTED.contains(&name) {
        c.sink.warning(
            &d.pos,
            format!(
                "`{name}` is a Tempesta FW directive this proxy does not implement; it is ignored"
            ),
        );
        return;
    }
    if name == "!include" {
        c.error(
            &d.pos,
            "`!include` is expanded by tempesta.sh, not by the configuration parser",
            "paste the included files into this one",
        );
        return;
    }
    if is_known(name) {
        c.error(
            &d.pos,
            format!("`{name}` is not allowed in {context}"),
            where_allowed(name),
        );
        return;
    }
    let mut err = Diagnostic::error(&d.pos, format!("unknown directive `{name}` in {context}"));
    if let Some(s) = did_you_mean(
        name,
        allowed.iter().copied().chain(UNSUPPORTED.iter().copied()),
    ) {
        err = err.with_hint(format!("did you mean `{s}`?"));
    } else if let Some(s) = did_you_mean(name, directives::all_known()) {
        err = err.with_hint(format!(
            "did you mean `{s}`? (it belongs elsewhere: {})",
            where_allowed(s)
        ));
    }
    c.sink.push(err);
}

fn where_allowed(name: &str) -> String {
    let mut places = Vec::new();
    if directives::TOP_LEVEL.contains(&name) || directives::EXTENSIONS.contains(&name) {
        places.push("top level");
    }
    if directives::VHOST_LEVEL.contains(&name) {
        places.push("`vhost`");
    }
    if directives::LOCATION_LEVEL.contains(&name) {
        places.push("`location`");
    }
    if directives::SRV_GROUP_LEVEL.contains(&name) {
        places.push("`srv_group`");
    }
    if directives::FRANG_GLOBAL.contains(&name) || directives::FRANG_HTTP.contains(&name) {
        places.push("`frang_limits`");
    }
    if directives::HEALTH_CHECK_LEVEL.contains(&name) {
        places.push("`health_check`");
    }
    if directives::STICKY_LEVEL.contains(&name) {
        places.push("`sticky`");
    }
    format!("`{name}` belongs in {}", places.join(", "))
}

struct VhostEntry {
    name: String,
    draft: Draft,
    /// The top-level `sticky` block as it stood when this vhost's section ended: Tempesta
    /// resolves a vhost's sticky settings then (tfw_http_sess_cfg_finish), so a top-level
    /// block written after the vhost does not reach it.
    top_sticky: Option<sticky::StickyDraft>,
}

/// Everything gathered while walking the top level.
struct Walk {
    cfg: Config,
    /// Default-vhost settings from top-level directives.
    global: Draft,
    /// Servers and group settings given at top level.
    top_group: GroupDraft,
    groups: Vec<GroupDraft>,
    /// Groups defined so far (the implicit `default` once a top-level
    /// `server` is seen).
    group_names: HashSet<String>,
    vhosts: Vec<VhostEntry>,
    vhost_names: HashSet<String>,
    all_vhost_names: HashSet<String>,
    chains: ChainState,
    /// Single-valued top-level directives seen so far.
    seen: once::Seen,
    /// Position of each accepted `listen`, parallel to `cfg.listeners`.
    listen_pos: Vec<Pos>,
    /// Position of each value of `acme { challenges ...; }`, parallel to its list.
    acme_challenges: Vec<Pos>,
    /// Position of the `cluster` block (checked against the listeners at the end).
    cluster_pos: Option<Pos>,
}

pub fn validate(nodes: &[Node], base_dir: &Path, sink: &mut Sink) -> Config {
    let all_vhost_names = nodes
        .iter()
        .filter_map(|n| match n {
            Node::Directive(d) if d.name == "vhost" => d.args.first().map(|a| a.text.clone()),
            _ => None,
        })
        .collect();
    let mut w = Walk {
        cfg: Config::default(),
        global: Draft::default(),
        top_group: GroupDraft {
            name: DEFAULT_NAME.to_string(),
            ..GroupDraft::default()
        },
        groups: Vec::new(),
        group_names: HashSet::new(),
        vhosts: Vec::new(),
        vhost_names: HashSet::new(),
        all_vhost_names,
        chains: ChainState::default(),
        seen: once::Seen::default(),
        listen_pos: Vec::new(),
        acme_challenges: Vec::new(),
        cluster_pos: None,
    };
    let mut c = Checker { sink, base_dir };
    for node in nodes {
        match node {
            Node::Directive(d) => top_level(&mut c, &mut w, d),
            Node::Rule(r) => c.error(
                &r.pos,
                "http_chain rule outside an `http_chain` block",
                "put rules inside `http_chain { ... }`",
            ),
        }
    }
    w.global.finish(&mut c);
    finish(&mut c, w)
}

fn top_level(c: &mut Checker<'_>, w: &mut Walk, d: &Directive) {
    let name = d.name.as_str();
    if !w.seen.check(c, d, once::TOP) {
        return;
    }
    match name {
        "vhost" => vhost_block(c, w, d),
        "srv_group" => srv_group(c, w, d),
        "http_chain" => {
            let mut vhosts = w.vhost_names.clone();
            if w.group_names.contains(DEFAULT_NAME) {
                vhosts.insert(DEFAULT_NAME.to_string());
            }
            let targets = Targets {
                vhosts: &vhosts,
                later_vhosts: &w.all_vhost_names,
            };
            chain::http_chain(c, d, &mut w.chains, &targets);
        }
        "frang_limits" => frang::apply(c, d, Some(&mut w.cfg.frang), &mut w.global.frang),
        "cluster" => {
            w.cfg.cluster = cluster::apply(c, d);
            w.cluster_pos = Some(d.pos.clone());
        }
        "acme" => w.cfg.acme = acme::apply(c, d, &mut w.acme_challenges),
        "tft" => w.cfg.tft = fingerprint::apply(c, d),
        "tfh" => w.cfg.tfh = fingerprint::apply(c, d),
        "tf_blocklist" => {
            if let Some(v) = c.single(d, "tf_blocklist PATH") {
                w.cfg.tf_blocklist = Some(c.path(v));
            }
        }
        _ => {
            if directives::SRV_GROUP_LEVEL.contains(&name) {
                if name == "server" {
                    if w.groups.iter().any(|g| g.name == DEFAULT_NAME) {
                        c.error(
                            &d.pos,
                            "`server` outside a group, but `srv_group default` is also defined",
                            "move this server into `srv_group default { ... }`",
                        );
                        return;
                    }
                    w.group_names.insert(DEFAULT_NAME.to_string());
                    if w.top_group.pos.is_none() {
                        w.top_group.pos = Some(d.pos.clone());
                    }
                }
                if w.top_group.seen.check(c, d, once::GROUP) {
                    servers::apply(c, d, &mut w.top_group);
                }
                return;
            }
            let scope = Scope {
                groups: &w.group_names,
            };
            if vhost::apply(c, &scope, Level::Global, d, &mut w.global) {
                return;
            }
            let listeners_before = w.cfg.listeners.len();
            if global::apply(c, d, &mut w.cfg) {
                if w.cfg.listeners.len() > listeners_before {
                    w.listen_pos.push(d.pos.clone());
                }
                return;
            }
            let allowed: Vec<&str> = directives::TOP_LEVEL
                .iter()
                .chain(directives::VHOST_LEVEL)
                .chain(directives::EXTENSIONS)
                .copied()
                .collect();
            unknown_here(c, d, "the top level", &allowed);
        }
    }
}

fn srv_group(c: &mut Checker<'_>, w: &mut Walk, d: &Directive) {
    let usage = "srv_group NAME { server ADDR; ... }";
    c.attrs_only(d, &[]);
    let (Some(children), [name]) = (&d.children, d.args.as_slice()) else {
        c.error(&d.pos, "`srv_group` needs a name and a block", usage);
        return;
    };
    if w.group_names.contains(&name.text) {
        let hint = if name.text == DEFAULT_NAME {
            "servers declared outside any group already form the `default` group; move them into this block"
        } else {
            "give each srv_group a distinct name"
        };
        c.error(
            &name.pos,
            format!("duplicate srv_group `{}`", name.text),
            hint,
        );
        return;
    }
    let mut g = GroupDraft {
        name: name.text.clone(),
        pos: Some(d.pos.clone()),
        ..GroupDraft::default()
    };
    for node in children {
        match node {
            Node::Directive(x) => {
                if !g.seen.check(c, x, once::GROUP) {
                    continue;
                }
                if !servers::apply(c, x, &mut g) {
                    unknown_here(c, x, "`srv_group`", directives::SRV_GROUP_LEVEL);
                }
            }
            Node::Rule(r) => c.error(
                &r.pos,
                "http_chain rules are not allowed in `srv_group`",
                usage,
            ),
        }
    }
    let has_server_lines = children
        .iter()
        .any(|n| matches!(n, Node::Directive(x) if x.name == "server"));
    // A group whose server lines were all refused was reported already.
    if !has_server_lines {
        c.error(
            &d.pos,
            format!("srv_group `{}` has no servers", g.name),
            "add `server IPADDR[:PORT];` lines",
        );
    }
    w.group_names.insert(g.name.clone());
    w.groups.push(g);
}

fn vhost_block(c: &mut Checker<'_>, w: &mut Walk, d: &Directive) {
    let usage = "vhost NAME { proxy_pass GROUP; ... }";
    c.attrs_only(d, &[]);
    let (Some(children), [name]) = (&d.children, d.args.as_slice()) else {
        c.error(&d.pos, "`vhost` needs a name and a block", usage);
        return;
    };
    if w.vhost_names.contains(&name.text) {
        c.error(
            &name.pos,
            format!("duplicate vhost `{}`", name.text),
            "give each vhost a distinct name",
        );
        return;
    }
    if w.chains.main.is_some() || !w.chains.chains.is_empty() {
        c.error(
            &d.pos,
            "vhost defined after an http_chain",
            "Tempesta requires the order srv_group -> vhost -> http_chain",
        );
    }
    // Frang limits are inherited as they stand at this point of the file.
    let mut draft = Draft::with_frang(w.global.frang.clone());
    let scope = Scope {
        groups: &w.group_names,
    };
    let mut seen = once::Seen::default();
    for node in children {
        match node {
            Node::Directive(x) => {
                if !seen.check(c, x, once::VHOST) {
                    continue;
                }
                if !vhost::apply(c, &scope, Level::Vhost, x, &mut draft) {
                    unknown_here(c, x, "`vhost`", directives::VHOST_LEVEL);
                }
            }
            Node::Rule(r) => c.error(
                &r.pos,
                "http_chain rules are not allowed in `vhost`",
                "move it into an `http_chain` block",
            ),
        }
    }
    draft.finish(c);
    if name.text == DEFAULT_NAME {
        if let Some(pp) = &draft.proxy_pass {
            if pp.group != DEFAULT_NAME {
                c.error(
                    &d.pos,
                    "the `default` vhost can only proxy to the `default` group",
                    "use `proxy_pass default;` or rename the vhost",
                );
            }
        }
    } else if !children
        .iter()
        .any(|n| matches!(n, Node::Directive(x) if x.name == "proxy_pass"))
    {
        c.error(
            &d.pos,
            format!("vhost `{}` has no `proxy_pass`", name.text),
            "add `proxy_pass GROUP;` naming a srv_group defined above",
        );
    }
    w.vhost_names.insert(name.text.clone());
    w.vhosts.push(VhostEntry {
        name: name.text.clone(),
        draft,
        top_sticky: w.global.sticky.clone(),
    });
}

/// Server groups: the implicit default first, then the explicit ones, each naming a health
/// check that exists.
fn server_groups(
    c: &mut Checker<'_>,
    top_group: &GroupDraft,
    groups: &[GroupDraft],
    cfg: &mut Config,
) {
    if !top_group.servers.is_empty() {
        cfg.server_groups.push(top_group.resolve(top_group));
    }
    for g in groups {
        cfg.server_groups.push(g.resolve(top_group));
    }
    let group_tls: Vec<_> = groups.iter().map(|g| &g.tls).collect();
    server_tls::check(c, &top_group.tls, &group_tls);
    let health_names: HashSet<&str> = cfg
        .health_checks
        .iter()
        .map(|h| h.name.as_str())
        .chain(["auto"])
        .collect();
    for g in groups.iter().chain([top_group]) {
        if let Some((h, pos)) = &g.health {
            if !health_names.contains(h.as_str()) {
                c.error(
                    pos,
                    format!("no health_check named `{h}`"),
                    "define `health_check NAME { ... }` or use the built-in `auto`",
                );
            }
        }
    }
}

fn finish(c: &mut Checker<'_>, w: Walk) -> Config {
    let mut cfg = w.cfg;
    server_groups(c, &w.top_group, &w.groups, &mut cfg);
    resolver::check_resolve(c, w.groups.iter().chain([&w.top_group]), &cfg);
    let has_default_group = cfg.server_group(DEFAULT_NAME).is_some();
    vhost::check_purge(
        c,
        std::iter::once(&w.global).chain(w.vhosts.iter().map(|v| &v.draft)),
        cfg.cache.mode.enabled(),
    );

    // Vhosts: the default one from top-level directives (or an explicit
    // `vhost default`), then the others inheriting from it.
    let builtin = Vhost::named(DEFAULT_NAME);
    let mut default_vhost = inherit::resolve(DEFAULT_NAME, &w.global, &builtin);
    if let Some(explicit) = w.vhosts.iter().find(|v| v.name == DEFAULT_NAME) {
        default_vhost = inherit::resolve(DEFAULT_NAME, &explicit.draft, &default_vhost);
    }
    if default_vhost.proxy_pass.is_none() && has_default_group {
        default_vhost.proxy_pass = Some(ProxyPass {
            group: DEFAULT_NAME.to_string(),
            backup: None,
        });
    }
    cfg.vhosts = w
        .vhosts
        .iter()
        .filter(|v| v.name != DEFAULT_NAME)
        .map(|v| {
            let mut vhost = inherit::resolve(&v.name, &v.draft, &default_vhost);
            vhost.sticky = inherit::sticky(&v.draft, v.top_sticky.as_ref(), &builtin.sticky);
            vhost
        })
        .collect();
    if let Some(pos) = w
        .vhosts
        .iter()
        .find(|v| v.name == DEFAULT_NAME)
        .and_then(|v| v.draft.acme.as_ref())
    {
        let mut default = Vhost::named(DEFAULT_NAME);
        acme::resolve_vhost(c, cfg.acme.as_ref(), &mut default, pos, false);
    }
    let acme_vhosts = w.vhosts.iter().filter(|v| v.name != DEFAULT_NAME);
    for (vhost, entry) in cfg.vhosts.iter_mut().zip(acme_vhosts) {
        if let Some(pos) = &entry.draft.acme {
            let own = !entry.draft.certificates.is_empty();
            acme::resolve_vhost(c, cfg.acme.as_ref(), vhost, pos, own);
        }
    }
    cfg.default_vhost = default_vhost;

    cfg.http_tables = tables(
        w.chains,
        has_default_group || w.vhost_names.contains(DEFAULT_NAME),
    );

    if let Some(acme) = cfg.acme.as_mut() {
        acme::resolve_challenges(c, acme, &cfg.listeners, &w.acme_challenges);
    }
    check_tls(c, &cfg, &w.listen_pos);
    cluster::check_whole(c, cfg.cluster.as_ref(), w.cluster_pos.as_ref(), &cfg);
    cfg
}

/// The HTTP table, with Tempesta's implicit main chain when none is given.
fn tables(chains: ChainState, default_vhost_exists: bool) -> HttpTables {
    let main = match chains.main {
        Some((main, _)) => main,
        None => {
            let points_to_default = chains
                .chains
                .iter()
                .flat_map(|c| &c.rules)
                .any(|r| r.action == Action::Vhost(DEFAULT_NAME.to_string()));
            let rules = if default_vhost_exists && !points_to_default {
                vec![Rule {
                    condition: None,
                    action: Action::Vhost(DEFAULT_NAME.to_string()),
                }]
            } else {
                Vec::new()
            };
            HttpChain { name: None, rules }
        }
    };
    HttpTables {
        chains: chains.chains,
        main,
    }
}

/// A TLS listener needs at least one certificate somewhere.
fn check_tls(c: &mut Checker<'_>, cfg: &Config, listen_pos: &[Pos]) {
    let any_cert = !cfg.default_vhost.tls.certificates.is_empty()
        || cfg.vhosts.iter().any(|v| !v.tls.certificates.is_empty());
    if any_cert {
        return;
    }
    for (l, pos) in cfg.listeners.iter().zip(listen_pos) {
        if l.is_tls() {
            c.error(
                pos,
                format!(
                    "listener {} uses TLS but no certificate is configured",
                    l.addr
                ),
                "add `tls_certificate FILE; tls_certificate_key FILE;` at top level or in a vhost",
            );
        }
    }
}
