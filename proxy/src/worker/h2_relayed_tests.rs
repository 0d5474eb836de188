//! A relayed final response head reaches an HTTP/2 client, and the cache's copy of it, from
//! the pieces the upstream reader parsed plus the proxy's edits (`h1::relayed_head_fields`
//! into [`RelayedFields`] and `http1::ResponseFields`), no longer as HTTP/1 text rendered
//! and parsed back. The old way lives only here, as the oracle: the head written for the
//! client as HTTP/1.1 text (the HTTP/1 codec's bytes, unchanged) and parsed, by
//! [`head_fields`] for HEADERS and by the HTTP/1 parser with its default limits for the
//! cache. For generated upstream heads, configured edits and forwarding limits, both ways
//! give the same verdict and the same status, reason and fields in order.

use http1::{HeaderEdits, Limits, ResponseFields, ResponseHead};
use proptest::prelude::*;

use super::super::h1::{relayed_head_fields, render_response_head, ReplyTo};
use super::{head_fields, FieldList, RelayedFields};

/// Field lines an upstream may send: end-to-end fields in varied case, hop-by-hop ones,
/// fields a `Connection` names (a field named `close` among them), framing, repeated and
/// empty values.
const LINES: &[&str] = &[
    "Content-Type: text/html",
    "X-Upper-Case: Kept As Sent",
    "set-cookie: a=1",
    "Set-Cookie: b=2; Path=/",
    "Cache-Control: max-age=60",
    "Connection: x-hop, Keep-Alive",
    "Connection: close",
    "X-Hop: 1",
    "Close: named",
    "Keep-Alive: timeout=5",
    "Proxy-Connection: keep-alive",
    "Upgrade: h2c",
    "TE: trailers",
    "Trailer: X-Sum",
    "Via: 1.0 earlier",
    "Server: origin",
    "Date: Sat, 05 Dec 2026 09:00:00 GMT",
    "Age: 7",
    "X-Empty:",
    "X-Tabs: \tpadded\t",
    "ETag: \"v1\"",
];

/// The status lines and framings an upstream head may have.
const STARTS: &[&str] = &[
    "HTTP/1.1 200 OK",
    "HTTP/1.1 200",
    "HTTP/1.1 404 Not Here",
    "HTTP/1.1 204 No Content",
    "HTTP/1.1 304 Not Modified",
    "HTTP/1.0 200 OK",
    "HTTP/1.1 500 Internal Server Error",
];
const FRAMINGS: &[&str] = &[
    "Content-Length: 5\r\n",
    "Transfer-Encoding: chunked\r\n",
    "", // close-delimited (or none, for 204 and 304)
];

/// The configured edits a vhost may have: `resp_hdr_set`/`add` with and without values.
fn edits(choice: u8) -> HeaderEdits {
    let mut e = HeaderEdits::new();
    if choice & 1 != 0 {
        e.set(b"Server", b"ktls-proxy").unwrap();
    }
    if choice & 2 != 0 {
        e.add(b"Set-Cookie", b"__sticky=abc; Path=/").unwrap();
    }
    if choice & 4 != 0 {
        e.remove(b"x-upper-case").unwrap();
    }
    if choice & 8 != 0 {
        e.set(b"Age", b"12").unwrap();
    }
    if choice & 16 != 0 {
        e.add(b"X-Spaced", b" inner value ").unwrap();
    }
    e
}

/// Forwarding limits: the defaults, and tight ones the proxy's own fields can cross.
fn limits(choice: u8) -> Limits {
    let defaults = Limits::default();
    match choice % 4 {
        0 => defaults,
        1 => Limits {
            max_headers: 6,
            ..defaults
        },
        2 => Limits {
            max_head_bytes: 160,
            ..defaults
        },
        _ => Limits {
            max_field_bytes: 24,
            ..defaults
        },
    }
}

/// The old way: the head rendered as HTTP/1.1 text for an HTTP/1.1 client kept open (the
/// codec's framing aside) and parsed back into HEADERS' status and fields.
fn old_headers(
    parsed: (&ResponseHead, &[u8]),
    edits: &HeaderEdits,
    limits: &Limits,
) -> Result<(u16, FieldList), ()> {
    let mut text = Vec::new();
    let no_copy = None::<ResponseFields>;
    render_response_head(
        &mut text,
        parsed,
        edits,
        limits,
        ReplyTo::default(),
        no_copy,
    )?;
    head_fields(&text).ok_or(())
}

fn new_headers(
    parsed: (&ResponseHead, &[u8]),
    edits: &HeaderEdits,
    limits: &Limits,
) -> Result<(u16, FieldList), ()> {
    let mut fields = RelayedFields::default();
    relayed_head_fields(&mut fields, parsed, edits, limits, ReplyTo::default())?;
    let list = fields
        .relayable()
        .into_iter()
        .map(|(n, v)| (n.to_vec(), v.to_vec()))
        .collect();
    Ok((fields.status, list))
}

type StoredHead = (u16, Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>);

/// The old cache copy: the head as written for this client, parsed with the default limits
/// (None where that parse failed: such a head was neither stored nor invalidated by). Also
/// the text, which the HTTP/1 codec sends.
fn old_stored(
    parsed: (&ResponseHead, &[u8]),
    edits: &HeaderEdits,
    limits: &Limits,
    to: ReplyTo,
) -> Result<(Option<StoredHead>, Vec<u8>), ()> {
    let mut text = Vec::new();
    render_response_head(&mut text, parsed, edits, limits, to, None::<ResponseFields>)?;
    let stored = match http1::parse_response(&text, &Limits::default(), false) {
        Ok(Some((head, _))) => Some((
            head.status(),
            head.reason(&text).to_vec(),
            head.headers()
                .fields(&text)
                .map(|(n, v)| (n.to_vec(), v.to_vec()))
                .collect(),
        )),
        _ => None,
    };
    Ok((stored, text))
}

/// The new cache copy, handed the same pieces while the client's text is written, judged
/// by its measure as `Fill` judges it.
fn new_stored(
    parsed: (&ResponseHead, &[u8]),
    edits: &HeaderEdits,
    limits: &Limits,
    to: ReplyTo,
) -> Result<(Option<StoredHead>, Vec<u8>), ()> {
    let mut text = Vec::new();
    let mut copy = ResponseFields::new();
    render_response_head(&mut text, parsed, edits, limits, to, &mut copy)?;
    let fits = copy.measure().check(&Limits::default()).is_ok();
    let stored = fits.then(|| {
        let fields = copy.fields().map(|(n, v)| (n.to_vec(), v.to_vec()));
        (copy.status(), copy.reason().to_vec(), fields.collect())
    });
    Ok((stored, text))
}

fn upstream_head(start: usize, framing: usize, lines: &[usize]) -> Vec<u8> {
    let mut raw = format!("{}\r\n", STARTS[start % STARTS.len()]);
    for &i in lines {
        raw.push_str(LINES[i % LINES.len()]);
        raw.push_str("\r\n");
    }
    raw.push_str(FRAMINGS[framing % FRAMINGS.len()]);
    raw.push_str("\r\n");
    raw.into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn h2_headers_and_the_cache_copy_are_the_old_render_and_reparse(
        start in 0usize..16,
        framing in 0usize..3,
        lines in proptest::collection::vec(0usize..64, 0..14),
        edit_choice in 0u8..32,
        limit_choice in 0u8..4,
        http10 in any::<bool>(),
        close in any::<bool>(),
    ) {
        let raw = upstream_head(start, framing, &lines);
        let Ok(Some((head, _))) = http1::parse_response(&raw, &Limits::default(), false) else {
            // Refused by the upstream reader: never relayed either way.
            return Ok(());
        };
        let (edits, limits) = (edits(edit_choice), limits(limit_choice));
        let parsed = (&head, &raw[..]);
        prop_assert_eq!(
            new_headers(parsed, &edits, &limits),
            old_headers(parsed, &edits, &limits)
        );
        let to = ReplyTo { http10, close };
        prop_assert_eq!(
            new_stored(parsed, &edits, &limits, to),
            old_stored(parsed, &edits, &limits, to)
        );
    }
}

/// The cases the generator must reach, spelled out: a `Connection` the writer adds for a
/// close-delimited body still hides a field it names, and tight limits refuse on both ways.
#[test]
fn a_close_delimited_head_and_an_oversized_one_agree() {
    let raw = b"HTTP/1.1 200 OK\r\nClose: named\r\nX-Kept: 1\r\n\r\n";
    let (head, _) = http1::parse_response(raw, &Limits::default(), false)
        .unwrap()
        .unwrap();
    let parsed = (&head, &raw[..]);
    let none = HeaderEdits::new();
    let (status, fields) = new_headers(parsed, &none, &Limits::default()).unwrap();
    assert_eq!(status, 200);
    assert_eq!(fields, vec![(b"x-kept".to_vec(), b"1".to_vec())]);
    assert_eq!(
        old_headers(parsed, &none, &Limits::default()),
        Ok((status, fields))
    );
    let tight = limits(1);
    let many = edits(31);
    assert!(new_headers(parsed, &many, &tight).is_err());
    assert!(old_headers(parsed, &many, &tight).is_err());
}

/// A head the configured limits let through but the default ones would not (more than 100
/// fields) reaches the client and is not the cache's, either way.
#[test]
fn a_head_over_the_default_limits_is_relayed_but_not_stored() {
    let mut raw = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n".to_vec();
    for i in 0..120 {
        raw.extend_from_slice(format!("X-Field-{i}: {i}\r\n").as_bytes());
    }
    raw.extend_from_slice(b"\r\n");
    let raised = Limits {
        max_headers: 200,
        ..Limits::default()
    };
    let (head, _) = http1::parse_response(&raw, &raised, false)
        .unwrap()
        .unwrap();
    let parsed = (&head, &raw[..]);
    let none = HeaderEdits::new();
    let (stored, text) = new_stored(parsed, &none, &raised, ReplyTo::default()).unwrap();
    assert!(stored.is_none() && text.len() > raw.len() / 2);
    assert_eq!(
        old_stored(parsed, &none, &raised, ReplyTo::default()),
        Ok((stored, text))
    );
    let (_, fields) = new_headers(parsed, &none, &raised).unwrap();
    assert_eq!(fields.len(), 121);
}
