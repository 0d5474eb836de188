//! One verdict whatever the protocol: the neutral head an HTTP/2 request is built into
//! ([`neutral_head`]) against the way it was made before, a rendering into HTTP/1.1 text
//! parsed by the HTTP/1 parser. That rendering lives only here, as the oracle: for every
//! generated header block both give the same verdict (the same status, and the same error
//! but for two names of a malformed request line) and, when the request is served, the same
//! method, target, authority, fields in order, framing and facts.

use h2::Field;
use http1::{ByteSet, Limits, ParseError, RequestHead};
use proptest::prelude::*;

use super::{neutral_head, Unservable};

/// The previous codec's conversion, kept as the oracle: the request rendered as HTTP/1.1
/// text (the authority as the first field, host and TE left out, a body without
/// content-length announced chunked) and parsed.
fn rendered(
    req: &h2::Request,
    end_stream: bool,
    limits: &Limits,
) -> Result<(RequestHead, Vec<u8>), Unservable> {
    let (Some(path), Some(authority)) = (&req.path, &req.authority) else {
        // CONNECT's form: the parser's own verdict on HTTP/1.1 (frang judges it next).
        if req.path.is_none() {
            return Err(Unservable::Invalid(ParseError::ConnectNotSupported));
        }
        return Err(Unservable::NotProxied(400));
    };
    if req.field_count > limits.max_headers {
        return Err(Unservable::Invalid(ParseError::TooManyHeaders));
    }
    let mut head = Vec::new();
    head.extend_from_slice(&req.method);
    head.push(b' ');
    head.extend_from_slice(path);
    head.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    head.extend_from_slice(authority);
    head.extend_from_slice(b"\r\n");
    for f in req
        .fields
        .iter()
        .filter(|f| f.name != b"host" && f.name != b"te")
    {
        head.extend_from_slice(&f.name);
        head.extend_from_slice(b": ");
        head.extend_from_slice(&f.value);
        head.extend_from_slice(b"\r\n");
    }
    if !end_stream && req.content_length.is_none() {
        head.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    head.extend_from_slice(b"\r\n");
    match http1::parse_request(&head, limits) {
        Ok(Some((parsed, _))) => Ok((parsed, head)),
        Ok(None) => Err(Unservable::Invalid(ParseError::HeadTooLarge)),
        Err(e) => Err(Unservable::Invalid(e)),
    }
}

/// What a verdict is compared by: the status, and the error with the request-line errors
/// as one (a space in a method or target is an invalid version to httparse, which reads
/// on past it; the builder names the piece).
fn verdict(result: &Result<(RequestHead, Vec<u8>), Unservable>) -> Option<(u16, String)> {
    match result {
        Ok(_) => None,
        Err(Unservable::NotProxied(status)) => Some((*status, "not proxied".into())),
        Err(Unservable::Invalid(ParseError::InvalidVersion | ParseError::InvalidRequestLine)) => {
            Some((400, "request line".into()))
        }
        Err(Unservable::Invalid(e)) => Some((e.status(), format!("{e:?}"))),
    }
}

/// What the exchange reads of a served head, for the comparison.
fn served(head: &RequestHead, buf: &[u8], unframed: bool) -> String {
    let mut fields: Vec<(&[u8], &[u8])> = head.headers().fields(buf).collect();
    // The oracle announced a body without a length with a field of its own, the builder
    // with the framing alone: compared through `framing` below.
    if unframed && fields.last() == Some(&(&b"transfer-encoding"[..], &b"chunked"[..])) {
        fields.pop();
    }
    format!(
        "{:?} {:?} {:?} {:?} {:?} {:?} {:?} ka={} expect={} upgrade={} ct={:?} mo={:?} {} {:?}",
        head.method(),
        String::from_utf8_lossy(head.method_bytes(buf)),
        String::from_utf8_lossy(head.target(buf)),
        String::from_utf8_lossy(head.path(buf)),
        head.host(buf).map(String::from_utf8_lossy),
        head.host_field(buf).map(String::from_utf8_lossy),
        fields
            .iter()
            .map(|(n, v)| (String::from_utf8_lossy(n), String::from_utf8_lossy(v)))
            .collect::<Vec<_>>(),
        head.keep_alive(),
        head.expect_continue(),
        head.upgrade(),
        head.content_type(buf),
        head.method_override(buf),
        head.method_override_conflict(),
        (head.framing(), head.target_form(), head.version()),
    )
}

/// Compares both conversions of one header block; returns whether the builder was reached
/// (the h2 crate let the block through).
fn same_verdict(list: &[Field], end_stream: bool, limits: &Limits) -> Result<bool, String> {
    let Ok(req) = h2::request_from_fields(list.to_vec()) else {
        // Malformed as HTTP/2 (RFC 9113 §8.2): refused before either conversion.
        return Ok(false);
    };
    let unframed = !end_stream && req.content_length.is_none();
    let old = rendered(&req, end_stream, limits);
    let new = neutral_head(&req, end_stream, limits);
    let shown = |r: &Result<(RequestHead, Vec<u8>), Unservable>| match r {
        Ok((head, buf)) => served(head, buf, unframed),
        Err(_) => format!("refused {:?}", verdict(r)),
    };
    let (old_shown, new_shown) = (shown(&old), shown(&new));
    if verdict(&old) != verdict(&new) || old_shown != new_shown {
        return Err(format!(
            "{list:?} end_stream={end_stream}\n old: {old_shown}\n new: {new_shown}"
        ));
    }
    Ok(true)
}

fn field(name: &str, value: &[u8]) -> Field {
    Field::new(name.as_bytes(), value)
}

/// Regular fields, valid and of each hostile class.
fn field_pool() -> Vec<Field> {
    let long = vec![b'v'; 9000];
    vec![
        field("accept", b"*/*"),
        field("cookie", b"a=1"),
        field("cookie", b"b=2"),
        field("content-length", b"5"),
        field("content-length", b"0"),
        field("content-length", b"6"),
        field("content-length", b"5, 5"),
        field("content-length", b"-1"),
        field("content-type", b"text/plain"),
        field("expect", b"100-continue"),
        field("x-http-method-override", b"PUT"),
        field("x-method-override", b"DELETE"),
        field("x-http-method", b"PUT"),
        field("host", b"a.example"),
        field("host", b"b.example"),
        field("te", b"trailers"),
        field("te", b"gzip"),
        field("transfer-encoding", b"chunked"),
        field("connection", b"close"),
        field("keep-alive", b"5"),
        field("proxy-connection", b"close"),
        field("upgrade", b"websocket"),
        field("x-ctl", b"a\x01b"),
        field("x-del", b"a\x7fb"),
        field("x-nul", b"a\0b"),
        field("x-cr", b"a\rb"),
        field("x-lf", b"a\nb"),
        field("x-crlf", b"a\r\nx-injected: 1"),
        field("x-tab", b"a\tb"),
        field("x-obs", "é".as_bytes()),
        field("x-space", b" lead"),
        field("x-empty", b""),
        field("Upper", b"x"),
        field("bad name", b"x"),
        field("bad:name", b"x"),
        field("x-long", &long),
        field(":path", b"/late"),
        field(":status", b"200"),
    ]
}

const METHODS: [&[u8]; 10] = [
    b"GET", b"POST", b"PUT", b"HEAD", b"OPTIONS", b"PURGE", b"BREW", b"get", b"GE T", b"CONNECT",
];

fn paths() -> Vec<Vec<u8>> {
    let mut long = b"/".to_vec();
    long.resize(9000, b'p');
    vec![
        b"/".to_vec(),
        b"/a?b=c".to_vec(),
        b"*".to_vec(),
        b"/x#frag".to_vec(),
        b"/a b".to_vec(),
        b"/a\x01".to_vec(),
        b"/a\x7f".to_vec(),
        "/é".as_bytes().to_vec(),
        b"http://a.example/abs".to_vec(),
        b"//a.example/x".to_vec(),
        b"".to_vec(),
        long,
    ]
}

const AUTHORITIES: [&[u8]; 9] = [
    b"a.example",
    b"",
    b"A.Example.:8443",
    b"[::1]:443",
    b"a b",
    b"user@a.example",
    b"a\x01",
    b"a/b",
    b"\xc3\xa9.example",
];

/// Limits the comparison runs under: the defaults, and each limit small enough to matter.
fn limit_sets() -> Vec<Limits> {
    let base = Limits::default();
    vec![
        base.clone(),
        Limits {
            max_head_bytes: 120,
            ..base.clone()
        },
        Limits {
            max_headers: 6,
            ..base.clone()
        },
        Limits {
            max_field_bytes: 16,
            ..base.clone()
        },
        Limits {
            max_uri_bytes: 4,
            max_body_bytes: Some(3),
            ..base.clone()
        },
        Limits {
            uri_bytes: Some(ByteSet::new().with_range(b'/', b'z')),
            header_value_bytes: Some(ByteSet::new().with_range(b'*', b'z')),
            ..base
        },
    ]
}

fn block(
    method: &[u8],
    path: Option<&[u8]>,
    authority: Option<&[u8]>,
    rest: &[Field],
) -> Vec<Field> {
    let mut list = vec![
        Field::new(b":method", method),
        Field::new(b":scheme", b"https"),
    ];
    list.extend(authority.map(|a| Field::new(b":authority", a)));
    list.extend(path.map(|p| Field::new(b":path", p)));
    list.extend_from_slice(rest);
    list
}

#[test]
fn every_hostile_class_alone_gets_one_verdict() {
    let pool = field_pool();
    let mut reached = 0;
    for limits in limit_sets() {
        for end_stream in [true, false] {
            for method in METHODS {
                for path in paths() {
                    for authority in AUTHORITIES {
                        let list = block(method, Some(&path), Some(authority), &[]);
                        reached += usize::from(same_verdict(&list, end_stream, &limits).unwrap());
                    }
                }
            }
            for f in &pool {
                for authority in [Some(&b"a.example"[..]), None] {
                    let list = block(b"POST", Some(b"/"), authority, std::slice::from_ref(f));
                    reached += usize::from(same_verdict(&list, end_stream, &limits).unwrap());
                }
            }
            // No :path (CONNECT's form), no authority at all.
            for list in [
                vec![
                    Field::new(b":method", b"CONNECT"),
                    Field::new(b":authority", b"a:1"),
                ],
                block(b"GET", Some(b"/"), None, &[]),
            ] {
                reached += usize::from(same_verdict(&list, end_stream, &limits).unwrap());
            }
        }
    }
    // Most blocks reach both conversions (the rest the h2 crate refuses first).
    assert!(reached > 2000, "{reached}");
}

#[test]
fn huge_field_counts_get_one_verdict() {
    for count in [30, 31, 32, 33, 95, 96, 97, 100, 101, 140] {
        let fields: Vec<Field> = (0..count)
            .map(|i| Field::new(format!("x-f{i}").as_bytes(), b"v"))
            .collect();
        let crumbs: Vec<Field> = (0..count).map(|_| field("cookie", b"c=1")).collect();
        for rest in [fields, crumbs] {
            let list = block(b"GET", Some(b"/"), Some(b"a.example"), &rest);
            for limits in limit_sets() {
                assert!(same_verdict(&list, true, &limits).unwrap() || rest.is_empty());
            }
        }
    }
}

#[test]
fn the_builder_refuses_what_the_h2_crate_would_have_caught() {
    // A request built by hand, past the h2 crate's own checks: the builder still refuses
    // line breaks, NUL and bad names (the old rendering read `a\r\nb: c` as two fields).
    for (name, value) in [
        (&b"x"[..], &b"a\r\nx-injected: 1"[..]),
        (b"x", b"a\rb"),
        (b"x", b"a\nb"),
        (b"x", b"a\0b"),
        (b"a b", b"v"),
        (b"x:y", b"v"),
        (b"", b"v"),
    ] {
        let req = h2::Request {
            method: b"GET".to_vec(),
            scheme: Some(b"https".to_vec()),
            authority: Some(b"a.example".to_vec()),
            path: Some(b"/".to_vec()),
            fields: vec![Field::new(name, value)],
            content_length: None,
            field_count: 5,
        };
        let result = neutral_head(&req, true, &Limits::default());
        assert!(
            matches!(result, Err(Unservable::Invalid(e)) if e.status() == 400),
            "{name:?}: {value:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn generated_header_blocks_get_one_verdict(
        method in 0..METHODS.len(),
        path in 0..12usize,
        authority in proptest::option::of(0..AUTHORITIES.len()),
        picks in proptest::collection::vec(0..38usize, 0..14),
        end_stream in any::<bool>(),
        limits in 0..6usize,
        head_limit in 40..400usize,
        field_limit in 8..64usize,
    ) {
        let pool = field_pool();
        let rest: Vec<Field> = picks.iter().filter_map(|&i| pool.get(i).cloned()).collect();
        let path = paths().swap_remove(path);
        let list = block(METHODS[method], Some(&path), authority.map(|a| AUTHORITIES[a]), &rest);
        let mut limits = limit_sets().swap_remove(limits);
        // Limits at any size, so that sizes counted one byte off show.
        limits.max_head_bytes = limits.max_head_bytes.min(head_limit);
        limits.max_field_bytes = limits.max_field_bytes.min(field_limit * 4);
        if let Err(diff) = same_verdict(&list, end_stream, &limits) {
            prop_assert!(false, "{}", diff);
        }
    }
}

#[test]
fn limits_at_every_size_get_one_verdict() {
    // A size counted one byte off shows only at the boundary: every limit from 0 up.
    let blocks = [
        block(b"GET", Some(b"/"), Some(b"a.example"), &[]),
        block(
            b"POST",
            Some(b"/up?x=1"),
            Some(b"a.example:8443"),
            &[
                field("accept", b"x"),
                field("cookie", b"a=1"),
                field("cookie", b"b=2"),
                field("content-type", b"text/plain"),
            ],
        ),
        block(
            b"PUT",
            Some(b"/"),
            Some(b"a"),
            &[field("content-length", b"12")],
        ),
    ];
    for list in &blocks {
        for end_stream in [true, false] {
            for size in 0..200 {
                for limits in [
                    Limits {
                        max_head_bytes: size,
                        ..Limits::default()
                    },
                    Limits {
                        max_field_bytes: size,
                        ..Limits::default()
                    },
                    Limits {
                        max_uri_bytes: size,
                        ..Limits::default()
                    },
                ] {
                    assert!(same_verdict(list, end_stream, &limits).unwrap());
                }
            }
        }
    }
}
