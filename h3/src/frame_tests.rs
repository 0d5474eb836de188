use super::*;

/// Everything a reader gives for `input`, fed in pieces of `split` bytes, with DATA
/// chunks joined per frame; or the first error.
fn read_all(kind: StreamKind, input: &[u8], split: usize) -> Result<Vec<String>, Error> {
    let limits = Limits {
        max_field_section_size: 100,
        ..Limits::default()
    };
    let mut r = FrameReader::new(kind);
    let mut out = Vec::new();
    let mut data = Vec::new();
    for piece in input.chunks(split.max(1)) {
        let mut rest = piece;
        while let Some(p) = r.next(&mut rest, &limits)? {
            match p {
                Piece::Data { chunk, end } => {
                    data.extend_from_slice(chunk);
                    if end {
                        out.push(format!("DATA {:?}", String::from_utf8_lossy(&data)));
                        data.clear();
                    }
                }
                other => out.push(format!("{other:?}")),
            }
        }
        assert!(rest.is_empty());
    }
    assert!(r.at_boundary(), "ends between frames");
    Ok(out)
}

fn request_bytes() -> Vec<u8> {
    let mut b = Vec::new();
    write(&mut b, HEADERS, b"\x00\x00\xd1");
    write(&mut b, 0x21, b"grease");
    write(&mut b, DATA, b"hello ");
    write(&mut b, DATA, b"");
    write(&mut b, 0x1234_5678, b"");
    write(&mut b, DATA, &[b'w'; 300]);
    write(&mut b, HEADERS, b"\x00\x00");
    b
}

/// RFC 9114 §7.1: frames over arbitrary splits of a stream give the same pieces.
#[test]
fn rfc9114_7_1_frames_read_the_same_at_every_split() {
    let input = request_bytes();
    let whole = read_all(StreamKind::Request, &input, input.len()).unwrap();
    assert_eq!(whole.len(), 7, "{whole:?}");
    assert!(whole[1].starts_with("Skipped { ty: 33, len: 6 }"));
    assert_eq!(whole[3], "DATA \"\"");
    for split in 1..input.len() {
        assert_eq!(
            read_all(StreamKind::Request, &input, split).unwrap(),
            whole,
            "{split}"
        );
    }
}

/// §7.2.4, §7.2.6, §7.2.7, §7.2.3: control frames and their one-varint payloads.
#[test]
fn rfc9114_7_2_control_frames_parse() {
    let mut b = Vec::new();
    write(&mut b, SETTINGS, &[0x01, 0x40, 0x64, 0x21, 0x00]);
    write_varint_frame(&mut b, GOAWAY, 8);
    write_varint_frame(&mut b, MAX_PUSH_ID, 300);
    write_varint_frame(&mut b, CANCEL_PUSH, 2);
    for split in 1..=b.len() {
        let got = read_all(StreamKind::Control, &b, split).unwrap();
        assert_eq!(
            got,
            [
                "Frame(Settings([(1, 100), (33, 0)]))",
                "Frame(GoAway(8))",
                "Frame(MaxPushId(300))",
                "Frame(CancelPush(2))"
            ]
        );
    }
}

fn code_of(kind: StreamKind, bytes: &[u8]) -> ErrorCode {
    match read_all(kind, bytes, bytes.len()) {
        Err(Error::Connection(e)) => e.code,
        other => panic!("{bytes:?}: {other:?}"),
    }
}

/// §7.2.5: a server never accepts PUSH_PROMISE; §7.2.8: HTTP/2's types are unexpected;
/// §7.2 table: control frames on requests and DATA/HEADERS on the control stream too.
#[test]
fn rfc9114_7_2_frames_out_of_place_are_frame_unexpected() {
    for (kind, ty) in [
        (StreamKind::Request, PUSH_PROMISE),
        (StreamKind::Control, PUSH_PROMISE),
        (StreamKind::Request, SETTINGS),
        (StreamKind::Request, GOAWAY),
        (StreamKind::Request, MAX_PUSH_ID),
        (StreamKind::Request, CANCEL_PUSH),
        (StreamKind::Control, DATA),
        (StreamKind::Control, HEADERS),
        (StreamKind::Request, 0x2),
        (StreamKind::Request, 0x6),
        (StreamKind::Control, 0x8),
        (StreamKind::Control, 0x9),
    ] {
        let mut b = Vec::new();
        write(&mut b, ty, &[0]);
        assert_eq!(
            code_of(kind, &b),
            ErrorCode::FrameUnexpected,
            "{kind:?} {ty:#x}"
        );
    }
}

/// §7.1: a payload unlike its type's layout is H3_FRAME_ERROR.
#[test]
fn rfc9114_7_1_bad_payloads_are_frame_errors() {
    for (ty, payload) in [
        (GOAWAY, &[0x01, 0x02][..]),
        (GOAWAY, &[][..]),
        (MAX_PUSH_ID, &[0x40][..]),
        (CANCEL_PUSH, &[0; 9][..]),
        (SETTINGS, &[0x01][..]),
        (SETTINGS, &[0x01, 0x40][..]),
    ] {
        let mut b = Vec::new();
        write(&mut b, ty, payload);
        assert_eq!(
            code_of(StreamKind::Control, &b),
            ErrorCode::FrameError,
            "{ty} {payload:?}"
        );
    }
}

/// A HEADERS frame over `max_field_section_size` is skipped unread; what follows reads.
#[test]
fn oversized_headers_are_skipped_not_buffered() {
    let mut b = Vec::new();
    write(&mut b, HEADERS, &[0; 101]);
    write(&mut b, DATA, b"x");
    for split in 1..=b.len() {
        let got = read_all(StreamKind::Request, &b, split).unwrap();
        assert_eq!(got, ["Oversized { len: 101 }", "DATA \"x\""]);
    }
    let mut s = Vec::new();
    write(&mut s, SETTINGS, &[0; 1025]);
    let r = read_all(StreamKind::Control, &s, s.len());
    assert_eq!(r, Err(Error::Flood(Flood::SettingsSize)));
}

#[test]
fn reserved_types_are_0x1f_n_plus_0x21() {
    assert!(is_reserved(0x21) && is_reserved(0x40) && is_reserved(0x21 + 0x1f * 1000));
    assert!(!is_reserved(0x20) && !is_reserved(0x41));
}
