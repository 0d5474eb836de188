//! Body decoding: chunked (split at every position, extensions, trailers,
//! refusals, pass-through accounting), Content-Length and close-delimited.

use http1::{BodyDecoder, BodyFraming, ChunkedDecoder, Limits, ParseError};

const BODY: &[u8] = b"5;name=value;quoted=\"a;b\"\r\nhello\r\n\
1A\r\nabcdefghijklmnopqrstuvwxyz\r\n\
000b \t; ext\r\n, world!...\r\n\
0\r\nExpires: never\r\nX-Checksum: abc\r\n\r\n";
const DECODED: &[u8] = b"helloabcdefghijklmnopqrstuvwxyz, world!...";

/// Feeds `pieces` one after another as separate reads; returns the
/// decoded data, and the total consumed.
fn decode_pieces(pieces: &[&[u8]]) -> Result<(Vec<u8>, usize, bool), ParseError> {
    let mut decoder = ChunkedDecoder::new(&Limits::default());
    let mut data = Vec::new();
    let mut consumed = 0;
    let mut done = false;
    for piece in pieces {
        let (used, finished) = decoder.decode_all(piece, |d| data.extend_from_slice(d))?;
        consumed += used;
        done = finished;
        if done {
            break;
        }
    }
    Ok((data, consumed, done))
}

#[test]
fn whole_body_with_extensions_and_trailers() {
    let mut input = BODY.to_vec();
    input.extend_from_slice(b"GET /next HTTP/1.1\r\n");
    let (data, consumed, done) = decode_pieces(&[&input]).unwrap();
    assert_eq!(data, DECODED);
    assert!(done);
    // Exactly the body's bytes: what follows is the next message.
    assert_eq!(consumed, BODY.len());
}

#[test]
fn split_at_every_position() {
    for cut in 0..=BODY.len() {
        let (data, consumed, done) = decode_pieces(&[&BODY[..cut], &BODY[cut..]]).unwrap();
        assert_eq!(data, DECODED, "cut {cut}");
        assert_eq!(consumed, BODY.len(), "cut {cut}");
        assert!(done, "cut {cut}");
    }
}

#[test]
fn byte_at_a_time() {
    let pieces: Vec<&[u8]> = BODY.chunks(1).collect();
    let (data, consumed, done) = decode_pieces(&pieces).unwrap();
    assert_eq!(
        (data.as_slice(), consumed, done),
        (DECODED, BODY.len(), true)
    );
}

#[test]
fn incomplete_body_is_not_done() {
    let (data, consumed, done) = decode_pieces(&[b"5\r\nhel"]).unwrap();
    assert_eq!((data.as_slice(), consumed, done), (&b"hel"[..], 6, false));
}

#[test]
fn steps_report_ranges_for_pass_through() {
    let input = b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
    let mut decoder = ChunkedDecoder::new(&Limits::default());
    let step = decoder.decode(input).unwrap();
    assert_eq!(
        (step.consumed, step.data.clone(), step.done),
        (6, 3..6, false)
    );
    let rest = &input[6..];
    let step = decoder.decode(rest).unwrap();
    assert_eq!(&rest[step.data.clone()], b"de");
    let rest = &rest[step.consumed..];
    let step = decoder.decode(rest).unwrap();
    assert!(step.done && step.data.is_empty());
    assert_eq!(step.consumed, rest.len());
    assert!(decoder.is_done());
    assert_eq!(decoder.data_len(), 5);
    assert!(!decoder.trailers_seen());
    // Past the end nothing more is taken.
    let step = decoder.decode(b"GET").unwrap();
    assert_eq!((step.consumed, step.done), (0, true));
}

#[test]
fn refusals() {
    use ParseError::*;
    let cases: &[(&[u8], ParseError)] = &[
        (b"\r\n", InvalidChunkSize),
        (b"g\r\n", InvalidChunkSize),
        (b"-1\r\n", InvalidChunkSize),
        (b"0x5\r\n", InvalidChunkSize),
        (b"+5\r\n", InvalidChunkSize),
        (b"10000000000000000\r\n", InvalidChunkSize),
        (b"5\n", InvalidChunkSize),
        (b"5 \r\n", InvalidChunkExtension),
        (b"5 x\r\n", InvalidChunkExtension),
        (b"5;\r\n", InvalidChunkExtension),
        (b"5;a\nb\r\n", InvalidChunkExtension),
        (b"5;a=\"x\0\"\r\n", InvalidChunkExtension),
        (b"5\rx", MissingChunkCrlf),
        (b"5\r\nhelloX", MissingChunkCrlf),
        (b"5\r\nhello\rX", MissingChunkCrlf),
        (b"5\r\nhello\n", MissingChunkCrlf),
        (b"0\r\n\rX", MissingChunkCrlf),
        (b"0\r\n folded: x\r\n\r\n", InvalidTrailer),
        (b"0\r\nX : y\r\n\r\n", InvalidTrailer),
        (b"0\r\nX: y\nZ: w\r\n\r\n", InvalidTrailer),
        (b"0\r\nX: y\0\r\n\r\n", InvalidTrailer),
        (b"0\r\n: y\r\n\r\n", InvalidTrailer),
    ];
    for (input, expected) in cases {
        let error = decode_pieces(&[input]).unwrap_err();
        assert_eq!(error, *expected, "{:?}", String::from_utf8_lossy(input));
        assert_eq!(error.status(), 400);
    }
}

#[test]
fn sixteen_digit_sizes_are_fine_and_padding_is_allowed() {
    let mut decoder = ChunkedDecoder::new(&Limits::default());
    let step = decoder.decode(b"FFFFFFFFFFFFFFFF\r\nab").unwrap();
    assert_eq!(step.data, 18..20);
    let (data, _, done) = decode_pieces(&[b"00000003\r\nabc\r\n0\r\n\r\n"]).unwrap();
    assert_eq!((data.as_slice(), done), (&b"abc"[..], true));
}

#[test]
fn limits_on_body_extensions_and_trailers() {
    let limits = Limits {
        max_body_bytes: Some(10),
        max_chunk_ext_bytes: 8,
        max_trailer_bytes: 16,
        ..Limits::default()
    };
    let run = |input: &[u8]| ChunkedDecoder::new(&limits).decode_all(input, |_| {});
    assert!(run(b"5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n").is_ok());
    let error = run(b"5\r\nhello\r\n6\r\n").unwrap_err();
    assert_eq!((error, error.status()), (ParseError::BodyTooLarge, 413));
    assert!(run(b"1;abcdefg\r\n").is_ok());
    assert_eq!(
        run(b"1;abcdefgh\r\n").unwrap_err(),
        ParseError::InvalidChunkExtension
    );
    assert!(run(b"0\r\nX: 0123456789\r\n\r\n").is_ok());
    assert_eq!(
        run(b"0\r\nX: 0123456789a\r\n\r\n").unwrap_err(),
        ParseError::TrailerTooLarge
    );
}

#[test]
fn trailers_are_reported() {
    let mut decoder = ChunkedDecoder::new(&Limits::default());
    decoder.decode_all(BODY, |_| {}).unwrap();
    assert!(decoder.trailers_seen());
}

#[test]
fn trailer_section_is_kept_whatever_the_split() {
    let body: &[u8] = b"3\r\nabc\r\n0\r\nHost: evil\r\nX-Sum: 9\r\n\r\n";
    for split in 0..body.len() {
        let mut decoder = ChunkedDecoder::new(&Limits::default());
        let (first, _) = decoder.decode_all(&body[..split], |_| {}).unwrap();
        let (_, done) = decoder.decode_all(&body[first..], |_| {}).unwrap();
        assert!(done, "split at {split}");
        assert_eq!(
            decoder.trailer_section(),
            b"Host: evil\r\nX-Sum: 9\r\n",
            "split at {split}"
        );
    }
    let mut plain = ChunkedDecoder::new(&Limits::default());
    plain.decode_all(b"0\r\n\r\n", |_| {}).unwrap();
    assert!(plain.trailer_section().is_empty());
}

#[test]
fn length_and_close_delimited_and_empty() {
    let limits = Limits {
        max_body_bytes: Some(8),
        ..Limits::default()
    };
    let mut body = BodyDecoder::new(BodyFraming::Length(5), &limits);
    let step = body.decode(b"hel").unwrap();
    assert_eq!((step.consumed, step.data, step.done), (3, 0..3, false));
    assert_eq!(body.finish_at_eof(), Err(ParseError::IncompleteBody));
    let step = body.decode(b"loGET /").unwrap();
    assert_eq!((step.consumed, step.data, step.done), (2, 0..2, true));
    assert!(body.is_done());
    assert_eq!(body.finish_at_eof(), Ok(()));

    let mut body = BodyDecoder::new(BodyFraming::CloseDelimited, &limits);
    assert_eq!(body.decode(b"12345").unwrap().consumed, 5);
    assert!(!body.is_done());
    assert_eq!(body.finish_at_eof(), Ok(()));
    assert_eq!(body.decode(b"6789").unwrap_err(), ParseError::BodyTooLarge);

    let mut body = BodyDecoder::new(BodyFraming::None, &limits);
    let step = body.decode(b"GET").unwrap();
    assert_eq!((step.consumed, step.done), (0, true));

    let mut body = BodyDecoder::new(BodyFraming::Chunked, &limits);
    body.decode(b"3\r\nab").unwrap();
    assert_eq!(body.finish_at_eof(), Err(ParseError::IncompleteBody));
}
