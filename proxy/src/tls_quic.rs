//! The TLS side of HTTP/3 (issue 33): a rustls server configuration for QUIC's handshake,
//! built from the same certificates, keys and vhost names the TCP listeners' OpenSSL
//! contexts use (`tls_setup.rs`), with the same choice by server name: the vhost the client
//! names, else (`tls_match_any_server_name`) the default vhost's or the first vhost's
//! certificates, else the handshake is refused. ALPN `h3` only; 0-RTT off (no early data,
//! no session tickets: every QUIC handshake is a full one).

use std::collections::HashMap;
use std::sync::Arc;

use config::{Config, Vhost};
use rustls::crypto::aws_lc_rs;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Request bytes a stream may have in flight to us (its QUIC credit).
pub const STREAM_RECEIVE_WINDOW: u32 = 256 * 1024;
/// Request bytes a connection may have in flight to us, all streams together.
pub const RECEIVE_WINDOW: u32 = 2 * 1024 * 1024;
/// Response bytes a connection keeps written but not yet acknowledged.
pub const SEND_WINDOW: u32 = 2 * 1024 * 1024;

/// The certificates of each vhost, chosen by the client's server name.
#[derive(Debug)]
struct ByServerName {
    by_name: HashMap<String, Vec<Arc<CertifiedKey>>>,
    /// Used when the name is unknown or missing, under `tls_match_any_server_name`.
    fallback: Option<Vec<Arc<CertifiedKey>>>,
}

impl ResolvesServerCert for ByServerName {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name().map(str::to_ascii_lowercase);
        let keys = name
            .as_deref()
            .and_then(|n| self.by_name.get(n))
            .or(self.fallback.as_ref())?;
        // A vhost may hold an ECDSA and an RSA pair: the first the client can verify.
        let offered = hello.signature_schemes();
        keys.iter()
            .find(|k| k.key.choose_scheme(offered).is_some())
            .cloned()
    }
}

/// The QUIC server configuration for `config`: None when no vhost has a certificate.
/// Err: the first file that rustls cannot read, in words.
pub fn build(config: &Config) -> Result<Option<Arc<quinn_proto::ServerConfig>>, String> {
    let mut by_name = HashMap::new();
    let mut first: Option<Vec<Arc<CertifiedKey>>> = None;
    for vhost in std::iter::once(&config.default_vhost).chain(config.vhosts.iter()) {
        if vhost.tls.certificates.is_empty() {
            continue;
        }
        let keys = vhost_keys(vhost)?;
        first.get_or_insert_with(|| keys.clone());
        by_name.insert(vhost.name.to_ascii_lowercase(), keys);
    }
    let Some(first) = first else {
        return Ok(None);
    };
    let resolver = ByServerName {
        by_name,
        fallback: config.tls.match_any_server_name.then_some(first),
    };
    let provider = Arc::new(aws_lc_rs::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("rustls refused TLS 1.3: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    tls.alpn_protocols = vec![b"h3".to_vec()];
    tls.max_early_data_size = 0;
    tls.send_tls13_tickets = 0;
    let crypto = quinn_proto::crypto::rustls::QuicServerConfig::try_from(tls)
        .map_err(|e| format!("QUIC cannot use the TLS settings: {e}"))?;
    let mut server = quinn_proto::ServerConfig::with_crypto(Arc::new(crypto));
    // A client that moves to another address would reach another worker's socket
    // (SO_REUSEPORT hashes the address), which does not know its connection: it is asked
    // not to (disable_active_migration).
    server.migration(false);
    let mut transport = quinn_proto::TransportConfig::default();
    transport.max_concurrent_uni_streams(8u32.into());
    transport.max_concurrent_bidi_streams(config.max_concurrent_streams.into());
    // What quinn-proto may hold per connection, by configuration: request bytes received
    // and not yet read (per stream, and in all), response bytes written and not yet
    // acknowledged. quinn-proto's defaults are 1.25 MB per stream, unbounded in all, 10 MB.
    transport.stream_receive_window(STREAM_RECEIVE_WINDOW.into());
    transport.receive_window(RECEIVE_WINDOW.into());
    transport.send_window(SEND_WINDOW.into());
    // An idle connection ends after `keepalive_timeout`, as a TCP one does.
    let idle = config
        .keepalive_timeout
        .max(std::time::Duration::from_secs(1));
    transport.max_idle_timeout(idle.try_into().ok());
    server.transport_config(Arc::new(transport));
    Ok(Some(Arc::new(server)))
}

/// Each certificate pair of `vhost` as rustls keeps it.
fn vhost_keys(vhost: &Vhost) -> Result<Vec<Arc<CertifiedKey>>, String> {
    let provider = aws_lc_rs::default_provider();
    let mut keys = Vec::new();
    for pair in &vhost.tls.certificates {
        let (cert, key) = (pair.certificate.as_path(), pair.key.as_path());
        let chain = CertificateDer::pem_file_iter(cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("vhost `{}`: {}: {e}", vhost.name, cert.display()))?;
        let der = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| format!("vhost `{}`: {}: {e}", vhost.name, key.display()))?;
        let signing = provider
            .key_provider
            .load_private_key(der)
            .map_err(|e| format!("vhost `{}`: {}: {e}", vhost.name, key.display()))?;
        keys.push(Arc::new(CertifiedKey::new(chain, signing)));
    }
    Ok(keys)
}
