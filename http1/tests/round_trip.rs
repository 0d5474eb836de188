//! The writers and the parsers agree (issue 12 item 11), as a property in the normal test run
//! (the `http1_parse` fuzz target checks the same on arbitrary bytes): a head built from random
//! fields — many of them, near the limits, with the names the writers manage — either parses
//! and forwards to a head that parses again at the same limits and says the same thing, or its
//! forwarded form is refused whole.

use http1::{
    parse_request, parse_response, write_request_head, write_response_head, ConnectionOption,
    Forwarding, HeaderEdits, HeaderSpans, Limits,
};
use proptest::prelude::*;

/// Names the writers treat specially, mixed with ordinary ones.
const NAMES: &[&str] = &[
    "Accept",
    "X-Forwarded-For",
    "Via",
    "Connection",
    "Keep-Alive",
    "TE",
    "X-Hop",
    "Cookie",
    "Expect",
    "Upgrade",
    "Set-Cookie",
];

const VALUES: &[&str] = &[
    "1",
    "x-hop",
    "close",
    "keep-alive",
    "a b",
    "10.0.0.1",
    "1.1 edge",
];

fn field() -> impl Strategy<Value = (String, String)> {
    (
        proptest::sample::select(NAMES),
        proptest::sample::select(VALUES),
        0..40usize,
    )
        .prop_map(|(name, value, pad)| (name.to_string(), format!("{value}{}", "v".repeat(pad))))
}

fn limits() -> impl Strategy<Value = Limits> {
    (4..40usize, 32..200usize, 200..2000usize).prop_map(|(max_headers, field, head)| Limits {
        max_headers,
        max_field_bytes: field,
        max_head_bytes: head,
        ..Limits::default()
    })
}

fn head_text(start: &str, fields: &[(String, String)]) -> Vec<u8> {
    let mut text = start.to_string();
    for (name, value) in fields {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.into_bytes()
}

/// Fields not managed by the writers, nor named by Connection: what must arrive unchanged.
fn end_to_end(buf: &[u8], fields: &HeaderSpans) -> Vec<(Vec<u8>, Vec<u8>)> {
    const MANAGED: &[&str] = &[
        "host",
        "x-forwarded-for",
        "via",
        "connection",
        "keep-alive",
        "te",
        "upgrade",
        "content-length",
        "transfer-encoding",
    ];
    let options: Vec<Vec<u8>> = fields
        .get_all(buf, "connection")
        .flat_map(|v| v.split(|&b| b == b','))
        .map(|o| o.trim_ascii().to_ascii_lowercase())
        .collect();
    fields
        .fields(buf)
        .filter(|(name, _)| {
            let lower = name.to_ascii_lowercase();
            !MANAGED.iter().any(|m| lower == m.as_bytes()) && !options.contains(&lower)
        })
        .map(|(n, v)| (n.to_vec(), v.to_vec()))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn forwarded_request_parses_at_the_same_limits_and_keeps_its_fields(
        fields in proptest::collection::vec(field(), 0..45),
        limits in limits(),
    ) {
        let mut all = vec![("Host".to_string(), "site.test".to_string())];
        all.extend(fields);
        let buf = head_text("POST /p?q HTTP/1.1\r\n", &all);
        let Ok(Some((head, _))) = parse_request(&buf, &limits) else {
            return Ok(());
        };
        let edits = HeaderEdits::new();
        let fwd = Forwarding {
            forwarded_for: Some(b"192.0.2.9"),
            forwarded_proto: None,
            via: Some(b"ktls-proxy"),
            edits: &edits,
            framing: head.framing(),
            connection: ConnectionOption::Default,
            limits: &limits,
        };
        let mut out = Vec::new();
        if write_request_head(&mut out, &head, &buf, &fwd).is_err() {
            prop_assert!(out.is_empty());
            return Ok(());
        }
        let again = parse_request(&out, &limits);
        prop_assert!(matches!(again, Ok(Some(_))), "{:?}: {}", again, String::from_utf8_lossy(&out));
        let Ok(Some((again, _))) = again else { unreachable!() };
        prop_assert_eq!(again.path(&out), head.path(&buf));
        prop_assert_eq!(again.host(&out), head.host(&buf));
        prop_assert_eq!(end_to_end(&out, again.headers()), end_to_end(&buf, head.headers()));
    }

    #[test]
    fn forwarded_response_parses_at_the_same_limits_and_keeps_its_fields(
        fields in proptest::collection::vec(field(), 0..45),
        limits in limits(),
        close_delimited in any::<bool>(),
    ) {
        let start = if close_delimited { "HTTP/1.1 200 OK\r\n" } else { "HTTP/1.1 204 No Content\r\n" };
        let buf = head_text(start, &fields);
        let Ok(Some((head, _))) = parse_response(&buf, &limits, false) else {
            return Ok(());
        };
        let edits = HeaderEdits::new();
        let fwd = Forwarding {
            forwarded_for: None,
            forwarded_proto: None,
            via: Some(b"ktls-proxy"),
            edits: &edits,
            framing: head.framing(),
            connection: ConnectionOption::Default,
            limits: &limits,
        };
        let mut out = Vec::new();
        if write_response_head(&mut out, &head, &buf, &fwd).is_err() {
            prop_assert!(out.is_empty());
            return Ok(());
        }
        let again = parse_response(&out, &limits, false);
        prop_assert!(matches!(again, Ok(Some(_))), "{:?}: {}", again, String::from_utf8_lossy(&out));
        let Ok(Some((again, _))) = again else { unreachable!() };
        prop_assert_eq!(again.status(), head.status());
        prop_assert_eq!(again.framing(), head.framing());
        prop_assert_eq!(end_to_end(&out, again.headers()), end_to_end(&buf, head.headers()));
    }
}
