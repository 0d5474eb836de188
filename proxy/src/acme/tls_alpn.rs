//! TLS-ALPN-01 (RFC 8737): while an order waits for it, a TLS listener answers a handshake
//! that names the domain and offers exactly the protocol `acme-tls/1` with a validation
//! certificate, then closes the connection without serving HTTP.
//!
//! The ordering process publishes each pending domain's key authorization ([`publish`],
//! a file under `state_dir`, `acme::challenges`, so that every process of
//! `worker_processes` answers); the accept context's ClientHello callback switches to a
//! validation context ([`context_for`]) only for such a handshake, so every other client of
//! the name keeps getting the vhost's certificate. Each process builds the context from the
//! file once per key authorization and keeps it while the file says the same. A client
//! offering only `acme-tls/1` for a name with no pending challenge is refused by the
//! listeners' ALPN callback (`alpn::select`, a `no_application_protocol` alert).

use std::path::Path;
use std::sync::{OnceLock, RwLock};

use config::AcmeChallenge;

use openssl::asn1::{Asn1Object, Asn1OctetString};
use openssl::error::ErrorStack;
use openssl::ex_data::Index;
use openssl::pkey::{PKey, Private};
use openssl::ssl::{select_next_proto, AlpnError, SslContext, SslContextBuilder, SslMethod};
use openssl::ssl::{SslOptions, SslRef, SslVersion};
use openssl::x509::{X509Extension, X509};

/// The protocol name (RFC 8737 §6.2).
pub const ACME_TLS_1: &[u8] = b"acme-tls/1";
/// The same in the ALPN wire format.
const ACME_TLS_1_WIRE: &[u8] = b"\x0aacme-tls/1";
/// id-pe-acmeIdentifier (RFC 8737 §6.1).
const ACME_IDENTIFIER_OID: &str = "1.3.6.1.5.5.7.1.31";

/// Per domain (lowercase), the key authorization last read for it and the context built
/// for it.
static BUILT: RwLock<Vec<(String, String, SslContext)>> = RwLock::new(Vec::new());

/// Starts answering `domain`'s challenge with `key_authorization` (Some), or stops (None),
/// in every process using `state_dir`.
pub fn publish(
    state_dir: &Path,
    domain: &str,
    key_authorization: Option<&str>,
) -> Result<(), String> {
    let domain = domain.to_ascii_lowercase();
    if let Some(k) = key_authorization {
        // Built here first: this process answers without building it in a worker.
        built(&domain, k)?;
    } else {
        forget(&domain);
    }
    super::challenges::write(
        state_dir,
        AcmeChallenge::TlsAlpn01,
        &domain,
        key_authorization,
    )
}

/// The context answering `key_authorization` for `domain`, built once.
fn built(domain: &str, key_authorization: &str) -> Result<SslContext, String> {
    {
        let table = BUILT.read().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, ctx)) = table
            .iter()
            .find(|(d, k, _)| d == domain && k == key_authorization)
        {
            return Ok(ctx.clone());
        }
    }
    let key = super::jws::new_p256_key()?;
    let ctx = validation_context(domain, key_authorization, &key)
        .map_err(|e| format!("tls-alpn-01 certificate for {domain}: {e}"))?;
    let mut table = BUILT.write().unwrap_or_else(|e| e.into_inner());
    table.retain(|(d, _, _)| d != domain);
    table.push((
        domain.to_string(),
        key_authorization.to_string(),
        ctx.clone(),
    ));
    Ok(ctx)
}

fn forget(domain: &str) {
    // Asked on every ClientHello offering only acme-tls/1 for a name with nothing pending:
    // look under the shared lock first, so that such hellos do not serialise the workers.
    let known = BUILT
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|(d, _, _)| d == domain);
    if known {
        let mut table = BUILT.write().unwrap_or_else(|e| e.into_inner());
        table.retain(|(d, _, _)| d != domain);
    }
}

/// For the ClientHello callback: the validation context to switch to when the client names
/// `server_name` (lowercase) and offers exactly `acme-tls/1` while a challenge for it is
/// pending.
pub fn context_for<'a>(
    server_name: Option<&str>,
    mut alpn: impl Iterator<Item = &'a [u8]>,
) -> Option<SslContext> {
    if alpn.next() != Some(ACME_TLS_1) || alpn.next().is_some() {
        return None;
    }
    let name = server_name?;
    let Some(key_authorization) = super::challenges::read(AcmeChallenge::TlsAlpn01, name) else {
        forget(name);
        return None;
    };
    match built(name, &key_authorization) {
        Ok(ctx) => Some(ctx),
        Err(e) => {
            crate::error!("acme: {e}");
            None
        }
    }
}

/// The mark every validation context carries, so that a handshake which ended in one is
/// known as a validation whatever ALPN it agreed: a client whose second ClientHello (after
/// a HelloRetryRequest) drops the ALPN extension agrees none, and must not be served HTTP
/// under the validation certificate either (RFC 8737 §3).
fn validation_mark() -> Result<Index<SslContext, ()>, ErrorStack> {
    static INDEX: OnceLock<Result<Index<SslContext, ()>, ErrorStack>> = OnceLock::new();
    INDEX.get_or_init(SslContext::new_ex_index).clone()
}

/// Whether `ssl` runs in a validation context (the ClientHello callback switched to one).
pub fn in_validation_context(ssl: &SslRef) -> bool {
    validation_mark().is_ok_and(|mark| ssl.ssl_context().ex_data(mark).is_some())
}

/// Whether a client's ALPN list (wire format) is `acme-tls/1` alone.
pub fn only_acme_tls_1(client: &[u8]) -> bool {
    client == ACME_TLS_1_WIRE
}

/// The validation certificate for `domain` (RFC 8737 §3): self-signed, the domain its one
/// name, and the critical id-pe-acmeIdentifier extension whose value is the DER OCTET STRING
/// of SHA-256(key authorization).
fn validation_certificate(
    domain: &str,
    key_authorization: &str,
    key: &PKey<Private>,
) -> Result<X509, ErrorStack> {
    let digest = openssl::sha::sha256(key_authorization.as_bytes());
    let mut der = vec![0x04, 0x20];
    der.extend_from_slice(&digest);
    let oid = Asn1Object::from_str(ACME_IDENTIFIER_OID)?;
    let value = Asn1OctetString::new_from_bytes(&der)?;
    let identifier = X509Extension::new_from_der(&oid, true, &value)?;
    super::state::self_signed("ACME TLS-ALPN-01 validation", domain, key, vec![identifier])
}

/// A server context with the validation certificate for `domain`: TLS 1.2 or later (RFC
/// 8737 §4), ALPN `acme-tls/1` or nothing, no session tickets.
fn validation_context(
    domain: &str,
    key_authorization: &str,
    key: &PKey<Private>,
) -> Result<SslContext, ErrorStack> {
    let cert = validation_certificate(domain, key_authorization, key)?;
    let mut b = SslContextBuilder::new(SslMethod::tls_server())?;
    b.set_ex_data(validation_mark()?, ());
    ktls::settings::set_protocol_versions(&mut b, SslVersion::TLS1_2, SslVersion::TLS1_3)?;
    b.set_certificate(&cert)?;
    b.set_private_key(key)?;
    b.check_private_key()?;
    b.set_options(SslOptions::NO_TICKET);
    ktls::settings::set_num_tickets(&mut b, 0)?;
    b.set_alpn_select_callback(|_, client| {
        select_next_proto(ACME_TLS_1_WIRE, client).ok_or(AlpnError::ALERT_FATAL)
    });
    // The accept context's SNI callback would switch back to the vhost's context: this one
    // runs instead, and keeps the validation context.
    b.set_servername_callback(|_, _| Ok(()));
    Ok(b.build())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: [&[u8]; 1] = [ACME_TLS_1];

    #[test]
    fn only_acme_tls_1_alone_for_a_pending_name_is_answered() {
        let dir = std::env::temp_dir().join(format!("acme-alpn-{}", std::process::id()));
        crate::acme::state::private_dir(&dir).unwrap();
        crate::acme::challenges::set_state_dir(Some(&dir));
        publish(&dir, "Pending.example", Some("token.thumbprint")).unwrap();
        assert!(context_for(Some("pending.example"), ONE.into_iter()).is_some());
        assert!(context_for(Some("other.example"), ONE.into_iter()).is_none());
        assert!(context_for(None, ONE.into_iter()).is_none());
        let two: [&[u8]; 2] = [b"http/1.1", ACME_TLS_1];
        assert!(context_for(Some("pending.example"), two.into_iter()).is_none());
        // What another process sees: the file only, nothing built yet.
        forget("pending.example");
        assert!(context_for(Some("pending.example"), ONE.into_iter()).is_some());
        publish(&dir, "pending.example", None).unwrap();
        assert!(context_for(Some("pending.example"), ONE.into_iter()).is_none());
        assert!(only_acme_tls_1(b"\x0aacme-tls/1"));
        assert!(!only_acme_tls_1(b"\x0aacme-tls/1\x08http/1.1"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_handshake_switched_to_a_validation_context_is_known_as_one() {
        let key = crate::acme::jws::new_p256_key().unwrap();
        let validation = validation_context("v.example", "token.thumbprint", &key).unwrap();
        let other = SslContextBuilder::new(SslMethod::tls_server())
            .unwrap()
            .build();
        let mut ssl = openssl::ssl::Ssl::new(&other).unwrap();
        assert!(!in_validation_context(&ssl));
        // What the ClientHello callback does for an `acme-tls/1` client of a pending name.
        ssl.set_ssl_context(&validation).unwrap();
        assert!(in_validation_context(&ssl));
    }

    #[test]
    fn the_validation_certificate_holds_the_digest_in_a_critical_extension() {
        let key = crate::acme::jws::new_p256_key().unwrap();
        let cert = validation_certificate("v.example", "token.thumbprint", &key).unwrap();
        let der = cert.to_der().unwrap();
        // OID 1.3.6.1.5.5.7.1.31, critical, OCTET STRING { OCTET STRING (32) digest }.
        let mut want = vec![
            0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x01, 0x1f, 0x01, 0x01, 0xff, 0x04,
            0x22, 0x04, 0x20,
        ];
        want.extend_from_slice(&openssl::sha::sha256(b"token.thumbprint"));
        assert!(der.windows(want.len()).any(|w| w == want.as_slice()));
    }
}
