//! The TLS 1.3 key schedule step kTLS needs: traffic secret -> record key and IV
//! (HKDF-Expand-Label, RFC 8446 §7.1 and §7.3).

use std::fmt;

use openssl::error::ErrorStack;
use openssl::md::{Md, MdRef};
use openssl::nid::Nid;
use openssl::sha::{Sha256, Sha384};

use crate::hmac::hkdf_expand;

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
        Nid::SHA256 => return hkdf_expand::<Sha256>(secret, &info, len).ok_or(HkdfError::TooLong),
        Nid::SHA384 => return hkdf_expand::<Sha384>(secret, &info, len).ok_or(HkdfError::TooLong),
        _ => {}
    }
    Ok(library_hkdf_expand(md, secret, &info, len)?)
}

/// HKDF-Expand (RFC 5869) by the TLS library itself: OpenSSL's EVP_PKEY HKDF in expand-only
/// mode (the `openssl` crate's wrapper of the mode is compiled out on AWS-LC).
#[cfg(not(feature = "aws-lc"))]
fn library_hkdf_expand(
    md: &MdRef,
    secret: &[u8],
    info: &[u8],
    len: usize,
) -> Result<Vec<u8>, ErrorStack> {
    use openssl::pkey::Id;
    use openssl::pkey_ctx::{HkdfMode, PkeyCtx};
    let mut out = vec![0u8; len];
    let mut ctx = PkeyCtx::new_id(Id::HKDF)?;
    ctx.derive_init()?;
    ctx.set_hkdf_mode(HkdfMode::EXPAND_ONLY)?;
    ctx.set_hkdf_md(md)?;
    ctx.set_hkdf_key(secret)?;
    ctx.add_hkdf_info(info)?;
    let written = ctx.derive(Some(&mut out))?;
    out.truncate(written);
    Ok(out)
}

/// HKDF-Expand (RFC 5869) by AWS-LC's own `HKDF_expand`.
#[cfg(feature = "aws-lc")]
fn library_hkdf_expand(
    md: &MdRef,
    secret: &[u8],
    info: &[u8],
    len: usize,
) -> Result<Vec<u8>, ErrorStack> {
    use foreign_types::ForeignTypeRef;
    let mut out = vec![0u8; len];
    // SAFETY: `out` is writable for `len` bytes, `secret` and `info` readable for their
    // lengths, `md` a live digest; AWS-LC only reads and writes those during the call (and
    // fails, writing nothing it reports, when `len` exceeds 255 hash lengths).
    let ok = unsafe {
        openssl_sys::HKDF_expand(
            out.as_mut_ptr(),
            len,
            md.as_ptr(),
            secret.as_ptr(),
            secret.len(),
            info.as_ptr(),
            info.len(),
        )
    };
    if ok == 1 {
        Ok(out)
    } else {
        Err(ErrorStack::get())
    }
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
                let slow = library_hkdf_expand(md, &secret, &info, len).unwrap();
                assert_eq!(fast, slow, "{label} {len}");
            }
        }
    }
}
