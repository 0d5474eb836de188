//! The TLS side of HTTP/3 (issue 33): a rustls server configuration for QUIC's handshake,
//! built from the same certificates, keys and vhost names the TCP listeners' OpenSSL
//! contexts use (`tls_setup.rs`), with the same choice by server name: the vhost the client
//! names, else (`tls_match_any_server_name`) the default vhost's or the first vhost's
//! certificates, else the handshake is refused. ALPN `h3` only; 0-RTT off (no early data);
//! session tickets as the start vhost's `tls_tickets` says (`tls_quic_tickets.rs`). rustls's
//! sessions are wrapped to capture each client's ClientHello for the TLS fingerprints
//! (`quic_hello.rs`).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use config::{Config, Vhost};
use quinn_proto::crypto::rustls::QuicServerConfig;
use rustls::crypto::aws_lc_rs;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::quic_hello::Capturing;

/// Bytes quinn-proto may buffer for one new connection before we decide on it. We decide
/// in the same call that hands it to us (`quic::accept`), so little is ever held.
const INCOMING_BUFFER: u64 = 16 * 1024;
/// The same for all new connections of an endpoint together.
const INCOMING_BUFFER_TOTAL: u64 = 1 << 20;

/// Request streams a new connection may open at once, before it is widened toward
/// `max_concurrent_streams` (see [`transport`]): with the 8 unidirectional ones, 28 entries,
/// what quinn-proto's two stream tables hold at 32 buckets (1.4 KB, against 5.4 KB for
/// 100), and more than a browser's first burst and than `h3_qpack_blocked_streams`' default.
pub const INITIAL_STREAMS: u32 = 20;

/// The endpoint settings every worker of the process shares, chief among them the stateless
/// reset key: a worker that gets a datagram of a connection no worker holds answers with a
/// reset the client believes only if its token is the one the owning worker derived from
/// the same key. Made once, kept for the process's life (reloads too). Each worker adds its
/// connection ID generator (`worker/quic/route.rs`, signed with [`cid_key`]).
pub fn endpoint_config() -> quinn_proto::EndpointConfig {
    static SHARED: OnceLock<quinn_proto::EndpointConfig> = OnceLock::new();
    SHARED
        .get_or_init(quinn_proto::EndpointConfig::default)
        .clone()
}

/// The key the process's connection IDs are signed with: a datagram is routed to the worker
/// its ID names, or answered with a stateless reset, only if the ID is the process's. Made
/// once per process. Without randomness (it does not fail on Linux) the key is 0: IDs are
/// then guessable, which costs a datagram moved between workers, no more.
pub fn cid_key() -> u64 {
    static KEY: OnceLock<u64> = OnceLock::new();
    *KEY.get_or_init(|| {
        let mut key = [0u8; 8];
        let _ = openssl::rand::rand_bytes(&mut key);
        u64::from_le_bytes(key)
    })
}

/// A server configuration carrying the process's Retry token key, with `crypto` in it.
/// The key must be the same in every worker (a client's Initial with the token may reach
/// another worker than the one that sent the Retry) and across reloads (a Retry sent just
/// before one is answered after it): the first configuration made holds it, later ones are
/// its copies with their own TLS settings.
fn with_process_token_key(crypto: Arc<Capturing>) -> quinn_proto::ServerConfig {
    static FIRST: OnceLock<quinn_proto::ServerConfig> = OnceLock::new();
    let mut server = FIRST
        .get_or_init(|| quinn_proto::ServerConfig::with_crypto(crypto.clone()))
        .clone();
    server.crypto = crypto;
    server
}

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

/// The QUIC server configuration for `config`: None when no vhost has a certificate. A key
/// ring file its tickets take is added to `ticket_files` (watched as TCP's are).
/// Err: the first file that rustls cannot read, in words.
pub fn build(
    config: &Config,
    ticket_files: &mut Vec<crate::ticket_files::Watched>,
) -> Result<Option<Arc<quinn_proto::ServerConfig>>, String> {
    let mut by_name = HashMap::new();
    // The start vhost (as TCP's accept context: the default vhost's, or the first vhost's
    // with certificates) and its keys.
    let mut first: Option<(&Vhost, Vec<Arc<CertifiedKey>>)> = None;
    for vhost in std::iter::once(&config.default_vhost).chain(config.vhosts.iter()) {
        if vhost.tls.certificates.is_empty() {
            continue;
        }
        let keys = vhost_keys(vhost)?;
        first.get_or_insert_with(|| (vhost, keys.clone()));
        by_name.insert(vhost.name.to_ascii_lowercase(), keys);
    }
    let Some((start, first)) = first else {
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
    // Stateless tickets or nothing: no session cache grows with the clients.
    tls.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    match ticketer(start, ticket_files)? {
        Some(ticketer) => {
            tls.ticketer = Arc::new(ticketer);
            // One is enough to resume, as on TCP.
            tls.send_tls13_tickets = 1;
        }
        None => tls.send_tls13_tickets = 0,
    }
    let crypto = QuicServerConfig::try_from(tls)
        .map_err(|e| format!("QUIC cannot use the TLS settings: {e}"))?;
    let mut server = with_process_token_key(Arc::new(Capturing::new(crypto)));
    // A client that moves to another address (NAT rebinding, migration) may reach another
    // worker's socket (SO_REUSEPORT hashes the address): that worker moves its datagrams to
    // the connection's owner by the connection ID (`worker/quic/route.rs`).
    server.migration(true);
    let h3 = &config.h3;
    server.max_incoming(h3.max_handshakes as usize);
    server.incoming_buffer_size(INCOMING_BUFFER);
    server.incoming_buffer_size_total(INCOMING_BUFFER_TOTAL);
    server.transport_config(Arc::new(transport(config)));
    Ok(Some(Arc::new(server)))
}

/// What quinn-proto may hold per connection, by configuration (`h3_*`, docs/HTTP3.md
/// "Limits"): request bytes received and not yet read (per stream, and in all), response
/// bytes written and not yet acknowledged, CRYPTO data out of order. quinn-proto's defaults
/// are 1.25 MB per stream, unbounded in all, 10 MB, 16 KiB; and no DATAGRAM frames.
fn transport(config: &Config) -> quinn_proto::TransportConfig {
    let h3 = &config.h3;
    let mut transport = quinn_proto::TransportConfig::default();
    transport.max_concurrent_uni_streams(8u32.into());
    // quinn-proto keeps a table entry for every stream the client may open: a connection
    // starts with a few and is widened toward `max_concurrent_streams` as it uses them
    // (`quic/codec.rs` `widen_streams`), so that an idle one does not pay for 100.
    let first = config.max_concurrent_streams.min(INITIAL_STREAMS);
    transport.max_concurrent_bidi_streams(first.into());
    transport.stream_receive_window(h3.stream_window.into());
    transport.receive_window(h3.connection_window.into());
    transport.send_window(h3.send_window.into());
    transport.crypto_buffer_size(h3.crypto_buffer as usize);
    // No DATAGRAM frames (RFC 9221): nothing here reads them, so a client that sent them
    // would fill quinn-proto's buffer for them (1.25 MB per connection by default). Without
    // the transport parameter, a DATAGRAM frame is a protocol violation.
    transport.datagram_receive_buffer_size(None);
    // An idle connection ends after `keepalive_timeout`, as a TCP one does; a handshake
    // that stalls, too (QUIC's idle timer runs from the first packet).
    let idle = config
        .keepalive_timeout
        .max(std::time::Duration::from_secs(1));
    transport.max_idle_timeout(idle.try_into().ok());
    transport
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

/// The ticketer of `vhost`'s `tls_tickets` (tls_quic_tickets.rs); None when they are off.
fn ticketer(
    vhost: &Vhost,
    ticket_files: &mut Vec<crate::ticket_files::Watched>,
) -> Result<Option<crate::tls_quic_tickets::Ticketer>, String> {
    let tickets = &vhost.tls.tickets;
    if !tickets.enabled {
        return Ok(None);
    }
    let ring = match &tickets.keys {
        Some(path) => {
            let (watched, ring) = crate::ticket_files::register(path)
                .map_err(|e| format!("ticket key file {}: {e}", path.display()))?;
            ticket_files.push(watched);
            ring
        }
        // QUIC's own scope: a TCP ticket of the same secret never opens here.
        None => {
            let scope = format!("h3 {}", vhost.name.to_ascii_lowercase());
            let secret = tickets.secret.as_deref().map(str::as_bytes);
            ktls::tickets::register(secret, scope.as_bytes(), tickets.lifetime)
                .map_err(|e| format!("cannot make ticket keys: {e}"))?
        }
    };
    let ticketer = crate::tls_quic_tickets::Ticketer::new(ring, tickets.lifetime);
    Ok(Some(ticketer))
}
