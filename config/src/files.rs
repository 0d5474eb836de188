//! The certificate and key files a configuration names, checked where they
//! are named: a file that is missing, unreadable, empty or of the wrong kind
//! is refused at its directive's `file:line:col` with the problem in words,
//! before OpenSSL is given it (whose error stack names neither the line nor,
//! in words, the problem).
//!
//! Only [`crate::load_path_and_files`] reads them, as the proxy loads;
//! [`crate::load_path`] and [`crate::parse_str`] check text alone, as their
//! callers (tests, tools) expect.

use std::io::ErrorKind;
use std::path::Path;

use crate::diag::Sink;
use crate::tree::{Directive, Node};

/// What a named file must hold.
#[derive(Clone, Copy)]
enum Kind {
    Certificate,
    Key,
}

/// Checks every `tls_certificate` and `tls_certificate_key` at top level
/// and in vhosts (elsewhere they are refused by validation already), and the
/// files of `server_tls_ca` and `server_tls_cert` at top level and in groups.
pub fn check_tls_files(nodes: &[Node], base_dir: &Path, sink: &mut Sink) {
    for node in nodes {
        let Node::Directive(d) = node else { continue };
        match d.name.as_str() {
            // `tls_certificate acme;` (an extension) names no file: the ACME client's.
            "tls_certificate" if matches!(d.args.as_slice(), [a] if a.text == "acme") => {}
            "tls_certificate" => check(d, Kind::Certificate, base_dir, sink),
            "tls_certificate_key" => check(d, Kind::Key, base_dir, sink),
            "tls_tickets" => check_ticket_keys(d, base_dir, sink),
            "vhost" | "srv_group" => {
                check_tls_files(d.children.as_deref().unwrap_or(&[]), base_dir, sink)
            }
            // TLS to the servers (an extension): the CA bundle, the client certificate.
            "server_tls_ca" => check(d, Kind::Certificate, base_dir, sink),
            "server_tls_cert" => {
                if let [crt, key] = d.args.as_slice() {
                    check_one(d, (crt, &crt.pos), Kind::Certificate, base_dir, sink);
                    check_one(d, (key, &key.pos), Kind::Key, base_dir, sink);
                }
            }
            _ => {}
        }
    }
}

fn check(d: &Directive, kind: Kind, base_dir: &Path, sink: &mut Sink) {
    // A directive of the wrong shape is validation's to report.
    let [arg] = d.args.as_slice() else { return };
    check_one(d, (arg, &d.pos), kind, base_dir, sink);
}

/// Checks the file `arg` of directive `d` names.
fn check_one(
    d: &Directive,
    (arg, pos): (&crate::tree::Value, &crate::diag::Pos),
    kind: Kind,
    base_dir: &Path,
    sink: &mut Sink,
) {
    let named = Path::new(&arg.text);
    let path = base_dir.join(named);
    let Some(problem) = problem(&path, kind) else {
        return;
    };
    let what = match kind {
        Kind::Certificate => "certificate",
        Kind::Key => "private key",
    };
    let hint = if named.is_relative() {
        format!(
            "relative paths start at the configuration file's directory, {}",
            base_dir.display()
        )
    } else {
        format!("give `{}` the path of a PEM {what} file", d.name)
    };
    sink.error_hint(
        pos,
        format!("{what} file {}: {problem}", path.display()),
        hint,
    );
}

/// `tls_tickets keys=FILE`: the key ring must parse now, not at the first handshake.
fn check_ticket_keys(d: &Directive, base_dir: &Path, sink: &mut Sink) {
    let Some(attr) = d.attrs.iter().find(|a| a.key == "keys") else {
        return;
    };
    if attr.value.text.is_empty() {
        return; // validation's to report
    }
    let path = crate::validate::values::resolve_path(base_dir, &attr.value.text);
    if let Err(problem) = crate::ticket_keys::read(&path) {
        sink.error_hint(
            &attr.value.pos,
            format!("ticket key file {}: {problem}", path.display()),
            "one base64 key of 80 (or 48) bytes per line, the key that seals new tickets first: `openssl rand 80 | openssl base64 -A >> FILE`",
        );
    }
}

/// The file's problem in words, or `None` when it looks like what it should.
fn problem(path: &Path, kind: Kind) -> Option<String> {
    if path.is_dir() {
        return Some("is a directory, not a file".into());
    }
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) => return Some(read_error(&e)),
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Some("is empty".into());
    }
    let text = String::from_utf8_lossy(&bytes);
    let has_certificate = text.contains("-----BEGIN CERTIFICATE-----");
    let has_key = text.lines().any(|l| {
        let l = l.trim();
        l.starts_with("-----BEGIN ") && l.ends_with("PRIVATE KEY-----")
    });
    match kind {
        Kind::Certificate if has_certificate => None,
        Kind::Certificate if has_key => Some(
            "holds a private key, not a certificate (are tls_certificate and tls_certificate_key swapped?)"
                .into(),
        ),
        Kind::Certificate => Some(not_pem("-----BEGIN CERTIFICATE-----")),
        Kind::Key if text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") => Some(
            "is encrypted with a passphrase, which the proxy cannot ask for (write it decrypted with `openssl pkey`)"
                .into(),
        ),
        Kind::Key if has_key => None,
        Kind::Key if has_certificate => Some(
            "holds a certificate, not a private key (are tls_certificate and tls_certificate_key swapped?)"
                .into(),
        ),
        Kind::Key => Some(not_pem("-----BEGIN PRIVATE KEY-----")),
    }
}

fn not_pem(begin: &str) -> String {
    format!("is not in PEM format: it has no `{begin}` line (a DER file converts with `openssl x509 -inform der` or `openssl pkey -inform der`)")
}

fn read_error(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::NotFound => "does not exist".into(),
        ErrorKind::PermissionDenied => {
            "cannot be read: permission denied (the proxy reads it as the user it starts as)".into()
        }
        _ => format!("cannot be read: {e}"),
    }
}
