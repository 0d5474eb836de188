//! Extension `resolver ADDR[:PORT]... [valid=SECONDS] [timeout=SECONDS];` and its rule: a
//! `server NAME resolve` needs one.

use crate::model::{Config, Resolver};
use crate::tree::Directive;
use crate::validate::servers::GroupDraft;
use crate::validate::values::Checker;

/// Handles `d` if it is `resolver`.
pub fn apply(c: &mut Checker<'_>, d: &Directive, cfg: &mut Config) -> bool {
    if d.name != "resolver" {
        return false;
    }
    let usage = "resolver ADDR[:PORT]... [valid=SECONDS] [timeout=SECONDS]";
    if !(c.no_block(d) & c.attrs_only(d, &["valid", "timeout"])) {
        return true;
    }
    if d.args.is_empty() {
        c.error(&d.pos, "`resolver` needs a DNS server's address", usage);
        return true;
    }
    let mut r = Resolver::default();
    for v in &d.args {
        if v.text.parse::<u16>().is_ok() {
            c.error(
                &v.pos,
                "`resolver` needs an IP address, not just a port",
                "write e.g. `127.0.0.1:53`",
            );
            continue;
        }
        if let Some(a) = c.socket_addr(v, 53) {
            r.servers.push(a);
        }
    }
    if let Some(a) = c.attr(d, "valid") {
        if let Some(t) = c.secs(&a.value, "time in seconds") {
            r.valid = (!t.is_zero()).then_some(t);
        }
    }
    if let Some(a) = c.attr(d, "timeout") {
        if let Some(n) = c.u32_in(&a.value, "timeout in seconds", 1, 60) {
            r.timeout = std::time::Duration::from_secs(u64::from(n));
        }
    }
    if r.servers.len() == d.args.len() {
        cfg.resolver = Some(r);
    }
    true
}

/// Each `resolve` flag of `groups` is an error without a `resolver`: nothing would ask again.
pub fn check_resolve<'g>(
    c: &mut Checker<'_>,
    groups: impl Iterator<Item = &'g GroupDraft>,
    cfg: &Config,
) {
    if cfg.resolver.is_some() {
        return;
    }
    for pos in groups.flat_map(|g| &g.resolve_at) {
        c.error(
            pos,
            "`resolve` needs a `resolver`: the DNS server to ask again",
            "add e.g. `resolver 127.0.0.1:53;` at top level, or remove `resolve`",
        );
    }
}
