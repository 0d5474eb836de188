//! One stored entry, two renderings: status + fields + body for a codec that
//! encodes its own head (HTTP/2), and the HTTP/1 head rendered once.

mod common;

use std::time::Duration;

use cache::{Policy, ReplyKind};
use common::*;

#[test]
fn status_fields_and_body_match_the_http1_head() {
    let policy = Policy {
        resp_hdr_del: vec!["x-secret".into()],
        ..Policy::default()
    };
    let e = entry(
        &policy,
        &[],
        &[
            ("Cache-Control", "max-age=60"),
            ("ETag", "\"v1\""),
            ("X-Secret", "s"),
            ("Connection", "keep-alive"),
            ("Content-Type", "text/plain"),
        ],
        "hello",
    );
    assert_eq!(e.status(), 200);
    let fields: Vec<(String, String)> = e
        .fields()
        .map(|(n, v)| {
            (
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            )
        })
        .collect();
    let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "Cache-Control",
            "ETag",
            "Content-Type",
            "Date",
            "Content-Length"
        ],
        "stored fields in order; connection fields and cache_resp_hdr_del never stored"
    );
    assert_eq!(fields[4].1, "5");
    assert_eq!(&e.body()[..], b"hello");
    // The HTTP/1 rendering is exactly the status line plus those fields.
    let mut rendered = b"HTTP/1.1 200 OK\r\n".to_vec();
    for (n, v) in &fields {
        rendered.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
    }
    let (head, body) = e.reply_parts(ReplyKind::Full);
    assert_eq!(head, &rendered[..]);
    assert_eq!(body, b"hello");
}

#[test]
fn age_line_counts_seconds_and_caps_at_2_pow_31() {
    let e = entry(
        &Policy::default(),
        &[],
        &[("Cache-Control", "max-age=60")],
        "x",
    );
    for (after, want) in [
        (0, "Age: 0\r\n\r\n"),
        (7, "Age: 7\r\n\r\n"),
        (86_400, "Age: 86400\r\n\r\n"),
        (1 << 40, "Age: 2147483648\r\n\r\n"),
    ] {
        let mut line = Vec::new();
        e.write_age(t(0) + Duration::from_secs(after), &mut line);
        assert_eq!(
            String::from_utf8_lossy(&line),
            want,
            "{after} s after storing"
        );
    }
    // Into the stack buffer the worker uses: a full line fits.
    let mut stack = [0u8; 40];
    let mut cursor = std::io::Cursor::new(&mut stack[..]);
    e.write_age(t(0) + Duration::from_secs(1 << 40), &mut cursor);
    assert_eq!(cursor.position(), "Age: 2147483648\r\n\r\n".len() as u64);
}
