//! OpenSSL's allocations routed to mimalloc, the proxy's global allocator.
//!
//! A TLS handshake makes a few hundred small allocations inside OpenSSL (the SSL object, its
//! buffers, the certificate and key-exchange work, the session); with glibc's malloc they
//! cost about as many instructions as the key exchange itself. `CRYPTO_set_mem_functions`
//! points OpenSSL's `CRYPTO_malloc`/`realloc`/`free` at mimalloc. OpenSSL accepts it only
//! before its first allocation, so the binary calls [`use_mimalloc`] first thing in `main`.

use std::os::raw::{c_char, c_int, c_void};

type MallocFn = unsafe extern "C" fn(usize, *const c_char, c_int) -> *mut c_void;
type ReallocFn = unsafe extern "C" fn(*mut c_void, usize, *const c_char, c_int) -> *mut c_void;
type FreeFn = unsafe extern "C" fn(*mut c_void, *const c_char, c_int);

extern "C" {
    // libcrypto, OpenSSL 1.1.0+; not declared by openssl-sys. Returns 0 (and changes nothing)
    // once OpenSSL has allocated anything.
    fn CRYPTO_set_mem_functions(m: MallocFn, r: ReallocFn, f: FreeFn) -> c_int;
}

unsafe extern "C" fn mi_malloc_fn(size: usize, _file: *const c_char, _line: c_int) -> *mut c_void {
    // SAFETY: mi_malloc has no preconditions; OpenSSL treats a null return as failure.
    unsafe { libmimalloc_sys::mi_malloc(size) }
}

unsafe extern "C" fn mi_realloc_fn(
    ptr: *mut c_void,
    size: usize,
    _file: *const c_char,
    _line: c_int,
) -> *mut c_void {
    // SAFETY: `ptr` is null or came from mi_malloc/mi_realloc: once these functions are
    // installed, every OpenSSL allocation goes through them (they can only be installed
    // before the first one).
    unsafe { libmimalloc_sys::mi_realloc(ptr, size) }
}

unsafe extern "C" fn mi_free_fn(ptr: *mut c_void, _file: *const c_char, _line: c_int) {
    // SAFETY: as for `mi_realloc_fn`: `ptr` is null or a live mimalloc allocation.
    unsafe { libmimalloc_sys::mi_free(ptr) }
}

/// Makes OpenSSL allocate with mimalloc. True if OpenSSL took it; false if OpenSSL had already
/// allocated (it then keeps glibc's malloc for the life of the process, which is only slower).
pub fn use_mimalloc() -> bool {
    // SAFETY: the three functions have exactly the signatures OpenSSL expects and stay valid
    // for the life of the process; OpenSSL refuses the switch (returns 0) after its first
    // allocation, so no block is ever freed by an allocator that did not allocate it.
    unsafe { CRYPTO_set_mem_functions(mi_malloc_fn, mi_realloc_fn, mi_free_fn) == 1 }
}

#[cfg(test)]
mod tests {
    /// In this test binary OpenSSL may already have allocated (another test ran first), so
    /// only the call's safety is checked here; the proxy's own start-up logs the outcome.
    #[test]
    fn switching_is_refused_or_taken_without_harm() {
        let _ = super::use_mimalloc();
        let ctx = openssl::ssl::SslContext::builder(openssl::ssl::SslMethod::tls()).unwrap();
        drop(ctx.build());
    }
}
