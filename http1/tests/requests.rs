//! Request heads: facts, refusals with their statuses, pipelining, and
//! heads split at every byte position.

use http1::{parse_request, BodyFraming, ByteSet, Limits, Method, ParseError, TargetForm, Version};

const BROWSER_GET: &[u8] = b"GET /index.html?lang=en HTTP/1.1\r\n\
Host: www.example.com\r\n\
User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n\
Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n\
Accept-Language: en-US,en;q=0.5\r\n\
Accept-Encoding: gzip, deflate, br\r\n\
Connection: keep-alive\r\n\
Cookie: session=abc123; theme=dark\r\n\
Upgrade-Insecure-Requests: 1\r\n\
Sec-Fetch-Dest: document\r\n\
Sec-Fetch-Mode: navigate\r\n\
\r\n";

fn parse(buf: &[u8]) -> Result<Option<(http1::RequestHead, usize)>, ParseError> {
    parse_request(buf, &Limits::default())
}

fn refused(buf: &[u8]) -> ParseError {
    parse_request(buf, &Limits::default())
        .err()
        .unwrap_or_else(|| panic!("accepted: {:?}", String::from_utf8_lossy(buf)))
}

#[test]
fn browser_get_facts() {
    let (head, len) = parse(BROWSER_GET).unwrap().unwrap();
    let buf = BROWSER_GET;
    assert_eq!(len, buf.len());
    assert_eq!(head.head_len(), len);
    assert_eq!(head.method(), Method::Get);
    assert_eq!(head.method_bytes(buf), b"GET");
    assert_eq!(head.version(), Version::Http11);
    assert_eq!(head.target(buf), b"/index.html?lang=en");
    assert_eq!(head.path(buf), b"/index.html?lang=en");
    assert_eq!(head.target_form(), TargetForm::Origin);
    assert_eq!(head.host(buf), Some(&b"www.example.com"[..]));
    assert_eq!(head.framing(), BodyFraming::None);
    assert!(head.keep_alive());
    assert!(!head.expect_continue());
    assert!(!head.upgrade());
    assert_eq!(head.headers().len(), 10);
    let names: Vec<&[u8]> = head.headers().fields(buf).map(|(n, _)| n).collect();
    assert_eq!(names[0], b"Host");
    assert_eq!(names[9], b"Sec-Fetch-Mode");
    assert_eq!(
        head.header(buf, "cookie"),
        Some(&b"session=abc123; theme=dark"[..])
    );
}

#[test]
fn absolute_form_host_wins_over_host_field() {
    let buf = b"GET http://Origin.example:8080/a/b?c HTTP/1.1\r\nHost: other\r\n\r\n";
    let (head, _) = parse(buf).unwrap().unwrap();
    assert_eq!(head.target_form(), TargetForm::Absolute);
    assert_eq!(head.host(buf), Some(&b"Origin.example:8080"[..]));
    assert_eq!(head.path(buf), b"/a/b?c");

    let buf = b"GET HTTPS://example.com HTTP/1.1\r\nHost: example.com\r\n\r\n";
    let (head, _) = parse(buf).unwrap().unwrap();
    assert_eq!(head.path(buf), b"/");
    assert_eq!(head.host(buf), Some(&b"example.com"[..]));
}

#[test]
fn asterisk_form_only_for_options() {
    let buf = b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n";
    let (head, _) = parse(buf).unwrap().unwrap();
    assert_eq!(head.target_form(), TargetForm::Asterisk);
    assert_eq!(head.path(buf), b"*");
    assert_eq!(
        refused(b"GET * HTTP/1.1\r\nHost: a\r\n\r\n"),
        ParseError::InvalidTarget
    );
}

#[test]
fn framing_and_expect() {
    let buf = b"POST /u HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n";
    let (head, _) = parse(buf).unwrap().unwrap();
    assert_eq!(head.framing(), BodyFraming::Length(10));
    assert!(head.expect_continue());

    let buf = b"POST /u HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
    let (head, _) = parse(buf).unwrap().unwrap();
    assert_eq!(head.framing(), BodyFraming::Chunked);
    assert!(!head.expect_continue());

    // Identical values are folded (RFC 9110 §8.6).
    let buf = b"POST /u HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\nContent-Length: 3\r\n\r\n";
    assert_eq!(
        parse(buf).unwrap().unwrap().0.framing(),
        BodyFraming::Length(3)
    );

    // Transfer-Encoding split over two fields is one list.
    let buf =
        b"POST /u HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(
        parse(buf).unwrap().unwrap().0.framing(),
        BodyFraming::Chunked
    );
}

#[test]
fn upgrade_needs_connection_option() {
    let buf = b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
    assert!(parse(buf).unwrap().unwrap().0.upgrade());
    let buf = b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n";
    assert!(!parse(buf).unwrap().unwrap().0.upgrade());
}

#[test]
fn keep_alive_rules() {
    let cases: [(&[u8], bool); 7] = [
        (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", true),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            false,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, CLOSE\r\n\r\n",
            false,
        ),
        (b"GET / HTTP/1.0\r\n\r\n", false),
        (b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true),
        (
            b"GET / HTTP/1.0\r\nConnection: foo\r\nConnection: keep-alive\r\n\r\n",
            true,
        ),
        (
            b"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n",
            false,
        ),
    ];
    for (buf, keep_alive) in cases {
        let (head, _) = parse(buf).unwrap().unwrap();
        assert_eq!(
            head.keep_alive(),
            keep_alive,
            "{}",
            String::from_utf8_lossy(buf)
        );
    }
    // HTTP/1.0 needs no Host.
    let (head, _) = parse(b"GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
    assert_eq!(head.host(b"GET / HTTP/1.0\r\n\r\n"), None);
}

#[test]
fn pipelined_requests_in_one_buffer() {
    let buf = b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\n\
POST /2 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc\
GET /3 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    let mut offset = 0;
    let mut targets = Vec::new();
    while offset < buf.len() {
        let rest = &buf[offset..];
        let (head, len) = parse(rest).unwrap().unwrap();
        targets.push(head.target(rest).to_vec());
        let body = match head.framing() {
            BodyFraming::Length(n) => n as usize,
            _ => 0,
        };
        offset += len + body;
    }
    assert_eq!(targets, [b"/1".to_vec(), b"/2".to_vec(), b"/3".to_vec()]);
}

#[test]
fn leading_empty_lines_are_skipped_but_must_be_crlf() {
    let buf = b"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n";
    let (head, len) = parse(buf).unwrap().unwrap();
    assert_eq!(len, buf.len());
    assert_eq!(head.method_bytes(buf), b"GET");
    assert_eq!(
        refused(b"\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"),
        ParseError::BareLf
    );
}

#[test]
fn split_at_every_position_gives_none_then_the_same_head() {
    let (full, full_len) = parse(BROWSER_GET).unwrap().unwrap();
    for cut in 0..BROWSER_GET.len() {
        assert!(
            parse(&BROWSER_GET[..cut]).unwrap().is_none(),
            "cut at {cut}"
        );
    }
    let (head, len) = parse(BROWSER_GET).unwrap().unwrap();
    assert_eq!(len, full_len);
    assert_eq!(
        head.headers().fields(BROWSER_GET).collect::<Vec<_>>(),
        full.headers().fields(BROWSER_GET).collect::<Vec<_>>()
    );
}

#[test]
fn split_invalid_heads_never_accept() {
    let bad: [&[u8]; 4] = [
        b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
    ];
    for buf in bad {
        let full = refused(buf);
        for cut in 0..buf.len() {
            match parse(&buf[..cut]) {
                Ok(None) => {}
                Err(e) => assert_eq!(e, full, "cut {cut} of {:?}", String::from_utf8_lossy(buf)),
                Ok(Some(_)) => panic!("prefix accepted"),
            }
        }
    }
}

/// Every refusal shape, its variant and its status.
#[test]
fn refusal_table() {
    use ParseError::*;
    let cases: &[(&[u8], ParseError, u16)] = &[
        // Framing.
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", ContentLengthWithTransferEncoding, 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", ContentLengthWithTransferEncoding, 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", ConflictingContentLength, 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 4\r\n\r\n", ConflictingContentLength, 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\n", InvalidContentLength, 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x3\r\n\r\n", InvalidContentLength, 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3 4\r\n\r\n", InvalidContentLength, 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", InvalidContentLength, 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n", InvalidContentLength, 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", InvalidTransferEncoding, 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n", InvalidTransferEncoding, 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", InvalidTransferEncoding, 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", InvalidTransferEncoding, 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \"chunked\"\r\n\r\n", InvalidTransferEncoding, 400),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", UnsupportedTransferCoding, 501),
        (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", TransferEncodingInHttp10, 400),
        // Line syntax.
        (b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n continued\r\n\r\n", ObsFold, 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n\tcontinued\r\n\r\n", ObsFold, 400),
        (b"GET / HTTP/1.1\r\n Host: a\r\n\r\n", ObsFold, 400),
        (b"GET / HTTP/1.1\nHost: a\r\n\r\n", BareLf, 400),
        (b"GET / HTTP/1.1\r\nHost: a\nX: 1\r\n\r\n", BareLf, 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\n\n", BareLf, 400),
        (b"GET / HTTP/1.1\r\nHost: a\n\r\n", BareLf, 400),
        (b"GET / HTTP/1.1\r\nHost: a\rX: 1\r\n\r\n", BareCr, 400),
        (b"GET / HTTP/1.1\rHost: a\r\n\r\n", BareCr, 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n", InvalidHeaderValue, 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n", InvalidHeaderValue, 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\r\n\r\n", InvalidHeaderValue, 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX(y): 1\r\n\r\n", InvalidHeaderName, 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\n: 1\r\n\r\n", InvalidHeaderName, 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX-Y : 1\r\n\r\n", WhitespaceBeforeColon, 400),
        (b"GET / HTTP/1.1\r\nHost\t: a\r\n\r\n", WhitespaceBeforeColon, 400),
        // Request line.
        (b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", InvalidRequestLine, 400),
        (b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", InvalidVersion, 400),
        (b"GET / HTTP/1.1 \r\nHost: a\r\n\r\n", InvalidRequestLine, 400),
        (b"GET /a#frag HTTP/1.1\r\nHost: a\r\n\r\n", InvalidTarget, 400),
        (b"GET a/b HTTP/1.1\r\nHost: a\r\n\r\n", InvalidTarget, 400),
        (b"GET ftp://a/b HTTP/1.1\r\nHost: a\r\n\r\n", InvalidTarget, 400),
        (b"GET http://user@a/b HTTP/1.1\r\nHost: a\r\n\r\n", InvalidTarget, 400),
        (b"GET http:///b HTTP/1.1\r\nHost: a\r\n\r\n", InvalidTarget, 400),
        (b"GET http://a?b HTTP/1.1\r\nHost: a\r\n\r\n", InvalidTarget, 400),
        (b"GET http://a\"b/ HTTP/1.1\r\nHost: a\r\n\r\n", InvalidHost, 400),
        (b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n", ConnectNotSupported, 501),
        // Host.
        (b"GET / HTTP/1.1\r\n\r\n", MissingHost, 400),
        (b"GET / HTTP/1.1\r\nX: 1\r\n\r\n", MissingHost, 400),
        (b"GET http://a/ HTTP/1.1\r\n\r\n", MissingHost, 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", DuplicateHost, 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", DuplicateHost, 400),
        (b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", InvalidHost, 400),
        (b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", InvalidHost, 400),
        (b"GET / HTTP/1.1\r\nHost: user@a\r\n\r\n", InvalidHost, 400),
    ];
    for (buf, variant, status) in cases {
        let error = refused(buf);
        assert_eq!(error, *variant, "{:?}", String::from_utf8_lossy(buf));
        assert_eq!(error.status(), *status, "{variant:?}");
        assert!(!error.to_string().is_empty());
    }
}

#[test]
fn size_limits() {
    let limits = Limits {
        max_head_bytes: 200,
        max_headers: 4,
        max_uri_bytes: 32,
        max_field_bytes: 40,
        max_body_bytes: Some(1000),
        ..Limits::default()
    };
    let check = |buf: &[u8], expected: ParseError, status: u16| {
        let error = parse_request(buf, &limits).unwrap_err();
        assert_eq!(error, expected, "{:?}", String::from_utf8_lossy(buf));
        assert_eq!(error.status(), status);
    };
    let long_uri = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(40));
    check(long_uri.as_bytes(), ParseError::UriTooLong, 414);
    // Detected before the request line is even complete.
    let endless_uri = format!("GET /{}", "a".repeat(100));
    check(endless_uri.as_bytes(), ParseError::UriTooLong, 414);
    let many = b"GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n";
    check(many, ParseError::TooManyHeaders, 431);
    let long_field = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n", "v".repeat(40));
    check(long_field.as_bytes(), ParseError::HeaderFieldTooLong, 431);
    let big = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nA: {0}\r\nB: {0}\r\nC: {0}\r\n\r\n",
        "v".repeat(60)
    );
    assert!(big.len() > 200);
    check(big.as_bytes(), ParseError::HeadTooLarge, 431);
    // Incomplete and already too large.
    let partial = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nA: {0}\r\nB: {0}\r\nC: {0}\r\n",
        "v".repeat(60)
    );
    check(partial.as_bytes(), ParseError::HeadTooLarge, 431);
    check(
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1001\r\n\r\n",
        ParseError::BodyTooLarge,
        413,
    );
    assert!(parse_request(
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n",
        &limits
    )
    .unwrap()
    .is_some());
}

#[test]
fn more_fields_than_the_stack_array_when_configured() {
    let limits = Limits {
        max_headers: 300,
        max_head_bytes: 64 * 1024,
        ..Limits::default()
    };
    let mut buf = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
    for i in 0..250 {
        buf.extend_from_slice(format!("X-{i}: {i}\r\n").as_bytes());
    }
    buf.extend_from_slice(b"\r\n");
    let (head, _) = parse_request(&buf, &limits).unwrap().unwrap();
    assert_eq!(head.headers().len(), 251);
    assert_eq!(head.header(&buf, "x-249"), Some(&b"249"[..]));
    let fewer = Limits {
        max_headers: 200,
        ..limits
    };
    assert_eq!(
        parse_request(&buf, &fewer).unwrap_err(),
        ParseError::TooManyHeaders
    );
}

#[test]
fn byte_ranges_for_uri_and_values() {
    let printable = ByteSet::new().with_range(0x21, 0x7e);
    let limits = Limits {
        uri_bytes: Some(printable),
        header_value_bytes: Some(printable.with_bytes(b" ")),
        ..Limits::default()
    };
    let ok = b"GET /a HTTP/1.1\r\nHost: a\r\nX: b c\r\n\r\n";
    assert!(parse_request(ok, &limits).unwrap().is_some());
    let uri = b"GET /\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n";
    assert!(parse_request(uri, &Limits::default()).unwrap().is_some());
    assert_eq!(
        parse_request(uri, &limits).unwrap_err(),
        ParseError::UriByteNotAllowed
    );
    let value = b"GET /a HTTP/1.1\r\nHost: a\r\nX: b\tc\r\n\r\n";
    let error = parse_request(value, &limits).unwrap_err();
    assert_eq!(error, ParseError::HeaderByteNotAllowed);
    assert_eq!(error.status(), 400);
}

#[test]
fn methods_are_case_sensitive_tokens() {
    let buf = b"PURGE /x HTTP/1.1\r\nHost: a\r\n\r\n";
    assert_eq!(parse(buf).unwrap().unwrap().0.method(), Method::Purge);
    let buf = b"get /x HTTP/1.1\r\nHost: a\r\n\r\n";
    let (head, _) = parse(buf).unwrap().unwrap();
    assert_eq!(head.method(), Method::Other);
    assert_eq!(head.method_bytes(buf), b"get");
    assert!(Method::Put.is_idempotent() && !Method::Post.is_idempotent());
}
