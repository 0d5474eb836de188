//! The provider path (AWS-LC: EVP_AEAD) against the EVP path: every cipher and version, byte
//! for byte, both ways, and forged records refused by both.

use super::aead::use_evp_on_this_thread;
#[cfg(not(feature = "aws-lc"))]
use super::aead_ctx::direct;
use super::aead_ctx::{AeadCtx, Backend};
use super::{DirectionKeys, Inbound, RecordError, RecordLayer};
use crate::kernel::{KernelCipher, TlsVersion};

const CIPHERS: [KernelCipher; 3] = [
    KernelCipher::AesGcm128,
    KernelCipher::AesGcm256,
    KernelCipher::Chacha20Poly1305,
];
const VERSIONS: [TlsVersion; 2] = [TlsVersion::Tls12, TlsVersion::Tls13];

/// A server layer and the client layer that reads it, with fixed keys.
fn pair(version: TlsVersion, cipher: KernelCipher) -> (RecordLayer, RecordLayer) {
    let key_len = cipher.key_len();
    let iv_len = match (version, cipher) {
        (TlsVersion::Tls12, KernelCipher::AesGcm128 | KernelCipher::AesGcm256) => 4,
        _ => 12,
    };
    let keys = |seed: u8| {
        let key: Vec<u8> = (0..key_len).map(|i| seed ^ (i as u8 * 29)).collect();
        let iv: Vec<u8> = (0..iv_len).map(|i| seed.wrapping_add(i as u8)).collect();
        match version {
            // TLS 1.3 keys come from a secret, so that KeyUpdate can derive the next ones.
            TlsVersion::Tls13 => DirectionKeys::from_secret(cipher, &[seed; 32], 5).unwrap(),
            TlsVersion::Tls12 => DirectionKeys::from_key_iv(&key, &iv, 5).unwrap(),
        }
    };
    let server = RecordLayer::new(version, cipher, keys(1), keys(2));
    let client = RecordLayer::new(version, cipher, keys(2), keys(1));
    (server, client)
}

/// What the test seals: the bodies of a response stream, sizes from empty to several records.
fn bodies() -> Vec<Vec<u8>> {
    [1usize, 10, 255, 4096, 16 * 1024, 16 * 1024 + 1, 40_000]
        .iter()
        .map(|&n| (0..n).map(|i| (i * 7 + n) as u8).collect())
        .collect()
}

/// The server's records for `bodies`, an alert, padding and (TLS 1.3) a KeyUpdate in the
/// middle, sealed on a thread of their own: through EVP if `evp`, else the default path.
fn sealed_stream(version: TlsVersion, cipher: KernelCipher, evp: bool) -> Vec<u8> {
    std::thread::spawn(move || {
        if evp {
            use_evp_on_this_thread();
        }
        let (mut server, _) = pair(version, cipher);
        let mut wire = Vec::new();
        for (i, body) in bodies().iter().enumerate() {
            server
                .seal_data(
                    &[&body[..3.min(body.len())], &body[3.min(body.len())..]],
                    usize::MAX,
                    &mut wire,
                )
                .unwrap();
            if i == 3 && version == TlsVersion::Tls13 {
                server.seal_key_update(false, &mut wire).unwrap();
                server
                    .seal_record(
                        super::content::APPLICATION_DATA,
                        &[b"padded"],
                        100,
                        &mut wire,
                    )
                    .unwrap();
            }
        }
        server
            .seal_alert(super::alert::CLOSE_NOTIFY, &mut wire)
            .unwrap();
        wire
    })
    .join()
    .unwrap()
}

/// Opens `wire` as the client (through EVP if `evp`): the application data, or the error.
fn opened_stream(
    version: TlsVersion,
    cipher: KernelCipher,
    evp: bool,
    mut wire: Vec<u8>,
) -> Result<Vec<u8>, RecordError> {
    std::thread::spawn(move || {
        if evp {
            use_evp_on_this_thread();
        }
        let (_, mut client) = pair(version, cipher);
        let mut data = Vec::new();
        let mut at = 0;
        loop {
            match client.open_record(&mut wire[at..])? {
                Inbound::Data { consumed, plain } => {
                    data.extend_from_slice(&wire[at + plain.start..at + plain.end]);
                    at += consumed;
                }
                Inbound::KeyUpdated { consumed, .. } | Inbound::Skip { consumed } => at += consumed,
                Inbound::Closed { .. } => return Ok(data),
                Inbound::Incomplete => panic!("stream cut at {at}"),
            }
        }
    })
    .join()
    .unwrap()
}

fn expected_plaintext(version: TlsVersion) -> Vec<u8> {
    let mut all = Vec::new();
    for (i, body) in bodies().iter().enumerate() {
        all.extend_from_slice(body);
        if i == 3 && version == TlsVersion::Tls13 {
            all.extend_from_slice(b"padded");
        }
    }
    all
}

#[test]
fn every_aead_is_called_through_its_provider() {
    for cipher in CIPHERS {
        // AWS-LC has no providers: its direct path is EVP_AEAD, for every cipher.
        #[cfg(not(feature = "aws-lc"))]
        assert!(direct(cipher).is_some(), "{cipher:?}: no provider table");
        let ctx = AeadCtx::new(cipher, Backend::Provider).unwrap();
        assert!(ctx.is_direct(), "{cipher:?}");
        assert!(!AeadCtx::new(cipher, Backend::Evp).unwrap().is_direct());
    }
}

#[test]
fn provider_and_evp_records_are_the_same_bytes_and_open_each_other() {
    for version in VERSIONS {
        for cipher in CIPHERS {
            let case = format!("{version:?} {cipher:?}");
            let by_provider = sealed_stream(version, cipher, false);
            let by_evp = sealed_stream(version, cipher, true);
            assert_eq!(by_provider, by_evp, "{case}: sealed bytes differ");
            let expected = expected_plaintext(version);
            for (sealed_by, opened_by_evp) in [(&by_provider, true), (&by_evp, false)] {
                let opened = opened_stream(version, cipher, opened_by_evp, sealed_by.clone());
                assert_eq!(opened.as_ref().ok(), Some(&expected), "{case}");
            }
        }
    }
}

/// A flipped bit in a record's header (the AAD), ciphertext or tag is refused by either
/// path, and the record as sent still opens after the forgery (the context is re-keyed).
#[test]
fn forged_records_are_refused_by_both_paths() {
    for version in VERSIONS {
        for cipher in CIPHERS {
            let wire = sealed_stream(version, cipher, false);
            let (_, mut probe) = pair(version, cipher);
            let mut first = wire.clone();
            let Ok(Inbound::Data { consumed, .. }) = probe.open_record(&mut first) else {
                panic!("{version:?} {cipher:?}: first record");
            };
            // The length bytes (3, 4) would only make the record incomplete or overflow.
            let flips = [1, 5, consumed / 2, consumed - 17, consumed - 1];
            for evp in [false, true] {
                for &at in &flips {
                    let case = format!("{version:?} {cipher:?} evp={evp} byte {at}");
                    let mut forged = wire.clone();
                    forged[at] ^= 0x20;
                    let genuine = wire[..consumed].to_vec();
                    let (forged_result, genuine) = std::thread::spawn(move || {
                        if evp {
                            use_evp_on_this_thread();
                        }
                        let (_, mut client) = pair(version, cipher);
                        let forged_result = client.open_record(&mut forged[..consumed]);
                        let mut genuine = genuine;
                        let genuine = client.open_record(&mut genuine);
                        (forged_result.map(|_| ()), genuine.map(|_| ()))
                    })
                    .join()
                    .unwrap();
                    // TLS 1.2 checks the record version before decrypting.
                    let refused = match forged_result {
                        Err(RecordError::BadRecordMac) => true,
                        Err(RecordError::DecodeError(_)) => version == TlsVersion::Tls12 && at == 1,
                        _ => false,
                    };
                    assert!(refused, "{case}: {forged_result:?}");
                    assert_eq!(genuine, Ok(()), "{case}: the genuine record after it");
                }
            }
        }
    }
}
