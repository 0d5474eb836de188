//! The crypto state of one direction: the safe model ([`CryptoInfo`], [`KernelCipher`],
//! [`TlsVersion`]) and the `linux/tls.h` structs it becomes. No `unsafe` here: the structs
//! reach the kernel only through `setsockopt_tls` in the parent module.

use std::fmt;
use std::mem;

/// `TLS_1_2_VERSION` / `TLS_1_3_VERSION` (linux/tls.h).
pub(super) const TLS_1_2_VERSION: u16 = 0x0303;
pub(super) const TLS_1_3_VERSION: u16 = 0x0304;
/// `TLS_CIPHER_*` (linux/tls.h).
pub(super) const TLS_CIPHER_AES_GCM_128: u16 = 51;
pub(super) const TLS_CIPHER_AES_GCM_256: u16 = 52;
pub(super) const TLS_CIPHER_CHACHA20_POLY1305: u16 = 54;

// ---------------------------------------------------------------- UAPI structs (linux/tls.h)

/// `struct tls_crypto_info`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(super) struct RawCryptoInfo {
    pub(super) version: u16,
    pub(super) cipher_type: u16,
}

/// `struct tls12_crypto_info_aes_gcm_128` (also used for TLS 1.3).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(super) struct RawAesGcm128 {
    pub(super) info: RawCryptoInfo,
    pub(super) iv: [u8; 8],
    pub(super) key: [u8; 16],
    pub(super) salt: [u8; 4],
    pub(super) rec_seq: [u8; 8],
}

/// `struct tls12_crypto_info_aes_gcm_256`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(super) struct RawAesGcm256 {
    pub(super) info: RawCryptoInfo,
    pub(super) iv: [u8; 8],
    pub(super) key: [u8; 32],
    pub(super) salt: [u8; 4],
    pub(super) rec_seq: [u8; 8],
}

/// `struct tls12_crypto_info_chacha20_poly1305` (its `salt[0]` takes no space).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(super) struct RawChacha20Poly1305 {
    pub(super) info: RawCryptoInfo,
    pub(super) iv: [u8; 12],
    pub(super) key: [u8; 32],
    pub(super) rec_seq: [u8; 8],
}

// The kernel checks optlen against these exact sizes.
const _: () = assert!(mem::size_of::<RawCryptoInfo>() == 4);
const _: () = assert!(mem::size_of::<RawAesGcm128>() == 40);
const _: () = assert!(mem::size_of::<RawAesGcm256>() == 56);
const _: () = assert!(mem::size_of::<RawChacha20Poly1305>() == 56);

// ---------------------------------------------------------------- safe model

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// The AEAD ciphers kernel 6.1 and OpenSSL 3.0 both offload (CCM is left out on purpose:
/// OpenSSL 3.0 does not offload it, see docs/KTLS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelCipher {
    AesGcm128,
    AesGcm256,
    Chacha20Poly1305,
}

impl KernelCipher {
    pub fn key_len(self) -> usize {
        match self {
            KernelCipher::AesGcm128 => 16,
            KernelCipher::AesGcm256 | KernelCipher::Chacha20Poly1305 => 32,
        }
    }

    /// The cipher of a TLS 1.3 suite or TLS 1.2 ECDHE suite, by its IANA (RFC) name as
    /// OpenSSL's `SSL_CIPHER_standard_name` reports it.
    pub fn from_standard_name(name: &str) -> Option<KernelCipher> {
        if name.ends_with("_WITH_AES_128_GCM_SHA256") || name == "TLS_AES_128_GCM_SHA256" {
            Some(KernelCipher::AesGcm128)
        } else if name.ends_with("_WITH_AES_256_GCM_SHA384") || name == "TLS_AES_256_GCM_SHA384" {
            Some(KernelCipher::AesGcm256)
        } else if name.ends_with("_WITH_CHACHA20_POLY1305_SHA256")
            || name == "TLS_CHACHA20_POLY1305_SHA256"
        {
            Some(KernelCipher::Chacha20Poly1305)
        } else {
            None
        }
    }

    pub(super) fn from_uapi(cipher_type: u16) -> Option<KernelCipher> {
        match cipher_type {
            TLS_CIPHER_AES_GCM_128 => Some(KernelCipher::AesGcm128),
            TLS_CIPHER_AES_GCM_256 => Some(KernelCipher::AesGcm256),
            TLS_CIPHER_CHACHA20_POLY1305 => Some(KernelCipher::Chacha20Poly1305),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            KernelCipher::AesGcm128 => "aes-128-gcm",
            KernelCipher::AesGcm256 => "aes-256-gcm",
            KernelCipher::Chacha20Poly1305 => "chacha20-poly1305",
        }
    }
}

/// Key material of one direction, in the layout the kernel wants for each cipher. For the GCM
/// ciphers the 12-byte nonce base splits into a 4-byte `salt` and an 8-byte `iv`; for
/// ChaCha20-Poly1305 the whole 12 bytes are the `iv`.
#[derive(Clone, PartialEq, Eq)]
pub enum CryptoInfo {
    AesGcm128 {
        version: TlsVersion,
        key: [u8; 16],
        salt: [u8; 4],
        iv: [u8; 8],
        rec_seq: [u8; 8],
    },
    AesGcm256 {
        version: TlsVersion,
        key: [u8; 32],
        salt: [u8; 4],
        iv: [u8; 8],
        rec_seq: [u8; 8],
    },
    Chacha20Poly1305 {
        version: TlsVersion,
        key: [u8; 32],
        iv: [u8; 12],
        rec_seq: [u8; 8],
    },
}

/// `CryptoInfo::tls13` got a key or IV of the wrong size for the cipher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyLengthError {
    pub cipher: KernelCipher,
    pub key_len: usize,
    pub iv_len: usize,
}

impl fmt::Display for KeyLengthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: key of {} bytes and IV of {} bytes (want {} and 12)",
            self.cipher.as_str(),
            self.key_len,
            self.iv_len,
            self.cipher.key_len()
        )
    }
}

impl std::error::Error for KeyLengthError {}

impl CryptoInfo {
    /// A TLS 1.3 direction from its traffic key and 12-byte IV (RFC 8446 §7.3) and the
    /// sequence number of the next record.
    pub fn tls13(
        cipher: KernelCipher,
        key: &[u8],
        iv: &[u8],
        seq: u64,
    ) -> Result<CryptoInfo, KeyLengthError> {
        let bad = KeyLengthError {
            cipher,
            key_len: key.len(),
            iv_len: iv.len(),
        };
        let iv: [u8; 12] = iv.try_into().map_err(|_| bad)?;
        let rec_seq = seq.to_be_bytes();
        let (salt, nonce) = iv.split_at(4);
        let version = TlsVersion::Tls13;
        Ok(match cipher {
            KernelCipher::AesGcm128 => CryptoInfo::AesGcm128 {
                version,
                key: key.try_into().map_err(|_| bad)?,
                salt: salt.try_into().map_err(|_| bad)?,
                iv: nonce.try_into().map_err(|_| bad)?,
                rec_seq,
            },
            KernelCipher::AesGcm256 => CryptoInfo::AesGcm256 {
                version,
                key: key.try_into().map_err(|_| bad)?,
                salt: salt.try_into().map_err(|_| bad)?,
                iv: nonce.try_into().map_err(|_| bad)?,
                rec_seq,
            },
            KernelCipher::Chacha20Poly1305 => CryptoInfo::Chacha20Poly1305 {
                version,
                key: key.try_into().map_err(|_| bad)?,
                iv,
                rec_seq,
            },
        })
    }

    /// One direction of either version from the record layer's keys: `iv` is the 12-byte
    /// nonce base (TLS 1.3, TLS 1.2 ChaCha20-Poly1305) or the TLS 1.2 AES-GCM salt followed
    /// by zeros, whose explicit nonce is then the sequence number (RFC 5288 §3), as the
    /// record layer writes it; the kernel counts it up from `seq` with each record.
    pub fn of_direction(
        version: TlsVersion,
        cipher: KernelCipher,
        key: &[u8],
        iv: &[u8; 12],
        seq: u64,
    ) -> Result<CryptoInfo, KeyLengthError> {
        let mut nonce = *iv;
        if version == TlsVersion::Tls12 && cipher != KernelCipher::Chacha20Poly1305 {
            nonce[4..].copy_from_slice(&seq.to_be_bytes());
        }
        let mut info = CryptoInfo::tls13(cipher, key, &nonce, seq)?;
        match &mut info {
            CryptoInfo::AesGcm128 { version: v, .. }
            | CryptoInfo::AesGcm256 { version: v, .. }
            | CryptoInfo::Chacha20Poly1305 { version: v, .. } => *v = version,
        }
        Ok(info)
    }

    pub fn version(&self) -> TlsVersion {
        match self {
            CryptoInfo::AesGcm128 { version, .. }
            | CryptoInfo::AesGcm256 { version, .. }
            | CryptoInfo::Chacha20Poly1305 { version, .. } => *version,
        }
    }

    pub fn cipher(&self) -> KernelCipher {
        match self {
            CryptoInfo::AesGcm128 { .. } => KernelCipher::AesGcm128,
            CryptoInfo::AesGcm256 { .. } => KernelCipher::AesGcm256,
            CryptoInfo::Chacha20Poly1305 { .. } => KernelCipher::Chacha20Poly1305,
        }
    }

    pub(super) fn raw_header(&self) -> RawCryptoInfo {
        let version = match self.version() {
            TlsVersion::Tls12 => TLS_1_2_VERSION,
            TlsVersion::Tls13 => TLS_1_3_VERSION,
        };
        let cipher_type = match self.cipher() {
            KernelCipher::AesGcm128 => TLS_CIPHER_AES_GCM_128,
            KernelCipher::AesGcm256 => TLS_CIPHER_AES_GCM_256,
            KernelCipher::Chacha20Poly1305 => TLS_CIPHER_CHACHA20_POLY1305,
        };
        RawCryptoInfo {
            version,
            cipher_type,
        }
    }
}

impl fmt::Debug for CryptoInfo {
    // Never print key material.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CryptoInfo({:?}, {})",
            self.version(),
            self.cipher().as_str()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls13_gcm_splits_iv_into_salt_and_nonce() {
        let iv: Vec<u8> = (1..=12).collect();
        let info = CryptoInfo::tls13(KernelCipher::AesGcm128, &[7; 16], &iv, 5).unwrap();
        match info {
            CryptoInfo::AesGcm128 {
                salt, iv, rec_seq, ..
            } => {
                assert_eq!(salt, [1, 2, 3, 4]);
                assert_eq!(iv, [5, 6, 7, 8, 9, 10, 11, 12]);
                assert_eq!(rec_seq, [0, 0, 0, 0, 0, 0, 0, 5]);
            }
            other => panic!("wrong variant {other:?}"),
        }
    }

    #[test]
    fn tls13_rejects_wrong_key_length() {
        let err = CryptoInfo::tls13(KernelCipher::AesGcm256, &[0; 16], &[0; 12], 0).unwrap_err();
        assert_eq!(err.key_len, 16);
        assert!(CryptoInfo::tls13(KernelCipher::Chacha20Poly1305, &[0; 32], &[0; 8], 0).is_err());
    }

    #[test]
    fn cipher_names() {
        assert_eq!(
            KernelCipher::from_standard_name("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"),
            Some(KernelCipher::AesGcm256)
        );
        assert_eq!(
            KernelCipher::from_standard_name("TLS_CHACHA20_POLY1305_SHA256"),
            Some(KernelCipher::Chacha20Poly1305)
        );
        assert_eq!(
            KernelCipher::from_standard_name("TLS_AES_128_CCM_SHA256"),
            None
        );
    }
}
