//! Fuzz the proxy's TLS record layer with peer-controlled bytes. The first byte picks the
//! protocol version, the cipher and a bit to flip; the rest is (1) fed as received records
//! to a layer that must only make progress or refuse, never panic, and (2) sealed as
//! application data, which must open back to the same bytes, and must fail with
//! bad_record_mac once one bit of the first record's body is flipped.
#![no_main]

use ktls::kernel::{KernelCipher, TlsVersion};
use ktls::record::{DirectionKeys, Inbound, RecordError, RecordLayer};
use libfuzzer_sys::fuzz_target;

fn keys(version: TlsVersion, cipher: KernelCipher, seed: u8) -> DirectionKeys {
    let key = vec![seed; cipher.key_len()];
    match (version, cipher) {
        (TlsVersion::Tls13, _) => DirectionKeys::from_secret(cipher, &[seed; 32], 0),
        (TlsVersion::Tls12, KernelCipher::Chacha20Poly1305) => {
            DirectionKeys::from_key_iv(&key, &[seed; 12], 1)
        }
        (TlsVersion::Tls12, _) => DirectionKeys::from_key_iv(&key, &[seed; 4], 1),
    }
    .expect("fixed-size test keys")
}

/// A writer and a reader that share keys.
fn pair(version: TlsVersion, cipher: KernelCipher) -> (RecordLayer, RecordLayer) {
    (
        RecordLayer::new(version, cipher, keys(version, cipher, 1), keys(version, cipher, 2)),
        RecordLayer::new(version, cipher, keys(version, cipher, 2), keys(version, cipher, 1)),
    )
}

/// Opens records from the front of `wire` until it runs out or is refused; returns the data
/// and how it ended.
fn open_all(layer: &mut RecordLayer, wire: &mut [u8]) -> (Vec<u8>, Result<(), RecordError>) {
    let mut data = Vec::new();
    let mut at = 0;
    while at < wire.len() {
        let consumed = match layer.open_record(&mut wire[at..]) {
            Ok(Inbound::Incomplete) => break,
            Ok(Inbound::Data { consumed, plain }) => {
                assert!(plain.end <= consumed);
                data.extend_from_slice(&wire[at + plain.start..at + plain.end]);
                consumed
            }
            Ok(Inbound::Closed { consumed })
            | Ok(Inbound::Skip { consumed })
            | Ok(Inbound::KeyUpdated { consumed, .. }) => consumed,
            Err(e) => return (data, Err(e)),
        };
        assert!(consumed > 0 && at + consumed <= wire.len());
        at += consumed;
    }
    (data, Ok(()))
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, input)) = data.split_first() else { return };
    let version = if control & 1 == 0 { TlsVersion::Tls12 } else { TlsVersion::Tls13 };
    let cipher = match (control >> 1) % 3 {
        0 => KernelCipher::AesGcm128,
        1 => KernelCipher::AesGcm256,
        _ => KernelCipher::Chacha20Poly1305,
    };

    // (1) Arbitrary received bytes.
    let (_, mut reader) = pair(version, cipher);
    let mut received = input.to_vec();
    let _ = open_all(&mut reader, &mut received);

    // (2) Our own records of the input open back to it...
    let (mut writer, mut reader) = pair(version, cipher);
    let mut wire = Vec::new();
    let sealed = writer
        .seal_data(&[input], usize::MAX, &mut wire)
        .expect("sealing application data");
    assert_eq!(sealed, input.len());
    let mut copy = wire.clone();
    let (opened, end) = open_all(&mut reader, &mut copy);
    assert!(end.is_ok());
    assert_eq!(opened, input);

    // ...and not once a bit of the first record's body is flipped.
    if wire.len() > 5 {
        let (_, mut reader) = pair(version, cipher);
        let first_body = usize::from(u16::from_be_bytes([wire[3], wire[4]]));
        let bit = usize::from(control >> 3) * 131 % (first_body * 8);
        wire[5 + bit / 8] ^= 1 << (bit % 8);
        let (_, end) = open_all(&mut reader, &mut wire);
        assert_eq!(end, Err(RecordError::BadRecordMac));
    }
});
