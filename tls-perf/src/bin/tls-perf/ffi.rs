//! The only `unsafe` of tls-perf: the descriptor limit (no safe wrapper in our dependencies) and
//! `SSL_set_session`, which the openssl crate marks unsafe because OpenSSL cannot check that
//! the session belongs to the same context.

use std::io;

use openssl::error::ErrorStack;
use openssl::ssl::{SslRef, SslSessionRef};

/// The RLIMIT_NOFILE soft and hard limits.
#[derive(Debug, Clone, Copy)]
pub struct FileLimit {
    pub soft: u64,
    pub hard: u64,
}

/// Raises the soft descriptor limit to the hard one and returns the result.
pub fn raise_file_limit() -> io::Result<FileLimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable rlimit that outlives the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: `raised` is a valid rlimit read by the kernel only during the call.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        }
    }
    Ok(FileLimit {
        soft: limit.rlim_cur,
        hard: limit.rlim_max,
    })
}

/// Offers `session` for resumption on the connection `ssl`.
///
/// The caller guarantees that `session` was received on a connection created from the same
/// `SslContext` as `ssl`: each worker thread owns one context and its peers only keep sessions
/// they received themselves (see `peer.rs`).
pub fn offer_session(ssl: &mut SslRef, session: &SslSessionRef) -> Result<(), ErrorStack> {
    // SAFETY: the context invariant above is what SSL_set_session requires; OpenSSL takes its
    // own reference to the session, so `session` may be dropped afterwards.
    unsafe { ssl.set_session(session) }
}
