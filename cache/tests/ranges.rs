//! Range requests answered from a complete stored response (RFC 9110 §14,
//! §15.3.7, §15.5.17; RFC 9111 §3.3-3.4 for what is stored).

mod common;

use cache::{Answer, BodyPart, ByteRange, ComposedReply, Entry, Policy, Reply, ReplyKind};
use common::*;

const BODY: &str = "0123456789abcdefghij"; // 20 bytes

fn stored() -> Entry {
    entry(
        &Policy::default(),
        &[],
        &[
            ("Cache-Control", "max-age=60"),
            ("ETag", "\"v1\""),
            (
                "Last-Modified",
                &http_date(t(0) - std::time::Duration::from_secs(3600)),
            ),
            ("Content-Type", "text/plain"),
        ],
        BODY,
    )
}

fn answer(e: &Entry, method: &str, headers: &[(&'static str, &str)]) -> Answer {
    let h = hdrs(headers);
    e.answer(&req(method, "/r", &h))
}

fn composed<'e>(e: &'e Entry, a: &Answer) -> ComposedReply<'e> {
    match e.reply(a) {
        Reply::Composed(r) => r,
        Reply::Stored(kind) => panic!("expected a composed reply, got {kind:?}"),
    }
}

fn head_text(r: &ComposedReply<'_>) -> String {
    let mut head = Vec::new();
    r.write_head(&mut head);
    String::from_utf8(head).unwrap()
}

fn field<'a>(r: &'a ComposedReply<'_>, name: &str) -> Vec<&'a [u8]> {
    r.fields()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
        .map(|(_, v)| v)
        .collect()
}

fn br(first: usize, last: usize) -> ByteRange {
    ByteRange { first, last }
}

/// One row of a decision table: method, request fields, the answer wanted.
type Row<'a> = (&'a str, Vec<(&'static str, &'a str)>, Answer);

fn assert_answers(e: &Entry, rows: Vec<Row<'_>>) {
    for (method, headers, want) in rows {
        assert_eq!(answer(e, method, &headers), want, "{method} {headers:?}");
    }
}

/// RFC 9110 §14.2 and §13.2.2 step 5: which requests get 206, 416 or 200.
#[test]
fn rfc9110_14_2_range_decision_table() {
    let e = stored();
    let full = Answer::Stored(ReplyKind::Full);
    let cases: Vec<Row<'_>> = vec![
        (
            "GET",
            vec![("Range", "bytes=0-4")],
            Answer::Partial(vec![br(0, 4)]),
        ),
        (
            "GET",
            vec![("Range", "bytes=-5")],
            Answer::Partial(vec![br(15, 19)]),
        ),
        (
            "GET",
            vec![("Range", "bytes=15-")],
            Answer::Partial(vec![br(15, 19)]),
        ),
        (
            "GET",
            vec![("Range", "bytes=0-1,10-11")],
            Answer::Partial(vec![br(0, 1), br(10, 11)]),
        ),
        (
            "GET",
            vec![("Range", "bytes=20-")],
            Answer::RangeNotSatisfiable,
        ),
        // §14.2: only GET has range semantics; HEAD and others ignore Range.
        (
            "HEAD",
            vec![("Range", "bytes=0-4")],
            Answer::Stored(ReplyKind::HeadOnly),
        ),
        // Invalid or unknown: the full representation.
        ("GET", vec![("Range", "bytes=4-1")], full.clone()),
        ("GET", vec![("Range", "pages=1-2")], full.clone()),
        (
            "GET",
            vec![("Range", "bytes=0-1"), ("Range", "bytes=2-3")],
            full.clone(),
        ),
    ];
    assert_answers(&e, cases);
}

/// RFC 9110 §13.1.5: If-Range decides whether Range applies.
#[test]
fn rfc9110_13_1_5_if_range_decision_table() {
    let e = stored();
    let lm = http_date(t(0) - std::time::Duration::from_secs(3600));
    let recent = http_date(t(0) - std::time::Duration::from_secs(30));
    let full = Answer::Stored(ReplyKind::Full);
    let cases: Vec<Row<'_>> = vec![
        // §13.1.5 If-Range: strong ETag match applies Range; weak or other tags do not.
        (
            "GET",
            vec![("Range", "bytes=0-4"), ("If-Range", "\"v1\"")],
            Answer::Partial(vec![br(0, 4)]),
        ),
        (
            "GET",
            vec![("Range", "bytes=0-4"), ("If-Range", "W/\"v1\"")],
            full.clone(),
        ),
        (
            "GET",
            vec![("Range", "bytes=0-4"), ("If-Range", "\"v2\"")],
            full.clone(),
        ),
        (
            "GET",
            vec![("Range", "bytes=0-4"), ("If-Range", "v1")],
            full.clone(),
        ),
        // ... an HTTP-date equal to a strong Last-Modified applies Range.
        (
            "GET",
            vec![("Range", "bytes=0-4"), ("If-Range", &lm)],
            Answer::Partial(vec![br(0, 4)]),
        ),
        (
            "GET",
            vec![("Range", "bytes=0-4"), ("If-Range", &recent)],
            full.clone(),
        ),
        (
            "GET",
            vec![("Range", "bytes=0-4"), ("If-Range", "yesterday")],
            full.clone(),
        ),
        (
            "GET",
            vec![
                ("Range", "bytes=0-4"),
                ("If-Range", "\"v1\""),
                ("If-Range", "\"v1\""),
            ],
            full.clone(),
        ),
        // If-Range without Range is ignored (§13.1.5 MUST).
        ("GET", vec![("If-Range", "\"v2\"")], full.clone()),
        // 416 for an unsatisfiable range even with If-Range true.
        (
            "GET",
            vec![("Range", "bytes=99-"), ("If-Range", "\"v1\"")],
            Answer::RangeNotSatisfiable,
        ),
    ];
    assert_answers(&e, cases);
}

/// A Last-Modified less than 60 s before Date is weak for an intermediary
/// (RFC 9110 §8.8.2.2), so an If-Range of that date does not apply Range.
#[test]
fn rfc9110_8_8_2_2_recent_last_modified_is_weak_for_if_range() {
    let recent_lm = entry(
        &Policy::default(),
        &[],
        &[
            ("Cache-Control", "max-age=60"),
            (
                "Last-Modified",
                &http_date(t(0) - std::time::Duration::from_secs(30)),
            ),
        ],
        BODY,
    );
    let recent = http_date(t(0) - std::time::Duration::from_secs(30));
    assert_eq!(
        answer(
            &recent_lm,
            "GET",
            &[("Range", "bytes=0-4"), ("If-Range", &recent)]
        ),
        Answer::Stored(ReplyKind::Full)
    );
}

/// §15.3.7: a single-part 206 has Content-Range and the stored fields
/// (Date, Cache-Control, ETag... as a 200 would), body a slice of the stored one.
#[test]
fn rfc9110_15_3_7_single_part() {
    let e = stored();
    let r = composed(&e, &Answer::Partial(vec![br(2, 6)]));
    assert_eq!(r.status(), 206);
    let head = head_text(&r);
    assert!(
        head.starts_with("HTTP/1.1 206 Partial Content\r\n"),
        "{head}"
    );
    assert_eq!(field(&r, "content-range"), [&b"bytes 2-6/20"[..]]);
    assert_eq!(field(&r, "content-length"), [&b"5"[..]]);
    assert_eq!(field(&r, "content-type"), [&b"text/plain"[..]]);
    for must in ["date", "cache-control", "etag"] {
        assert_eq!(field(&r, must).len(), 1, "{must}");
    }
    assert!(!head.ends_with("\r\n\r\n"), "the Age chunk ends the head");
    assert_eq!(r.body_parts(), [BodyPart::Stored(2..7)]);
    assert_eq!(r.body_to_vec(), b"23456");
    assert_eq!(r.body_len(), 5);
}

/// §14.6: multipart/byteranges with a boundary, each part with
/// Content-Type and Content-Range, no Content-Range in the header section.
#[test]
fn rfc9110_14_6_multipart() {
    let e = stored();
    let r = composed(&e, &Answer::Partial(vec![br(10, 11), br(0, 1)]));
    assert_eq!(r.status(), 206);
    assert!(field(&r, "content-range").is_empty());
    let ct = String::from_utf8(field(&r, "content-type")[0].to_vec()).unwrap();
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .expect(&ct)
        .to_string();
    assert_eq!(boundary.len(), 16);
    let body = String::from_utf8(r.body_to_vec()).unwrap();
    let want = format!(
        "--{b}\r\nContent-Type: text/plain\r\nContent-Range: bytes 10-11/20\r\n\r\nab\r\n\
         --{b}\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-1/20\r\n\r\n01\r\n--{b}--\r\n",
        b = boundary
    );
    assert_eq!(body, want);
    assert_eq!(
        field(&r, "content-length"),
        [body.len().to_string().as_bytes()]
    );
    assert_eq!(r.body_len(), body.len());
    // Content bytes are ranges of the stored body, not copies.
    let stored: Vec<_> = r
        .body_parts()
        .iter()
        .filter(|p| matches!(p, BodyPart::Stored(_)))
        .cloned()
        .collect();
    assert_eq!(stored, [BodyPart::Stored(10..12), BodyPart::Stored(0..2)]);
    // A fresh boundary per reply.
    let again = composed(&e, &Answer::Partial(vec![br(10, 11), br(0, 1)]));
    assert_ne!(field(&again, "content-type"), field(&r, "content-type"));
}

/// §15.5.17: 416 carries `Content-Range: bytes */len` and no content.
#[test]
fn rfc9110_15_5_17_not_satisfiable() {
    let e = stored();
    let r = composed(&e, &Answer::RangeNotSatisfiable);
    assert_eq!(r.status(), 416);
    assert!(head_text(&r).starts_with("HTTP/1.1 416 Range Not Satisfiable\r\n"));
    assert_eq!(field(&r, "content-range"), [&b"bytes */20"[..]]);
    assert_eq!(field(&r, "content-length"), [&b"0"[..]]);
    assert!(r.body_parts().is_empty());
}

/// RFC 9111 §3.3-3.4: a 206 from the origin is not stored (this cache does
/// not combine partial responses), so a stored partial response can never
/// be served as a complete one.
#[test]
fn rfc9111_3_3_partial_responses_are_not_stored() {
    let h = hdrs(&[
        ("Cache-Control", "max-age=60"),
        ("Content-Range", "bytes 0-4/20"),
        ("Date", &http_date(t(0))),
    ]);
    let got = Entry::build(
        &Policy::default(),
        &req("GET", "/r", &[]),
        &resp(206, &h, 5),
        body("01234"),
        times_at(0),
    );
    assert_eq!(got.err(), Some(cache::NotStoredReason::PartialContent));
}

/// Ranges apply to 200 only: a stored 404 ignores Range.
#[test]
fn rfc9110_14_2_ranges_only_for_200() {
    let policy = Policy {
        default_ttl: std::time::Duration::from_secs(60),
        ..Policy::default()
    };
    let h = hdrs(&[("Date", &http_date(t(0)))]);
    let e = Entry::build(
        &policy,
        &req("GET", "/", &[]),
        &resp(404, &h, 9),
        body("not found"),
        times_at(0),
    )
    .unwrap();
    assert_eq!(
        answer(&e, "GET", &[("Range", "bytes=0-1")]),
        Answer::Stored(ReplyKind::Full)
    );
}
