//! Per-connection capture of the TLS 1.3 client application traffic secret.
//!
//! OpenSSL 3.0 offloads TLS 1.3 send only; to put receive in the kernel too, the server needs
//! CLIENT_TRAFFIC_SECRET_0, which OpenSSL exposes only through the keylog callback. The
//! callback gets `&SslRef`, so each SSL carries a slot (ex_data) with interior mutability that
//! the callback fills and `offload` empties: connections never share state or a lock.

use std::sync::{Mutex, OnceLock};

use openssl::error::ErrorStack;
use openssl::ex_data::Index;
use openssl::ssl::{Ssl, SslContextBuilder, SslRef};

const CLIENT_TRAFFIC_SECRET_0: &str = "CLIENT_TRAFFIC_SECRET_0 ";
/// The longest TLS 1.3 secret is a SHA-384 output.
const MAX_SECRET_LEN: usize = 48;

/// The ex_data value of one SSL: its client traffic secret once the handshake logged it.
#[derive(Default)]
pub struct SecretSlot(Mutex<Option<Secret>>);

/// Secret bytes, overwritten before the memory is released.
pub struct Secret(Vec<u8>);

impl Secret {
    pub fn bytes(&self) -> &[u8] {
        &self.0
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
pub fn capture_secrets(builder: &mut SslContextBuilder) -> Result<(), ErrorStack> {
    slot_index()?;
    builder.set_keylog_callback(record_keylog_line);
    Ok(())
}

/// Gives one SSL object the slot its secret is captured into. Call before the handshake on
/// every SSL of a context set up with `capture_secrets`; without it TLS 1.3 receive stays in
/// user space (FallbackReason::NoTrafficSecret).
pub fn prepare_ssl(ssl: &mut SslRef) -> Result<(), ErrorStack> {
    ssl.set_ex_data(slot_index()?, SecretSlot::default());
    Ok(())
}

/// Moves the captured secret out of the SSL (it is needed exactly once).
pub fn take_client_secret(ssl: &mut SslRef) -> Option<Secret> {
    let index = slot_index().ok()?;
    let slot = ssl.ex_data_mut(index)?;
    slot.0.get_mut().ok()?.take()
}

fn record_keylog_line(ssl: &SslRef, line: &str) {
    let Some(rest) = line.strip_prefix(CLIENT_TRAFFIC_SECRET_0) else {
        return;
    };
    // "<client_random hex> <secret hex>"
    let Some(secret) = rest.split(' ').nth(1).and_then(decode_hex) else {
        return;
    };
    let Ok(index) = slot_index() else {
        return;
    };
    if let Some(SecretSlot(slot)) = ssl.ex_data(index) {
        if let Ok(mut guard) = slot.lock() {
            *guard = Some(secret);
        }
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
