//! The server name a client asked for in its TLS handshake (SNI), kept for the life of the
//! connection without a heap allocation in the common case.
//!
//! The name is taken at the hand-over, while other handshakes' memory surrounds the place a
//! small allocation would land; a boxed name there keeps a freed page resident per idle
//! connection. Names up to [`INLINE`] bytes (nearly all real host names) live inline in the
//! connection; longer ones (DNS allows 253) are boxed.

use std::fmt;
use std::ops::Deref;

/// Longest name kept inline (the value is 64 bytes in all).
pub const INLINE: usize = 62;

/// A server name in lower case, without a trailing dot.
#[derive(Clone)]
pub enum ServerName {
    Inline { len: u8, bytes: [u8; INLINE] },
    Boxed(Box<str>),
}

impl ServerName {
    /// Normalises `name` as strict host checking compares it: trailing dots removed, ASCII
    /// letters in lower case (other bytes are kept as they are).
    pub fn new(name: &str) -> Self {
        let name = name.trim_end_matches('.');
        match u8::try_from(name.len()) {
            Ok(len) if name.len() <= INLINE => {
                let mut bytes = [0u8; INLINE];
                bytes[..name.len()].copy_from_slice(name.as_bytes());
                bytes[..name.len()].make_ascii_lowercase();
                ServerName::Inline { len, bytes }
            }
            _ => ServerName::Boxed(name.to_ascii_lowercase().into()),
        }
    }

    /// The name's bytes, without the UTF-8 check [`ServerName::as_str`] makes: what a
    /// per-request comparison needs.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            ServerName::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or(&[]),
            ServerName::Boxed(name) => name.as_bytes(),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            // A whole `str` copied and ASCII-lowercased is still UTF-8, so the fallback is
            // never taken.
            ServerName::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or("")
            }
            ServerName::Boxed(name) => name,
        }
    }
}

impl Deref for ServerName {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for ServerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalised_inline_up_to_the_limit_and_boxed_beyond() {
        let n = ServerName::new("WWW.Tempesta-Tech.COM.");
        assert_eq!(&*n, "www.tempesta-tech.com");
        assert_eq!(n.as_bytes(), b"www.tempesta-tech.com");
        assert!(matches!(n, ServerName::Inline { .. }));

        let at_limit = "a".repeat(INLINE);
        assert!(matches!(
            ServerName::new(&at_limit),
            ServerName::Inline { .. }
        ));
        assert_eq!(&*ServerName::new(&at_limit), at_limit);

        let long = format!("{}.Example.", "B".repeat(250));
        let n = ServerName::new(&long);
        assert!(matches!(n, ServerName::Boxed(_)));
        assert_eq!(&*n, format!("{}.example", "b".repeat(250)));
        assert_eq!(n.as_bytes(), n.as_str().as_bytes());
    }

    #[test]
    fn non_ascii_bytes_survive_and_the_value_stays_small() {
        let n = ServerName::new("Bücher.example");
        assert_eq!(&*n, "bücher.example");
        assert_eq!(std::mem::size_of::<ServerName>(), 64);
        assert_eq!(&*ServerName::new(""), "");
        assert_eq!(&*ServerName::new("..."), "");
    }
}
