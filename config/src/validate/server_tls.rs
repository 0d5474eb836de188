//! TLS to a group's servers, an extension (Tempesta speaks cleartext HTTP to its servers):
//! `server_tls on|off`, `server_tls_ca FILE`, `server_tls_verify on|off`,
//! `server_tls_sni NAME`, `server_tls_cert CERT KEY`. In a `srv_group` or at top level, where
//! they configure the implicit `default` group and are the defaults of the explicit groups
//! (as every group setting is: `servers.rs`). The files' contents are checked by
//! `files.rs` where the proxy loads them.

use std::path::PathBuf;

use crate::diag::Pos;
use crate::model::ServerTls;
use crate::tree::Directive;
use crate::validate::values::Checker;

/// One group's (or the top level's) TLS settings as written, with where.
#[derive(Debug, Clone, Default)]
pub struct TlsDraft {
    pub on: Option<(bool, Pos)>,
    pub ca: Option<(PathBuf, Pos)>,
    pub verify: Option<(bool, Pos)>,
    pub sni: Option<(String, Pos)>,
    pub cert: Option<((PathBuf, PathBuf), Pos)>,
}

impl TlsDraft {
    /// The group's TLS: its own settings, else the top level's; None when TLS is off.
    pub fn resolve(&self, top: &TlsDraft) -> Option<ServerTls> {
        let on = self
            .on
            .as_ref()
            .or(top.on.as_ref())
            .is_some_and(|(b, _)| *b);
        if !on {
            return None;
        }
        Some(ServerTls {
            ca: pick(&self.ca, &top.ca),
            verify: pick(&self.verify, &top.verify).unwrap_or(true),
            sni: pick(&self.sni, &top.sni),
            cert: pick(&self.cert, &top.cert),
        })
    }

    /// Where each option other than `server_tls` itself was given.
    fn options(&self) -> Vec<(&'static str, &Pos)> {
        let mut v = Vec::new();
        if let Some((_, p)) = &self.ca {
            v.push(("server_tls_ca", p));
        }
        if let Some((_, p)) = &self.verify {
            v.push(("server_tls_verify", p));
        }
        if let Some((_, p)) = &self.sni {
            v.push(("server_tls_sni", p));
        }
        if let Some((_, p)) = &self.cert {
            v.push(("server_tls_cert", p));
        }
        v
    }

    fn is_on(&self) -> bool {
        self.on.as_ref().is_some_and(|(b, _)| *b)
    }
}

/// The group's own setting, else the top level's, without its position.
fn pick<T: Clone>(own: &Option<(T, Pos)>, top: &Option<(T, Pos)>) -> Option<T> {
    own.as_ref().or(top.as_ref()).map(|(v, _)| v.clone())
}

/// Handles one of the `server_tls*` directives; false if `d` is not one.
pub fn apply(c: &mut Checker<'_>, d: &Directive, t: &mut TlsDraft) -> bool {
    let pos = d.pos.clone();
    match d.name.as_str() {
        "server_tls" | "server_tls_verify" => {
            let usage = format!("{} on|off", d.name);
            if let Some(b) = c.single(d, &usage).and_then(|v| c.bool(v)) {
                let slot = if d.name == "server_tls" {
                    &mut t.on
                } else {
                    &mut t.verify
                };
                *slot = Some((b, pos));
            }
        }
        "server_tls_ca" => {
            if let Some(v) = c.single(d, "server_tls_ca FILE") {
                t.ca = Some((c.path(v), pos));
            }
        }
        "server_tls_sni" => {
            if let Some(v) = c.single(d, "server_tls_sni NAME") {
                if let Some(name) = sni_name(c, v) {
                    t.sni = Some((name, pos));
                }
            }
        }
        "server_tls_cert" => cert(c, d, t),
        _ => return false,
    }
    true
}

fn cert(c: &mut Checker<'_>, d: &Directive, t: &mut TlsDraft) {
    let usage = "usage: `server_tls_cert CERT_FILE KEY_FILE;`";
    if !(c.no_block(d) & c.attrs_only(d, &[])) {
        return;
    }
    match d.args.as_slice() {
        [crt, key] => t.cert = Some(((c.path(crt), c.path(key)), d.pos.clone())),
        [_] => c.error(
            &d.pos,
            "`server_tls_cert` names a certificate without its private key",
            usage,
        ),
        [] => c.error(
            &d.pos,
            "`server_tls_cert` needs a certificate and a key",
            usage,
        ),
        [_, _, extra, ..] => c.error(
            &extra.pos,
            "too many arguments for `server_tls_cert`",
            usage,
        ),
    }
}

/// A host name for SNI: letters, digits, `-` and `.`, not an IP address (RFC 6066 §3 sends
/// names only; without `server_tls_sni` the certificate is checked against the IP).
fn sni_name(c: &mut Checker<'_>, v: &crate::tree::Value) -> Option<String> {
    let name = v.text.trim_end_matches('.');
    if name.parse::<std::net::IpAddr>().is_ok() {
        c.error(
            &v.pos,
            format!("`{}` is an IP address, which SNI cannot carry", v.text),
            "leave `server_tls_sni` out: the certificate is then checked against the server's IP address",
        );
        return None;
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if name.len() > 253 || !name.split('.').all(label_ok) {
        c.error(
            &v.pos,
            format!("`{}` is not a host name", v.text),
            "expected letters, digits, `-` and `.`, e.g. `origin.example.com`",
        );
        return None;
    }
    Some(name.to_ascii_lowercase())
}

/// Every TLS option needs `server_tls on` where it applies: in its own group, or at top
/// level (which explicit groups inherit). An option at top level applies to the implicit
/// group and to every explicit group that does not set it.
pub fn check(c: &mut Checker<'_>, top: &TlsDraft, groups: &[&TlsDraft]) {
    let any_on = top.is_on() || groups.iter().any(|g| g.is_on());
    if !any_on {
        for (name, pos) in top.options() {
            needs_on(c, name, pos);
        }
    }
    for g in groups {
        if g.resolve(top).is_none() {
            for (name, pos) in g.options() {
                needs_on(c, name, pos);
            }
        }
    }
}

fn needs_on(c: &mut Checker<'_>, name: &str, pos: &Pos) {
    c.error(
        pos,
        format!("`{name}` is set but TLS to the servers is off"),
        "add `server_tls on;` to this group (or at top level for every group)",
    );
}
