//! Directives that configure a vhost: inside `vhost`, inside `location`,
//! and at top level (where they form the `default` vhost and the defaults
//! other vhosts inherit).

use std::collections::HashSet;

use crate::diag::Pos;
use crate::model::{
    CacheRule, CertificatePair, FrangHttp, HeaderOp, HeaderRule, IpPrefix, Method, NonIdempotent,
    ProxyPass, PurgeMode, StatusPattern, TlsTickets, UrlMatchOp, WrittenAt,
};
use crate::tree::{Directive, Node};
use crate::validate::frang;
use crate::validate::once::{self, Seen};
use crate::validate::sticky::{self, StickyDraft};
use crate::validate::tempesta_regex::translate;
use crate::validate::values::Checker;
use crate::validate::vhost_cache;
pub use crate::validate::vhost_cache::check_purge;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Top level: the implicit default vhost.
    Global,
    Vhost,
    Location,
}

/// Settings as written in one scope; `None`/empty means "not set here,
/// inherit".
#[derive(Debug, Clone, Default)]
pub struct Draft {
    pub proxy_pass: Option<ProxyPass>,
    pub locations: Vec<LocationDraft>,
    pub certificates: Vec<CertificatePair>,
    pending_cert: Option<(std::path::PathBuf, Pos)>,
    /// Extension `tls_certificate acme;`: where it was asked for.
    pub acme: Option<Pos>,
    pub tickets: Option<TlsTickets>,
    pub req_hdrs: Option<Vec<HeaderRule>>,
    pub resp_hdrs: Option<Vec<HeaderRule>>,
    pub cache_rules: Option<Vec<CacheRule>>,
    pub control_ignore: Option<Vec<String>>,
    pub use_stale: Option<Vec<StatusPattern>>,
    pub resp_hdr_del: Option<Vec<String>>,
    pub purge: Option<PurgeMode>,
    pub purge_acl: Option<Vec<IpPrefix>>,
    /// Where `cache_purge` / `cache_purge_acl` were given: each needs the other somewhere.
    pub purge_pos: Option<Pos>,
    pub purge_acl_pos: Option<Pos>,
    /// Already includes what was inherited when the scope opened (frang
    /// limits are order-dependent in Tempesta).
    pub frang: FrangHttp,
    pub hdr_via: Option<String>,
    pub nonidempotent: Option<Vec<NonIdempotent>>,
    pub http_post_validate: Option<bool>,
    pub sticky: Option<StickyDraft>,
}

#[derive(Debug, Clone)]
pub struct LocationDraft {
    pub op: UrlMatchOp,
    pub pattern: String,
    pub draft: Draft,
}

/// Names visible to a directive: server groups defined so far.
pub struct Scope<'a> {
    pub groups: &'a HashSet<String>,
}

impl Draft {
    pub fn with_frang(frang: FrangHttp) -> Draft {
        Draft {
            frang,
            ..Draft::default()
        }
    }

    /// Reports a certificate left without its key at the end of the scope.
    pub fn finish(&mut self, c: &mut Checker<'_>) {
        if let Some((_, pos)) = self.pending_cert.take() {
            c.error(
                &pos,
                "`tls_certificate` has no matching `tls_certificate_key`",
                "give the key file right after the certificate: `tls_certificate_key FILE;`",
            );
        }
    }
}

/// `tls_certificate acme;` (an extension): only in a vhost, which names the domain.
fn acme_certificate(c: &mut Checker<'_>, level: Level, d: &Directive, draft: &mut Draft) {
    if level == Level::Global {
        c.error(
            &d.pos,
            "`tls_certificate acme` is not allowed at top level",
            "put it in the vhost named after the domain to certify: `vhost example.com { tls_certificate acme; ... }` (a file named `acme`: write `./acme`)",
        );
    } else {
        draft.acme = Some(d.pos.clone());
    }
}

/// Handles `d` if it is a vhost-level directive valid at `level`; returns
/// false when the name is not one (the caller reports it).
pub fn apply(
    c: &mut Checker<'_>,
    scope: &Scope<'_>,
    level: Level,
    d: &Directive,
    draft: &mut Draft,
) -> bool {
    let name = d.name.as_str();
    match name {
        "proxy_pass" if level != Level::Global => proxy_pass(c, scope, d, draft),
        "proxy_pass" => c.error(
            &d.pos,
            "`proxy_pass` is not allowed outside a vhost",
            "the implicit default vhost always uses the `default` server group; declare `vhost default { ... }` to choose",
        ),
        "location" if level != Level::Location => location(c, scope, d, draft),
        "tls_certificate" | "tls_certificate_key" | "tls_tickets" if level == Level::Location => {
            return false;
        }
        "tls_certificate" => {
            if let Some(v) = c.single(d, "tls_certificate FILE") {
                if v.text == "acme" {
                    acme_certificate(c, level, d, draft);
                    return true;
                }
                let path = c.path(v);
                draft.finish(c);
                draft.pending_cert = Some((path, d.pos.clone()));
            }
        }
        "tls_certificate_key" => certificate_key(c, d, draft),
        "tls_tickets" => tls_tickets(c, d, draft),
        "req_hdr_set" | "req_hdr_add" | "resp_hdr_set" | "resp_hdr_add" => header_rule(c, d, draft),
        "cache_fulfill" | "cache_bypass" => vhost_cache::cache_rule(c, d, draft),
        "cache_control_ignore" | "cache_resp_hdr_del" => vhost_cache::lists(c, d, draft),
        "cache_use_stale" => {
            if c.shape(d, 1, usize::MAX, "cache_use_stale CODE|4*|5*...") {
                if let Some(list) = super::stale::use_stale(c, d) {
                    draft.use_stale = Some(list);
                }
            }
        }
        "cache_purge" if level != Level::Location => vhost_cache::purge(c, d, draft),
        "cache_purge_acl" if level != Level::Location => vhost_cache::purge_acl(c, d, draft),
        "frang_limits" if level != Level::Global => frang::apply(c, d, None, &mut draft.frang),
        "hdr_via" if level != Level::Location => {
            if c.shape(d, 0, 1, "hdr_via [TEXT]") {
                draft.hdr_via = d.args.first().map(|v| v.text.clone());
            }
        }
        "nonidempotent" => nonidempotent(c, d, draft),
        "sticky" if level != Level::Location => {
            if let Some(s) = sticky::block(c, d) {
                if draft.sticky.is_some() {
                    // Tempesta lets a later top-level block reset the defaults.
                    c.sink.warning(&d.pos, "this top-level `sticky` block replaces the earlier one");
                }
                draft.sticky = Some(s);
            }
        }
        "http_post_validate" => {
            if c.flag(d) {
                draft.http_post_validate = Some(true);
            }
        }
        _ => return false,
    }
    true
}

/// `tls_certificate_key FILE`: the key of the `tls_certificate` just before it.
fn certificate_key(c: &mut Checker<'_>, d: &Directive, draft: &mut Draft) {
    if let Some(v) = c.single(d, "tls_certificate_key FILE") {
        let key = c.path(v);
        let at = |pos: &Pos| format!("{}:{}:{}", pos.file, pos.line, pos.col);
        match draft.pending_cert.take() {
            Some((certificate, cert_pos)) => draft.certificates.push(CertificatePair {
                certificate,
                key,
                written_at: Some(WrittenAt {
                    certificate: at(&cert_pos),
                    key: at(&d.pos),
                }),
            }),
            None => c.error(
                &d.pos,
                "`tls_certificate_key` without a preceding `tls_certificate`",
                "give `tls_certificate FILE;` first, then its key",
            ),
        }
    }
}

fn proxy_pass(c: &mut Checker<'_>, scope: &Scope<'_>, d: &Directive, draft: &mut Draft) {
    let usage = "proxy_pass GROUP [backup=GROUP]";
    if !(c.no_block(d) & c.attrs_only(d, &["backup"])) {
        return;
    }
    if d.args.len() != 1 {
        c.error(&d.pos, "`proxy_pass` needs exactly one server group", usage);
        return;
    }
    let group = &d.args[0];
    let mut ok = check_group(c, scope, &group.text, &group.pos);
    let backup = c.attr(d, "backup").map(|a| a.value.clone());
    if let Some(b) = &backup {
        ok &= check_group(c, scope, &b.text, &b.pos);
    }
    if draft.proxy_pass.is_some() {
        c.error(
            &d.pos,
            "duplicate `proxy_pass`",
            "a vhost or location forwards to one group; remove one of them",
        );
        return;
    }
    if ok {
        draft.proxy_pass = Some(ProxyPass {
            group: group.text.clone(),
            backup: backup.map(|b| b.text),
        });
    }
}

fn check_group(c: &mut Checker<'_>, scope: &Scope<'_>, name: &str, pos: &Pos) -> bool {
    if scope.groups.contains(name) {
        return true;
    }
    let mut hint = "define the `srv_group` before the vhost that uses it".to_string();
    if let Some(s) = crate::diag::did_you_mean(name, scope.groups.iter().map(String::as_str)) {
        hint = format!("did you mean `{s}`? ({hint})");
    }
    c.error(pos, format!("server group `{name}` is not defined"), hint);
    false
}

pub(super) fn url_op(c: &mut Checker<'_>, text: &str, pos: &Pos) -> Option<UrlMatchOp> {
    match text {
        "*" => Some(UrlMatchOp::Any),
        "eq" => Some(UrlMatchOp::Eq),
        "prefix" => Some(UrlMatchOp::Prefix),
        "suffix" => Some(UrlMatchOp::Suffix),
        "regex" => Some(UrlMatchOp::Regex),
        _ => {
            c.error(
                pos,
                format!("unknown match operator `{text}`"),
                "expected `eq`, `prefix`, `suffix`, `regex` or `*`",
            );
            None
        }
    }
}

/// The pattern as the model keeps it: a `regex` operator's Tempesta expression translated
/// to the `regex` crate's syntax (tempesta_regex.rs), any other as written; `None` after an
/// error.
pub(super) fn model_pattern(
    c: &mut Checker<'_>,
    op: UrlMatchOp,
    text: &str,
    pos: &Pos,
) -> Option<String> {
    if op != UrlMatchOp::Regex {
        return Some(text.to_string());
    }
    match translate(text) {
        Ok(translated) => Some(translated),
        Err(e) => {
            c.error(pos, e.message, e.hint);
            None
        }
    }
}

fn location(c: &mut Checker<'_>, scope: &Scope<'_>, d: &Directive, draft: &mut Draft) {
    let usage = "location OP \"PATTERN\" { ... }";
    c.attrs_only(d, &[]);
    let Some(children) = &d.children else {
        c.error(&d.pos, "`location` needs a block", usage);
        return;
    };
    let (op, pattern) = match d.args.as_slice() {
        [op] if op.text == "*" => (Some(UrlMatchOp::Any), "*".to_string()),
        [op, pat] => match url_op(c, &op.text, &op.pos) {
            Some(o) => match model_pattern(c, o, &pat.text, &pat.pos) {
                Some(p) => (Some(o), p),
                None => (None, pat.text.clone()),
            },
            None => (None, pat.text.clone()),
        },
        _ => {
            c.error(
                &d.pos,
                "`location` needs a match operator and a pattern",
                usage,
            );
            (None, String::new())
        }
    };
    if let Some(op) = op {
        if draft
            .locations
            .iter()
            .any(|l| l.op == op && l.pattern == pattern)
        {
            c.error(
                &d.pos,
                format!("duplicate location `{pattern}`"),
                "merge the two blocks",
            );
        }
    }
    let mut inner = Draft::with_frang(draft.frang.clone());
    let mut seen = Seen::default();
    for node in children {
        match node {
            Node::Directive(cd) => {
                if !seen.check(c, cd, once::LOCATION) {
                    continue;
                }
                if !apply(c, scope, Level::Location, cd, &mut inner) {
                    crate::validate::unknown_here(
                        c,
                        cd,
                        "location",
                        crate::directives::LOCATION_LEVEL,
                    );
                }
            }
            Node::Rule(r) => c.error(
                &r.pos,
                "http_chain rules are not allowed in `location`",
                "move it into an `http_chain` block",
            ),
        }
    }
    inner.finish(c);
    if let Some(op) = op {
        draft.locations.push(LocationDraft {
            op,
            pattern,
            draft: inner,
        });
    }
}

fn tls_tickets(c: &mut Checker<'_>, d: &Directive, draft: &mut Draft) {
    let usage = "tls_tickets [enable|disable] [secret=SECRET | keys=FILE] [lifetime=SECONDS]";
    if !(c.no_block(d) & c.attrs_only(d, &["secret", "keys", "lifetime"])) {
        return;
    }
    let mut t = TlsTickets::default();
    match d.args.as_slice() {
        [] => {}
        [v] => match c.bool(v) {
            Some(b) => t.enabled = b,
            None => return,
        },
        [_, extra, ..] => {
            c.error(&extra.pos, "too many arguments for `tls_tickets`", usage);
            return;
        }
    }
    if let Some(a) = c.attr(d, "secret") {
        if a.value.text.is_empty() {
            c.error(
                &a.value.pos,
                "the ticket secret is empty",
                "give a secret string, e.g. secret=\"long random text\"",
            );
            return;
        }
        t.secret = Some(a.value.text.clone());
    }
    if let Some(a) = c.attr(d, "keys") {
        if t.secret.is_some() {
            c.error(
                &a.pos,
                "`secret=` and `keys=` both give the ticket keys",
                "keep one: keys=FILE (a key ring the platform rotates) or secret=TEXT (keys derived per period)",
            );
            return;
        }
        if a.value.text.is_empty() {
            c.error(&a.value.pos, "the ticket key file is empty", usage);
            return;
        }
        t.keys = Some(c.path(&a.value));
    }
    if let Some(a) = c.attr(d, "lifetime") {
        match c.secs(&a.value, "ticket lifetime in seconds") {
            Some(l) if !l.is_zero() => t.lifetime = l,
            Some(_) => {
                c.error(
                    &a.value.pos,
                    "the ticket lifetime must be at least 1 second",
                    usage,
                );
                return;
            }
            None => return,
        }
    }
    draft.tickets = Some(t);
}

fn header_rule(c: &mut Checker<'_>, d: &Directive, draft: &mut Draft) {
    let name = d.name.as_str();
    let set = name.ends_with("_set");
    let (min, usage) = if set {
        (1, format!("{name} NAME [VALUE]"))
    } else {
        (2, format!("{name} NAME VALUE"))
    };
    if !c.shape(d, min, 2, &usage) {
        return;
    }
    let header = &d.args[0];
    if header.text.is_empty()
        || !header
            .text
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b':')
    {
        c.error(
            &header.pos,
            format!("`{}` is not a header name", header.text),
            "use letters, digits and `-`",
        );
        return;
    }
    let list = if name.starts_with("req_") {
        &draft.req_hdrs
    } else {
        &draft.resp_hdrs
    };
    let twice = list
        .iter()
        .flatten()
        .any(|r| r.op == HeaderOp::Set && set && r.name.eq_ignore_ascii_case(&header.text));
    if twice {
        c.error(
            &header.pos,
            format!("`{name} {}` is given twice in this block", header.text),
            "Tempesta refuses a duplicated header modification; keep one",
        );
        return;
    }
    let rule = HeaderRule {
        op: if set { HeaderOp::Set } else { HeaderOp::Add },
        name: header.text.clone(),
        value: d.args.get(1).map(|v| v.text.clone()),
    };
    let list = if name.starts_with("req_") {
        &mut draft.req_hdrs
    } else {
        &mut draft.resp_hdrs
    };
    list.get_or_insert_with(Vec::new).push(rule);
}

fn nonidempotent(c: &mut Checker<'_>, d: &Directive, draft: &mut Draft) {
    let usage = "nonidempotent METHOD OP \"STRING\"";
    if !c.shape(d, 2, 3, usage) {
        return;
    }
    let m = &d.args[0];
    let method = if m.text == "*" {
        None
    } else {
        match Method::parse(&m.text) {
            Some(x) => Some(x),
            None => {
                c.error(
                    &m.pos,
                    format!("unknown HTTP method `{}`", m.text),
                    "expected e.g. GET, POST or `*`",
                );
                return;
            }
        }
    };
    let Some(op) = url_op(c, &d.args[1].text, &d.args[1].pos) else {
        return;
    };
    let pattern = d
        .args
        .get(2)
        .map_or_else(|| "*".to_string(), |v| v.text.clone());
    if op != UrlMatchOp::Any && d.args.len() != 3 {
        c.error(&d.pos, "`nonidempotent` needs a pattern", usage);
        return;
    }
    draft
        .nonidempotent
        .get_or_insert_with(Vec::new)
        .push(NonIdempotent {
            method,
            op,
            pattern,
        });
}
