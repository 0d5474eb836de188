//! Whether the names in a vhost's certificates can ever bring a client to it. A handshake
//! picks the vhost whose *name* is the server name the client asks for (SNI); unknown names
//! go to the first vhost with certificates only under `tls_match_any_server_name`, and are
//! refused otherwise. A vhost named `app` holding a certificate for `example.com` is then
//! reached by no client that checks the certificate: `proxy -t` says so.

use std::path::Path;

use config::Config;
use openssl::nid::Nid;
use openssl::x509::X509;

/// The DNS names a certificate is valid for: its subjectAltName DNS entries, or its subject
/// CN when it has none (as clients read it). Empty when the file cannot be read (its error
/// is reported where it is loaded).
pub fn certificate_names(path: &Path) -> Vec<String> {
    let Some(cert) = std::fs::read(path)
        .ok()
        .and_then(|pem| X509::from_pem(&pem).ok())
    else {
        return Vec::new();
    };
    let alt: Vec<String> = cert
        .subject_alt_names()
        .map(|names| {
            names
                .iter()
                .filter_map(|n| n.dnsname().map(str::to_ascii_lowercase))
                .collect()
        })
        .unwrap_or_default();
    if !alt.is_empty() {
        return alt;
    }
    cert.subject_name()
        .entries_by_nid(Nid::COMMONNAME)
        .filter_map(|e| e.data().to_string().ok().map(|s| s.to_ascii_lowercase()))
        .collect()
}

/// Whether the certificate name `pattern` (`example.com`, `*.example.com`) covers `name`;
/// a wildcard covers exactly one label (RFC 6125 §6.4.3).
pub fn covers(pattern: &str, name: &str) -> bool {
    let name = name.trim_end_matches('.');
    match pattern.strip_prefix("*.") {
        Some(parent) => name
            .split_once('.')
            .is_some_and(|(label, rest)| !label.is_empty() && rest.eq_ignore_ascii_case(parent)),
        None => pattern.eq_ignore_ascii_case(name),
    }
}

/// A warning for every vhost whose certificates name none of the names SNI reaches it by
/// (its own name). Without a TLS listener certificates are not used: nothing to say.
/// `start_vhost` serves unknown names under `tls_match_any_server_name`: it is reached
/// whatever its name.
pub fn unmatched_vhosts(config: &Config, start_vhost: &str) -> Vec<String> {
    if !config.effective_listeners().iter().any(|l| l.is_tls()) {
        return Vec::new();
    }
    let match_any = config.tls.match_any_server_name;
    let vhosts = std::iter::once(&config.default_vhost).chain(config.vhosts.iter());
    let mut warnings = Vec::new();
    for vhost in vhosts.filter(|v| !v.tls.certificates.is_empty()) {
        if match_any && vhost.name == start_vhost {
            continue;
        }
        let names: Vec<String> = vhost
            .tls
            .certificates
            .iter()
            .flat_map(|pair| certificate_names(&pair.certificate))
            .collect();
        if names.is_empty() || names.iter().any(|n| covers(n, &vhost.name)) {
            continue;
        }
        let fallback = if match_any {
            format!(
                "they get vhost `{start_vhost}`'s certificate instead (tls_match_any_server_name)"
            )
        } else {
            "their handshakes fail (unrecognized_name: tls_match_any_server_name is off)"
                .to_string()
        };
        warnings.push(format!(
            "vhost `{}`: its certificate is for {} but a TLS handshake reaches a vhost by its \
             name only: clients asking for {} do not reach it, {fallback}; name the vhost after \
             the certificate (`vhost {} {{ ... }}`)",
            vhost.name,
            names.join(", "),
            names.first().map_or("", String::as_str),
            names
                .iter()
                .find(|n| !n.starts_with('*'))
                .map_or("NAME", String::as_str),
        ));
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_cover_one_label() {
        assert!(covers("example.com", "EXAMPLE.com"));
        assert!(covers("example.com", "example.com."));
        assert!(covers("*.example.com", "www.example.com"));
        assert!(!covers("*.example.com", "example.com"));
        assert!(!covers("*.example.com", "a.b.example.com"));
        assert!(!covers("example.com", "app"));
    }
}
