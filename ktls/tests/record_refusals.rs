//! The proxy's record layer refuses what it must, on a pair of layers sharing arbitrary keys
//! (no handshake), for TLS 1.2 and 1.3 and every AEAD suite: every flipped bit of a record
//! is `bad_record_mac`; oversized ciphertext and plaintext are `record_overflow`; sequence
//! exhaustion closes both ways; post-handshake messages other than KeyUpdate, alerts and
//! unprotected records are answered as the protocol says.

use ktls::kernel::{KernelCipher, TlsVersion};
use ktls::record::{alert, content, DirectionKeys, Inbound, RecordError, RecordLayer};

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// A layer pair for the negative tests (keys are arbitrary; both ends share them).
fn pair(version: TlsVersion, cipher: KernelCipher) -> (RecordLayer, RecordLayer) {
    let keys = |seed: u8| {
        let key = vec![seed; cipher.key_len()];
        match version {
            TlsVersion::Tls13 => DirectionKeys::from_secret(cipher, &[seed; 32], 0).unwrap(),
            TlsVersion::Tls12 if cipher == KernelCipher::Chacha20Poly1305 => {
                DirectionKeys::from_key_iv(&key, &[seed; 12], 1).unwrap()
            }
            TlsVersion::Tls12 => DirectionKeys::from_key_iv(&key, &[seed; 4], 1).unwrap(),
        }
    };
    (
        RecordLayer::new(version, cipher, keys(1), keys(2)),
        RecordLayer::new(version, cipher, keys(2), keys(1)),
    )
}

const ALL: [(TlsVersion, KernelCipher); 6] = [
    (TlsVersion::Tls12, KernelCipher::AesGcm128),
    (TlsVersion::Tls12, KernelCipher::AesGcm256),
    (TlsVersion::Tls12, KernelCipher::Chacha20Poly1305),
    (TlsVersion::Tls13, KernelCipher::AesGcm128),
    (TlsVersion::Tls13, KernelCipher::AesGcm256),
    (TlsVersion::Tls13, KernelCipher::Chacha20Poly1305),
];

#[test]
fn every_flipped_bit_of_a_record_is_bad_record_mac() {
    for (version, cipher) in ALL {
        let (mut a, _) = pair(version, cipher);
        let mut record = Vec::new();
        a.seal_data(&[&b"GET / HTTP/1.1\r\n\r\n"[..]], usize::MAX, &mut record)
            .unwrap();
        // Every bit after the length field: explicit nonce, ciphertext, tag.
        for bit in 5 * 8..record.len() * 8 {
            let (_, mut b) = pair(version, cipher);
            let mut tampered = record.clone();
            tampered[bit / 8] ^= 1 << (bit % 8);
            let result = b.open_record(&mut tampered);
            assert_eq!(
                result,
                Err(RecordError::BadRecordMac),
                "{version:?} {cipher:?} bit {bit}"
            );
        }
        let (_, mut b) = pair(version, cipher);
        assert!(matches!(
            b.open_record(&mut record),
            Ok(Inbound::Data { .. })
        ));
    }
}

#[test]
fn oversized_records_are_record_overflow() {
    for (version, cipher) in ALL {
        let (_, mut b) = pair(version, cipher);
        let limit = ktls::record::layer::max_ciphertext(version);
        let mut header = vec![23, 3, 3];
        header.extend_from_slice(&((limit + 1) as u16).to_be_bytes());
        // Refused from the header alone: nothing is buffered for it.
        assert_eq!(
            b.open_record(&mut header),
            Err(RecordError::RecordOverflow(limit + 1))
        );
        // And we never write more than 2^14 bytes of plaintext in one record.
        let (mut a, _) = pair(version, cipher);
        let too_big = vec![0u8; 16385];
        assert_eq!(
            a.seal_record(content::APPLICATION_DATA, &[&too_big], 0, &mut Vec::new()),
            Err(RecordError::RecordOverflow(16385))
        );
    }
}

#[test]
fn a_tls13_inner_plaintext_over_two_to_the_fourteen_is_record_overflow() {
    // A record whose ciphertext length is legal (2^14 + 256 at most) but whose inner plaintext
    // holds 2^14 + 1 data bytes, sealed with OpenSSL directly under RFC 8448's client key.
    let secret = unhex("9e40646ce79a7f9dc05af8889bce6552875afa0b06df0087f792ebb7c17504a5");
    let key = unhex("17422dda596ed5d9acd890e3c63f5051");
    let iv = unhex("5b78923dee08579033e523d9");
    let c = KernelCipher::AesGcm128;
    let mut server = RecordLayer::new(
        TlsVersion::Tls13,
        c,
        DirectionKeys::from_secret(c, &secret, 0).unwrap(),
        DirectionKeys::from_secret(c, &secret, 0).unwrap(),
    );
    let mut inner = vec![0x41u8; 16385];
    inner.push(content::APPLICATION_DATA);
    let len = (inner.len() + 16) as u16;
    let header = [23, 3, 3, (len >> 8) as u8, len as u8];
    let mut tag = [0u8; 16];
    let body = openssl::symm::encrypt_aead(
        openssl::symm::Cipher::aes_128_gcm(),
        &key,
        Some(&iv),
        &header,
        &inner,
        &mut tag,
    )
    .unwrap();
    let mut record = header.to_vec();
    record.extend_from_slice(&body);
    record.extend_from_slice(&tag);
    assert_eq!(
        server.open_record(&mut record),
        Err(RecordError::RecordOverflow(16385))
    );
}

#[test]
fn sequence_exhaustion_closes_both_ways() {
    for (version, cipher) in ALL {
        let (mut a, mut b) = pair(version, cipher);
        a.set_sequences(0, u64::MAX - 1);
        b.set_sequences(u64::MAX - 1, 0);
        let mut record = Vec::new();
        a.seal_data(&[&b"last"[..]], usize::MAX, &mut record)
            .unwrap();
        assert!(matches!(
            b.open_record(&mut record),
            Ok(Inbound::Data { .. })
        ));
        assert_eq!(
            a.seal_data(&[&b"one more"[..]], usize::MAX, &mut Vec::new()),
            Err(RecordError::SequenceExhausted)
        );
        let mut any = vec![23, 3, 3, 0, 40];
        any.resize(45, 0);
        assert_eq!(b.open_record(&mut any), Err(RecordError::SequenceExhausted));
        assert_eq!(
            RecordError::SequenceExhausted.alert(),
            Some(alert::CLOSE_NOTIFY)
        );
    }
}

#[test]
fn post_handshake_messages_other_than_key_update_are_refused() {
    for (version, cipher) in ALL {
        let (mut a, mut b) = pair(version, cipher);
        let mut record = Vec::new();
        // A NewSessionTicket from a client, or a TLS 1.2 renegotiation ClientHello.
        a.seal_record(content::HANDSHAKE, &[&[4, 0, 0, 0]], 0, &mut record)
            .unwrap();
        assert!(
            matches!(
                b.open_record(&mut record),
                Err(RecordError::UnexpectedMessage(_))
            ),
            "{version:?}"
        );
    }
    let (mut a, mut b) = pair(TlsVersion::Tls13, KernelCipher::AesGcm128);
    let mut record = Vec::new();
    a.seal_record(content::HANDSHAKE, &[&[24, 0, 0, 1, 2]], 0, &mut record)
        .unwrap();
    assert!(matches!(
        b.open_record(&mut record),
        Err(RecordError::IllegalParameter(_))
    ));
    assert_eq!(
        RecordError::IllegalParameter("x").alert(),
        Some(alert::ILLEGAL_PARAMETER)
    );
}

#[test]
fn alerts_are_reported_and_answered_as_the_protocol_says() {
    for (version, cipher) in ALL {
        let (mut a, mut b) = pair(version, cipher);
        let mut record = Vec::new();
        a.seal_alert(alert::BAD_RECORD_MAC, &mut record).unwrap();
        assert_eq!(b.open_record(&mut record), Err(RecordError::PeerAlert(20)));
        assert_eq!(
            RecordError::PeerAlert(20).alert(),
            None,
            "no answer to a fatal alert"
        );
        let (mut a, mut b) = pair(version, cipher);
        let mut record = Vec::new();
        a.seal_alert(alert::CLOSE_NOTIFY, &mut record).unwrap();
        assert!(matches!(
            b.open_record(&mut record),
            Ok(Inbound::Closed { .. })
        ));
    }
    // TLS 1.3: an unprotected record after the handshake.
    let (_, mut b) = pair(TlsVersion::Tls13, KernelCipher::AesGcm128);
    let mut plain_alert = vec![21, 3, 3, 0, 2, 2, 40];
    assert!(matches!(
        b.open_record(&mut plain_alert),
        Err(RecordError::UnexpectedMessage(_))
    ));
}
