//! Sans-IO tests of the H1 codec (`h1.rs`): pipelined heads, drains, the connection field.

use super::*;
use crate::buf::BufPool;

fn buf_with(bytes: &[u8]) -> Buf {
    let mut buf = BufPool::default().take();
    assert_eq!(buf.push(bytes), bytes.len());
    buf
}

fn sent(out: &Outbox) -> String {
    let mut bytes = Vec::new();
    out.copy_front(out.len(), &mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

fn id() -> ExchangeId {
    let mut exchanges = super::super::exchange::Exchanges::default();
    let (head, _) = http1::parse_request(
        b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
        &http1::Limits::default(),
    )
    .unwrap()
    .unwrap();
    exchanges.insert(super::super::exchange::NewExchange {
        client: crate::worker::client::ClientId::from_index(0),
        client_id: 1,
        stream: 0,
        request: Request::new(head, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", Scheme::Http),
        keep_alive: true,
        log: None,
        limits: crate::frang::RequestLimits::new(
            &config::FrangGlobal::default(),
            false,
            std::time::Instant::now(),
        ),
    })
}

fn decoder(framing: BodyFraming) -> BodyDecoder {
    BodyDecoder::new(framing, &http1::Limits::default())
}

#[test]
fn pipelined_requests_are_taken_one_head_at_a_time() {
    let codec = H1Codec::default();
    let mut rbuf =
        buf_with(b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\nGET /3");
    let limits = http1::Limits::default();
    for path in [&b"/1"[..], b"/2"] {
        match codec.next_request(&mut rbuf, &limits, Scheme::Http) {
            Parsed::Request(r) => assert_eq!(r.path(), path),
            _ => panic!("expected a request"),
        }
    }
    assert!(matches!(
        codec.next_request(&mut rbuf, &limits, Scheme::Http),
        Parsed::Partial
    ));
    assert_eq!(rbuf.bytes(), b"GET /3");
}

#[test]
fn bad_and_oversized_heads_are_told_apart() {
    let codec = H1Codec::default();
    let limits = http1::Limits::default();
    let mut bad = buf_with(
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    assert!(matches!(
        codec.next_request(&mut bad, &limits, Scheme::Http),
        Parsed::Invalid(_)
    ));
    // Limits above the buffer: the buffer fills before any limit trips.
    let roomy = http1::Limits {
        max_head_bytes: 1 << 20,
        max_field_bytes: 1 << 20,
        ..http1::Limits::default()
    };
    let mut long = b"GET / HTTP/1.1\r\nX-Long: ".to_vec();
    long.resize(crate::buf::BUF_SIZE, b'a');
    let mut full = buf_with(&long);
    assert!(matches!(
        codec.next_request(&mut full, &roomy, Scheme::Http),
        Parsed::TooLarge
    ));
}

#[test]
fn an_unread_body_is_discarded_before_the_next_request() {
    let mut codec = H1Codec::default();
    codec.begin(id());
    assert!(!codec.exchange_done(Some(decoder(BodyFraming::Length(5))), false));
    assert!(matches!(codec.state(), ConnState::Drain(_)));
    let mut rbuf = buf_with(b"12345GET / HTTP/1.1\r\n");
    assert_eq!(codec.discard_body(Some(&mut rbuf), false), (true, false));
    assert!(codec.is_idle());
    assert_eq!(
        rbuf.bytes(),
        b"GET / HTTP/1.1\r\n",
        "the next request is intact"
    );
}

#[test]
fn a_closing_connection_does_not_drain() {
    let mut codec = H1Codec::default();
    codec.begin(id());
    assert!(codec.exchange_done(Some(decoder(BodyFraming::Chunked)), true));
    assert!(codec.is_idle());
    codec.begin(id());
    assert!(!codec.exchange_done(None, false), "no body, keep-alive");
    assert!(codec.is_idle());
}

#[test]
fn draining_is_bounded_and_stops_at_malformed_framing() {
    let mut codec = H1Codec::default();
    codec.begin(id());
    codec.exchange_done(
        Some(decoder(BodyFraming::Length(DRAIN_MAX_BYTES * 2))),
        false,
    );
    let chunk = vec![b'x'; crate::buf::BUF_SIZE];
    let mut closed = false;
    for _ in 0..(DRAIN_MAX_BYTES as usize / chunk.len() + 2) {
        let mut rbuf = buf_with(&chunk);
        let (_, close) = codec.discard_body(Some(&mut rbuf), false);
        if close {
            closed = true;
            break;
        }
    }
    assert!(closed, "more than DRAIN_MAX_BYTES closes the connection");
    codec.begin(id());
    codec.exchange_done(Some(decoder(BodyFraming::Chunked)), false);
    let mut rbuf = buf_with(b"zz\r\n");
    assert!(codec.discard_body(Some(&mut rbuf), false).1);
}

#[test]
fn the_peer_closing_mid_drain_closes() {
    let mut codec = H1Codec::default();
    codec.begin(id());
    codec.exchange_done(Some(decoder(BodyFraming::Length(10))), false);
    assert_eq!(codec.discard_body(None, true), (true, true));
}

#[test]
fn replies_carry_this_clients_connection_field() {
    let mut out = Outbox::default();
    let to = ReplyTo {
        http10: false,
        close: true,
    };
    let reply = Reply::Redirect {
        status: 301,
        location: "https://a/b",
    };
    assert_eq!(
        write_reply(&mut out, &reply, to, "Tue, 01 Dec 2026 00:00:00 GMT"),
        0
    );
    let text = sent(&out);
    assert!(
        text.starts_with("HTTP/1.1 301 Moved Permanently\r\n"),
        "{text}"
    );
    assert!(text.contains("Location: https://a/b\r\n"), "{text}");
    assert!(text.ends_with("Connection: close\r\n\r\n"), "{text}");
    let mut out = Outbox::default();
    let to = ReplyTo {
        http10: true,
        close: false,
    };
    write_reply(&mut out, &Reply::Status(200), to, "");
    assert!(sent(&out).ends_with("Connection: keep-alive\r\n\r\n"));
    let mut out = Outbox::default();
    let len = write_reply(
        &mut out,
        &Reply::Status(403),
        ReplyTo {
            http10: false,
            close: false,
        },
        "",
    );
    // Tempesta's 403 has no body.
    assert_eq!(len, 0);
    assert!(sent(&out).ends_with("Content-Length: 0\r\n\r\n"));
}

#[test]
fn an_http10_client_gets_a_chunked_response_close_delimited() {
    let input = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    let (head, _) = http1::parse_response(input, &http1::Limits::default(), false)
        .unwrap()
        .unwrap();
    let mut scratch = Vec::new();
    let to = ReplyTo {
        http10: true,
        close: false,
    };
    let plan = render_response_head(
        &mut scratch,
        (&head, input),
        &http1::HeaderEdits::new(),
        &http1::Limits::default(),
        to,
        None::<http1::ResponseFields>,
    )
    .unwrap();
    assert!(plan.dechunk && plan.close_delimited);
    let text = String::from_utf8_lossy(&scratch).to_ascii_lowercase();
    assert!(!text.contains("transfer-encoding"), "{text}");
    let mut out = Outbox::default();
    assert_eq!(write_body(&mut out, b"3\r\nabc\r\n", b"abc", true, true), 3);
    assert_eq!(sent(&out), "abc");
}

#[test]
fn canned_pages_count_their_body() {
    assert_eq!(
        page_body_len(http1::error_response(404, true)),
        "404 Not Found\n".len() as u64
    );
    assert_eq!(page_body_len(http1::error_response(403, true)), 0);
}
