//! HKDF-Expand through OpenSSL's EVP_KDF interface with one context per thread and hash.
//!
//! The `openssl` crate's HKDF (`PkeyCtx::new_id(Id::HKDF)`) builds an `EVP_PKEY_CTX` per call,
//! which in OpenSSL 3 fetches the key management, the KDF and the digest again each time:
//! about 25 µs per call, and a hand-over to the proxy's record layer makes four (key and IV
//! of both directions), a tenth of a full handshake. Here the KDF is fetched and its
//! context given the hash and the mode once per thread; a call only sets the key and the
//! info and derives (a couple of HMACs).

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr};

use openssl_sys as ffi;

extern "C" {
    // OpenSSL 3.0; not declared by openssl-sys.
    fn EVP_KDF_CTX_set_params(ctx: *mut ffi::EVP_KDF_CTX, params: *const ffi::OSSL_PARAM) -> c_int;
    fn OSSL_PARAM_construct_utf8_string(
        key: *const c_char,
        buf: *mut c_char,
        bsize: usize,
    ) -> ffi::OSSL_PARAM;
}

/// The hashes of the TLS 1.3 suites the record layer takes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Hash {
    Sha256,
    Sha384,
}

impl Hash {
    fn name(self) -> &'static CStr {
        match self {
            Hash::Sha256 => c"SHA256",
            Hash::Sha384 => c"SHA384",
        }
    }
}

/// An `EVP_KDF_CTX` for HKDF in EXPAND_ONLY mode with its digest set.
struct ExpandCtx(*mut ffi::EVP_KDF_CTX);

impl ExpandCtx {
    fn new(hash: Hash) -> Option<ExpandCtx> {
        // SAFETY: EVP_KDF_fetch takes NUL-terminated strings (a null library context and
        // properties mean the defaults) and returns an owned reference or null.
        let kdf =
            unsafe { ffi::EVP_KDF_fetch(std::ptr::null_mut(), c"HKDF".as_ptr(), std::ptr::null()) };
        if kdf.is_null() {
            return None;
        }
        // SAFETY: `kdf` is a live fetched KDF; the context takes its own reference, so ours
        // is released right after.
        let ctx = unsafe {
            let ctx = ffi::EVP_KDF_CTX_new(kdf);
            ffi::EVP_KDF_free(kdf);
            ctx
        };
        if ctx.is_null() {
            return None;
        }
        let ctx = ExpandCtx(ctx);
        let mode = c"EXPAND_ONLY";
        // SAFETY: the params point at 'static NUL-terminated strings, which OpenSSL only reads
        // during the call (the cast to *mut is the constructor's signature, nothing writes);
        // the array ends with OSSL_PARAM_END; `ctx.0` is live.
        let ok = unsafe {
            let params = [
                OSSL_PARAM_construct_utf8_string(
                    c"digest".as_ptr(),
                    hash.name().as_ptr().cast_mut(),
                    0,
                ),
                OSSL_PARAM_construct_utf8_string(c"mode".as_ptr(), mode.as_ptr().cast_mut(), 0),
                ffi::OSSL_PARAM_construct_end(),
            ];
            EVP_KDF_CTX_set_params(ctx.0, params.as_ptr())
        };
        (ok == 1).then_some(ctx)
    }

    fn expand(&mut self, key: &[u8], info: &[u8], out: &mut [u8]) -> bool {
        // SAFETY: `key` and `info` outlive the call and OpenSSL copies them (set_ctx_params
        // duplicates the key and concatenates the info into its own buffer) without
        // writing through the pointers; `out` is valid for `out.len()` bytes; the array ends
        // with OSSL_PARAM_END; `self.0` is live and used by this thread only.
        unsafe {
            let params = [
                ffi::OSSL_PARAM_construct_octet_string(
                    c"key".as_ptr(),
                    key.as_ptr().cast_mut().cast::<c_void>(),
                    key.len(),
                ),
                ffi::OSSL_PARAM_construct_octet_string(
                    c"info".as_ptr(),
                    info.as_ptr().cast_mut().cast::<c_void>(),
                    info.len(),
                ),
                ffi::OSSL_PARAM_construct_end(),
            ];
            ffi::EVP_KDF_derive(self.0, out.as_mut_ptr(), out.len(), params.as_ptr()) == 1
        }
    }
}

impl Drop for ExpandCtx {
    fn drop(&mut self) {
        // SAFETY: `self.0` is the live context this value owns; it is freed once (the KDF
        // context also clears the key it holds).
        unsafe { ffi::EVP_KDF_CTX_free(self.0) }
    }
}

thread_local! {
    /// Per hash: not tried yet, the context, or `None` when it could not be made.
    static CONTEXTS: RefCell<[Option<Option<ExpandCtx>>; 2]> = const { RefCell::new([None, None]) };
}

/// HKDF-Expand(`key`, `info`) into `out` with `hash`. False if OpenSSL failed (the caller
/// then takes the slower general path).
pub fn hkdf_expand(hash: Hash, key: &[u8], info: &[u8], out: &mut [u8]) -> bool {
    CONTEXTS.with(|cell| {
        let Ok(mut slots) = cell.try_borrow_mut() else {
            return false;
        };
        let slot = &mut slots[hash as usize];
        let ctx = slot.get_or_insert_with(|| ExpandCtx::new(hash));
        ctx.as_mut().is_some_and(|ctx| ctx.expand(key, info, out))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 5869 test case 3's OKM comes from PRK via Expand with empty info; here the TLS 1.3
    /// shape is checked against the crate's general HKDF instead.
    #[test]
    fn matches_the_general_hkdf_for_both_hashes() {
        use openssl::md::Md;
        use openssl::pkey::Id;
        use openssl::pkey_ctx::{HkdfMode, PkeyCtx};
        for (hash, md, len) in [
            (Hash::Sha256, Md::sha256(), 32),
            (Hash::Sha384, Md::sha384(), 48),
        ] {
            for info in [&b""[..], b"\x00\x10\x09tls13 key\x00", &[7u8; 200]] {
                let key = vec![0x42u8; len];
                let mut ours = vec![0u8; 2 * len + 3];
                assert!(hkdf_expand(hash, &key, info, &mut ours));
                let mut ctx = PkeyCtx::new_id(Id::HKDF).unwrap();
                ctx.derive_init().unwrap();
                ctx.set_hkdf_mode(HkdfMode::EXPAND_ONLY).unwrap();
                ctx.set_hkdf_md(md).unwrap();
                ctx.set_hkdf_key(&key).unwrap();
                ctx.add_hkdf_info(info).unwrap();
                let mut theirs = vec![0u8; ours.len()];
                ctx.derive(Some(&mut theirs)).unwrap();
                assert_eq!(ours, theirs, "{hash:?} info {}", info.len());
            }
        }
    }
}
