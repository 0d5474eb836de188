//! `tft`, Tempesta's TLS client fingerprint: 64 bits computed from the ClientHello and the
//! outcome of the handshake, laid out as Tempesta's `TlsTft` in memory on x86-64 (the
//! value its access log prints and its `tft { hash ...; }` entries name):
//!
//! | bits  | field |
//! |-------|-------|
//! | 0-2   | the ALPN protocols offered that the listener knows, each shifted in (`h2` = 2, `http/1.1` = 1; over QUIC `h3` = 3, an extension), mod 8 |
//! | 3     | the client offered a protocol the listener does not know |
//! | 4     | the server name names a vhost |
//! | 5     | the session was resumed |
//! | 6     | TLS 1.3 (always 0: Tempesta leaves it so, issue #1031 there) |
//! | 7     | QUIC (an extension: Tempesta has no QUIC), so that no QUIC client shares a value with a TCP one |
//! | 16-31 | cipher suites, `h = h * 11 + suite` (u16, wrapping), the first 123 |
//! | 32-47 | extension types in the client's order, the same way |
//! | 48-63 | supported groups, the same way, as Tempesta's parser reads them (below) |
//!
//! Tempesta's group loop reads as many 2-byte entries as the list has *bytes* (at most 11
//! when the list is longer than 22 bytes), from a 256-byte buffer where each extension it
//! parses was copied in turn: past the list it reads zeros or what an earlier, longer
//! extension left there. [`supported_groups_hash`] reproduces that read from the captured
//! extensions (no memory beyond them is involved), so that a hash taken from Tempesta's
//! log matches the same client here. Its tests check the values tempesta-test expects.

use ktls::hello::{ext, ClientHello};

/// A TLS fingerprint (Tempesta's `tft`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tft(pub u64);

impl std::fmt::Display for Tft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

/// Tempesta's accumulating hash step (`COMPUTE_TF_ACCHASH`, prime 11) on 16 bits.
pub(super) fn acc16(hash: u16, value: u16) -> u16 {
    hash.wrapping_mul(11).wrapping_add(value)
}

/// Tempesta's ALPN ids (`TTLS_ALPN_ID_HTTP1`, `_HTTP2`), and ours for HTTP/3 (Tempesta has
/// none).
const ALPN_HTTP1: u8 = 1;
const ALPN_HTTP2: u8 = 2;
const ALPN_HTTP3: u8 = 3;

/// The QUIC bit (module documentation).
const QUIC: u64 = 1 << 7;

/// Cipher suites Tempesta stores (and hashes) before skipping the rest: its `css` array.
const MAX_SUITES: usize = 123;

/// Tempesta's buffer that the extensions it parses are copied to.
const EXT_BUFFER: usize = 256;

/// What the fingerprint needs besides the ClientHello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handshake {
    /// The listener offers HTTP/1.1 (`proto=https`).
    pub http1: bool,
    /// The listener offers HTTP/2 (`proto=h2`).
    pub h2: bool,
    /// The client's server name is the name of a vhost.
    pub vhost_found: bool,
    /// The handshake resumed a session.
    pub resumed: bool,
    /// A QUIC handshake: the listener offers HTTP/3 (`h3`) only, and the QUIC bit is set.
    pub quic: bool,
}

impl Tft {
    /// The fingerprint of `hello`, accepted as `handshake` says.
    pub fn of(hello: &ClientHello, handshake: Handshake) -> Tft {
        let (alpn, unknown) = alpn_bits(hello, handshake);
        let flags = u64::from(alpn & 0b111)
            | u64::from(unknown) << 3
            | u64::from(handshake.vhost_found) << 4
            | u64::from(handshake.resumed) << 5
            | if handshake.quic { QUIC } else { 0 };
        let suites = hello.cipher_suites().take(MAX_SUITES).fold(0, acc16);
        let extensions = hello.extensions().map(|(kind, _)| kind).fold(0, acc16);
        Tft(flags
            | u64::from(suites) << 16
            | u64::from(extensions) << 32
            | u64::from(supported_groups_hash(hello)) << 48)
    }
}

/// The ALPN field (3 bits, Tempesta's `alpn <<= 1; alpn += id` per known protocol offered)
/// and whether an offered protocol was unknown to the listener.
fn alpn_bits(hello: &ClientHello, handshake: Handshake) -> (u8, bool) {
    let mut alpn = 0u8;
    let mut unknown = false;
    for name in hello.alpn_protocols() {
        let id = match name {
            b"h2" if handshake.h2 => ALPN_HTTP2,
            b"http/1.1" if handshake.http1 => ALPN_HTTP1,
            b"h3" if handshake.quic => ALPN_HTTP3,
            _ => {
                unknown = true;
                continue;
            }
        };
        alpn = (alpn << 1).wrapping_add(id) & 0b111;
    }
    (alpn, unknown)
}

/// Whether Tempesta copies extension `kind` into its parse buffer (`ttls_ext_is_supported`;
/// the session ticket goes to a buffer of its own).
fn copied_by_tempesta(kind: u16) -> bool {
    matches!(
        kind,
        ext::SERVER_NAME
            | ext::SIGNATURE_ALGORITHMS
            | ext::SUPPORTED_GROUPS
            | ext::EC_POINT_FORMATS
            | ext::EXTENDED_MASTER_SECRET
            | ext::ALPN
            | ext::RENEGOTIATION_INFO
    )
}

/// The supported-groups part of the fingerprint, as Tempesta's parser computes it (module
/// documentation): 0 without the extension.
pub fn supported_groups_hash(hello: &ClientHello) -> u16 {
    let mut buffer = [0u8; EXT_BUFFER];
    let mut groups = None;
    for (kind, body) in hello.extensions() {
        if !copied_by_tempesta(kind) {
            continue;
        }
        // Tempesta refuses a longer one; copy what fits.
        let len = body.len().min(EXT_BUFFER);
        buffer[..len].copy_from_slice(&body[..len]);
        if kind == ext::SUPPORTED_GROUPS {
            groups = Some(body);
            break;
        }
    }
    let Some(body) = groups else {
        return 0;
    };
    let list_bytes = match body {
        [hi, lo, ..] => usize::from(u16::from_be_bytes([*hi, *lo])),
        _ => return 0,
    };
    // TTLS_ECP_DP_MAX (12) leaves room for 11 entries.
    let entries = if list_bytes / 2 + 1 > 12 {
        11
    } else {
        list_bytes
    };
    (0..entries)
        .map(|i| {
            let at = 2 + 2 * i;
            u16::from_be_bytes([
                buffer.get(at).copied().unwrap_or(0),
                buffer.get(at + 1).copied().unwrap_or(0),
            ])
        })
        .fold(0, acc16)
}

#[cfg(test)]
#[path = "tft_tests.rs"]
mod tests;
