//! An AEAD called through OpenSSL's provider interface instead of the EVP layer.
//!
//! OpenSSL 3's EVP functions are a thin front for the provider's own functions, but on the
//! per-record path they add parameter plumbing that is not cryptography: every
//! `EVP_EncryptInit_ex` with a nonce asks the provider for the IV length (a parameter
//! look-up by name), and the tag's get and set through `EVP_CIPHER_CTX_ctrl` are converted
//! to parameter arrays and looked up again. Here the fetched cipher's provider is asked for
//! its cipher implementations (`OSSL_PROVIDER_query_operation`), the algorithm's function
//! table (`OSSL_DISPATCH`, numbered in `core_dispatch.h`) is kept, and a record calls those
//! functions directly: the nonce's length is known (12), the tag goes in one parameter.
//!
//! A table that lacks one of the functions used here (another provider) gives `None`, and
//! the caller stays on EVP.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_uint, c_void};
use std::ptr::{self, NonNull};

use foreign_types::ForeignTypeRef;
use openssl::cipher::CipherRef;
use openssl::error::ErrorStack;
use openssl_sys as ffi;

use super::aead::TAG_LEN;
use super::keys::NONCE_LEN;

/// `OSSL_DISPATCH` (core.h): a function number and the function, whose type the number fixes.
#[repr(C)]
struct OsslDispatch {
    function_id: c_int,
    function: Option<unsafe extern "C" fn()>,
}

/// `OSSL_ALGORITHM` (core.h): one implementation a provider offers.
#[repr(C)]
struct OsslAlgorithm {
    names: *const c_char,
    property_definition: *const c_char,
    implementation: *const OsslDispatch,
    description: *const c_char,
}

// core_dispatch.h: the operation and the cipher functions' numbers.
const OSSL_OP_CIPHER: c_int = 2;
const NEWCTX: c_int = 1;
const ENCRYPT_INIT: c_int = 2;
const DECRYPT_INIT: c_int = 3;
const UPDATE: c_int = 4;
const FINAL: c_int = 5;
const FREECTX: c_int = 7;
const GET_CTX_PARAMS: c_int = 10;
const SET_CTX_PARAMS: c_int = 11;

// core.h / core_names.h: the tag parameter.
const OSSL_PARAM_OCTET_STRING: c_uint = 5;
const OSSL_PARAM_UNMODIFIED: usize = usize::MAX;
const PARAM_TAG: &CStr = c"tag";

extern "C" {
    // OpenSSL 3.0 and later (openssl-sys does not declare them).
    fn EVP_CIPHER_get0_provider(cipher: *const ffi::EVP_CIPHER) -> *const ffi::OSSL_PROVIDER;
    fn OSSL_PROVIDER_query_operation(
        prov: *const ffi::OSSL_PROVIDER,
        operation_id: c_int,
        no_store: *mut c_int,
    ) -> *const OsslAlgorithm;
    fn OSSL_PROVIDER_unquery_operation(
        prov: *const ffi::OSSL_PROVIDER,
        operation_id: c_int,
        algs: *const OsslAlgorithm,
    );
    fn OSSL_PROVIDER_get0_provider_ctx(prov: *const ffi::OSSL_PROVIDER) -> *mut c_void;
}

type NewCtxFn = unsafe extern "C" fn(provctx: *mut c_void) -> *mut c_void;
type FreeCtxFn = unsafe extern "C" fn(cctx: *mut c_void);
type InitFn = unsafe extern "C" fn(
    cctx: *mut c_void,
    key: *const u8,
    keylen: usize,
    iv: *const u8,
    ivlen: usize,
    params: *const ffi::OSSL_PARAM,
) -> c_int;
type UpdateFn = unsafe extern "C" fn(
    cctx: *mut c_void,
    out: *mut u8,
    outl: *mut usize,
    outsize: usize,
    input: *const u8,
    inl: usize,
) -> c_int;
type FinalFn = unsafe extern "C" fn(
    cctx: *mut c_void,
    out: *mut u8,
    outl: *mut usize,
    outsize: usize,
) -> c_int;
type GetCtxParamsFn =
    unsafe extern "C" fn(cctx: *mut c_void, params: *mut ffi::OSSL_PARAM) -> c_int;
type SetCtxParamsFn =
    unsafe extern "C" fn(cctx: *mut c_void, params: *const ffi::OSSL_PARAM) -> c_int;

/// One AEAD's provider functions and the provider's context they are called with.
pub(crate) struct Dispatch {
    provctx: *mut c_void,
    newctx: NewCtxFn,
    freectx: FreeCtxFn,
    encrypt_init: InitFn,
    decrypt_init: InitFn,
    update: UpdateFn,
    final_: FinalFn,
    get_ctx_params: GetCtxParamsFn,
    set_ctx_params: SetCtxParamsFn,
}

// SAFETY: `provctx` is the provider's own context, which OpenSSL passes to the `newctx` of
// every thread's EVP contexts alike (the provider makes it thread-safe); the functions are
// plain code pointers. Nothing here is mutated after `lookup`.
unsafe impl Send for Dispatch {}
// SAFETY: as for Send: shared use is what OpenSSL itself does with them.
unsafe impl Sync for Dispatch {}

/// The function table of the implementation `cipher` (fetched, so it holds a reference to
/// its provider, which stays loaded while the cipher lives: the callers keep theirs for the
/// process) was fetched from, found by `name` among its provider's ciphers. `None` if the
/// provider does not list exactly one implementation by that name, or its table lacks a
/// function used here.
pub(crate) fn lookup(cipher: &CipherRef, name: &str) -> Option<Dispatch> {
    // SAFETY: `cipher` is a live EVP_CIPHER; get0 returns a borrowed pointer (NULL for a
    // legacy cipher without a provider), valid while the cipher holds its provider.
    let prov = unsafe { EVP_CIPHER_get0_provider(cipher.as_ptr()) };
    if prov.is_null() {
        return None;
    }
    let mut no_store: c_int = 0;
    // SAFETY: `prov` is a live provider (above); the returned array, terminated by an entry
    // with NULL names, stays valid until the matching unquery below.
    let algs = unsafe { OSSL_PROVIDER_query_operation(prov, OSSL_OP_CIPHER, &mut no_store) };
    if algs.is_null() {
        return None;
    }
    let mut found: Option<*const OsslDispatch> = None;
    let mut matches = 0;
    let mut at = algs;
    loop {
        // SAFETY: `at` is within the array: it starts at its first entry and only moves on
        // past entries whose names are not NULL (the terminator's are).
        let alg = unsafe { &*at };
        if alg.names.is_null() {
            break;
        }
        // SAFETY: a provider's algorithm names are a NUL-terminated string.
        let names = unsafe { CStr::from_ptr(alg.names) };
        if has_name(names, name) {
            found = Some(alg.implementation);
            matches += 1;
        }
        // SAFETY: this entry was not the terminator, so the next one is in the array.
        at = unsafe { at.add(1) };
    }
    // SAFETY: the function pointers copied out of the table are code of the provider, which
    // stays loaded (the cipher holds it); the table itself is not used after this.
    let dispatch = found
        .filter(|_| matches == 1)
        .and_then(|table| unsafe { from_table(table, OSSL_PROVIDER_get0_provider_ctx(prov)) });
    // SAFETY: `algs` came from query_operation on the same provider and operation.
    unsafe { OSSL_PROVIDER_unquery_operation(prov, OSSL_OP_CIPHER, algs) };
    dispatch
}

/// Whether the colon-separated `names` of an implementation include `name` (names are
/// compared without regard to case, as OpenSSL's fetch does).
fn has_name(names: &CStr, name: &str) -> bool {
    names
        .to_bytes()
        .split(|&b| b == b':')
        .any(|n| n.eq_ignore_ascii_case(name.as_bytes()))
}

/// The functions used here out of a dispatch table.
///
/// # Safety
/// `table` is NULL or a provider's `OSSL_DISPATCH` array (terminated by function number 0),
/// and every function in it has the type core_dispatch.h gives its number.
unsafe fn from_table(table: *const OsslDispatch, provctx: *mut c_void) -> Option<Dispatch> {
    if table.is_null() {
        return None;
    }
    let find = |id: c_int| {
        let mut at = table;
        loop {
            // SAFETY: `at` moves through the array only past entries that are not the
            // terminator (function number 0), per this function's contract.
            let entry = unsafe { &*at };
            if entry.function_id == 0 {
                return None;
            }
            if entry.function_id == id {
                return entry.function;
            }
            // SAFETY: this entry was not the terminator.
            at = unsafe { at.add(1) };
        }
    };
    // SAFETY (every transmute): per this function's contract, the function under each
    // number has the type core_dispatch.h declares for it (OSSL_FUNC_cipher_*_fn), which
    // the type alias it is converted to spells out; both are `extern "C"` code pointers.
    unsafe {
        Some(Dispatch {
            provctx,
            newctx: std::mem::transmute::<unsafe extern "C" fn(), NewCtxFn>(find(NEWCTX)?),
            freectx: std::mem::transmute::<unsafe extern "C" fn(), FreeCtxFn>(find(FREECTX)?),
            encrypt_init: std::mem::transmute::<unsafe extern "C" fn(), InitFn>(find(
                ENCRYPT_INIT,
            )?),
            decrypt_init: std::mem::transmute::<unsafe extern "C" fn(), InitFn>(find(
                DECRYPT_INIT,
            )?),
            update: std::mem::transmute::<unsafe extern "C" fn(), UpdateFn>(find(UPDATE)?),
            final_: std::mem::transmute::<unsafe extern "C" fn(), FinalFn>(find(FINAL)?),
            get_ctx_params: std::mem::transmute::<unsafe extern "C" fn(), GetCtxParamsFn>(find(
                GET_CTX_PARAMS,
            )?),
            set_ctx_params: std::mem::transmute::<unsafe extern "C" fn(), SetCtxParamsFn>(find(
                SET_CTX_PARAMS,
            )?),
        })
    }
}

/// A parameter array holding only the tag, over `tag`'s 16 bytes (built per call on the
/// stack: a few stores, and nothing can point into a context that moves).
fn tag_params(tag: *mut u8) -> [ffi::OSSL_PARAM; 2] {
    [
        ffi::OSSL_PARAM {
            key: PARAM_TAG.as_ptr(),
            data_type: OSSL_PARAM_OCTET_STRING,
            data: tag.cast::<c_void>(),
            data_size: TAG_LEN,
            return_size: OSSL_PARAM_UNMODIFIED,
        },
        ffi::OSSL_PARAM {
            key: ptr::null(),
            data_type: 0,
            data: ptr::null_mut(),
            data_size: 0,
            return_size: 0,
        },
    ]
}

/// One provider cipher context (the provider's own, no EVP_CIPHER_CTX around it), freed
/// (and its key schedule cleared: OpenSSL's AEADs free their contexts with
/// `OPENSSL_clear_free`) when dropped.
pub(crate) struct ProviderCtx {
    dispatch: &'static Dispatch,
    algctx: NonNull<c_void>,
}

impl Drop for ProviderCtx {
    fn drop(&mut self) {
        // SAFETY: `algctx` came from this table's `newctx` and is freed only here, once.
        unsafe { (self.dispatch.freectx)(self.algctx.as_ptr()) }
    }
}

fn ok(ret: c_int) -> Result<(), ErrorStack> {
    if ret == 1 {
        Ok(())
    } else {
        Err(ErrorStack::get())
    }
}

impl ProviderCtx {
    pub(crate) fn new(dispatch: &'static Dispatch) -> Result<ProviderCtx, ErrorStack> {
        // SAFETY: `provctx` is the context of the provider these functions belong to, as
        // `newctx` expects; it returns an owned context or NULL.
        let algctx = unsafe { (dispatch.newctx)(dispatch.provctx) };
        let algctx = NonNull::new(algctx).ok_or_else(ErrorStack::get)?;
        Ok(ProviderCtx { dispatch, algctx })
    }

    /// Starts sealing (`seal`) or opening with `key` (when given) and `nonce` (when given):
    /// the provider's own init, with the nonce's length as it is (12 for these AEADs).
    pub(crate) fn init(
        &mut self,
        seal: bool,
        key: Option<&[u8]>,
        nonce: Option<&[u8; NONCE_LEN]>,
    ) -> Result<(), ErrorStack> {
        let init = if seal {
            self.dispatch.encrypt_init
        } else {
            self.dispatch.decrypt_init
        };
        let (key, keylen) = key.map_or((ptr::null(), 0), |k| (k.as_ptr(), k.len()));
        let (iv, ivlen) = nonce.map_or((ptr::null(), 0), |n| (n.as_ptr(), n.len()));
        // SAFETY: `algctx` is a live context of this table; `key` and `iv` are NULL with
        // length 0 or readable for their lengths, only read during the call (the provider
        // copies them; it checks both lengths against the algorithm's); no parameters.
        ok(unsafe { init(self.algctx.as_ptr(), key, keylen, iv, ivlen, ptr::null()) })
    }

    /// Feeds additional authenticated data.
    pub(crate) fn aad(&mut self, aad: &[u8]) -> Result<(), ErrorStack> {
        let mut outl = 0;
        // SAFETY: a NULL output with input makes the AEADs take the input as AAD (the EVP
        // layer calls them the same way); `aad` is readable for its length during the call.
        ok(unsafe {
            (self.dispatch.update)(
                self.algctx.as_ptr(),
                ptr::null_mut(),
                &mut outl,
                aad.len(),
                aad.as_ptr(),
                aad.len(),
            )
        })
    }

    /// Encrypts `input` onto the end of `out` (no zero-fill of the spare capacity first).
    pub(crate) fn encrypt_append(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), ErrorStack> {
        if input.is_empty() {
            return Ok(());
        }
        out.reserve(input.len());
        let mut written = 0;
        // SAFETY: `algctx` is set up for encryption; these AEADs are stream ciphers that
        // write exactly `input.len()` bytes per update, and `outsize` tells the provider
        // that is all the room there is: `out` has at least that much spare capacity at
        // `as_mut_ptr() + len()` (reserved above). Neither buffer is kept after the call.
        let ret = unsafe {
            (self.dispatch.update)(
                self.algctx.as_ptr(),
                out.as_mut_ptr().add(out.len()),
                &mut written,
                input.len(),
                input.as_ptr(),
                input.len(),
            )
        };
        ok(ret)?;
        if written != input.len() {
            return Err(ErrorStack::get());
        }
        // SAFETY: the provider initialised the `written` (= `input.len()`, within the
        // reserved spare capacity) bytes after the old length.
        unsafe { out.set_len(out.len() + written) };
        Ok(())
    }

    /// Encrypts or decrypts `data` in place, as the context was set up (decrypted data is
    /// not yet authenticated: see [`ProviderCtx::finish_open`]).
    pub(crate) fn update_in_place(&mut self, data: &mut [u8]) -> Result<(), ErrorStack> {
        let mut written = 0;
        // SAFETY: input and output are the same live buffer, which these AEADs support (the
        // EVP layer's in-place updates pass the same pointer twice); `outsize` is its
        // length, the most a stream cipher writes for it.
        ok(unsafe {
            (self.dispatch.update)(
                self.algctx.as_ptr(),
                data.as_mut_ptr(),
                &mut written,
                data.len(),
                data.as_ptr(),
                data.len(),
            )
        })
    }

    fn finalize(&mut self) -> Result<(), ErrorStack> {
        let mut nothing = [0u8; 1];
        let mut written = 0;
        // SAFETY: AEAD finals write no output (outsize 0 says so; the one-byte buffer only
        // keeps the pointer valid); `algctx` is live.
        ok(unsafe {
            (self.dispatch.final_)(self.algctx.as_ptr(), nothing.as_mut_ptr(), &mut written, 0)
        })
    }

    /// Ends sealing and writes the tag.
    pub(crate) fn finish_seal(&mut self, tag: &mut [u8; TAG_LEN]) -> Result<(), ErrorStack> {
        self.finalize()?;
        let mut params = tag_params(tag.as_mut_ptr());
        // SAFETY: `params` is a terminated array of one octet-string parameter over `tag`'s
        // 16 writable bytes (data_size says 16), alive for the call.
        ok(unsafe { (self.dispatch.get_ctx_params)(self.algctx.as_ptr(), params.as_mut_ptr()) })
    }

    /// Sets the expected tag (16 bytes) and ends opening: an error if it does not match.
    pub(crate) fn finish_open(&mut self, tag: &[u8]) -> Result<(), ErrorStack> {
        // Always a whole tag: a shorter one would be checked on fewer bytes.
        let Ok(tag) = <&[u8; TAG_LEN]>::try_from(tag) else {
            return Err(ErrorStack::get());
        };
        let params = tag_params(tag.as_ptr().cast_mut());
        // SAFETY: a terminated array of one octet-string parameter over the 16 bytes of
        // `tag`, which set_ctx_params only reads (copies) during the call.
        ok(unsafe { (self.dispatch.set_ctx_params)(self.algctx.as_ptr(), params.as_ptr()) })?;
        self.finalize()
    }
}

#[cfg(test)]
mod tests {
    use super::has_name;

    #[test]
    fn names_match_whole_entries_without_regard_to_case() {
        let names = c"AES-128-GCM:id-aes128-GCM:2.16.840.1.101.3.4.1.6";
        assert!(has_name(names, "aes-128-gcm"));
        assert!(has_name(names, "2.16.840.1.101.3.4.1.6"));
        assert!(!has_name(names, "AES-128"));
        assert!(!has_name(c"AES-128-GCM-SIV", "AES-128-GCM"));
    }
}
