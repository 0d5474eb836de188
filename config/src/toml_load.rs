//! Loading the model from TOML through serde, then checking what serde
//! cannot: references between sections, ordering, value ranges. Relative
//! paths are resolved against the file's directory, as for `.conf` files.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::diag::Diagnostic;
use crate::model::{
    AccessLogDestination, Action, Config, CookieMode, Pattern, PidFile, Proto, UrlMatchOp, Vhost,
    DEFAULT_NAME, JS_CHALLENGE_CODES,
};
use crate::validate::values::resolve_path;

/// Parses TOML text into a checked `Config`; errors carry the TOML
/// position when serde knows it.
pub fn load(file: &str, text: &str, base_dir: &Path) -> Result<Config, Vec<Diagnostic>> {
    let mut cfg: Config = toml::from_str(text).map_err(|e| {
        let (line, col) = e.span().map_or((0, 0), |s| line_col(text, s.start));
        let msg = e.message().trim().to_string();
        vec![Diagnostic::file_error(file, line, col, msg)
            .with_hint("see docs/CONFIG.md for the TOML schema")]
    })?;
    resolve_paths(&mut cfg, base_dir);
    let errors = check(file, &cfg);
    if errors.is_empty() {
        Ok(cfg)
    } else {
        Err(errors)
    }
}

fn line_col(text: &str, offset: usize) -> (u32, u32) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (
        u32::try_from(line).unwrap_or(u32::MAX),
        u32::try_from(col).unwrap_or(u32::MAX),
    )
}

fn fix(p: &mut PathBuf, base: &Path) {
    if let Some(s) = p.to_str() {
        *p = resolve_path(base, s);
    }
}

/// The `sticky` rules of the `.conf` validator that a typed model can
/// still break.
fn check_sticky(e: &mut Errors<'_>, v: &Vhost) {
    let Some(c) = &v.sticky.cookie else { return };
    let token = |b: u8| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&b);
    if c.name.is_empty() || c.name.len() > 32 || !c.name.bytes().all(token) {
        e.push(
            format!(
                "vhost `{}`: `{}` is not a valid cookie name",
                v.name, c.name
            ),
            "use 1 to 32 token characters",
        );
    }
    if let CookieMode::Issued {
        enforce: false,
        max_misses: Some(_),
    } = c.mode
    {
        e.push(
            format!("vhost `{}`: max_misses needs enforce", v.name),
            "set enforce = true or drop max_misses",
        );
    }
    if let Some(js) = &c.js_challenge {
        let enforced = matches!(c.mode, CookieMode::Issued { enforce: true, .. });
        let delays = !js.delay_min.is_zero() && !js.delay_range.is_zero();
        if !enforced || !delays || !JS_CHALLENGE_CODES.contains(&js.resp_code) {
            e.push(
                format!("vhost `{}`: invalid js_challenge", v.name),
                "it needs an issued, enforced cookie, non-zero delays and a status from JS_CHALLENGE_CODES",
            );
        }
    }
}

fn resolve_vhost_paths(v: &mut Vhost, base: &Path) {
    for c in &mut v.tls.certificates {
        fix(&mut c.certificate, base);
        fix(&mut c.key, base);
    }
    if let Some(keys) = &mut v.tls.tickets.keys {
        fix(keys, base);
    }
    let js = v
        .sticky
        .cookie
        .as_mut()
        .and_then(|c| c.js_challenge.as_mut());
    if let Some(t) = js.and_then(|j| j.template.as_mut()) {
        fix(t, base);
    }
}

fn resolve_paths(cfg: &mut Config, base: &Path) {
    resolve_vhost_paths(&mut cfg.default_vhost, base);
    for v in &mut cfg.vhosts {
        resolve_vhost_paths(v, base);
    }
    for d in &mut cfg.access_log.destinations {
        if let AccessLogDestination::File(p) = d {
            fix(p, base);
        }
    }
    if let Some(p) = &mut cfg.access_log.logger_config {
        fix(p, base);
    }
    if let PidFile::Path(p) = &mut cfg.pid {
        fix(p, base);
    }
    for r in &mut cfg.response_bodies {
        fix(&mut r.path, base);
    }
}

struct Errors<'a> {
    file: &'a str,
    list: Vec<Diagnostic>,
}

impl Errors<'_> {
    fn push(&mut self, msg: String, hint: &str) {
        self.list
            .push(Diagnostic::file_error(self.file, 0, 0, msg).with_hint(hint));
    }
}

/// The cross-reference rules of the `.conf` validator, applied to a model.
fn check(file: &str, cfg: &Config) -> Vec<Diagnostic> {
    let mut e = Errors {
        file,
        list: Vec::new(),
    };
    let groups = check_groups(&mut e, cfg);
    let vhosts = check_vhosts(&mut e, cfg, &groups);
    check_chains(&mut e, cfg, &vhosts);
    check_listeners(&mut e, cfg);
    if let Some((message, hint)) = cfg
        .cluster
        .as_ref()
        .and_then(|k| k.problem(&cfg.effective_listeners()))
    {
        e.push(message, &hint);
    }
    e.list
}

/// Whether `p` compiles as the router compiles it (byte-wise `regex`).
fn regex_ok(p: &str) -> bool {
    regex::bytes::Regex::new(p).is_ok()
}

/// Server groups: distinct names, servers, known health checks; returns the names.
fn check_groups<'c>(e: &mut Errors<'_>, cfg: &'c Config) -> HashSet<&'c str> {
    let mut groups = HashSet::new();
    for g in &cfg.server_groups {
        if !groups.insert(g.name.as_str()) {
            e.push(
                format!("duplicate server group `{}`", g.name),
                "give each group a distinct name",
            );
        }
        if g.servers.is_empty() {
            e.push(
                format!("server group `{}` has no servers", g.name),
                "add [[server_groups.servers]] entries",
            );
        }
        for s in &g.servers {
            if !(1..=100).contains(&s.weight) || s.conns_n == 0 {
                e.push(
                    format!(
                        "server {} in `{}`: weight must be 1..=100 and conns_n at least 1",
                        s.addr, g.name
                    ),
                    "fix the server entry",
                );
            }
        }
        if let Some(h) = &g.health {
            if h != "auto" && !cfg.health_checks.iter().any(|x| &x.name == h) {
                e.push(
                    format!("no health_check named `{h}`"),
                    "define it in [[health_checks]]",
                );
            }
        }
    }
    groups
}

/// Vhosts: distinct names, groups that exist, regular expressions that compile; returns
/// the names a rule may route to.
fn check_vhosts<'c>(
    e: &mut Errors<'_>,
    cfg: &'c Config,
    groups: &HashSet<&str>,
) -> HashSet<&'c str> {
    let mut vhosts: HashSet<&str> = HashSet::new();
    if groups.contains(DEFAULT_NAME) {
        vhosts.insert(DEFAULT_NAME);
    }
    for v in std::iter::once(&cfg.default_vhost).chain(&cfg.vhosts) {
        if v.name != DEFAULT_NAME && !vhosts.insert(v.name.as_str()) {
            e.push(
                format!("duplicate vhost `{}`", v.name),
                "give each vhost a distinct name",
            );
        }
        let passes = v
            .proxy_pass
            .iter()
            .chain(v.locations.iter().filter_map(|l| l.proxy_pass.as_ref()));
        for p in passes {
            for g in std::iter::once(&p.group).chain(&p.backup) {
                if !groups.contains(g.as_str()) {
                    e.push(
                        format!("vhost `{}` proxies to undefined server group `{g}`", v.name),
                        "define it in [[server_groups]]",
                    );
                }
            }
        }
        check_sticky(e, v);
        if v.tls.tickets.secret.is_some() && v.tls.tickets.keys.is_some() {
            e.push(
                format!(
                    "vhost `{}`: tls tickets have both a secret and keys",
                    v.name
                ),
                "keep one: keys (a key ring file) or secret (keys derived per period)",
            );
        }
        if v.name != DEFAULT_NAME && v.proxy_pass.is_none() {
            e.push(
                format!("vhost `{}` has no proxy_pass", v.name),
                "set proxy_pass = { group = \"...\" }",
            );
        }
        let patterns = v.locations.iter().map(|l| (l.op, &l.pattern)).chain(
            v.cache
                .rules
                .iter()
                .flat_map(|r| r.patterns.iter().map(move |p| (r.op, p))),
        );
        for (op, p) in patterns {
            if op == UrlMatchOp::Regex && !regex_ok(p) {
                e.push(
                    format!("invalid regular expression `{p}` in vhost `{}`", v.name),
                    "fix the pattern",
                );
            }
        }
    }
    vhosts
}

/// Chains: defined before they are jumped to, a default rule last, known vhosts.
fn check_chains(e: &mut Errors<'_>, cfg: &Config, vhosts: &HashSet<&str>) {
    let mut seen_chains: HashSet<&str> = HashSet::new();
    for ch in cfg.http_tables.chains.iter().chain([&cfg.http_tables.main]) {
        let name = ch.name.as_deref();
        for (i, r) in ch.rules.iter().enumerate() {
            if let Some(c) = &r.condition {
                if let Pattern::Regex(p) = &c.pattern {
                    if !regex_ok(p) {
                        e.push(
                            format!("invalid regular expression `{p}`"),
                            "fix the pattern",
                        );
                    }
                }
            }
            let terminal = !matches!(
                r.action,
                Action::Mark(_) | Action::CacheTtl(_) | Action::CacheDisable(_)
            );
            if r.condition.is_none() && terminal && i + 1 != ch.rules.len() {
                e.push(
                    format!(
                        "chain `{}`: a rule without condition must be last",
                        name.unwrap_or("main")
                    ),
                    "move it to the end",
                );
            }
            match &r.action {
                Action::Chain(t) if !seen_chains.contains(t.as_str()) => e.push(
                    format!(
                        "chain `{}` jumps to `{t}`, which is not defined before it",
                        name.unwrap_or("main")
                    ),
                    "list chains in the order they are referenced",
                ),
                Action::Vhost(t) if !vhosts.contains(t.as_str()) => {
                    e.push(
                        format!("rule refers to undefined vhost `{t}`"),
                        "define the vhost in [[vhosts]]",
                    );
                }
                Action::Redirect { status, .. } if ![301, 302, 303, 307, 308].contains(status) => {
                    e.push(
                        format!("{status} is not a redirect status"),
                        "use 301, 302, 303, 307 or 308",
                    );
                }
                _ => {}
            }
        }
        match name {
            Some(n) if !seen_chains.insert(n) => e.push(
                format!("duplicate http_chain `{n}`"),
                "give each chain a distinct name",
            ),
            _ => {}
        }
    }
}

/// Listeners and the certificates TLS ones need.
fn check_listeners(e: &mut Errors<'_>, cfg: &Config) {
    let mut addrs = HashSet::new();
    for l in &cfg.listeners {
        if l.protos.is_empty() || (l.protos.contains(&Proto::Http) && l.protos.len() > 1) {
            e.push(
                format!(
                    "listener {}: protos must be [\"http\"] or TLS ones (https, h2)",
                    l.addr
                ),
                "fix protos",
            );
        }
        if !addrs.insert(l.addr) {
            e.push(
                format!("duplicate listener on {}", l.addr),
                "listen on each address once",
            );
        }
    }
    let any_cert = std::iter::once(&cfg.default_vhost)
        .chain(&cfg.vhosts)
        .any(|v| !v.tls.certificates.is_empty());
    if !any_cert {
        if let Some(l) = cfg.listeners.iter().find(|l| l.is_tls()) {
            e.push(
                format!(
                    "listener {} uses TLS but no certificate is configured",
                    l.addr
                ),
                "add [[vhosts.tls.certificates]]",
            );
        }
    }
}
