//! Response heads: the RFC 9112 §6.3 framing table, keep-alive, refusals.

use http1::{parse_response, BodyFraming, Limits, ParseError, Version};

fn framing(buf: &[u8], request_is_head: bool) -> BodyFraming {
    let (head, len) = parse_response(buf, &Limits::default(), request_is_head)
        .unwrap()
        .unwrap();
    assert_eq!(len, buf.len());
    head.framing()
}

#[test]
fn framing_table() {
    use BodyFraming::*;
    let cases: &[(&[u8], bool, BodyFraming)] = &[
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n",
            false,
            Length(12),
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", true, None),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
            Chunked,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            true,
            None,
        ),
        (b"HTTP/1.1 200 OK\r\n\r\n", false, CloseDelimited),
        (b"HTTP/1.0 200 OK\r\n\r\n", false, CloseDelimited),
        (b"HTTP/1.1 200 OK\r\n\r\n", true, None),
        (b"HTTP/1.1 204 No Content\r\n\r\n", false, None),
        (
            b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
            false,
            None,
        ),
        (
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
            false,
            None,
        ),
        (b"HTTP/1.1 100 Continue\r\n\r\n", false, None),
        (
            b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n",
            false,
            None,
        ),
        (
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
            false,
            Length(0),
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nContent-Length: 7\r\n\r\n",
            false,
            Length(7),
        ),
    ];
    for (buf, is_head, expected) in cases {
        assert_eq!(
            framing(buf, *is_head),
            *expected,
            "{}",
            String::from_utf8_lossy(buf)
        );
    }
}

#[test]
fn head_and_304_keep_their_content_length_for_forwarding() {
    let buf = b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n";
    let (head, _) = parse_response(buf, &Limits::default(), true)
        .unwrap()
        .unwrap();
    assert_eq!(head.content_length(), Some(12));
    assert_eq!(head.forward_framing(), BodyFraming::Length(12));
    let buf = b"HTTP/1.1 204 No Content\r\nContent-Length: 12\r\n\r\n";
    let (head, _) = parse_response(buf, &Limits::default(), false)
        .unwrap()
        .unwrap();
    assert_eq!(head.forward_framing(), BodyFraming::None);
}

#[test]
fn status_reason_version_fields() {
    let buf = b"HTTP/1.0 503 Service Unavailable\r\nRetry-After: 10\r\nServer: x\r\n\r\n";
    let (head, _) = parse_response(buf, &Limits::default(), false)
        .unwrap()
        .unwrap();
    assert_eq!(head.status(), 503);
    assert_eq!(head.reason(buf), b"Service Unavailable");
    assert_eq!(head.version(), Version::Http10);
    assert_eq!(head.header(buf, "retry-after"), Some(&b"10"[..]));
    assert!(!head.is_interim());

    let buf = b"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n";
    let (head, _) = parse_response(buf, &Limits::default(), false)
        .unwrap()
        .unwrap();
    assert_eq!(head.reason(buf), b"");

    let buf = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    let (head, len) = parse_response(buf, &Limits::default(), false)
        .unwrap()
        .unwrap();
    assert!(head.is_interim());
    let (next, _) = parse_response(&buf[len..], &Limits::default(), false)
        .unwrap()
        .unwrap();
    assert_eq!(next.status(), 200);
}

#[test]
fn keep_alive_rules() {
    let cases: &[(&[u8], bool)] = &[
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            false,
        ),
        (b"HTTP/1.1 200 OK\r\n\r\n", false),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false),
        (
            b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n",
            true,
        ),
    ];
    for (buf, keep_alive) in cases {
        let (head, _) = parse_response(buf, &Limits::default(), false)
            .unwrap()
            .unwrap();
        assert_eq!(
            head.keep_alive(),
            *keep_alive,
            "{}",
            String::from_utf8_lossy(buf)
        );
    }
}

#[test]
fn refusals() {
    use ParseError::*;
    let cases: &[(&[u8], ParseError)] = &[
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            ContentLengthWithTransferEncoding,
        ),
        (
            b"HTTP/1.1 304 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            ContentLengthWithTransferEncoding,
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            ConflictingContentLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            InvalidContentLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            InvalidTransferEncoding,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            UnsupportedTransferCoding,
        ),
        (
            b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            TransferEncodingInHttp10,
        ),
        (b"HTTP/1.1 200 OK\r\nX: 1\r\n folded\r\n\r\n", ObsFold),
        (b"HTTP/1.1 200 OK\nX: 1\r\n\r\n", BareLf),
        (b"HTTP/1.1 200 OK\r\nX: 1\n\n", BareLf),
        (b"HTTP/1.1 200 OK\r\nX: 1\rY: 2\r\n\r\n", BareCr),
        (b"HTTP/1.1 200 OK\r\nX : 1\r\n\r\n", WhitespaceBeforeColon),
        (b"HTTP/1.1 200 OK\r\nX: a\0\r\n\r\n", InvalidHeaderValue),
        (b"HTTP/1.1 20 OK\r\n\r\n", InvalidStatusLine),
        (b"HTTP/1.1 099 OK\r\n\r\n", InvalidStatusLine),
        (b"HTTP/1.1 600 OK\r\n\r\n", InvalidStatusLine),
        (b"HTTP/2.0 200 OK\r\n\r\n", InvalidVersion),
    ];
    for (buf, expected) in cases {
        let error = parse_response(buf, &Limits::default(), false).unwrap_err();
        assert_eq!(error, *expected, "{}", String::from_utf8_lossy(buf));
    }
}

#[test]
fn split_at_every_position() {
    let buf = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5\r\nCache-Control: max-age=60\r\n\r\nhello";
    let head_len = buf.len() - 5;
    for cut in 0..head_len {
        assert!(
            parse_response(&buf[..cut], &Limits::default(), false)
                .unwrap()
                .is_none(),
            "cut {cut}"
        );
    }
    let (head, len) = parse_response(buf, &Limits::default(), false)
        .unwrap()
        .unwrap();
    assert_eq!(len, head_len);
    assert_eq!(head.framing(), BodyFraming::Length(5));
}

#[test]
fn size_limit_while_incomplete() {
    let limits = Limits {
        max_head_bytes: 64,
        ..Limits::default()
    };
    let buf = format!("HTTP/1.1 200 OK\r\nX: {}", "a".repeat(80));
    assert_eq!(
        parse_response(buf.as_bytes(), &limits, false).unwrap_err(),
        ParseError::HeadTooLarge
    );
}
