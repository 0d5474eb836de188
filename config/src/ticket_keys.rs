//! Session ticket key files (`tls_tickets keys=FILE`, an extension): the key ring a platform
//! writes and rotates for a whole fleet.
//!
//! Two layouts are read, the ones nginx and HAProxy operators already produce:
//! - text, one base64 key per line (`openssl rand 80 | openssl base64 -A`), blank lines and
//!   `#` comments skipped;
//! - a bare binary key of 48 or 80 bytes (`openssl rand 80 > FILE`, nginx's
//!   `ssl_session_ticket_key` file), a ring of one key.
//!
//! Each key is 80 bytes (a 16-byte name, a 32-byte HMAC-SHA256 key, a 32-byte AES-256-CBC
//! key) or 48 bytes (a 16-byte name, a 16-byte AES-128-CBC key, a 16-byte HMAC key): nginx's
//! layouts, so a ticket sealed by one is opened by the other. The first key seals new
//! tickets; every key opens them. Only bytes are read here: no cryptography, no I/O beyond
//! [`read`].

use std::path::Path;

/// Bytes of a key's name, the clear prefix of every ticket it seals.
pub const NAME_LEN: usize = 16;
/// Keys a ring holds at most: each ticket is looked up among them.
pub const MAX_KEYS: usize = 16;

/// One key of a key file, as its bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct FileKey {
    pub name: [u8; NAME_LEN],
    /// 16 bytes (AES-128-CBC) or 32 (AES-256-CBC).
    pub aes: Vec<u8>,
    /// As long as `aes`: the HMAC-SHA256 key.
    pub hmac: Vec<u8>,
}

impl std::fmt::Debug for FileKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material; the name is public (every ticket carries it).
        write!(
            f,
            "FileKey({:02x?}, {} bits)",
            &self.name[..4],
            self.aes.len() * 8
        )
    }
}

/// Reads and parses the key file at `path`; the error says what is wrong in words.
pub fn read(path: &Path) -> Result<Vec<FileKey>, String> {
    if path.is_dir() {
        return Err("is a directory, not a file".into());
    }
    let bytes = std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "does not exist".to_string(),
        std::io::ErrorKind::PermissionDenied => "cannot be read: permission denied".to_string(),
        _ => format!("cannot be read: {e}"),
    })?;
    parse(&bytes)
}

/// Parses a key file's bytes (either layout of the module doc).
pub fn parse(bytes: &[u8]) -> Result<Vec<FileKey>, String> {
    let text = std::str::from_utf8(bytes).ok().filter(|t| t.is_ascii());
    let keys = match text {
        Some(text) => parse_lines(text)?,
        // Random bytes are not ASCII text (2^-48 for 48 of them): an nginx binary key.
        None if bytes.len() == 48 || bytes.len() == 80 => vec![split_key(bytes)?],
        None => {
            return Err(format!(
                "is neither text (one base64 key per line) nor one binary key of 48 or 80 bytes ({} bytes)",
                bytes.len()
            ))
        }
    };
    if keys.is_empty() {
        return Err(
            "holds no key (write one base64 key per line: `openssl rand 80 | openssl base64 -A`)"
                .into(),
        );
    }
    Ok(keys)
}

fn parse_lines(text: &str) -> Result<Vec<FileKey>, String> {
    let mut keys: Vec<(usize, FileKey)> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bytes = decode_base64(line).map_err(|e| format!("line {number}: {e}"))?;
        let key = split_key(&bytes).map_err(|e| format!("line {number}: {e}"))?;
        if let Some((first, _)) = keys.iter().find(|(_, k)| k.name == key.name) {
            return Err(format!(
                "line {number}: the key name (its first 16 bytes) repeats line {first}'s, so a ticket could not tell them apart"
            ));
        }
        if keys.len() == MAX_KEYS {
            return Err(format!(
                "line {number}: more than {MAX_KEYS} keys (keep the key that seals and those whose tickets may still be alive)"
            ));
        }
        keys.push((number, key));
    }
    Ok(keys.into_iter().map(|(_, k)| k).collect())
}

/// nginx's layouts: 48 bytes = name, AES-128 key, HMAC key; 80 bytes = name, HMAC key,
/// AES-256 key.
fn split_key(bytes: &[u8]) -> Result<FileKey, String> {
    let mut name = [0u8; NAME_LEN];
    match bytes.len() {
        48 => {
            name.copy_from_slice(&bytes[..16]);
            Ok(FileKey {
                name,
                aes: bytes[16..32].to_vec(),
                hmac: bytes[32..48].to_vec(),
            })
        }
        80 => {
            name.copy_from_slice(&bytes[..16]);
            Ok(FileKey {
                name,
                hmac: bytes[16..48].to_vec(),
                aes: bytes[48..80].to_vec(),
            })
        }
        n => Err(format!(
            "the key is {n} bytes; a key is 80 bytes (`openssl rand 80 | openssl base64 -A`) or 48"
        )),
    }
}

/// Standard base64 (RFC 4648 §4), padding optional, no line breaks inside.
fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
    let digits = text.trim_end_matches('=');
    if text.len() - digits.len() > 2 {
        return Err("not base64: too much `=` padding".into());
    }
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for (col, c) in digits.bytes().enumerate() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => {
                return Err(format!(
                    "not base64: `{}` at column {}",
                    char::from(c).escape_default(),
                    col + 1
                ))
            }
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    if bits >= 6 {
        return Err("not base64: its length is not that of whole bytes".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The base64 of `bytes`, written here so the tests do not trust the decoder they test.
    fn encode(bytes: &[u8]) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
            for i in 0..=chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            }
            out.push_str(&"=".repeat(3 - chunk.len()));
        }
        out
    }

    fn key_bytes(seed: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| seed.wrapping_mul(31).wrapping_add(i as u8))
            .collect()
    }

    #[test]
    fn lines_of_both_sizes_keep_their_order_and_nginx_layouts() {
        let k80 = key_bytes(1, 80);
        let k48 = key_bytes(2, 48);
        let text = format!(
            "# rotated by cron\n{}\n\n  {}  \n",
            encode(&k80),
            encode(&k48)
        );
        let keys = parse(text.as_bytes()).expect("a good file");
        assert_eq!(keys.len(), 2);
        assert_eq!(&keys[0].name[..], &k80[..16]);
        assert_eq!(keys[0].hmac, &k80[16..48]);
        assert_eq!(keys[0].aes, &k80[48..]);
        assert_eq!(&keys[1].name[..], &k48[..16]);
        assert_eq!(keys[1].aes, &k48[16..32]);
        assert_eq!(keys[1].hmac, &k48[32..]);
    }

    #[test]
    fn a_binary_key_of_nginx_is_a_ring_of_one() {
        let mut raw = key_bytes(3, 80);
        raw[0] = 0xff; // not ASCII, as random bytes are
        let keys = parse(&raw).expect("binary key");
        assert_eq!(keys.len(), 1);
        assert_eq!(&keys[0].name[..], &raw[..16]);
    }

    #[test]
    fn bad_files_say_what_and_where() {
        let cases: Vec<(String, &str)> = vec![
            (String::new(), "holds no key"),
            ("# only a comment\n".into(), "holds no key"),
            (
                format!("{}\n", encode(&key_bytes(1, 64))),
                "line 1: the key is 64 bytes",
            ),
            (
                format!("{}\nnot*base64\n", encode(&key_bytes(1, 80))),
                "line 2: not base64: `*` at column 4",
            ),
            ("QUJD===\n".into(), "too much `=` padding"),
            ("QUJDR\n".into(), "whole bytes"),
            (
                format!("{0}\n{0}\n", encode(&key_bytes(1, 80))),
                "line 2: the key name (its first 16 bytes) repeats line 1's",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(text.as_bytes()).expect_err(&text);
            assert!(err.contains(expected), "{text:?}: {err}");
        }
        let binary = [0xffu8; 50];
        assert!(parse(&binary).expect_err("50 bytes").contains("50 bytes"));
    }

    #[test]
    fn a_ring_is_bounded() {
        let lines: Vec<String> = (0..=MAX_KEYS as u8)
            .map(|i| encode(&key_bytes(i + 1, 80)))
            .collect();
        let err = parse(lines.join("\n").as_bytes()).expect_err("too many");
        assert!(err.contains(&format!("more than {MAX_KEYS} keys")), "{err}");
        let keys = parse(lines[..MAX_KEYS].join("\n").as_bytes()).expect("at the bound");
        assert_eq!(keys.len(), MAX_KEYS);
    }

    #[test]
    fn decoding_agrees_with_the_encoder_at_every_length() {
        for len in 0..12 {
            let bytes = key_bytes(9, len);
            let text = encode(&bytes);
            assert_eq!(decode_base64(&text).as_deref(), Ok(&bytes[..]), "{text}");
            assert_eq!(
                decode_base64(text.trim_end_matches('=')).as_deref(),
                Ok(&bytes[..])
            );
        }
    }
}
