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
//! quinn-proto's `Connected`), through `handshake_data`, with the server name rustls read
//! and whether the session was resumed: rustls does not say so through quinn-proto, but its
//! ServerHello does (a TLS 1.3 server accepts a ticket by answering with `pre_shared_key`,
//! RFC 8446 §4.2.11), and the session sees it go out (`write_handshake`).

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

/// Whether `flight`, when it starts with a ServerHello, accepts a pre-shared key (the
/// `pre_shared_key` extension, 41); None for anything else or a message cut short.
fn accepts_psk(flight: &[u8]) -> Option<bool> {
    const SERVER_HELLO: u8 = 2;
    const PRE_SHARED_KEY: u16 = 41;
    let u16_at = |at: usize| Some(u16::from_be_bytes([*flight.get(at)?, *flight.get(at + 1)?]));
    if *flight.first()? != SERVER_HELLO {
        return None;
    }
    // Header (4), legacy_version (2), random (32), then the legacy session id's length.
    let session_id = usize::from(*flight.get(HEADER + 34)?);
    // The session id, cipher suite (2), compression method (1), the extensions' length.
    let mut at = HEADER + 35 + session_id + 3;
    let end = at + 2 + usize::from(u16_at(at)?);
    if end > flight.len() {
        return None;
    }
    at += 2;
    while at + 4 <= end {
        if u16_at(at)? == PRE_SHARED_KEY {
            return Some(true);
        }
        at += 4 + usize::from(u16_at(at + 2)?);
    }
    Some(false)
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
            resumed: false,
        })
    }
}

/// rustls's session, and the capture of its ClientHello. The lock is taken once, when the
/// worker takes the hello (`handshake_data` lends `&self` only); the capture itself goes
/// through `&mut self` without it.
pub struct CapturingSession {
    inner: Box<dyn crypto::Session>,
    hello: Mutex<Capture>,
    /// The ServerHello sent accepted the client's ticket.
    resumed: bool,
}

/// What a completed QUIC handshake's `handshake_data` holds ([`completed`]).
pub struct HandshakeData {
    /// The server name the client sent, as rustls read it.
    pub server_name: Option<String>,
    /// The ClientHello: given out once, by the first call after the handshake completed.
    pub hello: Option<ClientHello>,
    /// The handshake resumed a session (a ticket).
    pub resumed: bool,
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
            resumed: false,
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
            resumed: self.resumed,
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
        let before = buf.len();
        let keys = self.inner.write_handshake(buf);
        // The ServerHello is the first message of the server's first flight. (A
        // HelloRetryRequest, which has its form, never carries `pre_shared_key`.)
        if let Some(accepted) = buf.get(before..).and_then(accepts_psk) {
            self.resumed = accepted;
        }
        keys
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
