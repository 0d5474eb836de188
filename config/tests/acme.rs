//! The `acme` block's challenge types (an extension): the default follows the listeners, a
//! listed order is kept.

use std::path::Path;

use config::{parse_str, AcmeChallenge};

fn challenges(listeners: &str, extra: &str) -> Vec<AcmeChallenge> {
    let text = format!(
        "{listeners}srv_group g {{ server 127.0.0.1; }}\n\
         acme {{ directory https://127.0.0.1:14000/dir; state_dir acme; {extra} }}\n\
         vhost site.example {{ tls_certificate acme; proxy_pass g; }}\n"
    );
    match parse_str("t.conf", &text, Path::new("/etc/t")) {
        Ok(l) => l.config.acme.expect("acme").challenges,
        Err(d) => panic!("refused:\n{text}\n{d}"),
    }
}

#[test]
fn without_a_list_http_01_is_kept_where_a_plain_listener_exists() {
    use AcmeChallenge::*;
    assert_eq!(challenges("listen 80;\n", ""), [Http01]);
    assert_eq!(
        challenges("listen 80;\nlisten 443 proto=https;\n", ""),
        [Http01]
    );
    // No plain listener: the TLS listener answers.
    assert_eq!(challenges("listen 443 proto=https;\n", ""), [TlsAlpn01]);
}

#[test]
fn a_listed_order_is_the_preference() {
    use AcmeChallenge::*;
    let both = "listen 80;\nlisten 443 proto=https;\n";
    assert_eq!(
        challenges(both, "challenges tls-alpn-01 http-01;"),
        [TlsAlpn01, Http01]
    );
    assert_eq!(challenges(both, "challenges tls-alpn-01;"), [TlsAlpn01]);
    assert_eq!(challenges(both, "challenges http-01;"), [Http01]);
}
