//! HMAC (RFC 2104) and HKDF-Expand (RFC 5869) over SHA-256 and SHA-384, on OpenSSL's plain
//! SHA-2 functions.
//!
//! The hand-over to the proxy's record layer derives record keys once per connection. Through
//! OpenSSL 3's EVP interfaces (`EVP_PKEY` HKDF, `EVP_DigestSign` HMAC) each derivation first
//! looks its algorithms up in the provider tables and builds a key object: ~60 000
//! instructions per HKDF-Expand-Label, ten times the hashing itself, and a quarter of a
//! million per TLS 1.3 hand-over (docs/PERFORMANCE.md, "Handshake cost"). The plain digest
//! contexts go straight to the compression function.

use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::sha::{Sha256, Sha384};

/// A hash function HMAC can be built on: OpenSSL's one-shot SHA-2 contexts, which go straight
/// to the compression function.
pub(crate) trait Hash: Sized {
    /// The input block size (RFC 2104's B).
    const BLOCK: usize;
    /// The output size (RFC 2104's L).
    const OUT: usize;
    fn start() -> Self;
    fn feed(&mut self, bytes: &[u8]);
    fn digest_into(self, out: &mut Vec<u8>);
}

impl Hash for Sha256 {
    const BLOCK: usize = 64;
    const OUT: usize = 32;
    fn start() -> Self {
        Sha256::new()
    }
    fn feed(&mut self, bytes: &[u8]) {
        self.update(bytes);
    }
    fn digest_into(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.finish());
    }
}

impl Hash for Sha384 {
    const BLOCK: usize = 128;
    const OUT: usize = 48;
    fn start() -> Self {
        Sha384::new()
    }
    fn feed(&mut self, bytes: &[u8]) {
        self.update(bytes);
    }
    fn digest_into(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.finish());
    }
}

/// HMAC (RFC 2104) of the concatenation of `parts`, appended to `out`.
pub(crate) fn hmac<H: Hash>(key: &[u8], parts: &[&[u8]], out: &mut Vec<u8>) {
    // K0: the key, hashed first if longer than a block, zero-padded to a block.
    let mut k0 = [0u8; 128];
    if key.len() > H::BLOCK {
        let mut hashed = Vec::with_capacity(H::OUT);
        let mut h = H::start();
        h.feed(key);
        h.digest_into(&mut hashed);
        k0[..H::OUT].copy_from_slice(&hashed);
    } else {
        k0[..key.len()].copy_from_slice(key);
    }
    let mut pad = [0u8; 128];
    for (p, k) in pad.iter_mut().zip(&k0).take(H::BLOCK) {
        *p = k ^ 0x36;
    }
    let mut inner = H::start();
    inner.feed(&pad[..H::BLOCK]);
    for part in parts {
        inner.feed(part);
    }
    let mut inner_digest = Vec::with_capacity(H::OUT);
    inner.digest_into(&mut inner_digest);
    for (p, k) in pad.iter_mut().zip(&k0).take(H::BLOCK) {
        *p = k ^ 0x5c;
    }
    let mut outer = H::start();
    outer.feed(&pad[..H::BLOCK]);
    outer.feed(&inner_digest);
    outer.digest_into(out);
    k0.fill(0);
    pad.fill(0);
    inner_digest.fill(0);
    std::hint::black_box((&k0, &pad, &inner_digest));
}

/// HKDF-Expand (RFC 5869 §2.3): T(i) = HMAC(PRK, T(i-1) | info | i), the first `len` bytes of
/// T(1) | T(2) | ...
pub(crate) fn hkdf_expand<H: Hash>(prk: &[u8], info: &[u8], len: usize) -> Option<Vec<u8>> {
    if len > 255 * H::OUT {
        return None;
    }
    let mut out = Vec::with_capacity(len.div_ceil(H::OUT) * H::OUT);
    let mut counter = 1u8;
    while out.len() < len {
        let previous_start = out.len().saturating_sub(H::OUT);
        let previous = out[previous_start..].to_vec();
        hmac::<H>(prk, &[&previous, info, &[counter]], &mut out);
        counter = counter.wrapping_add(1);
    }
    out.truncate(len);
    Some(out)
}

/// HMAC of the concatenation of `parts` with `md`, if `md` is SHA-256 or SHA-384 (`None`
/// otherwise: the caller falls back to OpenSSL's generic HMAC).
pub fn hmac_sha2(md: MessageDigest, key: &[u8], parts: &[&[u8]]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(48);
    match md.type_() {
        Nid::SHA256 => hmac::<Sha256>(key, parts, &mut out),
        Nid::SHA384 => hmac::<Sha384>(key, parts, &mut out),
        _ => return None,
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 5869 A.1 (the Expand step): 42 bytes, so two HMAC blocks.
    #[test]
    fn expand_matches_rfc5869_test_case_1() {
        let prk = hex("077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5");
        let info = hex("f0f1f2f3f4f5f6f7f8f9");
        let okm = hkdf_expand::<Sha256>(&prk, &info, 42).unwrap();
        assert_eq!(
            okm,
            hex("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
        );
    }

    /// RFC 4231 test case 6: a key longer than the block (hashed first), both hashes.
    #[test]
    fn hmac_matches_rfc4231_long_key() {
        let key = [0xaau8; 131];
        let data: &[u8] = b"Test Using Larger Than Block-Size Key - Hash Key First";
        let mut out = Vec::new();
        hmac::<Sha256>(&key, &[data], &mut out);
        assert_eq!(
            out,
            hex("60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
        );
        out.clear();
        hmac::<Sha384>(&key, &[&data[..10], &data[10..]], &mut out);
        assert_eq!(
            out,
            hex("4ece084485813e9088d2c63a041bc5b44f9ef1012a2b588f3cd11f05033ac4c60c2ef6ab4030fe8296248df163f44952")
        );
    }

    /// The same as OpenSSL's HMAC (EVP_DigestSign) for both hashes and several lengths.
    #[test]
    fn hmac_sha2_agrees_with_openssl() {
        use openssl::pkey::PKey;
        use openssl::sign::Signer;
        for md in [MessageDigest::sha256(), MessageDigest::sha384()] {
            for key_len in [1, 13, 48, 64, 128, 200] {
                let mut key = vec![0u8; key_len];
                openssl::rand::rand_bytes(&mut key).unwrap();
                let parts: [&[u8]; 3] = [b"key expansion", &[7u8; 32], &[9u8; 100]];
                let ours = hmac_sha2(md, &key, &parts).unwrap();
                let pkey = PKey::hmac(&key).unwrap();
                let mut signer = Signer::new(md, &pkey).unwrap();
                for part in parts {
                    signer.update(part).unwrap();
                }
                assert_eq!(ours, signer.sign_to_vec().unwrap(), "key {key_len}");
            }
        }
        assert!(hmac_sha2(MessageDigest::sha1(), b"k", &[b"m"]).is_none());
    }
}
