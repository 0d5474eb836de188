//! Record protection with OpenSSL's AEADs, through cipher contexts kept keyed per thread.
//!
//! A connection holds only its keys (no context: an idle connection costs no cipher state).
//! Each worker thread keeps up to [`KEYED_PER_THREAD`] contexts per direction, each keyed
//! with one connection direction's key, and the connection remembers which of them it last
//! used ([`DirectionKeys::slot`]). A record whose key is still in its slot sets only the
//! nonce: no key schedule, no GHASH table, no provider look-ups of the key length. The
//! connections active at once (100 in the benchmarks) all stay keyed; past that, slots are
//! re-keyed in turn. A slot is wiped (the context reset, which frees and clears OpenSSL's
//! copy of the key) when its keys are dropped on the thread that keyed it.
//! The ciphers are fetched once ([`openssl_cipher`]).

use std::cell::{Cell, RefCell};
use std::os::raw::c_int;
use std::sync::OnceLock;

use foreign_types::ForeignTypeRef;
use openssl::cipher::{Cipher, CipherRef};
use openssl::cipher_ctx::{CipherCtx, CipherCtxRef};
use openssl::error::ErrorStack;
use openssl_sys as ffi;

use crate::kernel::KernelCipher;
use crate::record::keys::NONCE_LEN;

pub(crate) const TAG_LEN: usize = 16;

extern "C" {
    // OpenSSL 1.1.0 and later (openssl-sys does not declare it).
    fn EVP_CIPHER_CTX_reset(ctx: *mut ffi::EVP_CIPHER_CTX) -> c_int;
}

/// Keyed contexts a thread keeps per direction (about 1 KB each with AES-GCM, made only as
/// connections become active). At most 256: a connection keeps its slot in a byte (which
/// fits in the padding of its keys, so an idle connection grows by nothing).
const KEYED_PER_THREAD: usize = 128;

/// One context and what it is keyed with.
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

    fn holds(&self, suite: &Suite<'_>) -> bool {
        self.key_id == suite.key_id && self.cipher == Some(suite.cipher)
    }

    /// Keys the context with `suite` (the cipher set only when it changes); no nonce yet.
    fn key(&mut self, seal: bool, suite: &Suite<'_>) -> Result<(), ErrorStack> {
        let cipher = (self.cipher != Some(suite.cipher)).then(|| openssl_cipher(suite.cipher));
        // Mark unkeyed first: if init fails half-way the context must not be trusted.
        self.cipher = None;
        if seal {
            self.ctx.encrypt_init(cipher, Some(suite.key), None)?;
        } else {
            self.ctx.decrypt_init(cipher, Some(suite.key), None)?;
        }
        self.cipher = Some(suite.cipher);
        self.key_id = suite.key_id;
        Ok(())
    }

    /// Sets the record's nonce on the keyed context, through the C call itself: the
    /// binding's `encrypt_init` first asks the context for its IV length, which OpenSSL 3
    /// answers with a parameter look-up by name (strcmp) on every record.
    fn set_nonce(&mut self, seal: bool, nonce: &[u8; NONCE_LEN]) -> Result<(), ErrorStack> {
        let ctx = self.ctx.as_ptr();
        let (cipher, engine, key) = (std::ptr::null(), std::ptr::null_mut(), std::ptr::null());
        // SAFETY: `ctx` is a live EVP_CIPHER_CTX owned by `self.ctx`, already initialised
        // with a cipher and key by `key` (the callers check `holds` first), so a NULL cipher,
        // engine and key keep them. Every cipher here (AES-GCM, ChaCha20-Poly1305) has a
        // 12-byte IV (their default, never changed), and `nonce` is 12 readable bytes that
        // OpenSSL only reads during the call.
        let ok = unsafe {
            if seal {
                ffi::EVP_EncryptInit_ex(ctx, cipher, engine, key, nonce.as_ptr())
            } else {
                ffi::EVP_DecryptInit_ex(ctx, cipher, engine, key, nonce.as_ptr())
            }
        };
        if ok == 1 {
            Ok(())
        } else {
            self.cipher = None;
            Err(ErrorStack::get())
        }
    }

    /// Forgets the key: the context is reset (OpenSSL frees its cipher state, clearing the
    /// key schedule) and must be given a cipher again.
    fn wipe(&mut self) {
        // SAFETY: `ctx` is a live EVP_CIPHER_CTX owned by `self.ctx`; a reset context stays
        // valid for a later init with a cipher, which `cipher = None` forces.
        unsafe {
            EVP_CIPHER_CTX_reset(self.ctx.as_ptr());
        }
        self.cipher = None;
        self.key_id = 0;
    }
}

/// One direction's keyed contexts on this thread.
#[derive(Default)]
struct Table {
    slots: Vec<Keyed>,
    /// The slot the next miss re-keys once the table is full (round robin).
    next_victim: usize,
}

impl Table {
    /// The context keyed with `suite`'s key, keying one if none is.
    fn keyed(&mut self, seal: bool, suite: &Suite<'_>) -> Result<&mut Keyed, ErrorStack> {
        let hint = usize::from(suite.slot.get());
        if self.slots.get(hint).is_some_and(|k| k.holds(suite)) {
            return Ok(&mut self.slots[hint]);
        }
        let index = if self.slots.len() < KEYED_PER_THREAD {
            self.slots.push(Keyed::new()?);
            self.slots.len() - 1
        } else {
            let victim = self.next_victim % KEYED_PER_THREAD;
            self.next_victim = victim + 1;
            victim
        };
        // KEYED_PER_THREAD <= 256, so every index fits.
        suite.slot.set(u8::try_from(index).unwrap_or(u8::MAX));
        let keyed = &mut self.slots[index];
        keyed.key(seal, suite)?;
        Ok(keyed)
    }

    fn forget(&mut self, key_id: u64, slot: usize) {
        if let Some(k) = self.slots.get_mut(slot).filter(|k| k.key_id == key_id) {
            k.wipe();
        }
    }
}

#[derive(Default)]
struct Contexts {
    seal: Table,
    open: Table,
}

thread_local! {
    static CONTEXTS: RefCell<Contexts> = RefCell::new(Contexts::default());
}

fn with_contexts<T>(
    f: impl FnOnce(&mut Contexts) -> Result<T, ErrorStack>,
) -> Result<T, ErrorStack> {
    CONTEXTS.with(|cell| f(&mut cell.borrow_mut()))
}

/// Wipes this thread's contexts keyed with `key_id` (its keys are being dropped). Keys
/// dropped on another thread than the one that used them are only overwritten when their
/// slot is re-keyed; the worker that serves a connection is also the one that drops it.
pub(crate) fn forget(key_id: u64, slot: u8) {
    let slot = usize::from(slot);
    let _ = CONTEXTS.try_with(|cell| {
        if let Ok(mut contexts) = cell.try_borrow_mut() {
            contexts.seal.forget(key_id, slot);
            contexts.open.forget(key_id, slot);
        }
    });
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
    /// Where this thread's keyed context for the key was last (a hint, checked by id).
    pub slot: &'a Cell<u8>,
}

/// Appends to `out` the encryption of the concatenation of `parts` and `trailer`, then the
/// tag. The ciphertext goes straight into `out`'s spare capacity: no zero-filling of the
/// record first (16 KiB per full record).
pub(crate) fn seal(
    suite: &Suite<'_>,
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    parts: &[&[u8]],
    trailer: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), ErrorStack> {
    let len: usize = parts.iter().map(|p| p.len()).sum::<usize>() + trailer.len();
    out.reserve(len + TAG_LEN);
    with_contexts(|c| {
        let keyed = c.seal.keyed(true, suite)?;
        keyed.set_nonce(true, nonce)?;
        let ctx = &mut keyed.ctx;
        ctx.cipher_update(aad, None)?;
        for part in parts.iter().chain([&trailer]) {
            encrypt_append(ctx, part, out)?;
        }
        ctx.cipher_final(&mut [])?;
        let mut tag = [0u8; TAG_LEN];
        ctx.tag(&mut tag)?;
        out.extend_from_slice(&tag);
        Ok(())
    })
}

/// Encrypts `input` onto the end of `out`.
fn encrypt_append(ctx: &CipherCtxRef, input: &[u8], out: &mut Vec<u8>) -> Result<(), ErrorStack> {
    if input.is_empty() {
        return Ok(());
    }
    // A record's parts are at most 2^14 bytes: this never fails.
    let Ok(in_len) = c_int::try_from(input.len()) else {
        return Err(ErrorStack::get());
    };
    out.reserve(input.len());
    let mut written: c_int = 0;
    // SAFETY: `ctx` is a live context set up for encryption with an AEAD of OpenSSL's
    // stream kind (AES-GCM, ChaCha20-Poly1305: block size 1), which writes at most (exactly)
    // `in_len` bytes for `in_len` bytes of input, and `out` has at least `input.len()` bytes
    // of spare capacity at `as_mut_ptr() + len()` (reserved just above). `input` is readable
    // for `in_len` bytes; neither buffer is kept after the call.
    let ok = unsafe {
        ffi::EVP_EncryptUpdate(
            ctx.as_ptr(),
            out.as_mut_ptr().add(out.len()),
            &mut written,
            input.as_ptr(),
            in_len,
        )
    };
    let written = usize::try_from(written).unwrap_or(0);
    if ok != 1 || written != input.len() {
        return Err(ErrorStack::get());
    }
    // SAFETY: OpenSSL initialised the `written` (= `input.len()`, within the reserved spare
    // capacity) bytes after the old length.
    unsafe { out.set_len(out.len() + written) };
    Ok(())
}

/// Decrypts `data` in place and checks `tag`. An error means the record is not authentic
/// (or OpenSSL failed); `data` then holds garbage.
pub(crate) fn open(
    suite: &Suite<'_>,
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    data: &mut [u8],
    tag: &[u8],
) -> Result<(), ErrorStack> {
    with_contexts(|c| {
        let keyed = c.open.keyed(false, suite)?;
        keyed.set_nonce(false, nonce)?;
        let ctx = &mut keyed.ctx;
        let len = data.len();
        let result = ctx
            .cipher_update(aad, None)
            .and_then(|_| ctx.cipher_update_inplace(data, len))
            .and_then(|_| ctx.set_tag(tag))
            .and_then(|_| ctx.cipher_final(&mut []));
        if result.is_err() {
            // A failed open leaves the context in an unknown state: re-key it next time.
            keyed.cipher = None;
        }
        result.map(|_| ())
    })
}

#[cfg(test)]
mod tests {
    use super::KEYED_PER_THREAD;
    use crate::kernel::{KernelCipher, TlsVersion};
    use crate::record::{DirectionKeys, Inbound, RecordLayer};

    const CONNECTIONS: usize = 2 * KEYED_PER_THREAD + 45;

    /// A key of its own for every `i` (its first two bytes are `i`).
    fn key(i: usize, len: usize) -> Vec<u8> {
        let mut key: Vec<u8> = (0..len).map(|b| (b * 13) as u8).collect();
        key[..2].copy_from_slice(&(i as u16).to_be_bytes());
        key
    }

    /// A server layer (writes with connection `i`'s key) and the client layer that reads it.
    fn pair(i: usize, cipher: KernelCipher) -> (RecordLayer, RecordLayer) {
        let len = if cipher == KernelCipher::AesGcm128 {
            16
        } else {
            32
        };
        let keys = |n: usize| DirectionKeys::from_key_iv(&key(n, len), &[n as u8; 12], 0).unwrap();
        let server = RecordLayer::new(TlsVersion::Tls13, cipher, keys(2 * i), keys(2 * i + 1));
        let client = RecordLayer::new(TlsVersion::Tls13, cipher, keys(2 * i + 1), keys(2 * i));
        (server, client)
    }

    fn cipher_of(i: usize) -> KernelCipher {
        [
            KernelCipher::AesGcm128,
            KernelCipher::AesGcm256,
            KernelCipher::Chacha20Poly1305,
        ][i % 3]
    }

    fn seal(layer: &mut RecordLayer, i: usize, round: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let text = format!("connection {i} round {round}");
        layer
            .seal_data(&[text.as_bytes()], usize::MAX, &mut out)
            .unwrap();
        out
    }

    /// More connections than a thread keeps keyed, their records interleaved (every record
    /// a miss or a hit on a re-keyed slot), some connections dropped and replaced midway:
    /// every record must be the bytes a fresh thread (no cached context) makes with the same
    /// keys, must open with its own connection's keys, and must not open with another's.
    #[test]
    fn interleaved_connections_past_the_cache_seal_and_open_as_alone() {
        let mut pairs: Vec<_> = (0..CONNECTIONS).map(|i| pair(i, cipher_of(i))).collect();
        let mut wire = vec![Vec::new(); CONNECTIONS];
        for round in 0..3 {
            for (i, (server, _)) in pairs.iter_mut().enumerate() {
                wire[i].push(seal(server, i, round));
            }
            // Drop and remake some connections (their slots are wiped, ids are new).
            for i in (0..CONNECTIONS).step_by(17) {
                pairs[i] = pair(i, cipher_of(i));
                wire[i].clear();
            }
            for (i, (_, client)) in pairs.iter_mut().enumerate() {
                for record in &wire[i] {
                    let mut input = record.clone();
                    match client.open_record(&mut input) {
                        Ok(Inbound::Data { plain, .. }) => {
                            assert!(input[plain].starts_with(format!("connection {i} ").as_bytes()))
                        }
                        other => panic!("connection {i}: {other:?}"),
                    }
                }
                wire[i].clear();
            }
        }
        // A record of connection 1 does not open with another connection's keys of the same
        // cipher, though this thread just had them keyed.
        let (mut server, _) = pair(1, cipher_of(1));
        let record = seal(&mut server, 1, 9);
        for other in [0, 1 + KEYED_PER_THREAD] {
            let (_, mut client) = pair(other, cipher_of(1));
            let mut input = record.clone();
            assert!(
                client.open_record(&mut input).is_err(),
                "opened with {other}"
            );
        }
        // The same records on a fresh thread, one connection at a time.
        let mut interleaved = Vec::new();
        let mut servers: Vec<_> = (0..CONNECTIONS).map(|i| pair(i, cipher_of(i)).0).collect();
        for round in 0..2 {
            for (i, server) in servers.iter_mut().enumerate() {
                interleaved.push(seal(server, i, round));
            }
        }
        let alone = std::thread::spawn(|| {
            let mut records = vec![Vec::new(); 2 * CONNECTIONS];
            for i in 0..CONNECTIONS {
                let (mut server, _) = pair(i, cipher_of(i));
                for round in 0..2 {
                    records[round * CONNECTIONS + i] = seal(&mut server, i, round);
                }
            }
            records
        })
        .join()
        .unwrap();
        assert_eq!(interleaved, alone);
    }
}
