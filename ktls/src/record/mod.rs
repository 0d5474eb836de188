//! The proxy's own TLS record layer: what the kernel's kTLS does, in user space, for kernels
//! without the `tls` module (or with `tls_ktls user`). After the handshake the connection
//! keeps only keys, IVs, sequence numbers and (TLS 1.3) traffic secrets; OpenSSL's SSL
//! object is freed. Records are protected with OpenSSL's AEADs through per-thread cipher
//! contexts ([`aead`]); the record format is this module's code ([`layer`], sans I/O),
//! driven on the socket by [`RecordSocket`].

mod aead;
mod aead_ctx;
// The direct path (OpenSSL's provider functions, AWS-LC's EVP_AEAD) against the EVP path.
#[cfg(test)]
mod aead_tests;
pub mod error;
#[cfg(feature = "aws-lc")]
mod evp_aead;
mod handover;
mod keys;
pub mod layer;
mod pool;
// OpenSSL 3's provider dispatch; AWS-LC has no providers (its contexts are EVP's).
#[cfg(not(feature = "aws-lc"))]
mod provider;
mod socket;
pub mod stats;
pub mod tls12;

pub use error::{alert, RecordError};
pub use handover::server_record_layer;
pub use keys::DirectionKeys;
pub use layer::{content, Inbound, RecordLayer};
pub use socket::{RecordSocket, MAX_KEY_UPDATES_WITHOUT_DATA, MAX_RECORDS_WITHOUT_DATA_PER_READ};

#[cfg(test)]
mod tests {
    /// What an idle connection on the proxy's record layer holds (docs/KTLS.md): keys and
    /// sequence numbers, no cipher context, no buffer.
    #[test]
    fn an_idle_connection_holds_a_few_hundred_bytes() {
        let layer = std::mem::size_of::<super::RecordLayer>();
        let socket = std::mem::size_of::<super::RecordSocket>();
        println!("RecordLayer {layer} bytes, RecordSocket {socket} bytes");
        assert!(layer <= 240, "RecordLayer grew to {layer} bytes");
        assert!(socket <= 272, "RecordSocket grew to {socket} bytes");
    }
}
