//! Raw OpenSSL calls that the `openssl` crate does not wrap: attaching an SSL object to a
//! socket fd, driving it without `SslStream`, asking whether kTLS is active, and the session
//! ticket key callback. This is the only module of the crate that calls OpenSSL unsafely.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::raw::{c_int, c_uchar, c_uint, c_void};
use std::sync::OnceLock;

use foreign_types::ForeignTypeRef;
use openssl::error::ErrorStack;
use openssl::ex_data::Index;
#[cfg(not(feature = "aws-lc"))]
use openssl::ssl::SslOptions;
use openssl::ssl::{SslContext, SslContextBuilder, SslContextRef, SslMode, SslRef};
use openssl_sys as ffi;

use crate::session::TlsError;
use crate::tickets;

/// `SSL_OP_ENABLE_KTLS` (ssl.h, OpenSSL 3.0); the `openssl` crate has no name for it.
/// AWS-LC has no kTLS of its own: the hand-over installs both directions (`offload`).
#[cfg(not(feature = "aws-lc"))]
const SSL_OP_ENABLE_KTLS: u64 = 1 << 3;
/// `BIO_CTRL_GET_KTLS_SEND` / `_RECV` (bio.h): what `BIO_get_ktls_send/recv` expand to.
#[cfg(not(feature = "aws-lc"))]
const BIO_CTRL_GET_KTLS_SEND: c_int = 73;
#[cfg(not(feature = "aws-lc"))]
const BIO_CTRL_GET_KTLS_RECV: c_int = 76;
/// `SSL_CTRL_SET_TLSEXT_TICKET_KEY_CB` (ssl.h); AWS-LC has a function for it.
#[cfg(not(feature = "aws-lc"))]
const SSL_CTRL_SET_TLSEXT_TICKET_KEY_CB: c_int = 72;

/// The calls openssl-sys declares for AWS-LC (its bindings are aws-lc-sys's, every symbol
/// prefixed) but not for OpenSSL: on OpenSSL they are declared here, against libssl's
/// stable ABI. A declaration of our own on AWS-LC would link to an unprefixed symbol, which
/// does not exist there (or worse, to a system libssl).
#[cfg(not(feature = "aws-lc"))]
mod sys {
    use openssl_sys as ffi;
    use std::os::raw::{c_int, c_long};

    extern "C" {
        // Part of libssl's stable ABI since 0.9.
        pub fn SSL_set_fd(ssl: *mut ffi::SSL, fd: c_int) -> c_int;
        // A plain setter on the SSL_CTX.
        pub fn SSL_CTX_set_timeout(ctx: *mut ffi::SSL_CTX, secs: c_long) -> c_long;
        // OpenSSL 1.1.1+: TLS 1.3 KeyUpdate, and whether any input is buffered.
        pub fn SSL_key_update(ssl: *mut ffi::SSL, updatetype: c_int) -> c_int;
        pub fn SSL_has_pending(ssl: *const ffi::SSL) -> c_int;
        // A plain setter on the SSL (OpenSSL 0.9.7+).
        pub fn SSL_set_msg_callback(ssl: *mut ffi::SSL, cb: Option<super::MsgCallback>);
        // OpenSSL 1.1.1+: pad TLS 1.3 records to a multiple of `block_size`.
        pub fn SSL_CTX_set_block_padding(ctx: *mut ffi::SSL_CTX, block_size: usize) -> c_int;
    }
}
#[cfg(feature = "aws-lc")]
mod sys {
    pub use openssl_sys::{SSL_CTX_set_timeout, SSL_has_pending, SSL_key_update};
}
use sys::*;

/// OpenSSL's `SSL_set_msg_callback` callback type.
#[cfg(not(feature = "aws-lc"))]
type MsgCallback = unsafe extern "C" fn(
    write_p: c_int,
    version: c_int,
    content_type: c_int,
    buf: *const c_void,
    len: usize,
    ssl: *mut ffi::SSL,
    arg: *mut c_void,
);

/// Makes OpenSSL report what this SSL writes to `offload::secrets` (the server's Finished and
/// the record headers after it), so that the hand-over knows the write sequence number.
/// AWS-LC tells the sequence number itself (`SSL_get_write_sequence`): nothing to count.
#[cfg(not(feature = "aws-lc"))]
pub(crate) fn count_records(ssl: &mut SslRef) {
    // SAFETY: `ssl` is live and borrowed mutably; SSL_set_msg_callback only stores the
    // function pointer, whose signature matches OpenSSL's `msg_callback`.
    unsafe { SSL_set_msg_callback(ssl.as_ptr(), Some(message_callback)) }
}

/// Stops [`count_records`] (at the hand-over: a connection that stays on OpenSSL's record
/// layer must not pay a callback per record for the rest of its life).
#[cfg(not(feature = "aws-lc"))]
pub(crate) fn stop_counting_records(ssl: &mut SslRef) {
    // SAFETY: as in `count_records`; a null callback is OpenSSL's "none".
    unsafe { SSL_set_msg_callback(ssl.as_ptr(), None) }
}

#[cfg(not(feature = "aws-lc"))]
unsafe extern "C" fn message_callback(
    write_p: c_int,
    _version: c_int,
    content_type: c_int,
    buf: *const c_void,
    len: usize,
    ssl: *mut ffi::SSL,
    _arg: *mut c_void,
) {
    // SAFETY: OpenSSL calls this with a live SSL and `buf` valid for `len` bytes for the
    // duration of the call. Nothing below panics, so no unwind crosses the FFI boundary.
    if write_p != 1 || ssl.is_null() || buf.is_null() {
        return;
    }
    let bytes = std::slice::from_raw_parts(buf.cast::<u8>(), len.min(1));
    crate::offload::note_written(SslRef::from_ptr(ssl), content_type, bytes);
}

/// Sets what every server and client context of this project needs for kTLS: the kTLS
/// option, buffers released while idle, and no read-ahead (so that OpenSSL never consumes an
/// application record the kernel should decrypt).
///
/// `ktls: false` (`tls_ktls off`) leaves the kTLS option off, so that OpenSSL does not offload
/// the send direction by itself either.
/// On AWS-LC `ktls` changes nothing: it has no kTLS of its own, and a peer's missing
/// close_notify is reported as OpenSSL's option makes it (a clean end of input).
pub fn configure_context(builder: &mut SslContextBuilder, ktls: bool) {
    #[cfg(not(feature = "aws-lc"))]
    {
        builder.set_options(SslOptions::IGNORE_UNEXPECTED_EOF);
        if ktls {
            builder.set_options(SslOptions::from_bits_retain(SSL_OP_ENABLE_KTLS));
        }
    }
    #[cfg(feature = "aws-lc")]
    let _ = ktls;
    // A retried SSL_write may pass the same bytes from another buffer (the proxy gathers
    // small segments into one record).
    builder.set_mode(SslMode::RELEASE_BUFFERS | SslMode::ACCEPT_MOVING_WRITE_BUFFER);
    builder.set_read_ahead(false);
}

/// The result of one OpenSSL call.
pub(crate) enum Outcome {
    Ok(usize),
    WantRead,
    WantWrite,
    Closed,
    Failed(TlsError),
}

#[cfg(not(feature = "aws-lc"))]
pub(crate) fn set_fd(ssl: &mut SslRef, fd: BorrowedFd<'_>) -> Result<(), ErrorStack> {
    // SAFETY: `ssl` is a live SSL object borrowed mutably; SSL_set_fd only creates a socket BIO
    // (BIO_NOCLOSE) for `fd` and stores it in the SSL; `fd` is open for the call (borrowed).
    // The BIO uses the number again only inside TlsSession's calls, each of which borrows the
    // same descriptor (checked by `AttachedFd`); freeing it never closes the descriptor.
    let ok = unsafe { SSL_set_fd(ssl.as_ptr(), fd.as_raw_fd()) };
    if ok == 1 {
        Ok(())
    } else {
        Err(ErrorStack::get())
    }
}

/// On AWS-LC a file-descriptor BIO, not the socket BIO of `SSL_set_fd`, which calls
/// `getsockopt(SO_ERROR)` before every read and write (10 of a handshake's 24 system calls).
#[cfg(feature = "aws-lc")]
pub(crate) fn set_fd(ssl: &mut SslRef, fd: BorrowedFd<'_>) -> Result<(), ErrorStack> {
    const BIO_NOCLOSE: c_int = 0;
    // SAFETY: BIO_new_fd stores the number `fd` (BIO_NOCLOSE: never closed by the BIO); `fd`
    // is open for the call, and the BIO uses it again only inside TlsSession's calls, each of
    // which borrows the same descriptor (checked by `AttachedFd`).
    let bio = unsafe { ffi::BIO_new_fd(fd.as_raw_fd(), BIO_NOCLOSE) };
    if bio.is_null() {
        return Err(ErrorStack::get());
    }
    // SAFETY: `ssl` is live (borrowed mutably), `bio` the live BIO above, whose one reference
    // we own; given as both, SSL_set_bio takes that one reference (AWS-LC's rule): it is
    // freed with the SSL object.
    unsafe { ffi::SSL_set_bio(ssl.as_ptr(), bio, bio) };
    Ok(())
}

/// Classifies the return value of an SSL_* I/O call. Must run right after the call, on the
/// same thread, before anything else touches the error queue.
fn classify(ssl: &SslRef, ret: c_int, done: usize) -> Outcome {
    if ret > 0 {
        return Outcome::Ok(done);
    }
    // SAFETY: `ssl` is live; SSL_get_error only reads the SSL and this thread's error queue.
    let code = unsafe { ffi::SSL_get_error(ssl.as_ptr(), ret) };
    match code {
        ffi::SSL_ERROR_WANT_READ => Outcome::WantRead,
        ffi::SSL_ERROR_WANT_WRITE => Outcome::WantWrite,
        ffi::SSL_ERROR_ZERO_RETURN => Outcome::Closed,
        ffi::SSL_ERROR_SYSCALL => {
            let errno = std::io::Error::last_os_error();
            let stack = ErrorStack::get();
            if errno.raw_os_error().unwrap_or(0) == 0 && stack.errors().is_empty() {
                Outcome::Closed
            } else if errno.raw_os_error().unwrap_or(0) != 0 {
                Outcome::Failed(TlsError::Io(errno))
            } else {
                Outcome::Failed(TlsError::Protocol(stack.to_string()))
            }
        }
        _ => Outcome::Failed(TlsError::Protocol(ErrorStack::get().to_string())),
    }
}

fn clear_errors() {
    // Stale errors from an earlier call on this thread would make SSL_get_error lie.
    let _ = ErrorStack::get();
}

pub(crate) fn do_handshake(ssl: &mut SslRef) -> Outcome {
    clear_errors();
    // SAFETY: `ssl` is live; its socket BIO's descriptor is borrowed by the caller
    // (TlsSession::handshake) for the duration of the call.
    let ret = unsafe { ffi::SSL_do_handshake(ssl.as_ptr()) };
    classify(ssl, ret, 0)
}

pub(crate) fn read(ssl: &mut SslRef, buf: &mut [u8]) -> Outcome {
    clear_errors();
    let mut done = 0usize;
    // SAFETY: `buf` is valid for `buf.len()` writable bytes; `done` is a valid out pointer.
    let ret = unsafe {
        ffi::SSL_read_ex(
            ssl.as_ptr(),
            buf.as_mut_ptr().cast::<c_void>(),
            buf.len(),
            &mut done,
        )
    };
    classify(ssl, ret, done)
}

pub(crate) fn write(ssl: &mut SslRef, buf: &[u8]) -> Outcome {
    clear_errors();
    let mut done = 0usize;
    // SAFETY: `buf` is valid for `buf.len()` readable bytes; `done` is a valid out pointer.
    // SSL_MODE_ENABLE_PARTIAL_WRITE is not set, so a retried write passes the same buffer.
    let ret = unsafe {
        ffi::SSL_write_ex(
            ssl.as_ptr(),
            buf.as_ptr().cast::<c_void>(),
            buf.len(),
            &mut done,
        )
    };
    classify(ssl, ret, done)
}

pub(crate) fn shutdown(ssl: &mut SslRef) {
    clear_errors();
    // SAFETY: `ssl` is live; SSL_shutdown writes at most one alert record to the socket.
    unsafe { ffi::SSL_shutdown(ssl.as_ptr()) };
    clear_errors();
}

pub(crate) fn has_pending(ssl: &SslRef) -> bool {
    // SSL_has_pending also sees raw record bytes read but not yet processed, which a
    // kernel-side reader would never get; SSL_pending sees only decrypted ones.
    // SAFETY: `ssl` is live; SSL_has_pending only reads the SSL's buffers.
    unsafe { SSL_has_pending(ssl.as_ptr()) == 1 }
}

/// Schedules a TLS 1.3 KeyUpdate (not requesting the peer's); it goes out with the next
/// write. Tests use it to check that a kTLS connection handles a peer's KeyUpdate.
pub fn key_update(ssl: &SslRef) -> Result<(), ErrorStack> {
    // SAFETY: `ssl` is live; SSL_key_update only marks it to send a KeyUpdate
    // (SSL_KEY_UPDATE_NOT_REQUESTED = 0) with the next write.
    let ok = unsafe { SSL_key_update(ssl.as_ptr(), 0) };
    if ok == 1 {
        Ok(())
    } else {
        Err(ErrorStack::get())
    }
}

/// Schedules a TLS 1.3 KeyUpdate that asks the peer to update its key too
/// (SSL_KEY_UPDATE_REQUESTED); it goes out with the next write.
pub fn request_key_update(ssl: &SslRef) -> Result<(), ErrorStack> {
    // SAFETY: `ssl` is live; SSL_key_update only marks it to send a KeyUpdate
    // (SSL_KEY_UPDATE_REQUESTED = 1) with the next write.
    let ok = unsafe { SSL_key_update(ssl.as_ptr(), 1) };
    if ok == 1 {
        Ok(())
    } else {
        Err(ErrorStack::get())
    }
}

/// Sends a TLS 1.3 KeyUpdate that asks the peer to update its key too, now rather than with
/// the next application data: OpenSSL writes a scheduled one in SSL_do_handshake, AWS-LC only
/// in SSL_write, where zero bytes are enough (as for its held-back tickets, crate::awslc).
/// The test clients that flood KeyUpdates use it on both libraries.
pub fn send_key_update(ssl: &SslRef) -> Result<(), ErrorStack> {
    request_key_update(ssl)?;
    // The outcome is read from the error queue too: nothing older may be in it.
    let _ = ErrorStack::get();
    let byte = 0u8;
    // SAFETY: `ssl` is live and its handshake is done (request_key_update refuses
    // otherwise). SSL_do_handshake on a finished connection only flushes what is scheduled;
    // SSL_write with a zero length reads nothing from the buffer and flushes the pending
    // KeyUpdate before it looks at the length.
    let ret = unsafe {
        if crate::settings::is_aws_lc() {
            ffi::SSL_write(ssl.as_ptr(), (&byte as *const u8).cast(), 0)
        } else {
            ffi::SSL_do_handshake(ssl.as_ptr())
        }
    };
    let errors = ErrorStack::get();
    let sent = if crate::settings::is_aws_lc() {
        ret >= 0 && errors.errors().is_empty()
    } else {
        ret == 1
    };
    if sent {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Makes OpenSSL pad every TLS 1.3 record it writes to a multiple of `block` bytes (the
/// differential tests compare the proxy's padding with it). Not on AWS-LC, which has no
/// record padding: `None` there.
#[cfg(not(feature = "aws-lc"))]
pub fn set_block_padding(builder: &mut SslContextBuilder, block: usize) -> Option<()> {
    // SAFETY: `builder` owns a live SSL_CTX; SSL_CTX_set_block_padding only stores a number.
    let ok = unsafe { SSL_CTX_set_block_padding(builder.as_ptr(), block) };
    (ok == 1).then_some(())
}

/// AWS-LC pads no records.
#[cfg(feature = "aws-lc")]
pub fn set_block_padding(_builder: &mut SslContextBuilder, _block: usize) -> Option<()> {
    None
}

/// Returns the allocator's free pages to the kernel (glibc `malloc_trim(0)`; elsewhere
/// nothing). Costs a walk over the free lists: call it rarely (the policy is in
/// `offload::memory`).
pub fn release_freed_handshake_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions; it only madvises pages that hold no live
    // allocation, under the allocator's own locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Whether OpenSSL handed the send direction of this connection to the kernel (never on
/// AWS-LC).
pub fn ktls_send_active(ssl: &SslRef) -> bool {
    #[cfg(feature = "aws-lc")]
    {
        let _ = ssl;
        false
    }
    #[cfg(not(feature = "aws-lc"))]
    // SAFETY: `ssl` is live; SSL_get_wbio returns its BIO (or null) without transferring
    // ownership; BIO_ctrl with GET_KTLS_SEND only reads the BIO's flags.
    unsafe {
        let bio = ffi::SSL_get_wbio(ssl.as_ptr());
        !bio.is_null() && ffi::BIO_ctrl(bio, BIO_CTRL_GET_KTLS_SEND, 0, std::ptr::null_mut()) > 0
    }
}

/// Whether OpenSSL handed the receive direction of this connection to the kernel (never on
/// AWS-LC).
pub fn ktls_recv_active(ssl: &SslRef) -> bool {
    #[cfg(feature = "aws-lc")]
    {
        let _ = ssl;
        false
    }
    #[cfg(not(feature = "aws-lc"))]
    // SAFETY: as for `ktls_send_active`, on the read BIO.
    unsafe {
        let bio = ffi::SSL_get_rbio(ssl.as_ptr());
        !bio.is_null() && ffi::BIO_ctrl(bio, BIO_CTRL_GET_KTLS_RECV, 0, std::ptr::null_mut()) > 0
    }
}

/// The ex_data slot of an SSL_CTX that holds its ticket key ring (freed with it).
fn ring_index() -> Result<Index<SslContext, tickets::RingHold>, ErrorStack> {
    static INDEX: OnceLock<Result<Index<SslContext, tickets::RingHold>, ErrorStack>> =
        OnceLock::new();
    INDEX.get_or_init(SslContext::new_ex_index).clone()
}

/// Makes `builder` issue and accept session tickets with the keys of ring `ring` (see
/// [`tickets`]), instead of OpenSSL's random per-process key. The context owns the ring from
/// then on: `ring` is moved into it and its keys are freed with it ([`tickets::RingHold`]).
/// One ring cannot be set on two contexts ([`tickets::RingHold`]'s examples).
pub fn set_ticket_keys(
    builder: &mut SslContextBuilder,
    ring: tickets::RingHold,
) -> Result<(), ErrorStack> {
    builder.set_ex_data(ring_index()?, ring);
    type TicketCb = unsafe extern "C" fn(
        *mut ffi::SSL,
        *mut c_uchar,
        *mut c_uchar,
        *mut ffi::EVP_CIPHER_CTX,
        *mut ffi::HMAC_CTX,
        c_int,
    ) -> c_int;
    let cb: TicketCb = ticket_key_callback;
    // SAFETY: AWS-LC declares the setter as a function taking exactly `TicketCb`'s
    // signature; it only stores the pointer in the live SSL_CTX `builder` owns.
    #[cfg(feature = "aws-lc")]
    let ret = unsafe { ffi::SSL_CTX_set_tlsext_ticket_key_cb(builder.as_ptr(), Some(cb)) };
    // SAFETY: SSL_CTRL_SET_TLSEXT_TICKET_KEY_CB expects exactly the signature of `TicketCb`
    // (OpenSSL's `tlsext_ticket_key_cb`); callback_ctrl stores it as a generic fn pointer and
    // casts it back before calling, so the transmute only erases the type for transport.
    #[cfg(not(feature = "aws-lc"))]
    let ret = unsafe {
        let generic = std::mem::transmute::<TicketCb, unsafe extern "C" fn()>(cb);
        ffi::SSL_CTX_callback_ctrl__fixed_rust(
            builder.as_ptr(),
            SSL_CTRL_SET_TLSEXT_TICKET_KEY_CB,
            Some(generic),
        )
    };
    if ret == 1 {
        Ok(())
    } else {
        Err(ErrorStack::get())
    }
}

/// OpenSSL's ticket key callback. `enc == 1`: choose the key for a new ticket, fill
/// `key_name` (16 bytes) and `iv` (16 bytes for AES-CBC) and initialise both contexts.
/// `enc == 0`: find the key named `key_name`; return 0 if unknown (full handshake), 1 if
/// current, 2 if valid but old (OpenSSL then issues a fresh ticket).
unsafe extern "C" fn ticket_key_callback(
    ssl: *mut ffi::SSL,
    key_name: *mut c_uchar,
    iv: *mut c_uchar,
    cipher_ctx: *mut ffi::EVP_CIPHER_CTX,
    hmac_ctx: *mut ffi::HMAC_CTX,
    enc: c_int,
) -> c_int {
    // SAFETY (whole function): OpenSSL calls this with a live SSL, `key_name` pointing at 16
    // bytes, `iv` at EVP_MAX_IV_LENGTH (16) bytes, and live cipher and HMAC contexts, all valid
    // for the duration of the call. No Rust panic can cross this boundary: nothing below panics.
    let ctx = ffi::SSL_get_SSL_CTX(ssl);
    if ctx.is_null() {
        return -1;
    }
    let ring = match ring_index() {
        Ok(index) => SslContextRef::from_ptr(ctx)
            .ex_data(index)
            .map(tickets::RingHold::id),
        Err(_) => None,
    };
    let name = std::slice::from_raw_parts_mut(key_name, tickets::KEY_NAME_LEN);
    if enc == 1 {
        // A context without a ring issues no ticket. The ClientHello callback may have
        // switched to such a context after the listener's settings chose to send tickets
        // (ACME's TLS-ALPN-01 validation context has none). OpenSSL reads 0 as "no ticket"
        // and completes the handshake; AWS-LC has no such answer (it would go on with the
        // contexts uninitialised), so there the ticket fails, after the handshake, as before.
        let Some(ring) = ring else {
            return if cfg!(feature = "aws-lc") { -1 } else { 0 };
        };
        let Some(key) = tickets::current_key(ring) else {
            return -1;
        };
        let iv = std::slice::from_raw_parts_mut(iv, 16);
        if ffi::RAND_bytes(iv.as_mut_ptr(), 16) != 1 {
            return -1;
        }
        name.copy_from_slice(&key.name);
        let ok = ffi::EVP_EncryptInit_ex(
            cipher_ctx,
            ticket_cipher(&key),
            std::ptr::null_mut(),
            key.aes_key().as_ptr(),
            iv.as_ptr(),
        ) == 1
            && ffi::HMAC_Init_ex(
                hmac_ctx,
                key.hmac_key().as_ptr().cast(),
                key.hmac_key().len() as _,
                ffi::EVP_sha256(),
                std::ptr::null_mut(),
            ) == 1;
        return if ok { 1 } else { -1 };
    }
    let mut wanted = [0u8; tickets::KEY_NAME_LEN];
    wanted.copy_from_slice(name);
    // Only the ring of the context SNI chose (switched in the client-hello callback, before
    // the ticket is decrypted): another vhost's or an earlier configuration's tickets are
    // unknown here, and the client gets a full handshake.
    let Some((key, fresh)) = ring.and_then(|ring| tickets::find_key(ring, &wanted)) else {
        return 0;
    };
    let ok = ffi::HMAC_Init_ex(
        hmac_ctx,
        key.hmac_key().as_ptr().cast(),
        key.hmac_key().len() as _,
        ffi::EVP_sha256(),
        std::ptr::null_mut(),
    ) == 1
        && ffi::EVP_DecryptInit_ex(
            cipher_ctx,
            ticket_cipher(&key),
            std::ptr::null_mut(),
            key.aes_key().as_ptr(),
            iv,
        ) == 1;
    // TLS 1.3 tickets are meant for one use (RFC 8446 C.4, and browsers use them so):
    // returning 2 makes OpenSSL send a fresh ticket after every resumption, as it does after
    // full handshakes. A TLS 1.2 ticket is renewed only when its key is the previous one.
    let tls13 = ffi::SSL_version(ssl) == ffi::TLS1_3_VERSION;
    match (ok, fresh && !tls13) {
        (false, _) => -1,
        (true, true) => 1,
        (true, false) => 2,
    }
}

/// The AES-CBC cipher a ticket key seals with (nginx's 48-byte keys: AES-128).
fn ticket_cipher(key: &tickets::TicketKey) -> *const ffi::EVP_CIPHER {
    // SAFETY: both return a pointer to a static cipher table the library owns.
    unsafe {
        match key.cipher {
            tickets::TicketCipher::Aes256Cbc => ffi::EVP_aes_256_cbc(),
            tickets::TicketCipher::Aes128Cbc => ffi::EVP_aes_128_cbc(),
        }
    }
}

/// Sets how long sessions (and so tickets) stay valid, in seconds (`SSL_CTX_set_timeout`):
/// the ticket lifetime hint clients see.
pub fn set_session_timeout(builder: &mut SslContextBuilder, secs: u32) {
    // SAFETY: `builder` owns a live SSL_CTX; SSL_CTX_set_timeout only stores a number.
    unsafe {
        // A `long` on OpenSSL, a `uint32_t` on AWS-LC: either holds every u32.
        #[allow(clippy::useless_conversion)]
        SSL_CTX_set_timeout(builder.as_ptr(), secs.into());
    }
}

/// The host name of the `server_name` extension (RFC 6066 §3) of the ClientHello being
/// processed, for a client-hello callback; `None` when absent or malformed.
pub fn client_hello_server_name(ssl: &SslRef) -> Option<&[u8]> {
    const TLSEXT_TYPE_SERVER_NAME: c_uint = 0;
    let mut data: *const c_uchar = std::ptr::null();
    let mut len: usize = 0;
    // SAFETY: `ssl` is a live SSL inside its client-hello callback (the only time the
    // ClientHello is available; elsewhere the call returns 0). On success OpenSSL points
    // `data` at `len` bytes owned by the SSL object, valid until the callback returns, which
    // the returned slice's lifetime (tied to `ssl`) does not outlive in practice: callers use
    // it within the callback.
    let ext = unsafe {
        if ffi::SSL_client_hello_get0_ext(
            ssl.as_ptr(),
            TLSEXT_TYPE_SERVER_NAME,
            &mut data,
            &mut len,
        ) != 1
            || data.is_null()
        {
            return None;
        }
        std::slice::from_raw_parts(data, len)
    };
    parse_server_name(ext)
}

/// The first `host_name` entry of a `server_name` extension body.
pub(crate) fn parse_server_name(ext: &[u8]) -> Option<&[u8]> {
    let list_len = usize::from(u16::from_be_bytes([*ext.first()?, *ext.get(1)?]));
    let mut list = ext.get(2..2 + list_len)?;
    while let [kind, hi, lo, rest @ ..] = list {
        let len = usize::from(u16::from_be_bytes([*hi, *lo]));
        let name = rest.get(..len)?;
        if *kind == 0 {
            return Some(name);
        }
        list = rest.get(len..)?;
    }
    None
}

#[cfg(test)]
mod server_name_tests {
    use super::parse_server_name;

    #[test]
    fn host_name_entries_are_found_and_malformed_ones_refused() {
        let ext = [
            0, 14, 0, 0, 11, b'e', b'x', b'a', b'm', b'p', b'l', b'e', b'.', b'c', b'o', b'm',
        ];
        assert_eq!(parse_server_name(&ext), Some(&b"example.com"[..]));
        assert_eq!(parse_server_name(&ext[..10]), None);
        assert_eq!(parse_server_name(&[0, 3, 1, 0, 0]), None);
        assert_eq!(parse_server_name(&[]), None);
    }
}
