//! What one direction of a connection needs for record protection after the handshake: the
//! AEAD key, the 12-byte nonce base, the record sequence number and (TLS 1.3) the traffic
//! secret the next KeyUpdate derives from. About 120 bytes, no cipher context.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::kernel::KernelCipher;
use crate::offload::{hkdf_expand_label, suite_hash, traffic_keys, HkdfError};

/// The longest key (AES-256, ChaCha20) and secret (SHA-384) of the suites offered.
const MAX_KEY: usize = 32;
const MAX_SECRET: usize = 48;
pub(crate) const NONCE_LEN: usize = 12;

/// Every key installed anywhere in the process gets a fresh id, so that a worker's shared
/// cipher context can tell whether it is still keyed with this direction's key.
static NEXT_KEY_ID: AtomicU64 = AtomicU64::new(1);

fn next_key_id() -> u64 {
    NEXT_KEY_ID.fetch_add(1, Ordering::Relaxed)
}

/// Key material of one direction. Overwritten with zeros when dropped.
pub struct DirectionKeys {
    key: [u8; MAX_KEY],
    /// TLS 1.3 and TLS 1.2 ChaCha20: the 12-byte IV XORed with the sequence number. TLS 1.2
    /// AES-GCM: the 4-byte implicit salt, then zeros (the explicit part is the sequence).
    iv: [u8; NONCE_LEN],
    secret: [u8; MAX_SECRET],
    key_len: u8,
    secret_len: u8,
    pub(crate) seq: u64,
    pub(crate) key_id: u64,
    /// The slot of the thread's keyed cipher contexts this key was last in (`aead`): a
    /// hint, checked against `key_id` before use.
    pub(crate) slot: Cell<u8>,
}

impl DirectionKeys {
    /// TLS 1.3: keys from an application traffic secret (RFC 8446 §7.3).
    pub fn from_secret(
        cipher: KernelCipher,
        secret: &[u8],
        seq: u64,
    ) -> Result<DirectionKeys, HkdfError> {
        if secret.len() > MAX_SECRET {
            return Err(HkdfError::TooLong);
        }
        let derived = traffic_keys(cipher, secret)?;
        let mut keys = DirectionKeys::from_key_iv(&derived.key, &derived.iv, seq)?;
        keys.secret[..secret.len()].copy_from_slice(secret);
        keys.secret_len = secret.len() as u8;
        Ok(keys)
    }

    /// A key and IV as they are (TLS 1.2 key block, tests). `iv` is 12 bytes, or the 4-byte
    /// salt of TLS 1.2 AES-GCM.
    pub fn from_key_iv(key: &[u8], iv: &[u8], seq: u64) -> Result<DirectionKeys, HkdfError> {
        if key.len() > MAX_KEY || iv.len() > NONCE_LEN {
            return Err(HkdfError::TooLong);
        }
        let mut keys = DirectionKeys {
            key: [0; MAX_KEY],
            iv: [0; NONCE_LEN],
            secret: [0; MAX_SECRET],
            key_len: key.len() as u8,
            secret_len: 0,
            seq,
            key_id: next_key_id(),
            slot: Cell::new(0),
        };
        keys.key[..key.len()].copy_from_slice(key);
        keys.iv[..iv.len()].copy_from_slice(iv);
        Ok(keys)
    }

    pub(crate) fn key(&self) -> &[u8] {
        &self.key[..usize::from(self.key_len)]
    }

    /// The nonce base as stored (see the field): what the kernel's state is made from.
    #[cfg(feature = "aws-lc")]
    pub(crate) fn iv(&self) -> &[u8; NONCE_LEN] {
        &self.iv
    }

    /// The next sequence number to use.
    pub fn sequence(&self) -> u64 {
        self.seq
    }

    /// The per-record nonce: the IV XOR the sequence number left-padded to 12 bytes. That is
    /// TLS 1.3 and TLS 1.2 ChaCha20 (RFC 8446 §5.3, RFC 7905 §2) and also TLS 1.2 AES-GCM
    /// (RFC 5288 §3: salt || 8-byte explicit nonce), because there the IV is the salt followed
    /// by zeros and the explicit nonce is the sequence number (as OpenSSL does it).
    pub(crate) fn nonce(&self) -> [u8; NONCE_LEN] {
        let mut nonce = self.iv;
        for (n, s) in nonce[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *n ^= s;
        }
        nonce
    }

    /// TLS 1.3 KeyUpdate (RFC 8446 §7.2): the next traffic secret and its key and IV,
    /// sequence back to 0.
    pub(crate) fn update(&mut self, cipher: KernelCipher) -> Result<(), HkdfError> {
        let md = suite_hash(cipher);
        let len = usize::from(self.secret_len);
        if len == 0 {
            return Err(HkdfError::TooLong);
        }
        let next = hkdf_expand_label(md, &self.secret[..len], "traffic upd", &[], len)?;
        let updated = DirectionKeys::from_secret(cipher, &next, 0)?;
        *self = updated;
        Ok(())
    }
}

impl Drop for DirectionKeys {
    fn drop(&mut self) {
        crate::record::aead::forget(self.key_id, self.slot.get());
        self.key.fill(0);
        self.iv.fill(0);
        self.secret.fill(0);
        // Keeps the zeroing from being optimised away as dead stores.
        std::hint::black_box((&self.key, &self.iv, &self.secret));
    }
}

impl std::fmt::Debug for DirectionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectionKeys")
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}
