//! Per-connection capture of the TLS 1.3 application traffic secrets, and of how many records
//! OpenSSL wrote under the server's application key before the hand-over.
//!
//! OpenSSL 3.0 offloads TLS 1.3 send only; to put receive in the kernel too, the server needs
//! CLIENT_TRAFFIC_SECRET_0, and the proxy's own record layer needs SERVER_TRAFFIC_SECRET_0 as
//! well. OpenSSL exposes them only through the keylog callback. The callback gets `&SslRef`,
//! so each SSL carries a slot (ex_data) with interior mutability that the callback fills and
//! the hand-over empties: connections never share state or a lock.
//!
//! The server's write sequence number at the hand-over is not 0 in TLS 1.3: OpenSSL sends its
//! NewSessionTickets after the handshake under the application key. The message callback
//! (`ossl::count_records`) counts the record headers OpenSSL writes after the server's
//! Finished message: OpenSSL builds a record (and reports its header) before it reports the
//! message the record carried, so the Finished record itself is not counted.
//!
//! On AWS-LC neither callback is installed: the secrets and sequence numbers are read from
//! the SSL at the hand-over (`crate::awslc`), after the NewSessionTickets AWS-LC holds back
//! went out. The slot then only counts the handshake in flight.

// On AWS-LC the capture half (keylog lines, record counting) is compiled but unused.
#![cfg_attr(feature = "aws-lc", allow(dead_code))]

use std::sync::{Mutex, OnceLock};

use openssl::error::ErrorStack;
use openssl::ex_data::Index;
use openssl::ssl::{Ssl, SslContextBuilder, SslRef};

const CLIENT_TRAFFIC_SECRET_0: &str = "CLIENT_TRAFFIC_SECRET_0 ";
const SERVER_TRAFFIC_SECRET_0: &str = "SERVER_TRAFFIC_SECRET_0 ";
/// Handshake message type of Finished; the message callback's pseudo content type of a
/// record header (`SSL3_RT_HEADER`).
const HANDSHAKE_FINISHED: u8 = 20;
const CONTENT_HANDSHAKE: i32 = 22;
const SSL3_RT_HEADER: i32 = 0x100;
/// The longest TLS 1.3 secret is a SHA-384 output.
const MAX_SECRET_LEN: usize = 48;

/// The ex_data value of one SSL: what its handshake logged. Made by `prepare_ssl` and
/// dropped when OpenSSL frees the SSL object; it also counts the thread's handshakes in flight
/// (`memory`): from `prepare_ssl` until the hand-over or, for a handshake that never
/// finishes, until the SSL object is freed.
pub struct SecretSlot {
    captured: Mutex<Captured>,
    in_flight: bool,
}

impl SecretSlot {
    fn new() -> Self {
        super::memory::handshake_started();
        SecretSlot {
            captured: Mutex::default(),
            in_flight: true,
        }
    }

    fn end_handshake(&mut self) {
        if std::mem::replace(&mut self.in_flight, false) {
            super::memory::handshake_ended();
        }
    }
}

impl Drop for SecretSlot {
    fn drop(&mut self) {
        self.end_handshake();
        super::memory::ssl_freed();
    }
}

#[derive(Default)]
struct Captured {
    client: Option<Secret>,
    server: Option<Secret>,
    /// The server's Finished went out: records written from now on use the application key.
    finished_written: bool,
    /// Records OpenSSL wrote under the server's application traffic key (TLS 1.3 tickets).
    app_records_written: u64,
    /// AWS-LC: the secrets were handed out (they are read from the SSL, once, as they are
    /// taken from the slot on OpenSSL).
    #[cfg(feature = "aws-lc")]
    taken: bool,
}

/// What the proxy's record layer takes over from a TLS 1.3 handshake.
pub struct Tls13Handover {
    pub client: Secret,
    pub server: Secret,
    /// The client's next record's sequence number (0 on OpenSSL, read-ahead being off).
    pub client_seq: u64,
    /// The server's next write sequence number.
    pub server_seq: u64,
}

/// Secret bytes, overwritten before the memory is released.
pub struct Secret(Vec<u8>);

impl Secret {
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    #[cfg(feature = "aws-lc")]
    pub(crate) fn from_bytes(bytes: &[u8]) -> Secret {
        Secret(bytes.to_vec())
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        self.0.fill(0);
        // Keeps the zeroing from being optimised away as a dead store.
        std::hint::black_box(&self.0);
    }
}

fn slot_index() -> Result<Index<Ssl, SecretSlot>, ErrorStack> {
    static INDEX: OnceLock<Result<Index<Ssl, SecretSlot>, ErrorStack>> = OnceLock::new();
    INDEX.get_or_init(Ssl::new_ex_index).clone()
}

/// Installs the keylog callback that records each connection's client traffic secret (into
/// the slot `prepare_ssl` gave it). Replaces any other keylog callback of the context.
/// On AWS-LC nothing is installed: the hand-over reads the secrets from the SSL.
pub fn capture_secrets(builder: &mut SslContextBuilder) -> Result<(), ErrorStack> {
    slot_index()?;
    #[cfg(not(feature = "aws-lc"))]
    builder.set_keylog_callback(record_keylog_line);
    #[cfg(feature = "aws-lc")]
    let _ = builder;
    Ok(())
}

/// Gives one SSL object the slot its secret is captured into. Call before the handshake on
/// every SSL of a context set up with `capture_secrets`; without it TLS 1.3 receive stays in
/// user space (FallbackReason::NoTrafficSecret).
pub fn prepare_ssl(ssl: &mut SslRef) -> Result<(), ErrorStack> {
    ssl.set_ex_data(slot_index()?, SecretSlot::new());
    #[cfg(not(feature = "aws-lc"))]
    crate::ossl::count_records(ssl);
    Ok(())
}

/// The handshake of this SSL is done (called once it is handed over, whatever the path):
/// it no longer counts as in flight, even if the SSL object lives on (OpenSSL's record layer).
pub(crate) fn end_handshake(ssl: &mut SslRef) {
    if let Some(slot) = slot_index().ok().and_then(|i| ssl.ex_data_mut(i)) {
        slot.end_handshake();
    }
}

/// Moves the captured client secret out of the SSL (it is needed exactly once). On AWS-LC:
/// the SSL's current read secret.
#[cfg(feature = "aws-lc")]
pub fn take_client_secret(ssl: &mut SslRef) -> Option<Secret> {
    take_once(ssl)?;
    crate::awslc::traffic_secret_of(ssl, true)
}

/// AWS-LC: `Some` the first time for an SSL `prepare_ssl` gave a slot, as the OpenSSL path
/// hands its captured secrets out once.
#[cfg(feature = "aws-lc")]
fn take_once(ssl: &mut SslRef) -> Option<()> {
    let captured = ssl
        .ex_data_mut(slot_index().ok()?)?
        .captured
        .get_mut()
        .ok()?;
    (!std::mem::replace(&mut captured.taken, true)).then_some(())
}

/// Moves the captured client secret out of the SSL (it is needed exactly once).
#[cfg(not(feature = "aws-lc"))]
pub fn take_client_secret(ssl: &mut SslRef) -> Option<Secret> {
    let index = slot_index().ok()?;
    let slot = ssl.ex_data_mut(index)?;
    slot.captured.get_mut().ok()?.client.take()
}

/// Moves both captured secrets and the server's write sequence number out of the SSL.
#[cfg(not(feature = "aws-lc"))]
pub fn take_tls13_handover(ssl: &mut SslRef) -> Option<Tls13Handover> {
    let index = slot_index().ok()?;
    let captured = ssl.ex_data_mut(index)?.captured.get_mut().ok()?;
    Some(Tls13Handover {
        client: captured.client.take()?,
        server: captured.server.take()?,
        client_seq: 0,
        server_seq: captured.app_records_written,
    })
}

/// Both current traffic secrets and sequence numbers of a TLS 1.3 SSL whose held-back
/// records went out (`offload` sends them first).
#[cfg(feature = "aws-lc")]
pub fn take_tls13_handover(ssl: &mut SslRef) -> Option<Tls13Handover> {
    take_once(ssl)?;
    let (client_seq, server_seq) = crate::awslc::sequences_of_client_and_server(ssl);
    Some(Tls13Handover {
        client: crate::awslc::traffic_secret_of(ssl, true)?,
        server: crate::awslc::traffic_secret_of(ssl, false)?,
        client_seq,
        server_seq,
    })
}

fn with_captured(ssl: &SslRef, f: impl FnOnce(&mut Captured)) {
    let Ok(index) = slot_index() else {
        return;
    };
    if let Some(slot) = ssl.ex_data(index) {
        if let Ok(mut guard) = slot.captured.lock() {
            f(&mut guard);
        }
    }
}

#[cfg(not(feature = "aws-lc"))]
fn record_keylog_line(ssl: &SslRef, line: &str) {
    let (rest, client) = if let Some(rest) = line.strip_prefix(CLIENT_TRAFFIC_SECRET_0) {
        (rest, true)
    } else if let Some(rest) = line.strip_prefix(SERVER_TRAFFIC_SECRET_0) {
        (rest, false)
    } else {
        return;
    };
    // "<client_random hex> <secret hex>"
    let Some(secret) = rest.split(' ').nth(1).and_then(decode_hex) else {
        return;
    };
    with_captured(ssl, |c| {
        if client {
            c.client = Some(secret);
        } else {
            c.server = Some(secret);
        }
    });
}

/// OpenSSL's message callback, for what this SSL writes: the server's Finished message, then
/// every record header after it.
#[cfg(not(feature = "aws-lc"))]
pub(crate) fn note_written(ssl: &SslRef, content_type: i32, bytes: &[u8]) {
    if content_type == CONTENT_HANDSHAKE && bytes.first() == Some(&HANDSHAKE_FINISHED) {
        with_captured(ssl, |c| c.finished_written = true);
    } else if content_type == SSL3_RT_HEADER {
        with_captured(ssl, |c| {
            if c.finished_written {
                c.app_records_written += 1;
            }
        });
    }
}

fn decode_hex(text: &str) -> Option<Secret> {
    let text = text.trim();
    let pairs = text.as_bytes().chunks_exact(2);
    if !pairs.remainder().is_empty() || pairs.len() > MAX_SECRET_LEN {
        return None;
    }
    let mut out = Secret(Vec::with_capacity(pairs.len()));
    for pair in pairs {
        let high = (pair[0] as char).to_digit(16)?;
        let low = (pair[1] as char).to_digit(16)?;
        out.0.push((high * 16 + low) as u8);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_hex_secrets() {
        assert_eq!(
            decode_hex("00ff10").map(|s| s.0.clone()),
            Some(vec![0, 255, 16])
        );
        assert!(decode_hex("0g").is_none());
        assert!(decode_hex("abc").is_none());
        assert!(decode_hex(&"00".repeat(49)).is_none());
    }
}
