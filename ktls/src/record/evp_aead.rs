//! AWS-LC's `EVP_AEAD`: one call seals or opens a whole record, in place, with the tag apart
//! (`EVP_AEAD_CTX_seal_scatter` / `EVP_AEAD_CTX_open_gather`). No per-record parameter
//! plumbing: the key schedule lives in the context, the nonce and AAD are arguments. The
//! OpenSSL build has no such interface (its direct path is `provider`).

use std::ptr::NonNull;

use openssl::error::ErrorStack;
use openssl_sys as ffi;

use super::aead::TAG_LEN;
use super::keys::NONCE_LEN;
use crate::kernel::KernelCipher;

/// One keyed `EVP_AEAD_CTX`, freed (and its key schedule with it) when dropped.
pub(crate) struct AeadKey {
    ctx: NonNull<ffi::EVP_AEAD_CTX>,
}

// SAFETY: the context is owned by this value alone and AWS-LC keeps no thread affinity for
// it; it is only used through `&self` calls that AWS-LC documents as not mutating it.
unsafe impl Send for AeadKey {}

fn check(ret: std::os::raw::c_int) -> Result<(), ErrorStack> {
    if ret == 1 {
        Ok(())
    } else {
        Err(ErrorStack::get())
    }
}

impl AeadKey {
    /// A context for `cipher` keyed with `key`, 16-byte tags.
    pub(crate) fn new(cipher: KernelCipher, key: &[u8]) -> Result<AeadKey, ErrorStack> {
        // SAFETY: the EVP_aead_* functions return pointers to AWS-LC's static tables;
        // EVP_AEAD_CTX_new reads `key` (valid for its length) during the call only and returns
        // a new heap context or null (a wrong key length included).
        let ctx = unsafe {
            let aead = match cipher {
                KernelCipher::AesGcm128 => ffi::EVP_aead_aes_128_gcm(),
                KernelCipher::AesGcm256 => ffi::EVP_aead_aes_256_gcm(),
                KernelCipher::Chacha20Poly1305 => ffi::EVP_aead_chacha20_poly1305(),
            };
            ffi::EVP_AEAD_CTX_new(aead, key.as_ptr(), key.len(), TAG_LEN)
        };
        NonNull::new(ctx)
            .map(|ctx| AeadKey { ctx })
            .ok_or_else(ErrorStack::get)
    }

    /// Encrypts `data` in place and writes its tag.
    pub(crate) fn seal_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        data: &mut [u8],
        tag: &mut [u8; TAG_LEN],
    ) -> Result<(), ErrorStack> {
        let mut tag_len = 0usize;
        let (at, len) = (data.as_mut_ptr(), data.len());
        // SAFETY: the context is live and keyed; `at` is readable and writable for `len`
        // bytes, and AWS-LC allows the output to alias the input exactly; `tag` has room for
        // TAG_LEN bytes (the bound passed), `nonce` and `aad` are readable for their lengths.
        // Nothing is kept after the call.
        check(unsafe {
            ffi::EVP_AEAD_CTX_seal_scatter(
                self.ctx.as_ptr(),
                at,
                tag.as_mut_ptr(),
                &mut tag_len,
                TAG_LEN,
                nonce.as_ptr(),
                NONCE_LEN,
                at,
                len,
                std::ptr::null(),
                0,
                aad.as_ptr(),
                aad.len(),
            )
        })?;
        if tag_len == TAG_LEN {
            Ok(())
        } else {
            Err(ErrorStack::get())
        }
    }

    /// Decrypts `data` in place if `tag` authenticates it (an error otherwise; `data` then
    /// holds nothing to use).
    pub(crate) fn open_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        data: &mut [u8],
        tag: &[u8],
    ) -> Result<(), ErrorStack> {
        let (at, len) = (data.as_mut_ptr(), data.len());
        // SAFETY: as in `seal_in_place`; `tag` is readable for its length (AWS-LC refuses a
        // length other than the context's).
        check(unsafe {
            ffi::EVP_AEAD_CTX_open_gather(
                self.ctx.as_ptr(),
                at,
                nonce.as_ptr(),
                NONCE_LEN,
                at,
                len,
                tag.as_ptr(),
                tag.len(),
                aad.as_ptr(),
                aad.len(),
            )
        })
    }
}

impl Drop for AeadKey {
    fn drop(&mut self) {
        // SAFETY: the context came from EVP_AEAD_CTX_new and is freed once, here; AWS-LC
        // clears the key schedule as it frees it.
        unsafe { ffi::EVP_AEAD_CTX_free(self.ctx.as_ptr()) }
    }
}
