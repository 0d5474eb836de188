//! Context settings and handshake facts whose safe `openssl` wrapper exists for OpenSSL but is
//! compiled out when the crate is built on AWS-LC (`aws-lc` feature): the callers (the proxy,
//! the benchmark tools, the tests) call these on both libraries, and the difference stays
//! here. On OpenSSL each function is the safe wrapper; on AWS-LC the same C call through
//! `openssl-sys`, whose AWS-LC bindings declare it (with AWS-LC's integer types).

#[cfg(feature = "aws-lc")]
use std::os::raw::c_int;
#[cfg(feature = "aws-lc")]
use std::sync::{Arc, OnceLock};

use openssl::error::ErrorStack;
#[cfg(feature = "aws-lc")]
use openssl::ex_data::Index;
#[cfg(not(feature = "aws-lc"))]
use openssl::ssl::{ClientHelloResponse, SslAlert};
use openssl::ssl::{SslCipherRef, SslContextBuilder, SslRef, SslVersion};
#[cfg(feature = "aws-lc")]
use openssl::ssl::{SslContext, SslContextRef};
#[cfg(feature = "aws-lc")]
use {foreign_types::ForeignTypeRef, openssl_sys as ffi};

/// Which TLS library the crate is built on, and its version: OpenSSL's own version string
/// ("OpenSSL 3.0.19 27 Jan 2026"), or "AWS-LC 1.73.0" (out of the "OpenSSL 1.1.1
/// (compatible; AWS-LC 1.73.0)" AWS-LC answers to the same call).
pub fn library() -> &'static str {
    let version = openssl::version::version();
    if !is_aws_lc() {
        return version;
    }
    version
        .find("AWS-LC ")
        .map(|start| version[start..].trim_end_matches(')'))
        .unwrap_or(version)
}

/// Whether the crate is built on AWS-LC (`aws-lc` feature) rather than OpenSSL.
pub const fn is_aws_lc() -> bool {
    cfg!(feature = "aws-lc")
}

#[cfg(feature = "aws-lc")]
fn check(ret: c_int) -> Result<(), ErrorStack> {
    if ret == 1 {
        Ok(())
    } else {
        Err(ErrorStack::get())
    }
}

/// The lowest and highest protocol versions the context negotiates.
pub fn set_protocol_versions(
    builder: &mut SslContextBuilder,
    min: SslVersion,
    max: SslVersion,
) -> Result<(), ErrorStack> {
    #[cfg(not(feature = "aws-lc"))]
    {
        builder.set_min_proto_version(Some(min))?;
        builder.set_max_proto_version(Some(max))
    }
    #[cfg(feature = "aws-lc")]
    {
        let raw = |v: SslVersion| -> Result<u16, ErrorStack> {
            [
                (SslVersion::TLS1, ffi::TLS1_VERSION),
                (SslVersion::TLS1_1, ffi::TLS1_1_VERSION),
                (SslVersion::TLS1_2, ffi::TLS1_2_VERSION),
                (SslVersion::TLS1_3, ffi::TLS1_3_VERSION),
            ]
            .into_iter()
            .find(|(known, _)| *known == v)
            .and_then(|(_, raw)| u16::try_from(raw).ok())
            .ok_or_else(ErrorStack::get)
        };
        let (min, max) = (raw(min)?, raw(max)?);
        // SAFETY: `builder` owns a live SSL_CTX; both setters only store a version number,
        // which AWS-LC checks (0 and an error for an unknown one).
        unsafe {
            check(ffi::SSL_CTX_set_min_proto_version(builder.as_ptr(), min))?;
            check(ffi::SSL_CTX_set_max_proto_version(builder.as_ptr(), max))
        }
    }
}

/// The TLS 1.3 suites the context offers or accepts, in order (`TLS_AES_128_GCM_SHA256:...`).
pub fn set_tls13_ciphersuites(
    builder: &mut SslContextBuilder,
    list: &str,
) -> Result<(), ErrorStack> {
    #[cfg(not(feature = "aws-lc"))]
    {
        builder.set_ciphersuites(list)
    }
    #[cfg(feature = "aws-lc")]
    {
        let list = std::ffi::CString::new(list).map_err(|_| ErrorStack::get())?;
        // SAFETY: `builder` owns a live SSL_CTX; `list` is a NUL-terminated string AWS-LC
        // parses during the call and does not keep.
        check(unsafe { ffi::SSL_CTX_set_ciphersuites(builder.as_ptr(), list.as_ptr()) })
    }
}

/// How many TLS 1.3 session tickets the server sends after a handshake (0: none).
pub fn set_num_tickets(builder: &mut SslContextBuilder, tickets: usize) -> Result<(), ErrorStack> {
    #[cfg(not(feature = "aws-lc"))]
    {
        builder.set_num_tickets(tickets)
    }
    #[cfg(feature = "aws-lc")]
    {
        // SAFETY: `builder` owns a live SSL_CTX; the setter only stores a number (capped).
        check(unsafe { ffi::SSL_CTX_set_num_tickets(builder.as_ptr(), tickets) })
    }
}

/// A ClientHello callback: what it returns decides whether the handshake goes on (an error
/// ends it with an internal_error alert).
pub type ClientHelloFn = dyn Fn(&mut SslRef) -> Result<(), ErrorStack> + Send + Sync + 'static;

/// Calls `callback` on every ClientHello the context receives, before anything else of it is
/// processed (a session ticket included); [`crate::ossl::client_hello_server_name`] reads the
/// server name there. An error when the callback cannot be installed (AWS-LC: no ex_data
/// slot to keep it in), so that a context never runs without it unnoticed.
pub fn set_client_hello_callback<F>(
    builder: &mut SslContextBuilder,
    callback: F,
) -> Result<(), ErrorStack>
where
    F: Fn(&mut SslRef) -> Result<(), ErrorStack> + Send + Sync + 'static,
{
    #[cfg(not(feature = "aws-lc"))]
    builder.set_client_hello_callback(move |ssl, alert| {
        callback(ssl)
            .map(|()| ClientHelloResponse::SUCCESS)
            .inspect_err(|_| *alert = SslAlert::INTERNAL_ERROR)
    });
    #[cfg(feature = "aws-lc")]
    {
        let index = hello_index()?;
        let callback: Arc<ClientHelloFn> = Arc::new(callback);
        builder.set_ex_data(index, callback);
        // SAFETY: `builder` owns a live SSL_CTX; the setter only stores the function pointer
        // (its signature is AWS-LC's `SSL_client_hello_cb_fn`) and a null argument.
        unsafe {
            ffi::SSL_CTX_set_client_hello_cb(
                builder.as_ptr(),
                Some(client_hello_trampoline),
                std::ptr::null_mut(),
            )
        };
    }
    Ok(())
}

/// The ex_data slot of an SSL_CTX that holds its ClientHello callback (AWS-LC).
#[cfg(feature = "aws-lc")]
fn hello_index() -> Result<Index<SslContext, Arc<ClientHelloFn>>, ErrorStack> {
    static INDEX: OnceLock<Result<Index<SslContext, Arc<ClientHelloFn>>, ErrorStack>> =
        OnceLock::new();
    INDEX.get_or_init(SslContext::new_ex_index).clone()
}

/// AWS-LC's ClientHello callback: finds the Rust callback in the context's ex_data and runs
/// it. 1 is `SSL_CLIENT_HELLO_SUCCESS`, 0 `SSL_CLIENT_HELLO_ERROR`; 80 is internal_error.
#[cfg(feature = "aws-lc")]
unsafe extern "C" fn client_hello_trampoline(
    ssl: *mut ffi::SSL,
    alert: *mut c_int,
    _arg: *mut std::os::raw::c_void,
) -> c_int {
    const SSL_AD_INTERNAL_ERROR: c_int = 80;
    if ssl.is_null() {
        return 0;
    }
    // SAFETY: AWS-LC calls this with a live SSL (owned by the handshake for the duration of
    // the call) and a valid alert pointer. The SSL_CTX it returns is the one the callback was
    // installed on; the callback is cloned out of its ex_data (an Arc) before it runs, so a
    // context switch inside it (SSL_set_SSL_CTX) cannot free it while it runs. No panic
    // crosses the boundary: it is caught and turned into a failed handshake.
    let ssl = SslRef::from_ptr_mut(ssl);
    let ctx = ffi::SSL_get_SSL_CTX(ssl.as_ptr());
    if ctx.is_null() {
        return 0;
    }
    let ctx = SslContextRef::from_ptr(ctx);
    let callback = hello_index()
        .ok()
        .and_then(|index| ctx.ex_data(index).cloned());
    let Some(callback) = callback else {
        return 1;
    };
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| callback(ssl).is_ok()))
        .unwrap_or(false);
    if ok {
        1
    } else {
        if !alert.is_null() {
            *alert = SSL_AD_INTERNAL_ERROR;
        }
        0
    }
}

/// The ClientHello's and ServerHello's randoms (32 bytes each, TLS 1.2 key derivation):
/// the number of bytes copied into `out`.
pub fn client_random(ssl: &SslRef, out: &mut [u8]) -> usize {
    #[cfg(not(feature = "aws-lc"))]
    {
        ssl.client_random(out)
    }
    #[cfg(feature = "aws-lc")]
    // SAFETY: `ssl` is live; AWS-LC copies at most `out.len()` bytes into `out`.
    unsafe {
        ffi::SSL_get_client_random(ssl.as_ptr(), out.as_mut_ptr(), out.len())
    }
}

/// See [`client_random`].
pub fn server_random(ssl: &SslRef, out: &mut [u8]) -> usize {
    #[cfg(not(feature = "aws-lc"))]
    {
        ssl.server_random(out)
    }
    #[cfg(feature = "aws-lc")]
    // SAFETY: as in `client_random`.
    unsafe {
        ffi::SSL_get_server_random(ssl.as_ptr(), out.as_mut_ptr(), out.len())
    }
}

/// The suite's RFC name (`TLS_AES_128_GCM_SHA256`, `TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256`).
pub fn cipher_standard_name(cipher: &SslCipherRef) -> Option<&'static str> {
    #[cfg(not(feature = "aws-lc"))]
    {
        cipher.standard_name()
    }
    #[cfg(feature = "aws-lc")]
    // SAFETY: `cipher` points into AWS-LC's static suite table; the name it returns is a
    // static NUL-terminated string (or null).
    unsafe {
        let name = ffi::SSL_CIPHER_standard_name(cipher.as_ptr());
        if name.is_null() {
            return None;
        }
        std::ffi::CStr::from_ptr(name).to_str().ok()
    }
}
