//! The `acme` block (an extension) and the vhosts that ask for its certificates with
//! `tls_certificate acme;`.

use super::once::Seen;
use super::unknown_here;
use super::values::Checker;
use crate::diag::Pos;
use crate::directives::ACME_LEVEL;
use crate::model::{Acme, Vhost};
use crate::tree::{Directive, Node};

const USAGE: &str =
    "acme { directory https://acme-v02.api.letsencrypt.org/directory; contact mailto:you@example.com; state_dir /var/lib/ktls-proxy/acme; }";

/// Directives of the block that take one value and may appear once.
const SINGLE: &[&str] = &["directory", "state_dir", "ca_root"];

/// `acme { ... }` at top level: `None` after an error (reported).
pub fn apply(c: &mut Checker<'_>, d: &Directive) -> Option<Acme> {
    c.attrs_only(d, &[]);
    let Some(children) = d.children.as_ref().filter(|_| d.args.is_empty()) else {
        c.error(&d.pos, "`acme` takes a block and no arguments", USAGE);
        return None;
    };
    let (mut directory, mut state_dir, mut ca_root, mut contact) = (None, None, None, Vec::new());
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
            "contact" => ok = false,
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
    })
    .filter(|_| ok)
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
