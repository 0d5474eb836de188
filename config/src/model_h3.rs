//! Extension: the bounds of the QUIC side of HTTP/3 (`h3_*` directives). Tempesta has no
//! HTTP/3; each bound caps what one client (or a flood of them) can make a worker hold.

use serde::{Deserialize, Serialize};

/// What each worker's QUIC endpoint and each HTTP/3 connection may hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct H3Limits {
    /// `h3_max_handshakes N`: QUIC handshakes in progress per worker; a new connection
    /// beyond them is refused (CONNECTION_REFUSED). 1024.
    pub max_handshakes: u32,
    /// `h3_retry_above N`: with more handshakes than this in progress on the worker, a
    /// client whose address is not validated yet is sent a Retry first (RFC 9000 §8.1.2).
    /// 0: always. 64.
    pub retry_above: u32,
    /// `h3_stream_window BYTES`: request bytes a stream may have in flight to us. 256K.
    pub stream_window: u32,
    /// `h3_connection_window BYTES`: request bytes a connection may have in flight, all
    /// streams together. 2M.
    pub connection_window: u32,
    /// `h3_send_window BYTES`: response bytes a connection keeps unacknowledged. 2M.
    pub send_window: u32,
    /// `h3_crypto_buffer BYTES`: out-of-order CRYPTO data a connection buffers per
    /// encryption level. 16K.
    pub crypto_buffer: u32,
    /// `h3_qpack_table BYTES`: the QPACK dynamic table the client's encoder may use. 4096.
    pub qpack_table: u32,
    /// `h3_qpack_blocked_streams N`: request streams waiting for QPACK inserts. 16.
    pub qpack_blocked_streams: u32,
}

impl Default for H3Limits {
    fn default() -> Self {
        H3Limits {
            max_handshakes: 1024,
            retry_above: 64,
            stream_window: 256 << 10,
            connection_window: 2 << 20,
            send_window: 2 << 20,
            crypto_buffer: 16 << 10,
            qpack_table: 4096,
            qpack_blocked_streams: 16,
        }
    }
}
