//! One AEAD context for one cipher, through the provider's functions where the provider
//! offers them all ([`provider`]) and through OpenSSL's EVP layer otherwise: the same steps
//! (key, nonce, AAD, data, tag) either way, so `aead` does not care which.
//!
//! AWS-LC has no providers: there the direct path is its `EVP_AEAD` ([`evp_aead`]), which
//! takes a whole record per call ([`AeadCtx::seal_whole`], [`AeadCtx::open_whole`]).
//!
//! [`evp_aead`]: super::evp_aead

#[cfg(not(feature = "aws-lc"))]
use std::os::raw::c_int;
#[cfg(not(feature = "aws-lc"))]
use std::sync::OnceLock;

use foreign_types::ForeignTypeRef;
use openssl::cipher::{Cipher, CipherRef};
use openssl::cipher_ctx::{CipherCtx, CipherCtxRef};
use openssl::error::ErrorStack;
use openssl_sys as ffi;

use super::aead::TAG_LEN;
#[cfg(feature = "aws-lc")]
use super::evp_aead::AeadKey;
use super::keys::NONCE_LEN;
#[cfg(not(feature = "aws-lc"))]
use super::provider::{self, Dispatch, ProviderCtx};
use crate::kernel::KernelCipher;

/// Which OpenSSL interface a thread's contexts use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// The provider's functions where the cipher's table has them all, EVP otherwise;
    /// AWS-LC's EVP_AEAD there.
    Provider,
    /// Always EVP (the one-time check and the tests compare the two).
    #[cfg_attr(feature = "aws-lc", allow(dead_code))]
    Evp,
}

/// A context made for one cipher; keyed and used by `aead`.
pub(crate) struct AeadCtx {
    cipher: KernelCipher,
    inner: Inner,
}

enum Inner {
    #[cfg(not(feature = "aws-lc"))]
    Provider(ProviderCtx),
    /// AWS-LC's EVP_AEAD; `None` until keyed (and after a failed key).
    #[cfg(feature = "aws-lc")]
    Aead(Option<AeadKey>),
    /// `keyed_once`: the cipher was given to the context (at its first key); later keys
    /// pass none, which keeps it without a look-up.
    Evp { ctx: CipherCtx, keyed_once: bool },
}

impl AeadCtx {
    pub(crate) fn new(cipher: KernelCipher, backend: Backend) -> Result<AeadCtx, ErrorStack> {
        #[cfg(not(feature = "aws-lc"))]
        let direct = match backend {
            Backend::Provider => direct(cipher),
            Backend::Evp => None,
        };
        #[cfg(feature = "aws-lc")]
        let direct = (backend == Backend::Provider).then_some(());
        let inner = match direct {
            #[cfg(not(feature = "aws-lc"))]
            Some(dispatch) => Inner::Provider(ProviderCtx::new(dispatch)?),
            #[cfg(feature = "aws-lc")]
            Some(()) => Inner::Aead(None),
            None => Inner::Evp {
                ctx: CipherCtx::new()?,
                keyed_once: false,
            },
        };
        Ok(AeadCtx { cipher, inner })
    }

    pub(crate) fn cipher(&self) -> KernelCipher {
        self.cipher
    }

    /// Whether the provider's functions (AWS-LC: EVP_AEAD) are called directly.
    #[cfg(test)]
    pub(crate) fn is_direct(&self) -> bool {
        #[cfg(not(feature = "aws-lc"))]
        return matches!(self.inner, Inner::Provider(_));
        #[cfg(feature = "aws-lc")]
        matches!(self.inner, Inner::Aead(_))
    }

    /// Seals a whole record in place: `data` (the plaintext, then the ciphertext) and its
    /// tag, on a keyed context.
    #[cfg(feature = "aws-lc")]
    pub(crate) fn seal_whole(
        &mut self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        data: &mut [u8],
        tag: &mut [u8; TAG_LEN],
    ) -> Result<(), ErrorStack> {
        if let Inner::Aead(key) = &self.inner {
            return key
                .as_ref()
                .ok_or_else(ErrorStack::get)?
                .seal_in_place(nonce, aad, data, tag);
        }
        self.set_nonce(true, nonce)?;
        self.aad(aad)?;
        self.update_in_place(data)?;
        self.finish_seal(tag)
    }

    /// Opens a whole record in place: an error unless `tag` authenticates it.
    #[cfg(feature = "aws-lc")]
    pub(crate) fn open_whole(
        &mut self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        data: &mut [u8],
        tag: &[u8],
    ) -> Result<(), ErrorStack> {
        if let Inner::Aead(key) = &self.inner {
            return key
                .as_ref()
                .ok_or_else(ErrorStack::get)?
                .open_in_place(nonce, aad, data, tag);
        }
        self.set_nonce(false, nonce)?;
        self.aad(aad)?;
        self.update_in_place(data)?;
        self.finish_open(tag)
    }

    /// Keys the context for sealing (`seal`) or opening; no nonce yet.
    pub(crate) fn set_key(&mut self, seal: bool, key: &[u8]) -> Result<(), ErrorStack> {
        match &mut self.inner {
            #[cfg(not(feature = "aws-lc"))]
            Inner::Provider(p) => p.init(seal, Some(key), None),
            #[cfg(feature = "aws-lc")]
            Inner::Aead(slot) => {
                // One context serves both directions' calls: `seal` needs no setting.
                let _ = seal;
                *slot = None;
                *slot = Some(AeadKey::new(self.cipher, key)?);
                Ok(())
            }
            Inner::Evp { ctx, keyed_once } => {
                let cipher = (!*keyed_once).then(|| openssl_cipher(self.cipher));
                if seal {
                    ctx.encrypt_init(cipher, Some(key), None)?;
                } else {
                    ctx.decrypt_init(cipher, Some(key), None)?;
                }
                *keyed_once = true;
                Ok(())
            }
        }
    }

    /// Starts a record with `nonce` on the keyed context.
    pub(crate) fn set_nonce(
        &mut self,
        seal: bool,
        nonce: &[u8; NONCE_LEN],
    ) -> Result<(), ErrorStack> {
        match &mut self.inner {
            #[cfg(not(feature = "aws-lc"))]
            Inner::Provider(p) => p.init(seal, None, Some(nonce)),
            // EVP_AEAD takes whole records only (`seal_whole`, `open_whole`).
            #[cfg(feature = "aws-lc")]
            Inner::Aead(_) => Err(ErrorStack::get()),
            Inner::Evp { ctx, .. } => evp_set_nonce(ctx, seal, nonce),
        }
    }

    pub(crate) fn aad(&mut self, aad: &[u8]) -> Result<(), ErrorStack> {
        match &mut self.inner {
            #[cfg(not(feature = "aws-lc"))]
            Inner::Provider(p) => p.aad(aad),
            // EVP_AEAD takes whole records only (`seal_whole`, `open_whole`).
            #[cfg(feature = "aws-lc")]
            Inner::Aead(_) => Err(ErrorStack::get()),
            Inner::Evp { ctx, .. } => ctx.cipher_update(aad, None).map(|_| ()),
        }
    }

    /// Encrypts `input` onto the end of `out`.
    #[cfg(not(feature = "aws-lc"))]
    pub(crate) fn encrypt_append(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), ErrorStack> {
        match &mut self.inner {
            #[cfg(not(feature = "aws-lc"))]
            Inner::Provider(p) => p.encrypt_append(input, out),
            Inner::Evp { ctx, .. } => evp_encrypt_append(ctx, input, out),
        }
    }

    /// Encrypts or decrypts `data` in place, as the context was set up (decrypted data is
    /// authenticated only by [`AeadCtx::finish_open`]).
    pub(crate) fn update_in_place(&mut self, data: &mut [u8]) -> Result<(), ErrorStack> {
        match &mut self.inner {
            #[cfg(not(feature = "aws-lc"))]
            Inner::Provider(p) => p.update_in_place(data),
            // EVP_AEAD takes whole records only (`seal_whole`, `open_whole`).
            #[cfg(feature = "aws-lc")]
            Inner::Aead(_) => Err(ErrorStack::get()),
            Inner::Evp { ctx, .. } => {
                let len = data.len();
                ctx.cipher_update_inplace(data, len).map(|_| ())
            }
        }
    }

    /// Ends a sealed record and writes its tag.
    pub(crate) fn finish_seal(&mut self, tag: &mut [u8; TAG_LEN]) -> Result<(), ErrorStack> {
        match &mut self.inner {
            #[cfg(not(feature = "aws-lc"))]
            Inner::Provider(p) => p.finish_seal(tag),
            // EVP_AEAD takes whole records only (`seal_whole`, `open_whole`).
            #[cfg(feature = "aws-lc")]
            Inner::Aead(_) => Err(ErrorStack::get()),
            Inner::Evp { ctx, .. } => {
                ctx.cipher_final(&mut [])?;
                ctx.tag(tag)
            }
        }
    }

    /// Ends an opened record: an error unless `tag` (16 bytes) authenticates it.
    pub(crate) fn finish_open(&mut self, tag: &[u8]) -> Result<(), ErrorStack> {
        match &mut self.inner {
            #[cfg(not(feature = "aws-lc"))]
            Inner::Provider(p) => p.finish_open(tag),
            // EVP_AEAD takes whole records only (`seal_whole`, `open_whole`).
            #[cfg(feature = "aws-lc")]
            Inner::Aead(_) => Err(ErrorStack::get()),
            Inner::Evp { ctx, .. } => {
                if tag.len() != TAG_LEN {
                    return Err(ErrorStack::get());
                }
                ctx.set_tag(tag)?;
                ctx.cipher_final(&mut []).map(|_| ())
            }
        }
    }
}

/// Sets the record's nonce on a keyed EVP context, through the C call itself: the binding's
/// `encrypt_init` first asks the context for its IV length, which OpenSSL 3 answers with a
/// parameter look-up by name (strcmp) on every record.
fn evp_set_nonce(
    ctx: &CipherCtxRef,
    seal: bool,
    nonce: &[u8; NONCE_LEN],
) -> Result<(), ErrorStack> {
    let ctx = ctx.as_ptr();
    let (cipher, engine, key) = (std::ptr::null(), std::ptr::null_mut(), std::ptr::null());
    // SAFETY: `ctx` is a live EVP_CIPHER_CTX already initialised with a cipher and key by
    // `set_key` (`aead` keys a context before its first nonce), so a NULL cipher, engine and
    // key keep them. Every cipher here (AES-GCM, ChaCha20-Poly1305) has a 12-byte IV (their
    // default, never changed), and `nonce` is 12 readable bytes OpenSSL only reads during
    // the call.
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
        Err(ErrorStack::get())
    }
}

/// Encrypts `input` onto the end of `out` through `EVP_EncryptUpdate`.
#[cfg(not(feature = "aws-lc"))]
fn evp_encrypt_append(
    ctx: &CipherCtxRef,
    input: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), ErrorStack> {
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

/// The three AEADs, fetched once from the default provider. OpenSSL 3 looks an implicitly
/// fetched cipher (`EVP_aes_128_gcm()`) up again, under a lock, every time a context is
/// initialised with it; an explicitly fetched one is used as it is. Never dropped: each keeps
/// its provider loaded, which the direct calls rely on.
struct Fetched {
    aes_128_gcm: Cipher,
    aes_256_gcm: Cipher,
    chacha20_poly1305: Cipher,
}

#[cfg_attr(feature = "aws-lc", allow(dead_code))]
const NAMES: [&str; 3] = ["AES-128-GCM", "AES-256-GCM", "ChaCha20-Poly1305"];

#[cfg_attr(feature = "aws-lc", allow(dead_code))]
fn index(cipher: KernelCipher) -> usize {
    match cipher {
        KernelCipher::AesGcm128 => 0,
        KernelCipher::AesGcm256 => 1,
        KernelCipher::Chacha20Poly1305 => 2,
    }
}

/// AWS-LC fetches nothing: its ciphers are plain static tables.
#[cfg(feature = "aws-lc")]
fn fetched() -> Option<&'static Fetched> {
    None
}

#[cfg(not(feature = "aws-lc"))]
fn fetched() -> Option<&'static Fetched> {
    static FETCHED: OnceLock<Option<Fetched>> = OnceLock::new();
    FETCHED
        .get_or_init(|| {
            Some(Fetched {
                aes_128_gcm: Cipher::fetch(None, NAMES[0], None).ok()?,
                aes_256_gcm: Cipher::fetch(None, NAMES[1], None).ok()?,
                chacha20_poly1305: Cipher::fetch(None, NAMES[2], None).ok()?,
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

/// The provider functions of `cipher`, if its fetched implementation offers them all and
/// sealing and opening a record through them gives what EVP gives (checked once per cipher
/// and process).
#[cfg(not(feature = "aws-lc"))]
pub(crate) fn direct(cipher: KernelCipher) -> Option<&'static Dispatch> {
    static DIRECT: [OnceLock<Option<&'static Dispatch>>; 3] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    *DIRECT[index(cipher)].get_or_init(|| {
        fetched()?;
        let found = provider::lookup(openssl_cipher(cipher), NAMES[index(cipher)])?;
        // One table per cipher for the life of the process.
        let dispatch: &'static Dispatch = Box::leak(Box::new(found));
        agrees_with_evp(cipher, dispatch).then_some(dispatch)
    })
}

/// Seals one record with a fixed key through `dispatch` and through EVP, and opens each
/// with the other: the direct path is used only if the bytes are the same.
#[cfg(not(feature = "aws-lc"))]
fn agrees_with_evp(cipher: KernelCipher, dispatch: &'static Dispatch) -> bool {
    let key = [0x5a_u8; 32];
    let key = &key[..cipher.key_len()];
    let nonce = [7u8; NONCE_LEN];
    let seal = |ctx: &mut AeadCtx| -> Result<Vec<u8>, ErrorStack> {
        let mut out = Vec::new();
        let mut tag = [0u8; TAG_LEN];
        ctx.set_key(true, key)?;
        ctx.set_nonce(true, &nonce)?;
        ctx.aad(b"header")?;
        ctx.encrypt_append(b"a record's plaintext", &mut out)?;
        ctx.finish_seal(&mut tag)?;
        out.extend_from_slice(&tag);
        Ok(out)
    };
    let open = |ctx: &mut AeadCtx, mut record: Vec<u8>| -> Result<Vec<u8>, ErrorStack> {
        let data_len = record.len() - TAG_LEN;
        let (data, tag) = record.split_at_mut(data_len);
        ctx.set_key(false, key)?;
        ctx.set_nonce(false, &nonce)?;
        ctx.aad(b"header")?;
        ctx.update_in_place(data)?;
        ctx.finish_open(tag)?;
        Ok(data.to_vec())
    };
    let check = || -> Result<bool, ErrorStack> {
        let direct = |c| -> Result<AeadCtx, ErrorStack> {
            Ok(AeadCtx {
                cipher: c,
                inner: Inner::Provider(ProviderCtx::new(dispatch)?),
            })
        };
        let mut evp = AeadCtx::new(cipher, Backend::Evp)?;
        let mut ours = direct(cipher)?;
        let by_evp = seal(&mut evp)?;
        let by_provider = seal(&mut ours)?;
        let opened_by_provider = open(&mut direct(cipher)?, by_evp.clone())?;
        let opened_by_evp = open(
            &mut AeadCtx::new(cipher, Backend::Evp)?,
            by_provider.clone(),
        )?;
        Ok(by_evp == by_provider
            && opened_by_provider == b"a record's plaintext"
            && opened_by_evp == b"a record's plaintext")
    };
    check().unwrap_or(false)
}
