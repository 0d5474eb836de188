//! TLS 1.2 record keys from the session's master secret (RFC 5246 §5 and §6.3): the key block
//! is PRF(master_secret, "key expansion", server_random || client_random) with the suite's
//! hash, cut into client key, server key, client IV, server IV (AEAD suites have no MAC keys).

use openssl::error::ErrorStack;
use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::sign::Signer;

use crate::kernel::KernelCipher;

/// `P_hash(secret, seed)` (RFC 5246 §5) filled into `out`. HMAC on the plain SHA-2 contexts
/// (`crate::hmac`): through `EVP_DigestSign` each of the ~8 HMACs of a key block first looked
/// its algorithm up and built a key object, about 258 000 instructions per TLS 1.2 hand-over
/// (docs/PERFORMANCE.md, "Handshake cost"); OpenSSL's generic HMAC stays for other digests.
fn p_hash(
    md: MessageDigest,
    secret: &[u8],
    seed: &[&[u8]],
    out: &mut [u8],
) -> Result<(), ErrorStack> {
    let hmac = |parts: &[&[u8]]| -> Result<Vec<u8>, ErrorStack> {
        if let Some(mac) = crate::hmac::hmac_sha2(md, secret, parts) {
            return Ok(mac);
        }
        let key = PKey::hmac(secret)?;
        let mut signer = Signer::new(md, &key)?;
        for part in parts {
            signer.update(part)?;
        }
        signer.sign_to_vec()
    };
    // A(1) = HMAC(secret, seed); block i = HMAC(secret, A(i) || seed).
    let mut a = hmac(seed)?;
    let mut filled = 0;
    while filled < out.len() {
        let mut parts: Vec<&[u8]> = vec![&a];
        parts.extend_from_slice(seed);
        let block = hmac(&parts)?;
        let n = block.len().min(out.len() - filled);
        out[filled..filled + n].copy_from_slice(&block[..n]);
        filled += n;
        a = hmac(&[&a])?;
    }
    Ok(())
}

/// The TLS 1.2 PRF: `P_<hash>(secret, label || seed)`.
pub fn prf(
    md: MessageDigest,
    secret: &[u8],
    label: &[u8],
    seed: &[&[u8]],
    out: &mut [u8],
) -> Result<(), ErrorStack> {
    let mut full: Vec<&[u8]> = vec![label];
    full.extend_from_slice(seed);
    p_hash(md, secret, &full, out)
}

/// Record keys of both directions. `*_iv` is the 4-byte salt for AES-GCM, 12 bytes for
/// ChaCha20-Poly1305.
pub struct KeyBlock {
    pub client_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub client_iv: Vec<u8>,
    pub server_iv: Vec<u8>,
}

impl Drop for KeyBlock {
    fn drop(&mut self) {
        for part in [
            &mut self.client_key,
            &mut self.server_key,
            &mut self.client_iv,
            &mut self.server_iv,
        ] {
            part.fill(0);
        }
        std::hint::black_box(&self.client_key);
    }
}

pub fn key_block(
    cipher: KernelCipher,
    master_secret: &[u8],
    client_random: &[u8],
    server_random: &[u8],
) -> Result<KeyBlock, ErrorStack> {
    let md = match cipher {
        KernelCipher::AesGcm256 => MessageDigest::sha384(),
        KernelCipher::AesGcm128 | KernelCipher::Chacha20Poly1305 => MessageDigest::sha256(),
    };
    let key_len = cipher.key_len();
    let iv_len = match cipher {
        KernelCipher::Chacha20Poly1305 => 12,
        KernelCipher::AesGcm128 | KernelCipher::AesGcm256 => 4,
    };
    let mut block = vec![0u8; 2 * (key_len + iv_len)];
    prf(
        md,
        master_secret,
        b"key expansion",
        &[server_random, client_random],
        &mut block,
    )?;
    let (client_key, rest) = block.split_at(key_len);
    let (server_key, rest) = rest.split_at(key_len);
    let (client_iv, server_iv) = rest.split_at(iv_len);
    let keys = KeyBlock {
        client_key: client_key.to_vec(),
        server_key: server_key.to_vec(),
        client_iv: client_iv.to_vec(),
        server_iv: server_iv.to_vec(),
    };
    block.fill(0);
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> Vec<u8> {
        let digits: Vec<u8> = text.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
        digits
            .chunks(2)
            .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
            .collect()
    }

    /// The widely used TLS 1.2 PRF (SHA-256) test vector posted to the IETF TLS list
    /// (secret, seed and label "test label", 100 bytes of output).
    #[test]
    fn prf_sha256_known_answer() {
        let secret = hex("9b be 43 6b a9 40 f0 17 b1 76 52 84 9a 71 db 35");
        let seed = hex("a0 ba 9f 93 6c da 31 18 27 a6 f7 96 ff d5 19 8c");
        let expected = hex(
            "e3 f2 29 ba 72 7b e1 7b 8d 12 26 20 55 7c d4 53 c2 aa b2 1d 07 c3 d4 95 32 9b 52 d4 e6 1e db 5a
             6b 30 17 91 e9 0d 35 c9 c9 a4 6b 4e 14 ba f9 af 0f a0 22 f7 07 7d ef 17 ab fd 37 97 c0 56 4b ab
             4f bc 91 66 6e 9d ef 9b 97 fc e3 4f 79 67 89 ba a4 80 82 d1 22 ee 42 c5 a7 2e 5a 51 10 ff f7 01
             87 34 7b 66",
        );
        let mut out = vec![0u8; expected.len()];
        prf(
            MessageDigest::sha256(),
            &secret,
            b"test label",
            &[&seed],
            &mut out,
        )
        .unwrap();
        assert_eq!(out, expected);
    }

    /// SHA-384 (the AES-256-GCM suites) against P_hash written out on OpenSSL's own HMAC.
    #[test]
    fn prf_sha384_matches_openssl_hmac() {
        let md = MessageDigest::sha384();
        let secret = hex("b8 0b 73 3d 6c ee fc dc 71 56 6e a4 8e 55 67 df");
        let seed = hex("cd 66 5c f6 a8 44 7d d6 ff 8b 27 55 5e db 74 65");
        let openssl_hmac = |data: &[u8]| {
            let key = PKey::hmac(&secret).unwrap();
            let mut signer = Signer::new(md, &key).unwrap();
            signer.update(data).unwrap();
            signer.sign_to_vec().unwrap()
        };
        let label_seed = [&b"test label"[..], &seed].concat();
        let mut a = openssl_hmac(&label_seed);
        let mut expected = Vec::new();
        while expected.len() < 148 {
            expected.extend(openssl_hmac(&[&a[..], &label_seed].concat()));
            a = openssl_hmac(&a);
        }
        expected.truncate(148);
        let mut out = vec![0u8; 148];
        prf(md, &secret, b"test label", &[&seed], &mut out).unwrap();
        assert_eq!(out, expected);
    }
}
