//! Serialisation: hop-by-hop removal, appended and edited fields, framing,
//! and round trips through the parsers.

use http1::{
    parse_request, parse_response, write_field, write_request_head, write_response_head,
    write_status_line, BodyFraming, ConnectionOption, Forwarding, HeaderEdits, InvalidHeader,
    Limits, TargetForm,
};

fn forwarding<'a>(edits: &'a HeaderEdits, framing: BodyFraming) -> Forwarding<'a> {
    Forwarding {
        forwarded_for: Some(b"192.0.2.7"),
        forwarded_proto: None,
        via: Some(b"ktls-proxy"),
        edits,
        framing,
        connection: ConnectionOption::Default,
        limits: &DEFAULT_LIMITS,
    }
}

static DEFAULT_LIMITS: Limits = Limits {
    max_head_bytes: 16 * 1024,
    max_headers: 100,
    max_uri_bytes: 8 * 1024,
    max_field_bytes: 8 * 1024,
    max_body_bytes: None,
    max_chunk_ext_bytes: 1024,
    max_trailer_bytes: 4 * 1024,
    uri_bytes: None,
    header_value_bytes: None,
    xff_bytes: None,
    allow_content_type_without_body: false,
};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn upstream_request_drops_hop_by_hop_and_appends() {
    let buf = b"POST /form?x=1 HTTP/1.1\r\n\
Host: example.com\r\n\
Connection: keep-alive, X-Secret, host\r\n\
Keep-Alive: timeout=5\r\n\
Proxy-Connection: keep-alive\r\n\
TE: trailers\r\n\
Trailer: X-Checksum\r\n\
Upgrade: h2c\r\n\
Proxy-Authorization: Basic Zm9vOmJhcg==\r\n\
X-Secret: drop me\r\n\
X-Forwarded-For: 10.0.0.1\r\n\
x-forwarded-for: 10.0.0.2\r\n\
Via: 1.0 edge\r\n\
Accept: */*\r\n\
X-Replace: old\r\n\
X-Replace: older\r\n\
Transfer-Encoding: chunked\r\n\r\n";
    let (head, _) = parse_request(buf, &Limits::default()).unwrap().unwrap();
    let mut edits = HeaderEdits::new();
    edits
        .set(b"x-replace", b"new")
        .unwrap()
        .add(b"X-Added", b"yes")
        .unwrap();
    let mut out = Vec::new();
    write_request_head(&mut out, &head, buf, &forwarding(&edits, head.framing())).unwrap();
    assert_eq!(
        text(&out),
        "POST /form?x=1 HTTP/1.1\r\n\
Host: example.com\r\n\
Accept: */*\r\n\
X-Forwarded-For: 10.0.0.1, 10.0.0.2, 192.0.2.7\r\n\
Via: 1.0 edge, 1.1 ktls-proxy\r\n\
x-replace: new\r\n\
X-Added: yes\r\n\
Transfer-Encoding: chunked\r\n\r\n"
    );
    // Round trip: the proxy's output parses, with the same facts.
    let (again, len) = parse_request(&out, &Limits::default()).unwrap().unwrap();
    assert_eq!(len, out.len());
    assert_eq!(again.framing(), BodyFraming::Chunked);
    assert_eq!(again.host(&out), Some(&b"example.com"[..]));
    assert_eq!(again.path(&out), b"/form?x=1");
}

#[test]
fn absolute_form_becomes_origin_form_with_host() {
    let buf =
        b"POST http://origin.example/p HTTP/1.1\r\nHost: spoofed\r\nContent-Length: 3\r\n\r\n";
    let (head, _) = parse_request(buf, &Limits::default()).unwrap().unwrap();
    let edits = HeaderEdits::new();
    let mut out = Vec::new();
    let fwd = Forwarding {
        forwarded_for: None,
        forwarded_proto: None,
        via: None,
        edits: &edits,
        framing: head.framing(),
        connection: ConnectionOption::Close,
        limits: &DEFAULT_LIMITS,
    };
    write_request_head(&mut out, &head, buf, &fwd).unwrap();
    assert_eq!(
        text(&out),
        "POST /p HTTP/1.1\r\nHost: origin.example\r\nContent-Length: 3\r\nConnection: close\r\n\r\n"
    );
    let (again, _) = parse_request(&out, &Limits::default()).unwrap().unwrap();
    assert_eq!(again.target_form(), TargetForm::Origin);
    assert!(!again.keep_alive());
}

#[test]
fn http10_request_is_sent_as_http11() {
    let buf = b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
    let (head, _) = parse_request(buf, &Limits::default()).unwrap().unwrap();
    let edits = HeaderEdits::new();
    let mut out = Vec::new();
    write_request_head(&mut out, &head, buf, &forwarding(&edits, head.framing())).unwrap();
    assert_eq!(
        text(&out),
        "GET / HTTP/1.1\r\nHost: \r\nX-Forwarded-For: 192.0.2.7\r\nVia: 1.1 ktls-proxy\r\n\r\n"
    );
}

#[test]
fn client_response_reframes_and_keeps_end_to_end_fields() {
    let buf = b"HTTP/1.1 200 OK\r\n\
Content-Type: text/html\r\n\
Transfer-Encoding: chunked\r\n\
Connection: close, X-Internal\r\n\
X-Internal: 1\r\n\
Proxy-Authenticate: Basic\r\n\
Set-Cookie: a=1\r\n\
Set-Cookie: b=2\r\n\r\n";
    let (head, _) = parse_response(buf, &Limits::default(), false)
        .unwrap()
        .unwrap();
    let mut edits = HeaderEdits::new();
    edits.set(b"Server", b"ktls-proxy").unwrap();
    let mut out = Vec::new();
    let fwd = Forwarding {
        forwarded_for: Some(b"ignored for responses"),
        forwarded_proto: None,
        via: None,
        edits: &edits,
        framing: BodyFraming::Length(42),
        connection: ConnectionOption::KeepAlive,
        limits: &DEFAULT_LIMITS,
    };
    write_response_head(&mut out, &head, buf, &fwd).unwrap();
    assert_eq!(
        text(&out),
        "HTTP/1.1 200 OK\r\n\
Content-Type: text/html\r\n\
Set-Cookie: a=1\r\n\
Set-Cookie: b=2\r\n\
Server: ktls-proxy\r\n\
Content-Length: 42\r\n\
Connection: keep-alive\r\n\r\n"
    );
    let (again, _) = parse_response(&out, &Limits::default(), false)
        .unwrap()
        .unwrap();
    assert_eq!(again.framing(), BodyFraming::Length(42));
    assert!(again.keep_alive());
    assert_eq!(again.headers().get_all(&out, "set-cookie").count(), 2);
}

#[test]
fn close_delimited_response_forces_close_and_reason_falls_back() {
    let buf = b"HTTP/1.0 404\r\n\r\n";
    let (head, _) = parse_response(buf, &Limits::default(), false)
        .unwrap()
        .unwrap();
    let edits = HeaderEdits::new();
    let mut out = Vec::new();
    let fwd = Forwarding {
        forwarded_for: None,
        forwarded_proto: None,
        via: Some(b"p"),
        edits: &edits,
        framing: head.framing(),
        connection: ConnectionOption::Default,
        limits: &DEFAULT_LIMITS,
    };
    write_response_head(&mut out, &head, buf, &fwd).unwrap();
    assert_eq!(
        text(&out),
        "HTTP/1.1 404 Not Found\r\nVia: 1.1 p\r\nConnection: close\r\n\r\n"
    );
    let (again, _) = parse_response(&out, &Limits::default(), false)
        .unwrap()
        .unwrap();
    assert_eq!(again.framing(), BodyFraming::CloseDelimited);
}

#[test]
fn buffer_is_reused_without_growing() {
    let buf = b"GET /a HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n";
    let (head, _) = parse_request(buf, &Limits::default()).unwrap().unwrap();
    let edits = HeaderEdits::new();
    let mut out = Vec::new();
    write_request_head(&mut out, &head, buf, &forwarding(&edits, head.framing())).unwrap();
    let capacity = out.capacity();
    for _ in 0..100 {
        out.clear();
        write_request_head(&mut out, &head, buf, &forwarding(&edits, head.framing())).unwrap();
    }
    assert_eq!(out.capacity(), capacity);
}

#[test]
fn edits_are_validated() {
    let mut edits = HeaderEdits::new();
    assert_eq!(edits.set(b"X Bad", b"v").unwrap_err(), InvalidHeader::Name);
    assert_eq!(edits.set(b"", b"v").unwrap_err(), InvalidHeader::Name);
    assert_eq!(
        edits.add(b"X", b"a\r\nInjected: 1").unwrap_err(),
        InvalidHeader::Value
    );
    assert_eq!(
        edits.add(b"Content-Length", b"1").unwrap_err(),
        InvalidHeader::Reserved
    );
    assert_eq!(
        edits.set(b"connection", b"close").unwrap_err(),
        InvalidHeader::Reserved
    );
    assert!(edits.is_empty());
}

#[test]
fn low_level_writers_refuse_injection() {
    let mut out = Vec::new();
    write_status_line(&mut out, 302, b"Found");
    write_field(&mut out, b"Location", b"/x\r\nSet-Cookie: evil");
    write_field(&mut out, b"Content-Length", b"0");
    out.extend_from_slice(b"\r\n");
    assert_eq!(
        text(&out),
        "HTTP/1.1 302 Found\r\nLocation: \r\nContent-Length: 0\r\n\r\n"
    );
    let (head, _) = parse_response(&out, &Limits::default(), false)
        .unwrap()
        .unwrap();
    assert_eq!(head.status(), 302);
}

/// A head with `fields` fields named X-F<n>, after `start` and before the
/// blank line.
fn head_with_fields(start: &str, fields: usize) -> Vec<u8> {
    let mut head = start.as_bytes().to_vec();
    for n in 0..fields {
        head.extend_from_slice(format!("X-F{n}: {n}\r\n").as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// Issue 12 item 11, found by the fuzz target: 99 fields parse at the
/// default limits, and the forwarded head (plus Via and Connection: close
/// for a close-delimited body) had 101, which the same parser refuses.
#[test]
fn response_at_the_field_limit_is_refused_instead_of_forwarded_unparseable() {
    let limits = Limits::default();
    let edits = HeaderEdits::new();
    let buf = head_with_fields("HTTP/1.1 200 OK\r\n", 99);
    let (head, _) = parse_response(&buf, &limits, false).unwrap().unwrap();
    assert_eq!(head.framing(), BodyFraming::CloseDelimited);
    let fwd = Forwarding {
        via: Some(b"p"),
        ..forwarding(&edits, head.framing())
    };
    let mut out = b"kept".to_vec();
    assert_eq!(
        write_response_head(&mut out, &head, &buf, &fwd),
        Err(http1::OversizedHead::TooManyFields {
            fields: 101,
            limit: 100
        })
    );
    assert_eq!(out, b"kept", "a refused head is taken back whole");

    // Two fewer fit exactly, and the result parses with the same limits.
    let buf = head_with_fields("HTTP/1.1 200 OK\r\n", 98);
    let (head, _) = parse_response(&buf, &limits, false).unwrap().unwrap();
    out.clear();
    let fwd = Forwarding {
        via: Some(b"p"),
        ..forwarding(&edits, head.framing())
    };
    write_response_head(&mut out, &head, &buf, &fwd).unwrap();
    let (again, _) = parse_response(&out, &limits, false).unwrap().unwrap();
    assert_eq!(again.headers().iter().count(), 100);
}

#[test]
fn request_whose_forwarded_head_exceeds_the_limits_is_refused_with_431() {
    let limits = Limits::default();
    let edits = HeaderEdits::new();
    // Host and 98 more: 99 received, 101 with X-Forwarded-For and Via.
    let buf = head_with_fields("GET / HTTP/1.1\r\nHost: a\r\n", 98);
    let (head, _) = parse_request(&buf, &limits).unwrap().unwrap();
    let mut out = Vec::new();
    let refused =
        write_request_head(&mut out, &head, &buf, &forwarding(&edits, head.framing())).unwrap_err();
    assert_eq!(refused.request_status(), 431);
    assert!(refused.to_string().contains("http_header_cnt"), "{refused}");
    assert!(out.is_empty());

    // Configured edits count too.
    let buf = head_with_fields("GET / HTTP/1.1\r\nHost: a\r\n", 97);
    let (head, _) = parse_request(&buf, &limits).unwrap().unwrap();
    write_request_head(&mut out, &head, &buf, &forwarding(&edits, head.framing())).unwrap();
    assert!(parse_request(&out, &limits).unwrap().is_some());
    let mut more = HeaderEdits::new();
    more.add(b"X-Edge", b"1").unwrap();
    out.clear();
    assert!(write_request_head(&mut out, &head, &buf, &forwarding(&more, head.framing())).is_err());
}

#[test]
fn merged_forwarded_for_longer_than_a_field_is_refused() {
    let limits = Limits {
        max_field_bytes: 64,
        ..Limits::default()
    };
    let edits = HeaderEdits::new();
    // Each field fits; merged with the proxy's own address they do not.
    let buf = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: {}\r\nX-Forwarded-For: {}\r\n\r\n",
        "1".repeat(40),
        "2".repeat(40)
    );
    let (head, _) = parse_request(buf.as_bytes(), &limits).unwrap().unwrap();
    let mut out = Vec::new();
    let fwd = Forwarding {
        limits: &limits,
        ..forwarding(&edits, head.framing())
    };
    assert!(matches!(
        write_request_head(&mut out, &head, buf.as_bytes(), &fwd),
        Err(http1::OversizedHead::FieldTooLong { limit: 64, .. })
    ));
}

#[test]
fn a_websocket_handshake_is_passed_on_with_the_writers_own_upgrade_fields() {
    let buf = b"GET /chat HTTP/1.1\r\n\
Host: example.com\r\n\
Upgrade: WebSocket, h2c\r\n\
Connection: keep-alive, Upgrade, X-Secret\r\n\
X-Secret: drop me\r\n\
Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
Sec-WebSocket-Version: 13\r\n\r\n";
    let (head, _) = parse_request(buf, &Limits::default()).unwrap().unwrap();
    assert!(head.upgrade());
    let edits = HeaderEdits::new();
    let mut out = Vec::new();
    let fwd = Forwarding {
        connection: ConnectionOption::UpgradeWebSocket,
        ..forwarding(&edits, head.framing())
    };
    write_request_head(&mut out, &head, buf, &fwd).unwrap();
    assert_eq!(
        text(&out),
        "GET /chat HTTP/1.1\r\n\
Host: example.com\r\n\
Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
Sec-WebSocket-Version: 13\r\n\
X-Forwarded-For: 192.0.2.7\r\n\
Via: 1.1 ktls-proxy\r\n\
Connection: upgrade\r\n\
Upgrade: websocket\r\n\r\n"
    );
    let (again, _) = parse_request(&out, &Limits::default()).unwrap().unwrap();
    assert!(again.upgrade());
    // The 101 back: the same two fields, nothing the origin's Connection named.
    let resp = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
Connection: Upgrade, X-Internal\r\nX-Internal: 1\r\n\
Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
    let (head, _) = parse_response(resp, &Limits::default(), false)
        .unwrap()
        .unwrap();
    assert!(head.upgrade() && head.is_interim());
    let mut out = Vec::new();
    let fwd = Forwarding {
        forwarded_for: None,
        forwarded_proto: None,
        via: None,
        connection: ConnectionOption::UpgradeWebSocket,
        ..forwarding(&edits, BodyFraming::None)
    };
    write_response_head(&mut out, &head, resp, &fwd).unwrap();
    assert_eq!(
        text(&out),
        "HTTP/1.1 101 Switching Protocols\r\n\
Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\
Connection: upgrade\r\n\
Upgrade: websocket\r\n\r\n"
    );
}

#[test]
fn removed_fields_are_not_forwarded_and_nothing_replaces_them() {
    let buf = b"GET / HTTP/1.1\r\nHost: a\r\nCookie: __tfw=1\r\nAccept: */*\r\ncookie: x=2\r\n\r\n";
    let (head, _) = parse_request(buf, &Limits::default()).unwrap().unwrap();
    let mut edits = HeaderEdits::new();
    edits.remove(b"Cookie").unwrap();
    assert!(!edits.is_empty());
    let mut out = Vec::new();
    write_request_head(&mut out, &head, buf, &forwarding(&edits, head.framing())).unwrap();
    let sent = text(&out);
    assert!(!sent.to_ascii_lowercase().contains("cookie"), "{sent}");
    assert!(sent.contains("Accept: */*\r\n"), "{sent}");
    assert_eq!(
        edits.remove(b"Content-Length").unwrap_err(),
        InvalidHeader::Reserved
    );
}

#[test]
fn removed_fields_are_not_forwarded() {
    let buf = b"HTTP/1.1 200 OK\r\n\
CDN-Cache-Control: max-age=600\r\n\
Cache-Control: max-age=60\r\n\
cdn-cache-control: no-store\r\n\
Content-Length: 0\r\n\r\n";
    let (head, _) = parse_response(buf, &Limits::default(), false)
        .unwrap()
        .unwrap();
    let mut edits = HeaderEdits::new();
    edits.remove(b"CDN-Cache-Control").unwrap();
    assert!(!edits.is_empty());
    assert_eq!(edits.remove(b"bad name").unwrap_err(), InvalidHeader::Name);
    let mut out = Vec::new();
    write_response_head(&mut out, &head, buf, &forwarding(&edits, head.framing())).unwrap();
    let out = text(&out).to_ascii_lowercase();
    assert!(!out.contains("cdn-cache-control"), "{out}");
    assert!(out.contains("cache-control: max-age=60\r\n"), "{out}");
}

#[test]
fn the_clients_x_forwarded_proto_is_replaced_by_the_connections_scheme() {
    let buf = b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-Proto: https\r\nx-forwarded-proto: wss\r\nAccept: */*\r\n\r\n";
    let (head, _) = parse_request(buf, &Limits::default()).unwrap().unwrap();
    let edits = HeaderEdits::new();
    let mut out = Vec::new();
    let fwd = Forwarding {
        forwarded_proto: Some(b"http"),
        ..forwarding(&edits, head.framing())
    };
    write_request_head(&mut out, &head, buf, &fwd).unwrap();
    let written = text(&out);
    assert_eq!(
        written.matches("X-Forwarded-Proto: http\r\n").count(),
        1,
        "{written}"
    );
    assert!(
        !written.to_ascii_lowercase().contains("proto: https"),
        "{written}"
    );
    assert!(!written.contains("wss"), "{written}");
}

#[test]
fn chunk_size_lines_are_lowercase_hex_with_crlf() {
    for (size, line) in [
        (0, &b"0\r\n"[..]),
        (1, b"1\r\n"),
        (16, b"10\r\n"),
        (0xabc, b"abc\r\n"),
        (usize::MAX, b"ffffffffffffffff\r\n"),
    ] {
        assert_eq!(http1::ChunkSize::new(size).as_bytes(), line);
    }
}
