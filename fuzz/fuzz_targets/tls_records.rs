//! Fuzz the proxy's TLS record layer with peer-controlled bytes.
//!
//! Random bytes almost never pass a record's authentication, so most of the layer (inner
//! content types, padding, alerts, KeyUpdate, sequence limits) would stay out of reach. The
//! input is therefore read three ways:
//!
//! 1. as received bytes, fed to a reader that must only make progress or refuse;
//! 2. as a script (structure-aware): after the control byte, each op seals a record with the
//!    writer that shares the reader's keys (application data, any content type with any
//!    TLS 1.3 padding, alerts, handshake messages, KeyUpdate), or appends raw bytes, or flips
//!    a bit of what is already on the wire; the reader opens the whole wire. A script of
//!    clean ops (application data and well-formed KeyUpdates) must open back to exactly the
//!    data sealed;
//! 3. as application data sealed and opened back, which must then fail with bad_record_mac
//!    once one bit of the first record's body is flipped.
//!
//! Control byte: bit 0 the version (1.2 / 1.3), bits 1-2 the cipher, bit 3 sequence numbers
//! starting just below 2^64 (exhaustion), bits 4-7 which bit (3) flips.
//! Seeds for (2) are written by fuzz/seeds/tls_records.py.
#![no_main]
#![forbid(unsafe_code)]

use ktls::kernel::{KernelCipher, TlsVersion};
use ktls::record::{content, DirectionKeys, Inbound, RecordError, RecordLayer};
use libfuzzer_sys::fuzz_target;

fn keys(version: TlsVersion, cipher: KernelCipher, seed: u8, seq: u64) -> DirectionKeys {
    let key = vec![seed; cipher.key_len()];
    match (version, cipher) {
        (TlsVersion::Tls13, _) => DirectionKeys::from_secret(cipher, &[seed; 32], seq),
        (TlsVersion::Tls12, KernelCipher::Chacha20Poly1305) => {
            DirectionKeys::from_key_iv(&key, &[seed; 12], seq)
        }
        (TlsVersion::Tls12, _) => DirectionKeys::from_key_iv(&key, &[seed; 4], seq),
    }
    .expect("fixed-size test keys")
}

/// A writer and a reader that share keys, both starting at sequence `seq`.
fn pair(version: TlsVersion, cipher: KernelCipher, seq: u64) -> (RecordLayer, RecordLayer) {
    (
        RecordLayer::new(
            version,
            cipher,
            keys(version, cipher, 1, seq),
            keys(version, cipher, 2, seq),
        ),
        RecordLayer::new(
            version,
            cipher,
            keys(version, cipher, 2, seq),
            keys(version, cipher, 1, seq),
        ),
    )
}

/// Opens records from the front of `wire` until it runs out or is refused; returns the data
/// and how it ended. A KeyUpdate that asks for an answer gets one (sealed, then dropped).
fn open_all(layer: &mut RecordLayer, wire: &mut [u8]) -> (Vec<u8>, Result<(), RecordError>) {
    let mut data = Vec::new();
    let mut at = 0;
    while at < wire.len() {
        let consumed = match layer.open_record(&mut wire[at..]) {
            Ok(Inbound::Incomplete) => break,
            Ok(Inbound::Data { consumed, plain }) => {
                assert!(!plain.is_empty() && plain.end <= consumed);
                data.extend_from_slice(&wire[at + plain.start..at + plain.end]);
                consumed
            }
            Ok(Inbound::KeyUpdated { consumed, answer }) => {
                if answer {
                    let mut sink = Vec::new();
                    if let Err(e) = layer.seal_key_update(false, &mut sink) {
                        return (data, Err(e));
                    }
                }
                consumed
            }
            Ok(Inbound::Closed { consumed }) | Ok(Inbound::Skip { consumed }) => consumed,
            Err(e) => return (data, Err(e)),
        };
        assert!(consumed > 0 && at + consumed <= wire.len());
        at += consumed;
    }
    (data, Ok(()))
}

/// Reads the script of (2) from `input`.
struct Script<'a> {
    input: &'a [u8],
}

impl<'a> Script<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.input.split_first()?;
        self.input = rest;
        Some(b)
    }

    /// A length (one byte, or two when the first has its top bit set: up to 32767, above a
    /// record's limit) and that many bytes, or fewer if the input ends.
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let first = self.byte()?;
        let len = if first & 0x80 == 0 {
            usize::from(first)
        } else {
            usize::from(first & 0x7f) << 8 | usize::from(self.byte()?)
        };
        let (taken, rest) = self.input.split_at(len.min(self.input.len()));
        self.input = rest;
        Some(taken)
    }
}

/// What the script's writer put on the wire, and the application data in it.
struct Written {
    wire: Vec<u8>,
    data: Vec<u8>,
    /// Only application data and well-formed KeyUpdates: the reader must get all of `data`.
    clean: bool,
    /// Raw bytes or flipped bits (or a TLS 1.3 record whose inner content type the payload
    /// decides): what the reader hands out is no longer predictable.
    tampered: bool,
}

/// Seals `data` as application data: the bytes the writer took join what the reader must see.
fn seal_data(writer: &mut RecordLayer, data: &[u8], w: &mut Written) -> Result<(), RecordError> {
    match writer.seal_data(&[data], usize::MAX, &mut w.wire) {
        // Fewer bytes: a later record was refused (sequence numbers exhausted).
        Ok(n) if n < data.len() => {
            w.data.extend_from_slice(&data[..n]);
            Err(RecordError::SequenceExhausted)
        }
        Ok(_) => {
            w.data.extend_from_slice(data);
            Ok(())
        }
        Err(e) => Err(e),
    }
}

fn run_script(writer: &mut RecordLayer, mut script: Script<'_>) -> Written {
    let mut w = Written {
        wire: Vec::new(),
        data: Vec::new(),
        clean: true,
        tampered: false,
    };
    while let Some(op) = script.byte() {
        let sealed = match op % 7 {
            0 => {
                let Some(data) = script.bytes() else { break };
                seal_data(writer, data, &mut w)
            }
            1 => {
                let (Some(content_type), Some(padding)) = (script.byte(), script.byte()) else {
                    break;
                };
                let Some(payload) = script.bytes() else { break };
                w.clean = false;
                // TLS 1.3 with type 0: the payload's last non-zero byte becomes the type.
                w.tampered |= content_type == 0;
                let result = writer.seal_record(
                    content_type,
                    &[payload],
                    usize::from(padding),
                    &mut w.wire,
                );
                if result.is_ok() && content_type == content::APPLICATION_DATA {
                    w.data.extend_from_slice(payload);
                }
                result
            }
            2 => {
                let Some(payload) = script.bytes() else { break };
                w.clean = false;
                writer.seal_record(content::ALERT, &[payload], 0, &mut w.wire)
            }
            3 => {
                let Some(payload) = script.bytes() else { break };
                w.clean = false;
                writer.seal_record(content::HANDSHAKE, &[payload], 0, &mut w.wire)
            }
            4 => writer.seal_key_update(op & 0x80 != 0, &mut w.wire),
            5 => {
                let Some(raw) = script.bytes() else { break };
                w.clean = false;
                w.tampered = true;
                w.wire.extend_from_slice(raw);
                Ok(())
            }
            _ => {
                let (Some(high), Some(low)) = (script.byte(), script.byte()) else {
                    break;
                };
                if !w.wire.is_empty() {
                    let bit = (usize::from(high) << 8 | usize::from(low)) % (w.wire.len() * 8);
                    w.wire[bit / 8] ^= 1 << (bit % 8);
                    w.clean = false;
                    w.tampered = true;
                }
                Ok(())
            }
        };
        // A record the writer refuses (too long, sequence exhausted, KeyUpdate in TLS 1.2)
        // is not on the wire; the reader's view of the rest stays consistent.
        if sealed.is_err() {
            w.clean = false;
        }
    }
    w
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, input)) = data.split_first() else { return };
    let version = if control & 1 == 0 { TlsVersion::Tls12 } else { TlsVersion::Tls13 };
    let cipher = match (control >> 1) % 3 {
        0 => KernelCipher::AesGcm128,
        1 => KernelCipher::AesGcm256,
        _ => KernelCipher::Chacha20Poly1305,
    };
    let first_seq = if control & 8 == 0 { 1 } else { u64::MAX - 3 };

    // (1) Arbitrary received bytes.
    let (_, mut reader) = pair(version, cipher, first_seq);
    let mut received = input.to_vec();
    let _ = open_all(&mut reader, &mut received);

    // (2) The input as a script of records the reader can authenticate.
    let (mut writer, mut reader) = pair(version, cipher, first_seq);
    let mut written = run_script(&mut writer, Script { input });
    let (opened, end) = open_all(&mut reader, &mut written.wire);
    if written.clean {
        assert!(end.is_ok(), "a clean script was refused: {end:?}");
        assert_eq!(opened, written.data);
    } else if !written.tampered {
        // Every record is authentic: what the reader hands out before it stops (at an alert,
        // a refused message, the end) is the beginning of the data sealed.
        assert!(written.data.starts_with(&opened), "data the writer never sealed");
    }

    // (3) Our own records of the input open back to it...
    let (mut writer, mut reader) = pair(version, cipher, 1);
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
        let (_, mut reader) = pair(version, cipher, 1);
        let first_body = usize::from(u16::from_be_bytes([wire[3], wire[4]]));
        let bit = usize::from(control >> 4) * 131 % (first_body * 8);
        wire[5 + bit / 8] ^= 1 << (bit % 8);
        let (_, end) = open_all(&mut reader, &mut wire);
        assert_eq!(end, Err(RecordError::BadRecordMac));
    }
});
