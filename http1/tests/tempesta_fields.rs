//! Fields Tempesta FW's request parser judges and this parser judges alike (issue 35):
//! X-Forwarded-For's syntax (fw/http_parser.c, `__req_parse_x_forwarded_for`) and content
//! on a method without a body (`tfw_http_parse_check_bodyless_meth`). Both run in the
//! judgement every codec shares, so an HTTP/2 request assembled by `RequestBuilder` gets the
//! same verdict.

use http1::{parse_request, ByteSet, Limits, ParseError, RequestBuilder};

fn parse(buf: &[u8], limits: &Limits) -> Result<http1::RequestHead, ParseError> {
    match parse_request(buf, limits) {
        Ok(Some((head, _))) => Ok(head),
        Ok(None) => panic!("incomplete: {:?}", String::from_utf8_lossy(buf)),
        Err(e) => Err(e),
    }
}

fn with_fields(start: &str, fields: &str) -> Vec<u8> {
    format!("{start} HTTP/1.1\r\nHost: a\r\n{fields}\r\n").into_bytes()
}

#[test]
fn x_forwarded_for_is_a_list_of_node_names() {
    let limits = Limits::default();
    for ok in [
        "X-Forwarded-For: 192.0.2.1\r\n",
        "X-Forwarded-For: 1.1.1.1.1.1\r\n",
        "X-Forwarded-For: 192.0.2.1 , [2001:db8::1]:80,unknown\r\n",
        "X-Forwarded-For: 192.0.2.1\r\nx-forwarded-for: _hidden\r\n",
    ] {
        let buf = with_fields("GET /", ok);
        assert!(parse(&buf, &limits).is_ok(), "{ok:?}");
    }
    for bad in [
        "X-Forwarded-For:\r\n",
        "X-Forwarded-For: 192.0.2.1,\r\n",
        "X-Forwarded-For: 192.0.2.1,,192.0.2.2\r\n",
        "X-Forwarded-For: 192.0.2.1 192.0.2.2\r\n",
        "X-Forwarded-For: \"192.0.2.1\"\r\n",
        "X-Forwarded-For: 192.0.2.1\r\nX-Forwarded-For: <xss>\r\n",
    ] {
        let buf = with_fields("GET /", bad);
        assert_eq!(
            parse(&buf, &limits).err(),
            Some(ParseError::InvalidForwardedFor),
            "{bad:?}"
        );
    }
    // The first field's value is kept for the address check.
    let buf = with_fields(
        "GET /",
        "X-Forwarded-For: 1.1.1.1.1.1\r\nX-Forwarded-For: a\r\n",
    );
    let head = parse(&buf, &limits).expect("parses");
    assert_eq!(head.forwarded_for(&buf), Some(&b"1.1.1.1.1.1"[..]));
    assert_eq!(http1::forwarded_for_address(b"1.1.1.1.1.1"), None);
    // `http_xff_brange` replaces the alphabet.
    let digits = Limits {
        xff_bytes: Some(ByteSet::new().with_range(b'0', b'9').with_bytes(b".")),
        ..Limits::default()
    };
    assert!(parse(
        &with_fields("GET /", "X-Forwarded-For: 10.0.0.1\r\n"),
        &digits
    )
    .is_ok());
    let named = with_fields("GET /", "X-Forwarded-For: unknown\r\n");
    assert_eq!(
        parse(&named, &digits).err(),
        Some(ParseError::InvalidForwardedFor)
    );
}

#[test]
fn x_forwarded_for_in_a_response_is_not_judged() {
    let buf = b"HTTP/1.1 200 OK\r\nX-Forwarded-For: ,,\r\nContent-Length: 0\r\n\r\n";
    assert!(matches!(
        http1::parse_response(buf, &Limits::default(), false),
        Ok(Some(_))
    ));
}

#[test]
fn a_method_without_a_body_carries_no_content_and_no_content_type() {
    let limits = Limits::default();
    let allowed = Limits {
        allow_content_type_without_body: true,
        ..Limits::default()
    };
    for method in ["GET", "HEAD", "DELETE", "TRACE"] {
        let start = format!("{method} /");
        let typed = with_fields(&start, "Content-Type: text/plain\r\n");
        assert_eq!(
            parse(&typed, &limits).err(),
            Some(ParseError::ContentOnBodylessMethod)
        );
        assert!(parse(&typed, &allowed).is_ok(), "{method}");
        let body = with_fields(&start, "Content-Length: 3\r\n");
        assert_eq!(
            parse(&body, &limits).err(),
            Some(ParseError::ContentOnBodylessMethod)
        );
        assert_eq!(
            parse(&body, &allowed).err(),
            Some(ParseError::ContentOnBodylessMethod)
        );
        let empty = with_fields(&start, "Content-Length: 0\r\n");
        assert!(
            parse(&empty, &limits).is_ok(),
            "{method}: Content-Length 0 is no content"
        );
    }
    for method in ["POST", "PUT", "PATCH", "OPTIONS", "PURGE"] {
        let buf = with_fields(
            &format!("{method} /"),
            "Content-Type: a\r\nContent-Length: 1\r\n",
        );
        assert!(parse(&buf, &limits).is_ok(), "{method}");
    }
    // A method override naming a method without a body counts as that method.
    let buf = with_fields(
        "POST /",
        "X-HTTP-Method-Override: GET\r\nContent-Type: a\r\nContent-Length: 1\r\n",
    );
    assert_eq!(
        parse(&buf, &limits).err(),
        Some(ParseError::ContentOnBodylessMethod)
    );
    let buf = with_fields(
        "POST /",
        "X-HTTP-Method-Override: PUT\r\nContent-Length: 1\r\n",
    );
    assert!(parse(&buf, &limits).is_ok());
}

#[test]
fn an_assembled_head_gets_the_same_verdicts() {
    let build = |method: &[u8], fields: &[(&[u8], &[u8])]| {
        let mut b = RequestBuilder::new(method, b"/", 256).expect("builder");
        b.field(b"host", b"a").expect("host");
        for (name, value) in fields {
            b.field(name, value).expect("field");
        }
        b.finish(false, &Limits::default()).map(|_| ())
    };
    assert_eq!(
        build(b"GET", &[(b"content-type", b"invalid")]),
        Err(ParseError::ContentOnBodylessMethod)
    );
    assert_eq!(
        build(b"GET", &[(b"x-forwarded-for", b"a,,b")]),
        Err(ParseError::InvalidForwardedFor)
    );
    assert_eq!(
        build(b"GET", &[(b"x-forwarded-for", b"1.1.1.1.1.1")]),
        Ok(())
    );
}
