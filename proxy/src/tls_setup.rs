//! OpenSSL server contexts built from the configuration: one per vhost with certificates,
//! SNI choosing among them, ALPN, session tickets, and the kTLS options.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use config::{Config, Vhost};
use openssl::error::ErrorStack;
use openssl::ssl::{
    NameType, SniError, SslAlert, SslContext, SslContextBuilder, SslMethod, SslOptions, SslVersion,
};

/// TLS 1.2 suites offered: forward-secret AEAD only, ECDSA first (the reference certificate is
/// ECDSA P-256). TLS 1.3 keeps OpenSSL's default suites.
const TLS12_CIPHERS: &str = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:\
ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384:\
ECDHE-RSA-CHACHA20-POLY1305";
const GROUPS: &str = "X25519:P-256:P-384";

#[derive(Debug)]
pub enum TlsSetupError {
    /// The file passed the configuration's checks, the TLS library refused its contents.
    /// `at`: the `tls_certificate` line (`FILE:LINE:COL`) when the configuration has it.
    Certificate {
        vhost: String,
        path: PathBuf,
        reason: String,
        at: Option<String>,
    },
    /// As `Certificate`, for the key; `at` is the `tls_certificate_key` line.
    Key {
        vhost: String,
        path: PathBuf,
        reason: String,
        at: Option<String>,
    },
    /// `at`: the `tls_certificate_key` line.
    KeyMismatch {
        vhost: String,
        certificate: PathBuf,
        key: PathBuf,
        at: Option<String>,
    },
    OpenSsl {
        vhost: String,
        reason: String,
    },
    /// `tls_tickets keys=FILE` names a file that is not a key ring.
    TicketKeys {
        vhost: String,
        path: PathBuf,
        reason: String,
    },
    /// A TLS listener exists but no vhost has a certificate.
    NoCertificate,
    /// QUIC's TLS configuration (`tls_quic.rs`) could not be built: the reason in words.
    Quic(String),
}

impl fmt::Display for TlsSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsSetupError::Certificate {
                vhost, path, reason, ..
            } => write!(
                f,
                "vhost `{vhost}`: cannot load certificate {}: {reason} (check tls_certificate)",
                path.display()
            ),
            TlsSetupError::Key {
                vhost, path, reason, ..
            } => {
                write!(f, "vhost `{vhost}`: cannot load private key {}: {reason} (check tls_certificate_key)", path.display())
            }
            TlsSetupError::KeyMismatch {
                vhost,
                certificate,
                key,
                ..
            } => write!(
                f,
                "vhost `{vhost}`: private key {} does not match certificate {} (give the key the certificate was made for)",
                key.display(),
                certificate.display()
            ),
            TlsSetupError::TicketKeys { vhost, path, reason } => write!(
                f,
                "vhost `{vhost}`: ticket key file {}: {reason} (check tls_tickets keys=)",
                path.display()
            ),
            TlsSetupError::OpenSsl { vhost, reason } => write!(f, "vhost `{vhost}`: OpenSSL refused the TLS settings: {reason}"),
            TlsSetupError::Quic(reason) => write!(f, "HTTP/3 (listen ... proto=h3): {reason}"),
            TlsSetupError::NoCertificate => f.write_str(
                "a `listen ... proto=https` listener needs a certificate: add tls_certificate and tls_certificate_key at top level or in a vhost",
            ),
        }
    }
}

impl std::error::Error for TlsSetupError {}

impl TlsSetupError {
    /// The configuration line the error is about (`FILE:LINE:COL`), when it has one.
    pub fn written_at(&self) -> Option<&str> {
        match self {
            TlsSetupError::Certificate { at, .. }
            | TlsSetupError::Key { at, .. }
            | TlsSetupError::KeyMismatch { at, .. } => at.as_deref(),
            _ => None,
        }
    }
}

/// The contexts a TLS listener accepts with.
pub struct TlsContexts {
    /// The context every handshake starts in; its SNI callback switches to a vhost's.
    pub accept: SslContext,
    /// Vhost names that have a context of their own, for logs.
    pub names: Vec<String>,
    /// The key ring files of `tls_tickets keys=`, watched for changes (`ticket_files.rs`).
    pub ticket_files: Vec<crate::ticket_files::Watched>,
}

/// Builds the contexts for `config`, or every error found. `Ok(None)` when no vhost has a
/// certificate (fine as long as no listener is TLS).
pub fn build(config: &Config) -> Result<Option<TlsContexts>, Vec<TlsSetupError>> {
    let ktls_mode = config.tls.ktls;
    let mut errors = Vec::new();
    let mut by_name: HashMap<String, SslContext> = HashMap::new();
    let mut names = Vec::new();
    let mut ticket_files = Vec::new();
    let vhosts = std::iter::once(&config.default_vhost).chain(config.vhosts.iter());
    for vhost in vhosts {
        if vhost.tls.certificates.is_empty() {
            continue;
        }
        match vhost_context(vhost, ktls_mode, None, &mut ticket_files) {
            Ok(builder) => {
                by_name.insert(vhost.name.to_ascii_lowercase(), builder.build());
                names.push(vhost.name.clone());
            }
            Err(mut e) => errors.append(&mut e),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    // Handshakes start with the default vhost's certificates, or the first vhost's.
    let Some(start_vhost) = std::iter::once(&config.default_vhost)
        .chain(config.vhosts.iter())
        .find(|v| !v.tls.certificates.is_empty())
    else {
        return Ok(None);
    };
    for warning in crate::tls_names::unmatched_vhosts(config, &start_vhost.name) {
        crate::warn!("{warning}");
    }
    let sni = SniPolicy {
        by_name: Arc::new(by_name),
        match_any: config.tls.match_any_server_name,
    };
    match vhost_context(start_vhost, ktls_mode, Some(sni), &mut ticket_files) {
        Ok(builder) => Ok(Some(TlsContexts {
            accept: builder.build(),
            names,
            ticket_files,
        })),
        Err(e) => Err(e),
    }
}

/// How the accept context answers the client's server name.
struct SniPolicy {
    by_name: Arc<HashMap<String, SslContext>>,
    /// `tls_match_any_server_name`: unknown or missing names keep the start context.
    match_any: bool,
}

fn vhost_context(
    vhost: &Vhost,
    ktls_mode: config::KtlsMode,
    sni: Option<SniPolicy>,
    ticket_files: &mut Vec<crate::ticket_files::Watched>,
) -> Result<SslContextBuilder, Vec<TlsSetupError>> {
    let name = vhost.name.clone();
    let openssl_err = |e: ErrorStack| {
        vec![TlsSetupError::OpenSsl {
            vhost: name.clone(),
            reason: e.to_string(),
        }]
    };
    let mut b = SslContextBuilder::new(SslMethod::tls_server()).map_err(openssl_err)?;
    ktls::settings::set_protocol_versions(&mut b, SslVersion::TLS1_2, SslVersion::TLS1_3)
        .map_err(openssl_err)?;
    b.set_cipher_list(TLS12_CIPHERS).map_err(openssl_err)?;
    b.set_groups_list(GROUPS).map_err(openssl_err)?;
    b.set_options(SslOptions::CIPHER_SERVER_PREFERENCE | SslOptions::NO_RENEGOTIATION);
    // OpenSSL offloads send by itself only where the kernel may take the records, and only
    // where it can: without the kernel's `tls` module, OpenSSL would try (and fail) to attach
    // it twice per handshake (two `setsockopt(TCP_ULP)` calls) before the hand-over picks the
    // proxy's record layer anyway (`offload` asks the same cached probe).
    let kernel_allowed = matches!(ktls_mode, config::KtlsMode::Auto | config::KtlsMode::On)
        && ktls::kernel::kernel_support().is_available();
    ktls::ossl::configure_context(&mut b, kernel_allowed);
    // Both hand-overs (the kernel's TLS 1.3 receive, the proxy's record layer) need each
    // connection's traffic secrets; `tls_ktls off` keeps OpenSSL's records and needs none.
    if ktls_mode != config::KtlsMode::Off {
        ktls::offload::capture_secrets(&mut b).map_err(openssl_err)?;
    }
    let mut errors = Vec::new();
    for pair in &vhost.tls.certificates {
        load_pair(&mut b, &vhost.name, pair, &mut errors);
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    // The listener's protocols travel on each connection's SSL object (`alpn.rs`).
    b.set_alpn_select_callback(crate::alpn::select);
    set_tickets(&mut b, vhost, ticket_files)?;
    if let Some(policy) = sni {
        choose_by_server_name(&mut b, policy).map_err(openssl_err)?;
    }
    Ok(b)
}

/// Session tickets as the vhost's `tls_tickets` says: keys of its own, or none at all.
fn set_tickets(
    b: &mut SslContextBuilder,
    vhost: &Vhost,
    ticket_files: &mut Vec<crate::ticket_files::Watched>,
) -> Result<(), Vec<TlsSetupError>> {
    let openssl_err = |e: ErrorStack| {
        vec![TlsSetupError::OpenSsl {
            vhost: vhost.name.clone(),
            reason: e.to_string(),
        }]
    };
    let tickets = &vhost.tls.tickets;
    if !tickets.enabled {
        b.set_options(SslOptions::NO_TICKET);
        ktls::settings::set_num_tickets(b, 0).map_err(openssl_err)?;
        return Ok(());
    }
    let scope = vhost.name.to_ascii_lowercase();
    let ring = match &tickets.keys {
        Some(path) => {
            let (watched, ring) = crate::ticket_files::register(path).map_err(|reason| {
                vec![TlsSetupError::TicketKeys {
                    vhost: vhost.name.clone(),
                    path: path.clone(),
                    reason,
                }]
            })?;
            ticket_files.push(watched);
            ring
        }
        // Keys scoped to this vhost: its tickets resume only under its own name.
        None => ktls::tickets::register(
            tickets.secret.as_deref().map(str::as_bytes),
            scope.as_bytes(),
            tickets.lifetime,
        )
        .map_err(openssl_err)?,
    };
    // Keys from a file may be shared by several vhosts: the session id context (the
    // vhost's name, hashed to fit) keeps a session of one from resuming under another.
    let context = openssl::sha::sha256(scope.as_bytes());
    b.set_session_id_context(&context).map_err(openssl_err)?;
    ktls::ossl::set_ticket_keys(b, ring).map_err(openssl_err)?;
    ktls::ossl::set_session_timeout(
        b,
        u32::try_from(tickets.lifetime.as_secs()).unwrap_or(u32::MAX),
    );
    // One ticket is enough for a client to resume; the second OpenSSL sends by default
    // costs a record per handshake.
    ktls::settings::set_num_tickets(b, 1).map_err(openssl_err)?;
    Ok(())
}

/// Switches a handshake to the context of the vhost its client names (ClientHello and SNI
/// callbacks of the accept context).
fn choose_by_server_name(b: &mut SslContextBuilder, policy: SniPolicy) -> Result<(), ErrorStack> {
    // The vhost's context is chosen from the ClientHello before anything else of it is
    // processed, so that a session ticket is decrypted with that vhost's keys only.
    let early = SniPolicy {
        by_name: policy.by_name.clone(),
        match_any: policy.match_any,
    };
    ktls::settings::set_client_hello_callback(b, move |ssl| {
        // The fingerprints' ClientHello (`worker::fingerprint_hook`), read after the handshake.
        ktls::hello::capture(ssl);
        let requested = ktls::ossl::client_hello_server_name(ssl)
            .and_then(|n| std::str::from_utf8(n).ok())
            .map(str::to_ascii_lowercase);
        // ACME's TLS-ALPN-01 validation: only a client offering exactly `acme-tls/1` for a
        // name whose challenge is pending gets the validation certificate.
        let validation = ktls::hello::peek(ssl).and_then(|hello| {
            crate::acme::tls_alpn::context_for(requested.as_deref(), hello.alpn_protocols())
        });
        if let Some(ctx) = validation {
            return ssl.set_ssl_context(&ctx);
        }
        match requested.as_deref().and_then(|n| early.by_name.get(n)) {
            Some(ctx) => ssl.set_ssl_context(ctx),
            None => Ok(()),
        }
    })?;
    b.set_servername_callback(move |ssl, alert| {
        let requested = ssl
            .servername(NameType::HOST_NAME)
            .map(str::to_ascii_lowercase);
        let chosen = requested.as_deref().and_then(|n| policy.by_name.get(n));
        match chosen {
            Some(ctx) => ssl.set_ssl_context(ctx).map_err(|_| SniError::ALERT_FATAL),
            None if policy.match_any => Ok(()),
            None => {
                // Kept for the worker's log line and counter (`handshake_failure.rs`).
                crate::handshake_failure::note_refused_name(
                    ssl,
                    requested.as_deref().unwrap_or(""),
                );
                *alert = SslAlert::UNRECOGNIZED_NAME;
                Err(SniError::ALERT_FATAL)
            }
        }
    });
    Ok(())
}

fn load_pair(
    b: &mut SslContextBuilder,
    vhost: &str,
    pair: &config::CertificatePair,
    errors: &mut Vec<TlsSetupError>,
) {
    let (cert, key) = (pair.certificate.as_path(), pair.key.as_path());
    let cert_at = pair.written_at.as_ref().map(|w| w.certificate.clone());
    let key_at = pair.written_at.as_ref().map(|w| w.key.clone());
    if let Err(e) = b.set_certificate_chain_file(cert) {
        errors.push(TlsSetupError::Certificate {
            vhost: vhost.into(),
            path: cert.into(),
            reason: in_words(&first_reason(&e)),
            at: cert_at,
        });
        return;
    }
    if let Err(e) = b.set_private_key_file(key, openssl::ssl::SslFiletype::PEM) {
        // The library checks the key against the certificate while loading it: OpenSSL says
        // "key values mismatch", AWS-LC "KEY_VALUES_MISMATCH".
        if first_reason(&e).to_ascii_lowercase().contains("mismatch") {
            errors.push(TlsSetupError::KeyMismatch {
                vhost: vhost.into(),
                certificate: cert.into(),
                key: key.into(),
                at: key_at,
            });
            return;
        }
        errors.push(TlsSetupError::Key {
            vhost: vhost.into(),
            path: key.into(),
            reason: in_words(&first_reason(&e)),
            at: key_at,
        });
        return;
    }
    if b.check_private_key().is_err() {
        errors.push(TlsSetupError::KeyMismatch {
            vhost: vhost.into(),
            certificate: cert.into(),
            key: key.into(),
            at: key_at,
        });
    }
}

/// A TLS library's reason for refusing a PEM file (OpenSSL's "bad base64 decode", AWS-LC's
/// "BAD_BASE64_DECODE"), said as what is wrong with the file.
fn in_words(reason: &str) -> String {
    let plain = reason.to_ascii_lowercase().replace('_', " ");
    let words = if plain.contains("base64") {
        "its PEM block is not valid base64 (the file is damaged, or was cut or edited)"
    } else if plain.contains("no start line") {
        "it has no PEM block the TLS library can read"
    } else if plain.contains("bad end line") {
        "its PEM block has no matching END line"
    } else if plain.contains("asn1") || plain.contains("decode") || plain.contains("wrong tag") {
        "its PEM block does not decode as what it should hold (a certificate, or a private key)"
    } else {
        return format!("the TLS library says: {reason}");
    };
    format!("{words} (the TLS library says: {reason})")
}

fn first_reason(e: &ErrorStack) -> String {
    e.errors()
        .first()
        .and_then(|e| e.reason().map(str::to_string))
        .unwrap_or_else(|| e.to_string())
}
