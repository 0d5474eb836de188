//! Tempesta's fingerprint limits (`tft { ... }`, `tfh { ... }`) and the fingerprint
//! blocklist file (`tf_blocklist`, an extension).

use serde::{Deserialize, Serialize};

/// `tft [storage_size=N] { hash HEX CONNS_PER_S RECORDS_PER_S; ... }` or the same for `tfh`
/// (whose third number limits requests per second).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FingerprintLimits {
    /// `storage_size=`: bytes Tempesta gives its table of rates (a multiple of 2 MiB). Here
    /// only configured fingerprints are counted, so it bounds nothing; 0 turns the limits
    /// off, as in Tempesta.
    pub storage_size: u64,
    /// The `hash` entries, one per fingerprint (a repeated one replaces the earlier).
    pub hashes: Vec<FingerprintLimit>,
}

/// Tempesta's default `storage_size` (25 extents of 2 MiB).
pub const DEFAULT_FINGERPRINT_STORAGE: u64 = 25 << 21;

impl Default for FingerprintLimits {
    fn default() -> Self {
        FingerprintLimits {
            storage_size: DEFAULT_FINGERPRINT_STORAGE,
            hashes: Vec::new(),
        }
    }
}

/// `hash HEX CONNS_PER_S RECORDS_PER_S;`: the most connections, and TLS records (`tft`) or
/// requests (`tfh`), one fingerprint may make per second; more are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FingerprintLimit {
    pub hash: u64,
    pub connections: u32,
    pub records: u32,
}

/// A fingerprint as Tempesta writes it: up to 16 hexadecimal digits, `0x` allowed.
pub fn parse_fingerprint(text: &str) -> Option<u64> {
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}
