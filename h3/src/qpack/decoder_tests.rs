use super::*;
use crate::qpack::prefix::write_string;
use crate::qpack::{encode, Decoded};
use h2::Field;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn limits(capacity: u64) -> Limits {
    Limits {
        qpack_max_table_capacity: capacity,
        qpack_blocked_streams: 2,
        ..Limits::default()
    }
}

fn fields(pairs: &[(&str, &str)]) -> Vec<Field> {
    pairs
        .iter()
        .map(|(n, v)| Field::new(n.as_bytes(), v.as_bytes()))
        .collect()
}

fn decoded(o: Outcome) -> Vec<Field> {
    match o {
        Outcome::Decoded(Decoded::Fields(f)) => f,
        other => panic!("{other:?}"),
    }
}

fn feed(d: &mut Decoder, bytes: &[u8]) -> Vec<(u64, Decoded)> {
    let mut unblocked = Vec::new();
    d.feed_encoder(bytes, &mut unblocked).unwrap();
    unblocked
}

/// RFC 9204 Appendix B.1: a literal with a static name reference, no dynamic table.
#[test]
fn rfc9204_b1_literal_field_line_with_name_reference() {
    let mut d = Decoder::new(&limits(0));
    let out = d
        .decode_section(0, hex("0000 510b 2f69 6e64 6578 2e68 746d 6c"))
        .unwrap();
    assert_eq!(decoded(out), fields(&[(":path", "/index.html")]));
    assert!(
        d.take_instructions().is_empty(),
        "no acknowledgment for RIC 0"
    );
}

/// RFC 9204 Appendix B.2 to B.4: inserts, post-base references, the acknowledgment, the
/// insert count increment, a duplicate, relative references.
#[test]
fn rfc9204_b2_to_b4_dynamic_table_walkthrough() {
    let mut d = Decoder::new(&limits(220));
    let b2 = hex("3fbd01 c00f 7777 772e 6578 616d 706c 652e 636f 6d
         c10c 2f73 616d 706c 652f 7061 7468");
    assert!(feed(&mut d, &b2).is_empty());
    assert_eq!(d.take_instructions(), [0x02], "Insert Count Increment 2");
    let s4 = d.decode_section(4, hex("0381 10 11")).unwrap();
    assert_eq!(
        decoded(s4),
        fields(&[(":authority", "www.example.com"), (":path", "/sample/path")])
    );
    assert_eq!(
        d.take_instructions(),
        [0x84],
        "Section Acknowledgment, stream 4"
    );
    let b3 = hex("4a63 7573 746f 6d2d 6b65 790c 6375 7374 6f6d 2d76 616c 7565");
    feed(&mut d, &b3);
    assert_eq!(
        d.take_instructions(),
        [0x01],
        "B.3's Insert Count Increment 1"
    );
    feed(&mut d, &hex("02"));
    let s8 = d.decode_section(8, hex("0500 80 c1 81")).unwrap();
    assert_eq!(
        decoded(s8),
        fields(&[
            (":authority", "www.example.com"),
            (":path", "/"),
            ("custom-key", "custom-value")
        ])
    );
    // B.5: an insert by dynamic name reference evicts the oldest entry.
    feed(&mut d, &hex("810d 6375 7374 6f6d 2d76 616c 7565 32"));
    assert!(d.table.get(0).is_none());
    assert_eq!(
        d.table.get(4),
        Some((&b"custom-key"[..], &b"custom-value2"[..]))
    );
}

/// RFC 9204 §2.1.2: a section needing inserts not received waits, then decodes, and is
/// acknowledged; one blocked stream beyond QPACK_BLOCKED_STREAMS is
/// QPACK_DECOMPRESSION_FAILED.
#[test]
fn rfc9204_2_1_2_blocked_streams_wait_and_are_capped() {
    let mut d = Decoder::new(&limits(4096));
    // RIC 1 (encoded 2 with MaxEntries 128), Base 1, indexed dynamic relative 0.
    assert_eq!(
        d.decode_section(0, vec![0x02, 0x00, 0x80]),
        Ok(Outcome::Blocked)
    );
    assert_eq!(
        d.decode_section(4, vec![0x02, 0x00, 0x80]),
        Ok(Outcome::Blocked)
    );
    assert_eq!(
        d.decode_section(8, vec![0x02, 0x00, 0x80]),
        Err(Error::Flood(Flood::BlockedStreams))
    );
    let mut enc = vec![0x3f, 0xe1, 0x1f]; // capacity 4096
    write_string(&mut enc, 0x40, 5, b"x-a");
    write_string(&mut enc, 0, 7, b"1");
    // Fed in two pieces: nothing unblocks before the insert is whole.
    assert!(feed(&mut d, &enc[..5]).is_empty());
    let un = feed(&mut d, &enc[5..]);
    assert_eq!(un.len(), 2);
    assert_eq!(un[0], (0, Decoded::Fields(fields(&[("x-a", "1")]))));
    assert_eq!(
        d.take_instructions(),
        [0x80, 0x84],
        "two acknowledgments, no increment"
    );
    assert_eq!(d.blocked_streams(), 0);
}

/// RFC 9204 §4.3.1: a capacity above our SETTINGS is QPACK_ENCODER_STREAM_ERROR; §4.3.2,
/// an entry larger than the capacity too.
#[test]
fn rfc9204_4_3_capacity_over_settings_and_oversized_entries() {
    let mut d = Decoder::new(&limits(100));
    let mut un = Vec::new();
    assert_eq!(
        d.feed_encoder(&[0x3f, 0x46], &mut un), // capacity 101
        Err(Error::Flood(Flood::TableCapacity))
    );
    let mut d = Decoder::new(&limits(100));
    let mut enc = vec![0x3f, 0x45]; // capacity 100
    write_string(&mut enc, 0x40, 5, &[b'a'; 40]);
    write_string(&mut enc, 0, 7, &[b'b'; 40]);
    let e = d.feed_encoder(&enc, &mut un).unwrap_err();
    assert!(matches!(e, Error::Connection(c) if c.code == ErrorCode::QpackEncoderStreamError));
}

/// An encoder-stream instruction that could never fit the table is refused before it is
/// whole, so the buffer stays bounded.
#[test]
fn encoder_instruction_buffer_is_bounded() {
    let mut d = Decoder::new(&limits(64));
    let mut enc = vec![0x3f, 0x21]; // capacity 64
    enc.push(0x5f); // literal name, length >= 31 ...
    enc.extend([0xff, 0xff, 0x03]); // ... about 65 000 bytes, never sent
    enc.extend([b'a'; 400]);
    let mut un = Vec::new();
    assert_eq!(
        d.feed_encoder(&enc, &mut un),
        Err(Error::Flood(Flood::EncoderInstruction))
    );
}

/// RFC 9204 §4.5.1.1 and §2.2.3: references at or past Required Insert Count, to evicted
/// entries, or an impossible encoded count are QPACK_DECOMPRESSION_FAILED.
#[test]
fn rfc9204_4_5_invalid_references_fail() {
    let mut d = Decoder::new(&limits(4096));
    let mut enc = vec![0x3f, 0xe1, 0x1f];
    write_string(&mut enc, 0x40, 5, b"x-a");
    write_string(&mut enc, 0, 7, b"1");
    feed(&mut d, &enc);
    for (why, section) in [
        ("post-base at RIC", vec![0x02, 0x00, 0x10]),
        ("relative below 0", vec![0x02, 0x00, 0x81]),
        ("RIC beyond range", vec![0xff, 0x01, 0x00]),
        ("static index 99", vec![0x00, 0x00, 0xff, 0x24]),
        ("negative Base", vec![0x02, 0x81, 0x80]),
        ("truncated literal", vec![0x00, 0x00, 0x5f, 0x05]),
        ("no prefix", vec![]),
    ] {
        let r = d.decode_section(0, section);
        let code = match r {
            Err(Error::Connection(e)) => e.code,
            other => panic!("{why}: {other:?}"),
        };
        assert_eq!(code, ErrorCode::QpackDecompressionFailed, "{why}");
    }
    let mut none = Decoder::new(&limits(0));
    assert!(
        none.decode_section(0, vec![0x01, 0x00]).is_err(),
        "dynamic ref, no table"
    );
}

/// Sections over the limits stop decoding (431), without error.
#[test]
fn sections_over_the_limits_are_too_large() {
    let l = Limits {
        max_field_section_size: 100,
        ..Limits::default()
    };
    let mut d = Decoder::new(&l);
    let mut big = Vec::new();
    encode([(&b"x-long"[..], &[b'v'; 80][..])], &mut big);
    let r = d.decode_section(0, big).unwrap();
    assert_eq!(
        r,
        Outcome::Decoded(Decoded::TooLarge(Flood::FieldSectionSize))
    );
    let mut d = Decoder::new(&Limits {
        max_header_fields: 3,
        ..Limits::default()
    });
    let mut many = Vec::new();
    encode([(&b":path"[..], &b"/"[..]); 4], &mut many);
    let r = d.decode_section(4, many).unwrap();
    assert_eq!(r, Outcome::Decoded(Decoded::TooLarge(Flood::HeaderFields)));
}

/// Our encoder: static references, static names with literal values, literal names; what
/// it writes our decoder reads back.
#[test]
fn our_encoder_round_trips_through_our_decoder() {
    let list = [
        (":status", "200"),
        (":status", "418"),
        ("content-type", "text/plain"),
        ("x-custom", "a value"),
        ("set-cookie", ""),
    ];
    let mut block = Vec::new();
    encode(
        list.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
        &mut block,
    );
    assert_eq!(
        &block[..3],
        [0x00, 0x00, 0xd9],
        ":status 200 is static index 25"
    );
    let mut d = Decoder::new(&limits(0));
    let got = decoded(d.decode_section(0, block).unwrap());
    let want = fields(&list);
    assert_eq!(got, want);
}

/// RFC 9204 §4.4.2: a cancelled stream's held section is dropped and the encoder told.
#[test]
fn rfc9204_4_4_2_stream_cancellation() {
    let mut d = Decoder::new(&limits(4096));
    assert_eq!(
        d.decode_section(12, vec![0x02, 0x00, 0x80]),
        Ok(Outcome::Blocked)
    );
    d.cancel_stream(12);
    assert!(!d.is_blocked(12));
    assert_eq!(d.take_instructions(), [0x4c]);
}
