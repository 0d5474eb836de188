//! The cache directives of a vhost, a location or the top level: `cache_fulfill`,
//! `cache_bypass`, `cache_control_ignore`, `cache_resp_hdr_del`, `cache_purge` and
//! `cache_purge_acl` (and the rule that each of the last two needs the other).

use crate::model::{CacheAction, CacheRule, IpPrefix, PurgeMode, UrlMatchOp};
use crate::tree::Directive;
use crate::validate::once::unique_args;
use crate::validate::values::Checker;
use crate::validate::vhost::{model_pattern, url_op, Draft};

/// `cache_purge` and `cache_purge_acl` each need the other, in any scope: Tempesta keeps both
/// as global flags and refuses the configuration when one is missing (fw/vhost.c,
/// "Directives mismatching"), so PURGE is never open to every client. `cache_purge` also
/// needs the cache on: Tempesta refuses it beside `cache 0`, in either order (fw/cache.c and
/// fw/vhost.c, "requires 'cache' be not zero").
pub fn check_purge<'d>(
    c: &mut Checker<'_>,
    drafts: impl Iterator<Item = &'d Draft> + Clone,
    cache_on: bool,
) {
    let purge = drafts.clone().find_map(|d| d.purge_pos.as_ref());
    let acl = drafts.clone().find_map(|d| d.purge_acl_pos.as_ref());
    if let Some(pos) = purge.filter(|_| !cache_on) {
        c.error(
            pos,
            "`cache_purge` with `cache 0`: there is no cache to purge",
            "turn the cache on (`cache 1;` or `cache 2;`) or remove `cache_purge` (Tempesta refuses it too)",
        );
    }
    match (purge, acl) {
        (Some(pos), None) => c.error(
            pos,
            "`cache_purge` needs `cache_purge_acl`",
            "list the clients allowed to PURGE, e.g. `cache_purge_acl 127.0.0.1;` (Tempesta refuses it too)",
        ),
        (None, Some(pos)) => c.error(
            pos,
            "`cache_purge_acl` without `cache_purge`",
            "add `cache_purge;` to allow PURGE, or remove the list (Tempesta refuses it too)",
        ),
        _ => {}
    }
}

pub fn cache_rule(c: &mut Checker<'_>, d: &Directive, draft: &mut Draft) {
    let usage = format!(
        "{} OP \"STRING\"... (OP: eq, prefix, suffix, regex or *)",
        d.name
    );
    if !c.shape(d, 1, usize::MAX, &usage) {
        return;
    }
    let Some(op) = url_op(c, &d.args[0].text, &d.args[0].pos) else {
        return;
    };
    let patterns: Vec<String> = d.args[1..].iter().map(|v| v.text.clone()).collect();
    if op == UrlMatchOp::Any {
        if patterns.iter().any(|p| p != "*") {
            c.error(
                &d.args[1].pos,
                "operator `*` takes no pattern other than `*`",
                format!("write `{} * *;`", d.name),
            );
            return;
        }
    } else if patterns.is_empty() {
        c.error(
            &d.pos,
            format!("`{}` needs at least one pattern", d.name),
            usage,
        );
        return;
    }
    unique_args(c, d, &d.args[1..], |v| Some(v.text.clone()), false);
    let mut translated = Vec::with_capacity(patterns.len());
    for (v, p) in d.args[1..].iter().zip(&patterns) {
        let Some(p) = model_pattern(c, op, p, &v.pos) else {
            return;
        };
        translated.push(p);
    }
    let patterns = translated;
    let action = if d.name == "cache_fulfill" {
        CacheAction::Fulfill
    } else {
        CacheAction::Bypass
    };
    let patterns = if op == UrlMatchOp::Any {
        vec!["*".to_string()]
    } else {
        patterns
    };
    draft
        .cache_rules
        .get_or_insert_with(Vec::new)
        .push(CacheRule {
            action,
            op,
            patterns,
        });
}

/// `cache_control_ignore NAME...`, `cache_resp_hdr_del NAME...` (lower-cased, added up).
pub fn lists(c: &mut Checker<'_>, d: &Directive, draft: &mut Draft) {
    let name = d.name.as_str();
    if c.shape(d, 1, usize::MAX, &format!("{name} NAME...")) {
        let names = d.args.iter().map(|v| v.text.to_ascii_lowercase());
        let list = if name == "cache_control_ignore" {
            &mut draft.control_ignore
        } else {
            &mut draft.resp_hdr_del
        };
        list.get_or_insert_with(Vec::new).extend(names);
    }
}

/// `cache_purge [invalidate|immediate]`.
pub fn purge(c: &mut Checker<'_>, d: &Directive, draft: &mut Draft) {
    draft.purge_pos.get_or_insert_with(|| d.pos.clone());
    if c.shape(d, 0, 1, "cache_purge [invalidate|immediate]") {
        draft.purge = match d.args.first().map(|v| (v, v.text.as_str())) {
            None | Some((_, "invalidate")) => Some(PurgeMode::Invalidate),
            Some((_, "immediate")) => Some(PurgeMode::Immediate),
            Some((v, other)) => {
                c.error(
                    &v.pos,
                    format!("unknown purge mode `{other}`"),
                    "expected `invalidate` or `immediate`",
                );
                None
            }
        };
    }
}

/// `cache_purge_acl ADDR[/PREFIX]...`: who may PURGE.
pub fn purge_acl(c: &mut Checker<'_>, d: &Directive, draft: &mut Draft) {
    draft.purge_acl_pos.get_or_insert_with(|| d.pos.clone());
    if c.shape(d, 1, usize::MAX, "cache_purge_acl ADDR[/PREFIX]...") {
        // Tempesta refuses an address or prefix listed twice.
        unique_args(c, d, &d.args, |v| v.text.parse::<IpPrefix>().ok(), true);
        for v in &d.args {
            match v.text.parse::<IpPrefix>() {
                Ok(p) => draft.purge_acl.get_or_insert_with(Vec::new).push(p),
                Err(e) => c.error(&v.pos, format!("bad address `{}`", v.text), e),
            }
        }
    }
}
