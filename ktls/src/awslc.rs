//! What the hand-over reads from AWS-LC directly, where OpenSSL needs the keylog and message
//! callbacks (`offload::secrets`): the current traffic secrets and sequence numbers of a
//! finished TLS 1.3 handshake, after the NewSessionTickets it holds back went out.
//!
//! AWS-LC queues the TLS 1.3 NewSessionTickets at the end of the handshake but writes them
//! only with the first application write (to share a packet with it). The hand-over frees
//! the SSL object, so it first makes that write happen with zero bytes ([`send_held_back`]):
//! otherwise the client would never get a ticket, and the write sequence number read before
//! it would be off by the tickets.

use foreign_types::ForeignTypeRef;
use openssl::ssl::SslRef;
use openssl_sys as ffi;

use crate::offload::Secret;

/// The longest TLS 1.3 secret is a SHA-384 output.
const MAX_SECRET_LEN: usize = 48;
/// `SSL_NOTHING` (ssl.h, = `SSL_ERROR_NONE` in AWS-LC): no I/O is pending.
const SSL_NOTHING: std::os::raw::c_int = 0;

/// Why the held-back handshake records could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeldBack {
    /// The socket took only part of them: what remains is in the SSL's write buffer.
    Pending,
    /// AWS-LC refused the write (a closed or failed connection).
    Failed,
}

/// Writes what AWS-LC holds back after a server handshake (TLS 1.3 NewSessionTickets, a
/// KeyUpdate acknowledgement) with a zero-byte application write, which sends no record of
/// its own. `Ok` when nothing is left in the SSL's buffers.
pub(crate) fn send_held_back(ssl: &mut SslRef) -> Result<(), HeldBack> {
    let _ = openssl::error::ErrorStack::get();
    let byte = 0u8;
    // SAFETY: `ssl` is live, its handshake is done and its socket BIO's descriptor is
    // borrowed by the caller (`offload`) for the duration of the call. A zero length makes
    // AWS-LC read nothing from the buffer; it only flushes its pending flight. SSL_write
    // returns 0 both for "wrote zero bytes" and for some failures, so the outcome is read from
    // SSL_want (no I/O pending) and the error queue (empty), which the call reset first.
    let (ret, want) = unsafe {
        let ret = ffi::SSL_write(ssl.as_ptr(), (&byte as *const u8).cast(), 0);
        (ret, ffi::SSL_want(ssl.as_ptr()))
    };
    let errors = openssl::error::ErrorStack::get();
    if ret >= 0 && want == SSL_NOTHING && errors.errors().is_empty() {
        Ok(())
    } else if want != SSL_NOTHING && errors.errors().is_empty() {
        Err(HeldBack::Pending)
    } else {
        Err(HeldBack::Failed)
    }
}

/// Whether `ssl` is the server side of its connection.
fn is_server(ssl: &SslRef) -> bool {
    // SAFETY: `ssl` is live; SSL_is_server only reads a flag.
    unsafe { ffi::SSL_is_server(ssl.as_ptr()) == 1 }
}

/// The current TLS 1.3 traffic secret the client writes with (`client`) or the server does,
/// whichever side `ssl` is; `None` for TLS 1.2 or during a handshake.
pub(crate) fn traffic_secret_of(ssl: &SslRef, client: bool) -> Option<Secret> {
    traffic_secret(ssl, client == is_server(ssl))
}

/// The sequence numbers of the next record from the client and from the server (see
/// [`sequences`]), whichever side `ssl` is.
pub(crate) fn sequences_of_client_and_server(ssl: &SslRef) -> (u64, u64) {
    let (read, write) = sequences(ssl);
    if is_server(ssl) {
        (read, write)
    } else {
        (write, read)
    }
}

/// The current TLS 1.3 traffic secret of one direction (`read`: the peer's), or `None` for
/// TLS 1.2 or during a handshake.
fn traffic_secret(ssl: &SslRef, read: bool) -> Option<Secret> {
    let mut buf = [0u8; MAX_SECRET_LEN];
    let mut len = buf.len();
    // SAFETY: `ssl` is live; `buf` is writable for `len` bytes, which AWS-LC checks against
    // the secret's length before it copies, and `len` is a valid in/out pointer.
    let ok = unsafe {
        if read {
            ffi::SSL_get_read_traffic_secret(ssl.as_ptr(), buf.as_mut_ptr(), &mut len)
        } else {
            ffi::SSL_get_write_traffic_secret(ssl.as_ptr(), buf.as_mut_ptr(), &mut len)
        }
    };
    let secret = (ok == 1 && len <= MAX_SECRET_LEN).then(|| Secret::from_bytes(&buf[..len]));
    buf.fill(0);
    std::hint::black_box(&buf);
    secret
}

/// The sequence numbers of the next record read and the next record written, in the current
/// epoch (TLS 1.3: of the current traffic keys).
pub(crate) fn sequences(ssl: &SslRef) -> (u64, u64) {
    // SAFETY: `ssl` is live; both getters only read its record state.
    unsafe {
        (
            ffi::SSL_get_read_sequence(ssl.as_ptr()),
            ffi::SSL_get_write_sequence(ssl.as_ptr()),
        )
    }
}
