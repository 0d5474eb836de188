//! The ClientHello of a QUIC handshake, for the TLS fingerprints (`tft`, JA4) that TCP takes
//! from OpenSSL's ClientHello callback (`ktls::hello`). rustls runs QUIC's handshake inside
//! quinn-proto and shows no ClientHello; but quinn-proto's crypto is pluggable, and it hands
//! the CRYPTO stream's bytes to the TLS session in order (`Session::read_handshake`). So
//! [`Capturing`] is rustls's QUIC server configuration whose sessions ([`CapturingSession`])
//! forward every call to rustls's and copy the first handshake message as it passes: the
//! ClientHello, its 4-byte header and its body. It is parsed as soon as it is whole, its
//! bytes are dropped, and nothing is copied after it (the client's Finished and every later
//! CRYPTO byte go to rustls untouched). A ClientHello that came whole in one call is parsed
//! where it lies, without the copy.
//!
//! Bounds: a ClientHello longer than [`MAX_HELLO`] is not captured (that connection gets no
//! fingerprint); the buffer is reserved once, at the length the header announces. After a
//! HelloRetryRequest the client's second ClientHello is not read: the first one is the
//! client's fingerprint, as a TCP client's first ClientHello is.
//!
//! The worker takes the parsed hello once the handshake completed ([`completed`], called at
//! quinn-proto's `Connected`), through `handshake_data`, with the server name rustls read.

use std::any::Any;
use std::sync::{Arc, Mutex, PoisonError};

use ktls::hello::ClientHello;
use quinn_proto::crypto::rustls::QuicServerConfig;
use quinn_proto::crypto::{self, ExportKeyingMaterialError, KeyPair, Keys, UnsupportedVersion};
use quinn_proto::transport_parameters::TransportParameters;
use quinn_proto::{ConnectionId, Side, TransportError};

/// The longest ClientHello captured (common clients send well under 4 KiB; a post-quantum
/// key share alone is 1.2 KB).
pub const MAX_HELLO: usize = 16 * 1024;

/// A handshake message's header: type (1 byte) and length (3).
const HEADER: usize = 4;

/// The `client_hello` handshake type.
const CLIENT_HELLO: u8 = 1;

/// How far the capture of a session's first handshake message is.
#[derive(Debug)]
enum Capture {
    /// The message's bytes so far (the header first).
    Reading(Vec<u8>),
    /// Parsed, until the worker takes it.
    Parsed(ClientHello),
    /// Taken, too long, or not a ClientHello: nothing more to do.
    Over,
}

impl Capture {
    /// The next bytes of the CRYPTO stream.
    fn feed(&mut self, mut bytes: &[u8]) {
        while let Capture::Reading(buf) = self {
            if bytes.is_empty() {
                return;
            }
            if buf.is_empty() && bytes.len() >= HEADER {
                // The header in this call: judged without a copy, and the whole message (the
                // common case) parsed where it lies.
                let Some(len) = message_len(bytes) else {
                    *self = Capture::Over;
                    return;
                };
                if let Some(message) = bytes.get(..len) {
                    *self = parsed(message);
                    return;
                }
                buf.reserve_exact(len);
            }
            let target = message_len(buf).unwrap_or(HEADER);
            let take = target.saturating_sub(buf.len()).min(bytes.len());
            let (now, later) = bytes.split_at(take);
            buf.extend_from_slice(now);
            bytes = later;
            match message_len(buf) {
                Some(len) if buf.len() == len => *self = parsed(buf),
                // The one allocation, when the header is in (a no-op after).
                Some(len) => buf.reserve_exact(len - buf.len()),
                None if buf.len() < HEADER => {}
                None => *self = Capture::Over,
            }
        }
    }
}

/// The whole length of the handshake message `bytes` starts with, once its header is in:
/// `None` before that, for another message than a ClientHello, or over [`MAX_HELLO`].
fn message_len(bytes: &[u8]) -> Option<usize> {
    let [CLIENT_HELLO, a, b, c, ..] = *bytes else {
        return None;
    };
    let len = HEADER + (usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c));
    (len <= MAX_HELLO).then_some(len)
}

fn parsed(message: &[u8]) -> Capture {
    ClientHello::parse(message).map_or(Capture::Over, Capture::Parsed)
}

/// rustls's QUIC server configuration, with sessions that capture the ClientHello.
pub struct Capturing(Arc<QuicServerConfig>);

impl Capturing {
    pub fn new(inner: QuicServerConfig) -> Capturing {
        Capturing(Arc::new(inner))
    }
}

impl crypto::ServerConfig for Capturing {
    fn initial_keys(
        &self,
        version: u32,
        dst_cid: &ConnectionId,
    ) -> Result<Keys, UnsupportedVersion> {
        self.0.initial_keys(version, dst_cid)
    }

    fn retry_tag(&self, version: u32, orig_dst_cid: &ConnectionId, packet: &[u8]) -> [u8; 16] {
        self.0.retry_tag(version, orig_dst_cid, packet)
    }

    fn start_session(
        self: Arc<Self>,
        version: u32,
        params: &TransportParameters,
    ) -> Box<dyn crypto::Session> {
        Box::new(CapturingSession {
            inner: self.0.clone().start_session(version, params),
            hello: Mutex::new(Capture::Reading(Vec::new())),
        })
    }
}

/// rustls's session, and the capture of its ClientHello. The lock is taken once, when the
/// worker takes the hello (`handshake_data` lends `&self` only); the capture itself goes
/// through `&mut self` without it.
pub struct CapturingSession {
    inner: Box<dyn crypto::Session>,
    hello: Mutex<Capture>,
}

/// What a completed QUIC handshake's `handshake_data` holds ([`completed`]).
pub struct HandshakeData {
    /// The server name the client sent, as rustls read it.
    pub server_name: Option<String>,
    /// The ClientHello: given out once, by the first call after the handshake completed.
    pub hello: Option<ClientHello>,
}

/// The server name and ClientHello of `session`'s completed handshake (the hello only on the
/// first call).
pub fn completed(session: &dyn crypto::Session) -> HandshakeData {
    let data = session.handshake_data();
    match data.and_then(|d| d.downcast::<HandshakeData>().ok()) {
        Some(data) => *data,
        None => HandshakeData {
            server_name: None,
            hello: None,
        },
    }
}

impl crypto::Session for CapturingSession {
    fn initial_keys(&self, dst_cid: &ConnectionId, side: Side) -> Keys {
        self.inner.initial_keys(dst_cid, side)
    }

    fn handshake_data(&self) -> Option<Box<dyn Any>> {
        let tls = self.inner.handshake_data()?;
        let tls = tls
            .downcast::<quinn_proto::crypto::rustls::HandshakeData>()
            .ok()?;
        let hello = match self.inner.is_handshaking() {
            true => None,
            false => {
                let mut capture = self.hello.lock().unwrap_or_else(PoisonError::into_inner);
                match std::mem::replace(&mut *capture, Capture::Over) {
                    Capture::Parsed(hello) => Some(hello),
                    _ => None,
                }
            }
        };
        Some(Box::new(HandshakeData {
            server_name: tls.server_name,
            hello,
        }))
    }

    fn peer_identity(&self) -> Option<Box<dyn Any>> {
        self.inner.peer_identity()
    }

    fn early_crypto(&self) -> Option<(Box<dyn crypto::HeaderKey>, Box<dyn crypto::PacketKey>)> {
        self.inner.early_crypto()
    }

    fn early_data_accepted(&self) -> Option<bool> {
        self.inner.early_data_accepted()
    }

    fn is_handshaking(&self) -> bool {
        self.inner.is_handshaking()
    }

    fn read_handshake(&mut self, buf: &[u8]) -> Result<bool, TransportError> {
        let capture = self.hello.get_mut().unwrap_or_else(PoisonError::into_inner);
        capture.feed(buf);
        self.inner.read_handshake(buf)
    }

    fn transport_parameters(&self) -> Result<Option<TransportParameters>, TransportError> {
        self.inner.transport_parameters()
    }

    fn write_handshake(&mut self, buf: &mut Vec<u8>) -> Option<Keys> {
        self.inner.write_handshake(buf)
    }

    fn next_1rtt_keys(&mut self) -> Option<KeyPair<Box<dyn crypto::PacketKey>>> {
        self.inner.next_1rtt_keys()
    }

    fn is_valid_retry(&self, orig_dst_cid: &ConnectionId, header: &[u8], payload: &[u8]) -> bool {
        self.inner.is_valid_retry(orig_dst_cid, header, payload)
    }

    fn export_keying_material(
        &self,
        output: &mut [u8],
        label: &[u8],
        context: &[u8],
    ) -> Result<(), ExportKeyingMaterialError> {
        self.inner.export_keying_material(output, label, context)
    }
}

#[cfg(test)]
#[path = "quic_hello_tests.rs"]
mod tests;
