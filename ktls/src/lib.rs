//! TLS on a socket file descriptor.
//!
//! OpenSSL does the handshake on the connection's own fd (`SSL_set_fd`): OpenSSL turns kTLS on
//! only for socket BIOs, never for the custom BIO that `openssl::ssl::SslStream` uses. After
//! the handshake the record layer moves into the kernel where it can ([`offload`]); where it
//! cannot, the connection stays on [`TlsSession`] (user-space `SSL_read`/`SSL_write`).
//!
//! Where the kernel cannot take the records, the proxy's own record layer does ([`record`]);
//! OpenSSL's SSL object is freed either way.
//!
//! `unsafe` lives in [`ossl`], [`settings`], [`hello`] (the ClientHello capture), `awslc` and `alloc` (raw OpenSSL or AWS-LC calls
//! the `openssl` crate does not wrap, or compiles out on AWS-LC), [`kernel`] (the kernel's TLS socket interface), [`sockopt`] (listener options no
//! socket crate names) and [`resume`] (client session resumption, whose requirement it
//! checks so that callers, the benchmark tools and tests included, need no `unsafe`).
//!
//! No connection type here owns or keeps its socket: every call that reaches the socket
//! borrows it (`BorrowedFd`), so the descriptor is open for the call by construction, and the
//! type refuses a descriptor other than the one it was attached to (`TlsError::WrongFd`).

#[cfg(feature = "mimalloc")]
mod alloc;
#[cfg(feature = "aws-lc")]
mod awslc;
pub mod hello;
pub mod hmac;
pub mod kernel;
pub mod offload;
pub mod ossl;
pub mod readiness;
pub mod record;
pub mod resume;
mod session;
pub mod settings;
pub mod sockopt;
pub mod tickets;

#[cfg(feature = "mimalloc")]
pub use alloc::use_mimalloc;
pub use session::{IoStatus, Progress, TlsError, TlsSession};
