//! Why a client's TLS handshake failed, as a label for the log and for
//! `ktls_proxy_tls_handshake_failures_total{reason}`. A vhost not named after the name its
//! clients ask for makes every handshake fail; the operator must be told which name was
//! refused, not see the connections vanish.

use std::net::IpAddr;
use std::sync::OnceLock;

use ktls::TlsError;
use openssl::ex_data::Index;
use openssl::ssl::{Ssl, SslRef};

/// Where the SNI callback leaves the server name it refused, on the connection's SSL.
fn refused_index() -> Option<Index<Ssl, String>> {
    static INDEX: OnceLock<Option<Index<Ssl, String>>> = OnceLock::new();
    *INDEX.get_or_init(|| Ssl::new_ex_index::<String>().ok())
}

/// Notes on `ssl` that its handshake is refused because no vhost is named `name`.
pub fn note_refused_name(ssl: &mut SslRef, name: &str) {
    if let Some(index) = refused_index() {
        ssl.set_ex_data(index, name.to_string());
    }
}

/// The server name the SNI callback refused on `ssl`, if it did.
pub fn refused_name(ssl: &SslRef) -> Option<&str> {
    refused_index()
        .and_then(|index| ssl.ex_data(index))
        .map(String::as_str)
}

/// Logs (rate-limited) and counts (in all and by reason) a failed handshake of a client at `peer`.
pub fn report(metrics: &crate::metrics::Metrics, peer: IpAddr, ssl: &SslRef, err: &TlsError) {
    crate::metrics::bump(&metrics.handshakes_failed);
    let refused = refused_name(ssl);
    let reason = reason(err, refused.is_some());
    metrics.count_handshake_failure(reason);
    match refused {
        Some(name) => crate::warn!(
            "TLS handshake from {peer} failed: {reason}: no vhost is named {name:?} (the server \
             name it asked for) and tls_match_any_server_name is off"
        ),
        None => crate::warn!("TLS handshake from {peer} failed: {reason}: {err}"),
    }
}

/// Every label [`reason`] gives, for the documentation and the tests.
pub const REASONS: &[&str] = &[
    "unknown_server_name",
    "not_tls",
    "protocol_version",
    "no_shared_cipher",
    "peer_alert",
    "peer_closed",
    "other",
];

/// The label of a failed handshake: `refused` when the SNI callback refused the name.
pub fn reason(err: &TlsError, refused: bool) -> &'static str {
    if refused {
        return "unknown_server_name";
    }
    let text = match err {
        TlsError::Protocol(text) => text.to_ascii_lowercase(),
        TlsError::UnexpectedEof | TlsError::Io(_) => return "peer_closed",
        TlsError::Alert(_) => return "peer_alert",
        _ => return "other",
    };
    // OpenSSL's and AWS-LC's reason strings (`SSL_R_*`), in either spelling.
    let has = |needles: &[&str]| needles.iter().any(|n| text.contains(n));
    if has(&[
        "http request",
        "http_request",
        "https proxy request",
        "wrong version number",
        "wrong_version_number",
        "packet length too long",
        "record_too_large",
        "record too large",
    ]) {
        "not_tls"
    } else if has(&[
        "unsupported protocol",
        "unsupported_protocol",
        "version too low",
        "protocol_version",
        "protocol version",
        "unknown protocol",
        "unknown_protocol",
    ]) {
        "protocol_version"
    } else if has(&[
        "no shared cipher",
        "no_shared_cipher",
        "no suitable",
        "no_shared_group",
        "no shared group",
        "no_suitable",
    ]) {
        "no_shared_cipher"
    } else if has(&["alert"]) {
        "peer_alert"
    } else if has(&["eof", "unexpected_eof"]) {
        "peer_closed"
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_read_openssl_and_aws_lc_spellings() {
        let p = |s: &str| TlsError::Protocol(s.to_string());
        let reason = |e: &TlsError, refused: bool| {
            let label = reason(e, refused);
            assert!(REASONS.contains(&label), "{label}");
            label
        };
        assert_eq!(reason(&p("anything"), true), "unknown_server_name");
        assert_eq!(
            reason(
                &p("error:...:SSL routines:OPENSSL_internal:HTTP_REQUEST"),
                false
            ),
            "not_tls"
        );
        assert_eq!(
            reason(&p("ssl3_get_record:wrong version number"), false),
            "not_tls"
        );
        assert_eq!(
            reason(
                &p("tls_early_post_process_client_hello:unsupported protocol"),
                false
            ),
            "protocol_version"
        );
        assert_eq!(
            reason(&p("error:...:NO_SHARED_CIPHER"), false),
            "no_shared_cipher"
        );
        assert_eq!(
            reason(&p("error:...:TLSV1_ALERT_UNKNOWN_CA"), false),
            "peer_alert"
        );
        assert_eq!(reason(&TlsError::UnexpectedEof, false), "peer_closed");
        assert_eq!(reason(&p("something new"), false), "other");
    }
}
