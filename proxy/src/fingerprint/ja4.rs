//! JA4, FoxIO's TLS client fingerprint (the BSD-licensed part of their suite), from the
//! ClientHello that `ktls::hello` captured. Written to the access log beside Tempesta's
//! `tft`; no limit or blocklist reads it.
//!
//! `t13d1516h2_8daaf6152771_e5627efa2ab1`, in three parts:
//!
//! - `a`: `t` (TLS over TCP) or `q` (QUIC; the proxy serves no DTLS), the highest version
//!   (`supported_versions` when sent, else `legacy_version`: `13`, `12`, `11`, `10`, `s3`, `s2`,
//!   `s1`, otherwise `00`), `d` with a server name and `i` without, the number of cipher suites
//!   and of extensions (two digits, at most 99), and the first and last characters of the first
//!   ALPN protocol (`00` without one; when either is not an ASCII letter or digit, the first
//!   and last hex digits of the protocol's bytes);
//! - `b`: the first 12 hex digits of the SHA-256 of the cipher suites as 4-digit lower-case hex,
//!   sorted, joined by commas;
//! - `c`: the same of the extension types sorted, without `server_name` (0) and ALPN (16),
//!   then `_` and the signature algorithms in the client's order (no `_` without them).
//!
//! GREASE values (RFC 8701) are left out everywhere, counts included. An empty list hashes to
//! twelve zeros.

use ktls::hello::{ext, ClientHello};

/// The length of every JA4 value.
const LEN: usize = 36;

/// A JA4 fingerprint: 36 ASCII bytes, kept inline so a request's log record copies it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ja4([u8; LEN]);

impl Ja4 {
    pub fn as_str(&self) -> &str {
        // Built from ASCII only (`of`).
        std::str::from_utf8(&self.0).unwrap_or("")
    }

    /// The fingerprint of `hello`, sent over TCP.
    pub fn of(hello: &ClientHello) -> Ja4 {
        Ja4::over('t', hello)
    }

    /// The fingerprint of `hello`, sent over QUIC.
    pub fn of_quic(hello: &ClientHello) -> Ja4 {
        Ja4::over('q', hello)
    }

    /// The fingerprint of `hello`, its transport's letter first.
    fn over(transport: char, hello: &ClientHello) -> Ja4 {
        let ciphers: Vec<u16> = hello.cipher_suites().filter(|&v| !is_grease(v)).collect();
        let extensions: Vec<u16> = hello
            .extensions()
            .map(|(kind, _)| kind)
            .filter(|&v| !is_grease(v))
            .collect();
        let (alpn_first, alpn_last) = alpn_chars(hello);
        let mut text = format!(
            "{transport}{}{}{:02}{:02}{}{}_",
            version_label(hello),
            if hello.extension(ext::SERVER_NAME).is_some() {
                'd'
            } else {
                'i'
            },
            ciphers.len().min(99),
            extensions.len().min(99),
            alpn_first,
            alpn_last,
        );
        text.push_str(&truncated_hash(&sorted_hex(ciphers)));
        text.push('_');
        let mut c = sorted_hex(
            extensions
                .into_iter()
                .filter(|&v| v != ext::SERVER_NAME && v != ext::ALPN)
                .collect(),
        );
        let sigalgs: Vec<String> = hello
            .signature_algorithms()
            .filter(|&v| !is_grease(v))
            .map(|v| format!("{v:04x}"))
            .collect();
        if !sigalgs.is_empty() {
            c.push('_');
            c.push_str(&sigalgs.join(","));
        }
        text.push_str(&truncated_hash(&c));
        let mut bytes = [b'0'; LEN];
        for (slot, byte) in bytes.iter_mut().zip(text.bytes()) {
            *slot = byte;
        }
        Ja4(bytes)
    }
}

impl std::fmt::Display for Ja4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for Ja4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ja4({})", self.as_str())
    }
}

/// A GREASE value (RFC 8701 §2): `0x?a?a` with both bytes equal.
pub fn is_grease(v: u16) -> bool {
    v & 0x0f0f == 0x0a0a && v >> 8 == v & 0xff
}

/// The two characters of the version: the highest non-GREASE `supported_versions` entry, or
/// `legacy_version` without that extension.
fn version_label(hello: &ClientHello) -> &'static str {
    let version = hello
        .supported_versions()
        .filter(|&v| !is_grease(v))
        .max()
        .unwrap_or_else(|| hello.legacy_version());
    match version {
        0x0304 => "13",
        0x0303 => "12",
        0x0302 => "11",
        0x0301 => "10",
        0x0300 => "s3",
        0x0200 => "s2",
        0x0100 => "s1",
        _ => "00",
    }
}

/// The first and last characters of the first ALPN protocol (module documentation).
fn alpn_chars(hello: &ClientHello) -> (char, char) {
    let Some(name) = hello.alpn_protocols().next() else {
        return ('0', '0');
    };
    let (Some(&first), Some(&last)) = (name.first(), name.last()) else {
        return ('0', '0');
    };
    if first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric() {
        (char::from(first), char::from(last))
    } else {
        (hex_digit(first >> 4), hex_digit(last & 0xf))
    }
}

fn hex_digit(nibble: u8) -> char {
    char::from(b"0123456789abcdef"[usize::from(nibble & 0xf)])
}

/// `values` as 4-digit lower-case hex, sorted, joined by commas.
fn sorted_hex(mut values: Vec<u16>) -> String {
    values.sort_unstable();
    values
        .iter()
        .map(|v| format!("{v:04x}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The first 12 hex digits of the SHA-256 of `text`; twelve zeros for an empty `text`.
pub(super) fn truncated_hash(text: &str) -> String {
    if text.is_empty() {
        return "0".repeat(12);
    }
    openssl::sha::sha256(text.as_bytes())[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
#[path = "ja4_tests.rs"]
mod tests;
