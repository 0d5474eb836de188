//! HKDF-Expand-Label and the TLS 1.3 traffic key derivation against RFC 8448 §3 ("Simple
//! 1-RTT Handshake", TLS_AES_128_GCM_SHA256): the application traffic secrets and the write
//! keys and IVs the trace derives from them.

use ktls::kernel::{CryptoInfo, KernelCipher};
use ktls::offload::{hkdf_expand_label, traffic_keys};
use openssl::md::Md;

fn hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

/// {client} derive write traffic keys for application data.
const CLIENT_AP_SECRET: &str = "9e 40 64 6c e7 9a 7f 9d c0 5a f8 88 9b ce 65 52
                                87 5a fa 0b 06 df 00 87 f7 92 eb b7 c1 75 04 a5";
const CLIENT_AP_KEY: &str = "17 42 2d da 59 6e d5 d9 ac d8 90 e3 c6 3f 50 51";
const CLIENT_AP_IV: &str = "5b 78 92 3d ee 08 57 90 33 e5 23 d9";

/// {server} derive write traffic keys for application data.
const SERVER_AP_SECRET: &str = "a1 1a f9 f0 55 31 f8 56 ad 47 11 6b 45 a9 50 32
                                82 04 b4 f4 4b fb 6b 3a 4b 4f 1f 3f cb 63 16 43";
const SERVER_AP_KEY: &str = "9f 02 28 3b 6c 9c 07 ef c2 6b b9 f2 ac 92 e3 56";
const SERVER_AP_IV: &str = "cf 78 2b 88 dd 83 54 9a ad f1 e9 84";

#[test]
fn expand_label_gives_rfc8448_server_application_key_and_iv() {
    let secret = hex(SERVER_AP_SECRET);
    let key = hkdf_expand_label(Md::sha256(), &secret, "key", &[], 16).unwrap();
    let iv = hkdf_expand_label(Md::sha256(), &secret, "iv", &[], 12).unwrap();
    assert_eq!(key, hex(SERVER_AP_KEY));
    assert_eq!(iv, hex(SERVER_AP_IV));
}

#[test]
fn traffic_keys_give_rfc8448_client_application_key_and_iv() {
    // The secret a TLS 1.3 server captures as CLIENT_TRAFFIC_SECRET_0 and installs as TLS_RX.
    let keys = traffic_keys(KernelCipher::AesGcm128, &hex(CLIENT_AP_SECRET)).unwrap();
    assert_eq!(keys.key, hex(CLIENT_AP_KEY));
    assert_eq!(keys.iv, hex(CLIENT_AP_IV));
}

#[test]
fn crypto_info_from_rfc8448_client_keys_splits_the_iv() {
    let keys = traffic_keys(KernelCipher::AesGcm128, &hex(CLIENT_AP_SECRET)).unwrap();
    match CryptoInfo::tls13(KernelCipher::AesGcm128, &keys.key, &keys.iv, 0).unwrap() {
        CryptoInfo::AesGcm128 {
            key,
            salt,
            iv,
            rec_seq,
            ..
        } => {
            assert_eq!(key.to_vec(), hex(CLIENT_AP_KEY));
            assert_eq!(salt.to_vec(), hex("5b 78 92 3d"));
            assert_eq!(iv.to_vec(), hex("ee 08 57 90 33 e5 23 d9"));
            assert_eq!(rec_seq, [0; 8]);
        }
        other => panic!("wrong layout {other:?}"),
    }
}

#[test]
fn key_lengths_follow_the_cipher() {
    let secret48 = [0x42u8; 48];
    let keys = traffic_keys(KernelCipher::AesGcm256, &secret48).unwrap();
    assert_eq!((keys.key.len(), keys.iv.len()), (32, 12));
    let keys = traffic_keys(KernelCipher::Chacha20Poly1305, &[0x42u8; 32]).unwrap();
    assert_eq!((keys.key.len(), keys.iv.len()), (32, 12));
}

#[test]
fn overlong_label_is_an_error_not_a_panic() {
    let label = "x".repeat(300);
    assert!(hkdf_expand_label(Md::sha256(), &[1; 32], &label, &[], 16).is_err());
}
