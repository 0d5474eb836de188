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
//! `unsafe` lives in exactly two modules: [`ossl`] (raw OpenSSL calls the `openssl` crate does
//! not wrap) and [`kernel`] (the kernel's TLS socket interface).

pub mod kernel;
pub mod offload;
pub mod ossl;
pub mod record;
mod session;
pub mod tickets;

pub use session::{IoStatus, Progress, TlsError, TlsSession};
