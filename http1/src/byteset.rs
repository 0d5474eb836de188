//! A 256-bit set of bytes, and the fixed character classes of RFC 9110.
//!
//! Tempesta's `http_*_brange` directives restrict which bytes may appear in
//! the URI or in header values; [`ByteSet`] is how such a configured range
//! list is represented. The same type also holds the grammar's own classes
//! (token characters, authority characters), so that every membership test
//! is one shift and one mask.

/// A set of bytes, one bit per possible value.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ByteSet([u64; 4]);

impl ByteSet {
    /// The empty set.
    pub const EMPTY: ByteSet = ByteSet([0; 4]);

    /// The empty set (same as [`ByteSet::EMPTY`]).
    pub const fn new() -> Self {
        Self::EMPTY
    }

    /// This set plus every byte in `lo..=hi` (nothing when `lo > hi`).
    pub const fn with_range(mut self, lo: u8, hi: u8) -> Self {
        let mut b = lo as u16;
        while b <= hi as u16 {
            // `b` is at most 255 here, so `b >> 6` is at most 3.
            self.0[(b >> 6) as usize] |= 1u64 << (b & 63);
            b += 1;
        }
        self
    }

    /// This set plus every byte of `bytes`.
    pub const fn with_bytes(mut self, bytes: &[u8]) -> Self {
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            self.0[(b >> 6) as usize] |= 1u64 << (b & 63);
            i += 1;
        }
        self
    }

    /// Adds one byte.
    pub fn insert(&mut self, b: u8) {
        *self = self.with_bytes(&[b]);
    }

    /// Whether `b` is in the set.
    #[inline(always)]
    pub const fn contains(&self, b: u8) -> bool {
        // `b >> 6` is at most 3: this index cannot be out of bounds.
        (self.0[(b >> 6) as usize] >> (b & 63)) & 1 == 1
    }

    /// The first byte of `bytes` that is not in the set, if any.
    #[inline]
    pub fn first_outside(&self, bytes: &[u8]) -> Option<u8> {
        bytes.iter().copied().find(|&b| !self.contains(b))
    }

    /// Whether every byte of `bytes` is in the set.
    #[inline]
    pub fn contains_all(&self, bytes: &[u8]) -> bool {
        self.first_outside(bytes).is_none()
    }
}

impl Default for ByteSet {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl std::fmt::Debug for ByteSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ByteSet({:016x}{:016x}{:016x}{:016x})",
            self.0[3], self.0[2], self.0[1], self.0[0]
        )
    }
}

/// `tchar` of RFC 9110 §5.6.2: the bytes of header names, methods and
/// transfer-coding names.
pub(crate) const TCHAR: ByteSet = ByteSet::new()
    .with_range(b'a', b'z')
    .with_range(b'A', b'Z')
    .with_range(b'0', b'9')
    .with_bytes(b"!#$%&'*+-.^_`|~");

/// Bytes allowed in a field value: VCHAR, SP, HTAB and obs-text.
/// Everything else (NUL, CR, LF and the other controls, DEL) is refused.
pub(crate) const FIELD_VALUE: ByteSet = ByteSet::new()
    .with_range(0x20, 0x7e)
    .with_range(0x80, 0xff)
    .with_bytes(b"\t");

/// Bytes of an authority (`Host` value or absolute-form authority):
/// reg-name, IP literal brackets, port, percent-encoding. No userinfo (`@`).
pub(crate) const AUTHORITY: ByteSet = ByteSet::new()
    .with_range(b'a', b'z')
    .with_range(b'A', b'Z')
    .with_range(b'0', b'9')
    .with_bytes(b"-._~!$&'()*+,;=%:[]");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_bytes_are_members() {
        let set = ByteSet::new().with_range(0x20, 0x7e).with_bytes(&[0, 255]);
        assert!(set.contains(0));
        assert!(set.contains(255));
        assert!(set.contains(b'a'));
        assert!(!set.contains(0x7f));
        assert!(!set.contains(0x1f));
        assert_eq!(set.first_outside(b"abc\x7fd"), Some(0x7f));
        assert!(set.contains_all(b"hello world"));
    }

    #[test]
    fn full_range_does_not_overflow() {
        let all = ByteSet::new().with_range(0, 255);
        assert!((0..=255u8).all(|b| all.contains(b)));
        let none = ByteSet::new().with_range(9, 3);
        assert_eq!(none, ByteSet::EMPTY);
    }

    #[test]
    fn tchar_excludes_separators() {
        for b in b"()<>@,;:\\\"/[]?={} \t".iter() {
            assert!(!TCHAR.contains(*b), "{}", *b as char);
        }
        assert!(TCHAR.contains_all(b"X-Forwarded-For"));
    }
}
