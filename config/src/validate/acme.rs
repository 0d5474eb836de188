//! The `acme` block (an extension) and the vhosts that ask for its certificates with
//! `tls_certificate acme;`.

use super::once::Seen;
use super::unknown_here;
use super::values::Checker;
use crate::diag::Pos;
use crate::directives::ACME_LEVEL;
use crate::model::{Acme, AcmeChallenge, Listener, Vhost};
use crate::tree::{Directive, Node};

const USAGE: &str =
    "acme { directory https://acme-v02.api.letsencrypt.org/directory; contact mailto:you@example.com; state_dir /var/lib/ktls-proxy/acme; }";

/// Directives of the block that take one value and may appear once.
const SINGLE: &[&str] = &["directory", "state_dir", "ca_root", "challenges"];

const CHALLENGES_USAGE: &str = "challenges http-01 tls-alpn-01;";

/// `acme { ... }` at top level: `None` after an error (reported). `challenge_pos` gets the
/// position of each `challenges` value, for [`resolve_challenges`].
pub fn apply(c: &mut Checker<'_>, d: &Directive, challenge_pos: &mut Vec<Pos>) -> Option<Acme> {
    c.attrs_only(d, &[]);
    let Some(children) = d.children.as_ref().filter(|_| d.args.is_empty()) else {
        c.error(&d.pos, "`acme` takes a block and no arguments", USAGE);
        return None;
    };
    let (mut directory, mut state_dir, mut ca_root, mut contact) = (None, None, None, Vec::new());
    let mut challenges = Vec::new();
    let mut ok = true;
    let mut seen = Seen::default();
    for node in children {
        let Node::Directive(x) = node else {
            if let Node::Rule(r) = node {
                c.error(&r.pos, "http_chain rules are not allowed in `acme`", USAGE);
            }
            ok = false;
            continue;
        };
        if !seen.check(c, x, SINGLE) {
            ok = false;
            continue;
        }
        match x.name.as_str() {
            "directory" => match c.single(x, "directory https://HOST/PATH") {
                Some(v) if v.text.starts_with("https://") && v.text.len() > "https://".len() => {
                    directory = Some(v.text.clone());
                }
                Some(v) => {
                    c.error(
                        &v.pos,
                        format!("`{}` is not an ACME directory URL", v.text),
                        "ACME servers are reached over TLS: give an `https://` URL, e.g. https://acme-v02.api.letsencrypt.org/directory",
                    );
                    ok = false;
                }
                None => ok = false,
            },
            "contact" if c.shape(x, 1, usize::MAX, "contact mailto:ADDRESS...") => {
                ok &= contacts(c, x, &mut contact);
            }
            "state_dir" => match c.single(x, "state_dir PATH") {
                Some(v) => state_dir = Some(c.path(v)),
                None => ok = false,
            },
            "ca_root" => match c.single(x, "ca_root FILE") {
                Some(v) => ca_root = Some(c.path(v)),
                None => ok = false,
            },
            "challenges" if c.shape(x, 1, 2, CHALLENGES_USAGE) => {
                ok &= challenge_types(c, x, &mut challenges, challenge_pos);
            }
            "contact" | "challenges" => ok = false,
            _ => {
                unknown_here(c, x, "`acme`", ACME_LEVEL);
                ok = false;
            }
        }
    }
    for (missing, what) in [
        (directory.is_none(), "`acme` names no ACME server: add `directory https://...;`"),
        (state_dir.is_none(), "`acme` has no `state_dir`: add `state_dir PATH;` (the account key and certificates are kept there)"),
    ] {
        if missing && ok {
            c.error(&d.pos, what, USAGE);
        }
    }
    Some(Acme {
        directory: directory?,
        contact,
        state_dir: state_dir?,
        ca_root,
        challenges,
    })
    .filter(|_| ok)
}

/// `challenges TYPE...`: each a type the client can answer, once; false after an error.
fn challenge_types(
    c: &mut Checker<'_>,
    x: &Directive,
    out: &mut Vec<AcmeChallenge>,
    positions: &mut Vec<Pos>,
) -> bool {
    let mut ok = true;
    for v in &x.args {
        let kind = match v.text.as_str() {
            "http-01" => AcmeChallenge::Http01,
            "tls-alpn-01" => AcmeChallenge::TlsAlpn01,
            other => {
                let hint = if other == "dns-01" {
                    "dns-01 needs the DNS provider's API, which the proxy has none of: use http-01 or tls-alpn-01"
                } else {
                    "the types are `http-01` (plain listener) and `tls-alpn-01` (TLS listener), in order of preference"
                };
                c.error(
                    &v.pos,
                    format!("`{other}` is not an ACME challenge type"),
                    hint,
                );
                ok = false;
                continue;
            }
        };
        if out.contains(&kind) {
            c.error(
                &v.pos,
                format!("`{}` is listed twice", v.text),
                CHALLENGES_USAGE,
            );
            ok = false;
            continue;
        }
        out.push(kind);
        positions.push(v.pos.clone());
    }
    ok
}

/// Fills `acme.challenges` when the block did not list them (`http-01` when a plain listener
/// exists, else `tls-alpn-01`), and refuses a listed type no listener can answer: `positions`
/// are those of the listed values.
pub fn resolve_challenges(
    c: &mut Checker<'_>,
    acme: &mut Acme,
    listeners: &[Listener],
    positions: &[Pos],
) {
    let has_tls = listeners.iter().any(Listener::is_tls);
    let has_plain = listeners.iter().any(|l| !l.is_tls());
    if acme.challenges.is_empty() {
        acme.challenges = vec![if has_plain || !has_tls {
            AcmeChallenge::Http01
        } else {
            AcmeChallenge::TlsAlpn01
        }];
        return;
    }
    for (kind, pos) in acme.challenges.iter().zip(positions) {
        let (missing, which) = match kind {
            AcmeChallenge::Http01 => (!has_plain, "a plain (`proto=http`) listener"),
            AcmeChallenge::TlsAlpn01 => (!has_tls, "a TLS (`proto=https` or `h2`) listener"),
        };
        if missing {
            c.error(
                pos,
                format!("`{}` is answered on {which}, and this configuration has none", kind.as_str()),
                "add the listener (the ACME server connects to port 80 for http-01, 443 for tls-alpn-01) or list the other type",
            );
        }
    }
}

/// Gives each vhost that asked with `tls_certificate acme` (at `pos`) the certificate the
/// ACME client keeps for it.
pub fn resolve_vhost(
    c: &mut Checker<'_>,
    acme: Option<&Acme>,
    vhost: &mut Vhost,
    pos: &Pos,
    own_certificates: bool,
) {
    let Some(acme) = acme else {
        c.error(
            pos,
            "`tls_certificate acme` needs an `acme { ... }` block",
            USAGE,
        );
        return;
    };
    if own_certificates {
        c.error(
            pos,
            format!(
                "vhost `{}` has both `tls_certificate acme` and certificate files",
                vhost.name
            ),
            "keep one: the ACME client's certificate or the files",
        );
        return;
    }
    if !is_dns_name(&vhost.name) {
        c.error(
            pos,
            format!("vhost `{}` cannot get an ACME certificate: its name is not a domain name", vhost.name),
            "ACME certifies the vhost's name: name the vhost after its domain, e.g. `vhost example.com { ... }`",
        );
        return;
    }
    vhost.tls.certificates = vec![acme.certificate_paths(&vhost.name)];
    vhost.tls.acme = true;
}

/// Letters, digits and hyphens in dot-separated labels, at least two of them.
fn is_dns_name(name: &str) -> bool {
    let labels: Vec<&str> = name.split('.').collect();
    labels.len() >= 2
        && name.len() <= 253
        && labels.iter().all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// `contact mailto:...`: each address a `mailto:` URI, added to `contact`; false after an
/// error.
fn contacts(c: &mut Checker<'_>, x: &Directive, contact: &mut Vec<String>) -> bool {
    let mut ok = true;
    for v in &x.args {
        if v.text.starts_with("mailto:") && v.text.contains('@') {
            contact.push(v.text.clone());
        } else {
            c.error(
                &v.pos,
                format!("`{}` is not a contact URI", v.text),
                "write an e-mail address as a URI: `mailto:you@example.com`",
            );
            ok = false;
        }
    }
    ok
}
