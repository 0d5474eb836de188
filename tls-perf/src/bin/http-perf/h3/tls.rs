//! `--h3`'s TLS: a rustls client (AWS-LC provider, TLS 1.3 as QUIC requires, ALPN `h3`)
//! that, like http-perf's TCP modes, does not verify the server's certificate chain or
//! name (a load generator measures, it does not authenticate). The handshake signature is
//! still checked, so the server must hold the key of the certificate it sends. No session
//! tickets nor 0-RTT: every connection's handshake is a full one.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{aws_lc_rs, CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// Accepts any certificate; checks the handshake's signature with it.
#[derive(Debug)]
struct AnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The QUIC client configuration every `--h3` connection uses: ALPN `h3`, up to 16
/// server-opened unidirectional streams (HTTP/3 needs 3), no server-opened bidirectional
/// ones, `idle` as the idle timeout, and a PING every `keep_alive` when given.
pub fn client_config(
    idle: std::time::Duration,
    keep_alive: Option<std::time::Duration>,
) -> Result<quinn_proto::ClientConfig, String> {
    let provider: Arc<CryptoProvider> = Arc::new(aws_lc_rs::default_provider());
    let verifier = AnyCertificate {
        algorithms: provider.signature_verification_algorithms,
    };
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("rustls refused TLS 1.3: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    tls.enable_early_data = false;
    tls.resumption = rustls::client::Resumption::disabled();
    let crypto = quinn_proto::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| format!("QUIC cannot use the TLS settings: {e}"))?;
    let mut config = quinn_proto::ClientConfig::new(Arc::new(crypto));
    let mut transport = quinn_proto::TransportConfig::default();
    transport.max_concurrent_bidi_streams(0u32.into());
    transport.max_concurrent_uni_streams(16u32.into());
    transport.max_idle_timeout(idle.try_into().ok());
    transport.keep_alive_interval(keep_alive);
    config.transport_config(Arc::new(transport));
    Ok(config)
}
