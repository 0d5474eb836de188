//! The client's ClientHello, captured during the handshake into a plain value the proxy reads
//! after it: the fields a TLS fingerprint is made of (legacy version, cipher suites, the
//! extensions in the order sent) and those a later step needs (the ALPN list and the server
//! name, which ACME's TLS-ALPN-01 answers by).
//!
//! [`capture`] runs inside the ClientHello callback (the only time the library exposes the
//! message): it copies the cipher suites and every extension (type, length, body, in the
//! client's order) into one buffer and keeps it on the SSL object; [`take`] moves it out
//! after the handshake. The readers below ([`ClientHello::alpn_protocols`], ...) parse that
//! buffer in safe code and treat malformed bodies as absent.
//!
//! Cost: one allocation per handshake that lives until the proxy drops the value (the
//! buffer: the cipher list plus 768 bytes, which holds the extensions of common clients
//! without regrowing; a client sending a post-quantum key share, about 1.2 KB, makes it
//! grow once or twice), and the library's own temporary list of extension types, freed in
//! the callback.

use std::os::raw::{c_int, c_uchar, c_uint};
use std::sync::OnceLock;

use foreign_types::ForeignTypeRef;
use openssl::ex_data::Index;
use openssl::ssl::{Ssl, SslRef};
use openssl_sys as ffi;

/// Extension types this module reads (IANA TLS ExtensionType values).
pub mod ext {
    pub const SERVER_NAME: u16 = 0;
    pub const SUPPORTED_GROUPS: u16 = 10;
    pub const EC_POINT_FORMATS: u16 = 11;
    pub const SIGNATURE_ALGORITHMS: u16 = 13;
    pub const ALPN: u16 = 16;
    pub const EXTENDED_MASTER_SECRET: u16 = 23;
    pub const SESSION_TICKET: u16 = 35;
    pub const PRE_SHARED_KEY: u16 = 41;
    pub const SUPPORTED_VERSIONS: u16 = 43;
    pub const RENEGOTIATION_INFO: u16 = 0xff01;
}

/// A ClientHello as the client sent it (the parts after the random and session id).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientHello {
    legacy_version: u16,
    /// The cipher suites (2 bytes each), then every extension as on the wire: type (2
    /// bytes), length (2), body.
    bytes: Vec<u8>,
    /// Where the extensions start in `bytes`.
    ciphers_len: usize,
}

impl ClientHello {
    /// A ClientHello of `legacy_version`, with the raw `cipher_suites` field and
    /// `extensions` in the client's order (tests, and the capture).
    pub fn from_parts<'a>(
        legacy_version: u16,
        cipher_suites: &[u8],
        extensions: impl IntoIterator<Item = (u16, &'a [u8])> + Clone,
    ) -> ClientHello {
        let ciphers_len = cipher_suites.len() & !1;
        let ext_len: usize = extensions
            .clone()
            .into_iter()
            .map(|(_, body)| 4 + body.len().min(usize::from(u16::MAX)))
            .sum();
        let mut bytes = Vec::with_capacity(ciphers_len + ext_len);
        bytes.extend_from_slice(&cipher_suites[..ciphers_len]);
        for (kind, body) in extensions {
            let body = &body[..body.len().min(usize::from(u16::MAX))];
            bytes.extend_from_slice(&kind.to_be_bytes());
            bytes.extend_from_slice(&(body.len() as u16).to_be_bytes());
            bytes.extend_from_slice(body);
        }
        ClientHello {
            legacy_version,
            bytes,
            ciphers_len,
        }
    }

    /// The ClientHello of a whole handshake message or TLS record carrying one (tests and
    /// tools: the proxy captures through the library). `None` if it is not one.
    pub fn parse(message: &[u8]) -> Option<ClientHello> {
        // A record header first (handshake, 0x16), then the handshake header (client_hello, 1).
        let body = match message {
            [0x16, _, _, _, _, rest @ ..] => rest,
            other => other,
        };
        let [1, a, b, c, rest @ ..] = body else {
            return None;
        };
        let len = usize::from(*a) << 16 | usize::from(*b) << 8 | usize::from(*c);
        let body = rest.get(..len)?;
        let legacy_version = u16::from_be_bytes([*body.first()?, *body.get(1)?]);
        let mut rest = body.get(2 + 32..)?;
        let session_id = usize::from(*rest.first()?);
        rest = rest.get(1 + session_id..)?;
        let (ciphers, after) = split_vec16(rest)?;
        let compression = usize::from(*after.first()?);
        let after = after.get(1 + compression..)?;
        let (mut list, _) = if after.is_empty() {
            (&[][..], after)
        } else {
            split_vec16(after)?
        };
        let mut extensions = Vec::new();
        while !list.is_empty() {
            let kind = u16::from_be_bytes([*list.first()?, *list.get(1)?]);
            let (body, tail) = split_vec16(list.get(2..)?)?;
            extensions.push((kind, body));
            list = tail;
        }
        Some(ClientHello::from_parts(
            legacy_version,
            ciphers,
            extensions.iter().copied(),
        ))
    }

    /// `legacy_version` (0x0303 for TLS 1.2 and 1.3 alike).
    pub fn legacy_version(&self) -> u16 {
        self.legacy_version
    }

    /// The cipher suites in the client's order, GREASE values included.
    pub fn cipher_suites(&self) -> impl Iterator<Item = u16> + '_ {
        u16s(&self.bytes[..self.ciphers_len])
    }

    /// Every extension, `(type, body)`, in the client's order.
    pub fn extensions(&self) -> Extensions<'_> {
        Extensions(&self.bytes[self.ciphers_len..])
    }

    /// The body of extension `kind`, if the client sent it.
    pub fn extension(&self, kind: u16) -> Option<&[u8]> {
        self.extensions().find(|(k, _)| *k == kind).map(|(_, b)| b)
    }

    /// `supported_groups` (named groups, RFC 8446 §4.2.7), in the client's order.
    pub fn supported_groups(&self) -> impl Iterator<Item = u16> + '_ {
        let list = self
            .extension(ext::SUPPORTED_GROUPS)
            .and_then(|b| split_vec16(b).map(|(l, _)| l))
            .unwrap_or(&[]);
        u16s(list)
    }

    /// `signature_algorithms` (RFC 8446 §4.2.3), in the client's order; empty when absent
    /// or malformed.
    pub fn signature_algorithms(&self) -> impl Iterator<Item = u16> + '_ {
        let list = self
            .extension(ext::SIGNATURE_ALGORITHMS)
            .and_then(|b| split_vec16(b).map(|(l, _)| l))
            .unwrap_or(&[]);
        u16s(list)
    }

    /// `supported_versions` (RFC 8446 §4.2.1), in the client's order; empty when absent
    /// (a TLS 1.2 client).
    pub fn supported_versions(&self) -> impl Iterator<Item = u16> + '_ {
        let list = self
            .extension(ext::SUPPORTED_VERSIONS)
            .and_then(|b| {
                let len = usize::from(*b.first()?);
                b.get(1..1 + len)
            })
            .unwrap_or(&[]);
        u16s(list)
    }

    /// The protocols of the ALPN extension (RFC 7301), in the client's order; empty when
    /// absent or malformed.
    pub fn alpn_protocols(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let mut list = self
            .extension(ext::ALPN)
            .and_then(|b| split_vec16(b).map(|(l, _)| l))
            .unwrap_or(&[]);
        std::iter::from_fn(move || {
            let (len, rest) = list.split_first()?;
            let name = rest.get(..usize::from(*len))?;
            list = &rest[name.len()..];
            Some(name)
        })
    }

    /// The host name of the `server_name` extension (RFC 6066 §3).
    pub fn server_name(&self) -> Option<&[u8]> {
        crate::ossl::parse_server_name(self.extension(ext::SERVER_NAME)?)
    }

    /// Whether the client offers to resume a session: a non-empty `session_ticket`
    /// (RFC 5077) or a `pre_shared_key` (RFC 8446 §4.2.11).
    pub fn offers_resumption(&self) -> bool {
        self.extension(ext::SESSION_TICKET)
            .is_some_and(|t| !t.is_empty())
            || self.extension(ext::PRE_SHARED_KEY).is_some()
    }
}

/// The extensions of a [`ClientHello`]: `(type, body)` in the client's order.
#[derive(Debug, Clone)]
pub struct Extensions<'a>(&'a [u8]);

impl<'a> Iterator for Extensions<'a> {
    type Item = (u16, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let [t0, t1, l0, l1, rest @ ..] = self.0 else {
            return None;
        };
        let len = usize::from(u16::from_be_bytes([*l0, *l1]));
        // The buffer was built by `from_parts`: every length fits.
        let body = rest.get(..len)?;
        self.0 = &rest[len..];
        Some((u16::from_be_bytes([*t0, *t1]), body))
    }
}

fn u16s(bytes: &[u8]) -> impl Iterator<Item = u16> + '_ {
    bytes
        .chunks_exact(2)
        .map(|pair| u16::from_be_bytes([pair[0], pair[1]]))
}

/// A vector with a 2-byte length prefix, and what follows it.
fn split_vec16(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = usize::from(u16::from_be_bytes([*bytes.first()?, *bytes.get(1)?]));
    let body = bytes.get(2..2 + len)?;
    Some((body, &bytes[2 + len..]))
}

/// The SSL ex_data slot the captured ClientHello waits in until the handshake ends.
fn index() -> Option<Index<Ssl, ClientHello>> {
    static INDEX: OnceLock<Option<Index<Ssl, ClientHello>>> = OnceLock::new();
    *INDEX.get_or_init(|| Ssl::new_ex_index().ok())
}

/// Copies the ClientHello being processed into `ssl`'s ex_data, for [`take`]. Call it from
/// a ClientHello callback (`settings::set_client_hello_callback`); elsewhere the library
/// exposes no ClientHello and nothing is kept. A second ClientHello (after a
/// HelloRetryRequest) keeps the first, the one the client chose freely.
pub fn capture(ssl: &mut SslRef) {
    let Some(index) = index() else {
        return;
    };
    if ssl.ex_data(index).is_some_and(|h| !h.bytes.is_empty()) {
        return;
    }
    if let Some(hello) = read_client_hello(ssl) {
        ssl.set_ex_data(index, hello);
    }
}

/// The ClientHello [`capture`] kept on `ssl`, in place: for the rest of the ClientHello
/// callback (its ALPN list and server name; on AWS-LC without the cipher suites, which
/// [`take`] adds).
pub fn peek(ssl: &SslRef) -> Option<&ClientHello> {
    ssl.ex_data(index()?).filter(|h| !h.bytes.is_empty())
}

/// The ClientHello [`capture`] kept on `ssl`, moved out (later calls get `None`). Call it
/// when the handshake is done: AWS-LC records the client's cipher suites only after the
/// ClientHello callback, so they are read here.
pub fn take(ssl: &mut SslRef) -> Option<ClientHello> {
    let mut hello = ssl.ex_data_mut(index()?).map(std::mem::take)?;
    if hello.bytes.is_empty() {
        return None;
    }
    if hello.ciphers_len == 0 {
        let suites = client_cipher_suites(ssl);
        let even = suites.len() & !1;
        hello.bytes.splice(0..0, suites[..even].iter().copied());
        hello.ciphers_len = even;
    }
    Some(hello)
}

/// The raw cipher_suites field of the client's ClientHello: OpenSSL has it during the
/// ClientHello callback only, AWS-LC from just after it to the SSL's end.
fn client_cipher_suites(ssl: &SslRef) -> &[u8] {
    let mut ciphers: *const c_uchar = std::ptr::null();
    // SAFETY: `ssl` is live. Where the library has the list, `ciphers` points at `len`
    // bytes it owns: OpenSSL's in the handshake state (valid until the callback returns),
    // AWS-LC's on the SSL object (valid until it is freed). The slice borrows `ssl`, so it
    // is copied before either can happen: within the callback, or by `take`, which holds
    // `ssl` mutably. Elsewhere the call returns 0 and the list is empty.
    unsafe {
        let len = ffi::SSL_client_hello_get0_ciphers(ssl.as_ptr(), &mut ciphers);
        if ciphers.is_null() || len == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(ciphers, len)
        }
    }
}

/// Reads the ClientHello through the library's ClientHello accessors into one buffer.
fn read_client_hello(ssl: &SslRef) -> Option<ClientHello> {
    let ptr = ssl.as_ptr();
    // SAFETY: `ptr` is a live SSL inside its ClientHello callback, where both libraries keep
    // the parsed ClientHello; the call only reads a number from it.
    let version = unsafe { ffi::SSL_client_hello_get0_legacy_version(ptr) };
    let legacy_version = u16::try_from(version).ok()?;
    // Empty on AWS-LC here: `take` reads them after the handshake.
    let cipher_suites = client_cipher_suites(ssl);
    // Room for the extensions of common clients (300 to 600 bytes) and, on AWS-LC, the
    // cipher list `take` adds, without a regrowth.
    let mut bytes = Vec::with_capacity(cipher_suites.len() + 768);
    bytes.extend_from_slice(&cipher_suites[..cipher_suites.len() & !1]);
    let ciphers_len = bytes.len();
    for_each_extension_type(ptr, |kind| {
        let mut data: *const c_uchar = std::ptr::null();
        let mut len: usize = 0;
        // SAFETY: as above; on success `data` points at `len` bytes of the extension's body,
        // owned by the SSL's handshake state until the callback returns, and copied into
        // `bytes` at once. A duplicate type cannot occur: both libraries refuse a
        // ClientHello that repeats an extension before the callback runs.
        let body = unsafe {
            if ffi::SSL_client_hello_get0_ext(ptr, c_uint::from(kind), &mut data, &mut len) != 1 {
                return;
            }
            if data.is_null() || len == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(data, len)
            }
        };
        // An extension body is at most 2^16 - 1 bytes on the wire.
        let Ok(body_len) = u16::try_from(body.len()) else {
            return;
        };
        bytes.extend_from_slice(&kind.to_be_bytes());
        bytes.extend_from_slice(&body_len.to_be_bytes());
        bytes.extend_from_slice(body);
    })?;
    Some(ClientHello {
        legacy_version,
        bytes,
        ciphers_len,
    })
}

/// Calls `f` with the type of each of the ClientHello's extensions, in the client's order.
fn for_each_extension_type(ssl: *mut ffi::SSL, mut f: impl FnMut(u16)) -> Option<()> {
    let mut list: *mut c_int = std::ptr::null_mut();
    let mut len: usize = 0;
    // SAFETY: `ssl` is live inside its ClientHello callback. On success the library
    // allocated `list` (`len` ints, in the order the extensions were received: OpenSSL
    // places each by its `received_order`, AWS-LC walks the message) and hands it to us: it
    // is read while alive, then freed once with OPENSSL_free, the library's own
    // deallocator. A null `list` (no extensions) is not freed.
    unsafe {
        if ffi::SSL_client_hello_get1_extensions_present(ssl, &mut list, &mut len) != 1 {
            return None;
        }
        if list.is_null() {
            return Some(());
        }
        for &kind in std::slice::from_raw_parts(list, len) {
            if let Ok(kind) = u16::try_from(kind) {
                f(kind);
            }
        }
        ffi::OPENSSL_free(list.cast());
    }
    Some(())
}

#[cfg(test)]
mod tests;
