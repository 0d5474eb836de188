//! Record protection with OpenSSL's AEADs, through one pair of cipher contexts per thread.
//!
//! A connection holds only its keys; the worker thread's context is re-keyed when the record
//! to seal or open belongs to a different key than the last one (`key_id`), and only the
//! nonce is set otherwise, so a burst of records of one connection pays one key schedule.
//! The ciphers are fetched once ([`openssl_cipher`]) and set on a context only when the
//! suite changes.

use std::cell::RefCell;
use std::sync::OnceLock;

use openssl::cipher::{Cipher, CipherRef};
use openssl::cipher_ctx::CipherCtx;
use openssl::error::ErrorStack;

use crate::kernel::KernelCipher;

pub(crate) const TAG_LEN: usize = 16;

/// One direction's context and what it is keyed with.
struct Keyed {
    ctx: CipherCtx,
    cipher: Option<KernelCipher>,
    key_id: u64,
}

impl Keyed {
    fn new() -> Result<Keyed, ErrorStack> {
        Ok(Keyed {
            ctx: CipherCtx::new()?,
            cipher: None,
            key_id: 0,
        })
    }

    /// Points the context at `key` and `nonce`: the cipher is set only when it changes, the
    /// key only when the record belongs to another key than the last one (another
    /// connection, or a KeyUpdate), and otherwise only the nonce.
    fn init(&mut self, seal: bool, suite: &Suite<'_>, nonce: &[u8]) -> Result<(), ErrorStack> {
        let (cipher, key) = if self.cipher != Some(suite.cipher) {
            (Some(openssl_cipher(suite.cipher)), Some(suite.key))
        } else if self.key_id != suite.key_id {
            (None, Some(suite.key))
        } else {
            (None, None)
        };
        if key.is_some() {
            // Mark unkeyed first: if init fails half-way the context must not be trusted.
            self.cipher = None;
        }
        if seal {
            self.ctx.encrypt_init(cipher, key, Some(nonce))?;
        } else {
            self.ctx.decrypt_init(cipher, key, Some(nonce))?;
        }
        self.cipher = Some(suite.cipher);
        self.key_id = suite.key_id;
        Ok(())
    }
}

struct Contexts {
    seal: Keyed,
    open: Keyed,
}

thread_local! {
    static CONTEXTS: RefCell<Option<Contexts>> = const { RefCell::new(None) };
}

fn with_contexts<T>(
    f: impl FnOnce(&mut Contexts) -> Result<T, ErrorStack>,
) -> Result<T, ErrorStack> {
    CONTEXTS.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(Contexts {
                seal: Keyed::new()?,
                open: Keyed::new()?,
            });
        }
        match slot.as_mut() {
            Some(contexts) => f(contexts),
            None => Err(ErrorStack::get()),
        }
    })
}

/// The three AEADs, fetched once from the default provider. OpenSSL 3 looks an implicitly
/// fetched cipher (`EVP_aes_128_gcm()`) up again, under a lock, every time a context is
/// initialised with it; an explicitly fetched one is used as it is.
struct Fetched {
    aes_128_gcm: Cipher,
    aes_256_gcm: Cipher,
    chacha20_poly1305: Cipher,
}

fn fetched() -> Option<&'static Fetched> {
    static FETCHED: OnceLock<Option<Fetched>> = OnceLock::new();
    FETCHED
        .get_or_init(|| {
            Some(Fetched {
                aes_128_gcm: Cipher::fetch(None, "AES-128-GCM", None).ok()?,
                aes_256_gcm: Cipher::fetch(None, "AES-256-GCM", None).ok()?,
                chacha20_poly1305: Cipher::fetch(None, "ChaCha20-Poly1305", None).ok()?,
            })
        })
        .as_ref()
}

fn openssl_cipher(cipher: KernelCipher) -> &'static CipherRef {
    match (fetched(), cipher) {
        (Some(f), KernelCipher::AesGcm128) => &f.aes_128_gcm,
        (Some(f), KernelCipher::AesGcm256) => &f.aes_256_gcm,
        (Some(f), KernelCipher::Chacha20Poly1305) => &f.chacha20_poly1305,
        // Not fetchable (a provider configuration without them): the implicit ones.
        (None, KernelCipher::AesGcm128) => Cipher::aes_128_gcm(),
        (None, KernelCipher::AesGcm256) => Cipher::aes_256_gcm(),
        (None, KernelCipher::Chacha20Poly1305) => Cipher::chacha20_poly1305(),
    }
}

/// Which key a record is protected with.
pub(crate) struct Suite<'a> {
    pub cipher: KernelCipher,
    pub key: &'a [u8],
    pub key_id: u64,
}

/// Encrypts the concatenation of `parts` and `trailer` into `out` (exactly their total
/// length) and writes the tag into `tag`.
pub(crate) fn seal(
    suite: &Suite<'_>,
    nonce: &[u8],
    aad: &[u8],
    parts: &[&[u8]],
    trailer: &[u8],
    out: &mut [u8],
    tag: &mut [u8],
) -> Result<(), ErrorStack> {
    with_contexts(|c| {
        c.seal.init(true, suite, nonce)?;
        let ctx = &mut c.seal.ctx;
        ctx.cipher_update(aad, None)?;
        let mut at = 0;
        for part in parts.iter().chain([&trailer]) {
            let end = at + part.len();
            at += ctx.cipher_update(part, Some(&mut out[at..end]))?;
        }
        ctx.cipher_final(&mut [])?;
        ctx.tag(tag)
    })
}

/// Decrypts `data` in place and checks `tag`. An error means the record is not authentic
/// (or OpenSSL failed); `data` then holds garbage.
pub(crate) fn open(
    suite: &Suite<'_>,
    nonce: &[u8],
    aad: &[u8],
    data: &mut [u8],
    tag: &[u8],
) -> Result<(), ErrorStack> {
    with_contexts(|c| {
        c.open.init(false, suite, nonce)?;
        let ctx = &mut c.open.ctx;
        let len = data.len();
        let result = ctx
            .cipher_update(aad, None)
            .and_then(|_| ctx.cipher_update_inplace(data, len))
            .and_then(|_| ctx.set_tag(tag))
            .and_then(|_| ctx.cipher_final(&mut []));
        if result.is_err() {
            // A failed open leaves the context in an unknown state: re-key it next time.
            c.open.cipher = None;
        }
        result.map(|_| ())
    })
}
