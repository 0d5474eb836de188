//! From a finished OpenSSL handshake to the proxy's record layer: the same secrets from the
//! same places as the kernel hand-over (keylog secrets for TLS 1.3, the master secret and the
//! hello randoms for TLS 1.2) and the exact sequence numbers.
//!
//! Sequence numbers at the hand-over (server side):
//! - TLS 1.3 read: 0. Read-ahead is off, so OpenSSL read nothing after the client's Finished
//!   (checked: `SSL_has_pending`); a request the client pipelined is still in the socket.
//! - TLS 1.3 write: the records OpenSSL wrote after its Finished (the NewSessionTickets),
//!   counted by the message callback.
//! - TLS 1.2 read and write: 1. Each side's Finished is the only record under the new keys
//!   (tickets go before ChangeCipherSpec, renegotiation is refused).
//!
//! On AWS-LC the TLS 1.3 secrets and every sequence number are read from the SSL itself
//! (`SSL_get_{read,write}_traffic_secret`, `SSL_get_{read,write}_sequence`), after `offload`
//! made it write the tickets it holds back (`crate::awslc`).

use openssl::ssl::{SslRef, SslVersion};

use super::keys::DirectionKeys;
use super::layer::RecordLayer;
use super::tls12;
use crate::kernel::{KernelCipher, TlsVersion};
use crate::offload::{take_tls13_handover, FallbackReason};
use crate::session::TlsSession;
use crate::settings;

/// The longest master secret (TLS 1.2) and hello random.
const MASTER_SECRET_LEN: usize = 48;
const RANDOM_LEN: usize = 32;

/// Takes the record state of a server-side session whose handshake is done. On error the
/// session is untouched apart from its captured secrets and stays usable with OpenSSL.
pub fn server_record_layer(session: &mut TlsSession) -> Result<RecordLayer, FallbackReason> {
    if session.has_pending() {
        return Err(FallbackReason::PendingData);
    }
    let ssl = session.ssl_mut();
    // The tickets AWS-LC holds back go out first, under the keys and sequence numbers read
    // below (`offload` has sent them already; then this writes nothing).
    #[cfg(feature = "aws-lc")]
    crate::awslc::send_held_back(ssl).map_err(|_| FallbackReason::HeldBackWrite)?;
    let version = match ssl.version2() {
        Some(SslVersion::TLS1_2) => TlsVersion::Tls12,
        Some(SslVersion::TLS1_3) => TlsVersion::Tls13,
        _ => return Err(FallbackReason::UnsupportedVersion),
    };
    let cipher = ssl
        .current_cipher()
        .and_then(crate::settings::cipher_standard_name)
        .and_then(KernelCipher::from_standard_name)
        .ok_or(FallbackReason::CipherNotOffloadable)?;
    match version {
        TlsVersion::Tls13 => tls13(ssl, cipher),
        TlsVersion::Tls12 => tls12(ssl, cipher),
    }
}

fn tls13(ssl: &mut SslRef, cipher: KernelCipher) -> Result<RecordLayer, FallbackReason> {
    let handover = take_tls13_handover(ssl).ok_or(FallbackReason::NoTrafficSecret)?;
    let read = DirectionKeys::from_secret(cipher, handover.client.bytes(), handover.client_seq);
    let write = DirectionKeys::from_secret(cipher, handover.server.bytes(), handover.server_seq);
    match (read, write) {
        (Ok(read), Ok(write)) => Ok(RecordLayer::new(TlsVersion::Tls13, cipher, read, write)),
        _ => Err(FallbackReason::KeyDerivationFailed),
    }
}

fn tls12(ssl: &SslRef, cipher: KernelCipher) -> Result<RecordLayer, FallbackReason> {
    let session = ssl.session().ok_or(FallbackReason::NoTrafficSecret)?;
    let mut master = [0u8; MASTER_SECRET_LEN];
    let master_len = session.master_key(&mut master);
    let mut client_random = [0u8; RANDOM_LEN];
    let mut server_random = [0u8; RANDOM_LEN];
    let got_randoms = settings::client_random(ssl, &mut client_random) == RANDOM_LEN
        && settings::server_random(ssl, &mut server_random) == RANDOM_LEN;
    if master_len != MASTER_SECRET_LEN || !got_randoms {
        master.fill(0);
        return Err(FallbackReason::NoTrafficSecret);
    }
    let block = tls12::key_block(cipher, &master, &client_random, &server_random);
    master.fill(0);
    std::hint::black_box(&master);
    let block = block.map_err(|_| FallbackReason::KeyDerivationFailed)?;
    // OpenSSL: 1 each (see the module's comment). AWS-LC says so itself.
    #[cfg(not(feature = "aws-lc"))]
    let (read_seq, write_seq) = (1, 1);
    #[cfg(feature = "aws-lc")]
    let (read_seq, write_seq) = crate::awslc::sequences(ssl);
    let read = DirectionKeys::from_key_iv(&block.client_key, &block.client_iv, read_seq);
    let write = DirectionKeys::from_key_iv(&block.server_key, &block.server_iv, write_seq);
    match (read, write) {
        (Ok(read), Ok(write)) => Ok(RecordLayer::new(TlsVersion::Tls12, cipher, read, write)),
        _ => Err(FallbackReason::KeyDerivationFailed),
    }
}
