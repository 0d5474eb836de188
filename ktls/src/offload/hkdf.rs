//! The TLS 1.3 key schedule step kTLS needs: traffic secret -> record key and IV
//! (HKDF-Expand-Label, RFC 8446 §7.1 and §7.3).

use std::fmt;

use openssl::error::ErrorStack;
use openssl::md::{Md, MdRef};
use openssl::nid::Nid;
use openssl::pkey::Id;
use openssl::pkey_ctx::{HkdfMode, PkeyCtx};
use openssl::sha::{Sha256, Sha384};

use crate::kernel::KernelCipher;

/// Why a key could not be derived.
#[derive(Debug)]
pub enum HkdfError {
    /// The label, context or output length does not fit the HkdfLabel encoding.
    TooLong,
    OpenSsl(ErrorStack),
}

impl fmt::Display for HkdfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HkdfError::TooLong => f.write_str("HKDF-Expand-Label argument too long"),
            HkdfError::OpenSsl(e) => write!(f, "HKDF-Expand failed: {e}"),
        }
    }
}

impl std::error::Error for HkdfError {}

impl From<ErrorStack> for HkdfError {
    fn from(e: ErrorStack) -> Self {
        HkdfError::OpenSsl(e)
    }
}

/// `HKDF-Expand-Label(secret, label, context, len)` with the hash `md`:
/// HKDF-Expand(secret, HkdfLabel{ uint16 len, "tls13 " + label, context }, len).
pub fn hkdf_expand_label(
    md: &MdRef,
    secret: &[u8],
    label: &str,
    context: &[u8],
    len: usize,
) -> Result<Vec<u8>, HkdfError> {
    let full_label_len = 6 + label.len();
    let out_len = u16::try_from(len).map_err(|_| HkdfError::TooLong)?;
    let label_len = u8::try_from(full_label_len).map_err(|_| HkdfError::TooLong)?;
    let context_len = u8::try_from(context.len()).map_err(|_| HkdfError::TooLong)?;
    let mut info = Vec::with_capacity(4 + full_label_len + context.len());
    info.extend_from_slice(&out_len.to_be_bytes());
    info.push(label_len);
    info.extend_from_slice(b"tls13 ");
    info.extend_from_slice(label.as_bytes());
    info.push(context_len);
    info.extend_from_slice(context);

    // Every hand-over derives four of these (key and IV of each direction): the plain digests
    // keep that to a few SHA blocks, where OpenSSL 3's EVP_PKEY HKDF looked the algorithms up
    // in its provider tables on every call (~60 000 instructions a call, docs/PERFORMANCE.md).
    match md.type_() {
        Nid::SHA256 => return hkdf_expand::<Sha256>(secret, &info, len),
        Nid::SHA384 => return hkdf_expand::<Sha384>(secret, &info, len),
        _ => {}
    }
    let mut ctx = PkeyCtx::new_id(Id::HKDF)?;
    ctx.derive_init()?;
    ctx.set_hkdf_mode(HkdfMode::EXPAND_ONLY)?;
    ctx.set_hkdf_md(md)?;
    ctx.set_hkdf_key(secret)?;
    ctx.add_hkdf_info(&info)?;
    let mut out = vec![0u8; len];
    let written = ctx.derive(Some(&mut out))?;
    out.truncate(written);
    Ok(out)
}

/// A hash function HMAC can be built on: OpenSSL's one-shot SHA-2 contexts, which go straight
/// to the compression function.
trait Hash: Sized {
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
fn hmac<H: Hash>(key: &[u8], parts: &[&[u8]], out: &mut Vec<u8>) {
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
fn hkdf_expand<H: Hash>(prk: &[u8], info: &[u8], len: usize) -> Result<Vec<u8>, HkdfError> {
    if len > 255 * H::OUT {
        return Err(HkdfError::TooLong);
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
    Ok(out)
}

/// The hash of the TLS 1.3 suite that uses `cipher` (SHA-384 only for AES-256-GCM).
pub fn suite_hash(cipher: KernelCipher) -> &'static MdRef {
    match cipher {
        KernelCipher::AesGcm256 => Md::sha384(),
        KernelCipher::AesGcm128 | KernelCipher::Chacha20Poly1305 => Md::sha256(),
    }
}

/// Record protection key and IV of one direction, from its traffic secret (RFC 8446 §7.3).
pub struct TrafficKeys {
    pub key: Vec<u8>,
    pub iv: Vec<u8>,
}

pub fn traffic_keys(cipher: KernelCipher, secret: &[u8]) -> Result<TrafficKeys, HkdfError> {
    let md = suite_hash(cipher);
    Ok(TrafficKeys {
        key: hkdf_expand_label(md, secret, "key", &[], cipher.key_len())?,
        iv: hkdf_expand_label(md, secret, "iv", &[], 12)?,
    })
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

    /// The plain-digest path gives what OpenSSL's HKDF gives, for both suite hashes, secrets of
    /// their lengths, labels with and without context, and lengths over one block.
    #[test]
    fn fast_path_agrees_with_openssl_hkdf() {
        for (md, secret_len) in [(Md::sha256(), 32), (Md::sha384(), 48)] {
            let mut secret = vec![0u8; secret_len];
            openssl::rand::rand_bytes(&mut secret).unwrap();
            for (label, context, len) in [
                ("key", &b""[..], 16),
                ("iv", &b""[..], 12),
                ("traffic upd", &b""[..], secret_len),
                ("finished", &b"some transcript hash"[..], 100),
            ] {
                let fast = hkdf_expand_label(md, &secret, label, context, len).unwrap();
                let mut info = Vec::new();
                info.extend_from_slice(&u16::try_from(len).unwrap().to_be_bytes());
                info.push(u8::try_from(6 + label.len()).unwrap());
                info.extend_from_slice(b"tls13 ");
                info.extend_from_slice(label.as_bytes());
                info.push(u8::try_from(context.len()).unwrap());
                info.extend_from_slice(context);
                let mut ctx = PkeyCtx::new_id(Id::HKDF).unwrap();
                ctx.derive_init().unwrap();
                ctx.set_hkdf_mode(HkdfMode::EXPAND_ONLY).unwrap();
                ctx.set_hkdf_md(md).unwrap();
                ctx.set_hkdf_key(&secret).unwrap();
                ctx.add_hkdf_info(&info).unwrap();
                let mut slow = vec![0u8; len];
                ctx.derive(Some(&mut slow)).unwrap();
                assert_eq!(fast, slow, "{label} {len}");
            }
        }
    }
}
