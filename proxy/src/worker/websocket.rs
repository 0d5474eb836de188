//! The WebSocket opening handshake (RFC 6455 §4) as the proxy checks it, both halves, without
//! I/O: which requests ask for a tunnel (and which of those are malformed), and which `101`
//! answers may open one. The tunnel itself is `tunnel.rs`.

use http1::{BodyFraming, Method, ResponseHead, Version};

use super::request::Request;

/// What a request asks of the connection.
#[derive(Debug, PartialEq, Eq)]
pub enum Upgrade {
    /// An ordinary request (no upgrade, or one to a protocol the proxy does not tunnel: its
    /// Upgrade field is dropped and the origin answers it as HTTP, RFC 9110 §7.8).
    None,
    /// A valid WebSocket opening handshake.
    WebSocket,
    /// A WebSocket handshake the origin must not see: answered 400, and why.
    Malformed(&'static str),
}

/// Classifies `request`. HTTP/1.0 upgrades are ignored (RFC 9110 §7.8), and a request from
/// an HTTP/2 client never carries the connection-specific fields.
pub fn classify(request: &Request) -> Upgrade {
    if !request.head().upgrade() || request.version() != Version::Http11 {
        return Upgrade::None;
    }
    let wants_websocket = request
        .header("upgrade")
        .is_some_and(|v| list_has(v, b"websocket"));
    if !wants_websocket {
        return Upgrade::None;
    }
    if request.method() != Method::Get {
        return Upgrade::Malformed("a WebSocket handshake must be a GET");
    }
    if request.framing() != BodyFraming::None {
        return Upgrade::Malformed("a WebSocket handshake has no body");
    }
    if !request.header("sec-websocket-key").is_some_and(is_key) {
        return Upgrade::Malformed("Sec-WebSocket-Key is missing or not 16 bytes in base64");
    }
    if request
        .header("sec-websocket-version")
        .map(<[u8]>::trim_ascii)
        != Some(b"13")
    {
        return Upgrade::Malformed("Sec-WebSocket-Version is not 13");
    }
    Upgrade::WebSocket
}

/// Whether the origin's `101` accepts the WebSocket handshake: it switches to `websocket`
/// and proves it read the key (`Sec-WebSocket-Accept`; its value is the client's to check).
pub fn accepts(head: &ResponseHead, input: &[u8]) -> bool {
    head.status() == 101
        && head.upgrade()
        && head
            .header(input, "upgrade")
            .is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"websocket"))
        && head
            .header(input, "sec-websocket-accept")
            .is_some_and(|v| !v.trim_ascii().is_empty())
}

/// A comma-separated list holds `token` (case-insensitive; protocol versions after `/`
/// are part of the element, so `websocket/2` is another protocol).
fn list_has(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|e| e.trim_ascii().eq_ignore_ascii_case(token))
}

/// A nonce of 16 bytes in base64: 22 characters of the alphabet and `==`.
fn is_key(value: &[u8]) -> bool {
    let value = value.trim_ascii();
    let Some(body) = value.strip_suffix(b"==") else {
        return false;
    };
    body.len() == 22
        && body
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::request::Scheme;

    const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

    fn request(text: &str) -> Request {
        let (head, _) = http1::parse_request(text.as_bytes(), &http1::Limits::default())
            .unwrap()
            .unwrap();
        Request::new(head, text.as_bytes(), Scheme::Http)
    }

    fn handshake(method: &str, extra: &str) -> String {
        format!(
            "{method} /chat HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
        )
    }

    #[test]
    fn a_valid_handshake_asks_for_a_tunnel() {
        assert_eq!(
            classify(&request(&handshake("GET", ""))),
            Upgrade::WebSocket
        );
        let keep_alive_too = handshake("GET", "").replace("Upgrade\r\n", "keep-alive, Upgrade\r\n");
        assert_eq!(classify(&request(&keep_alive_too)), Upgrade::WebSocket);
    }

    #[test]
    fn malformed_handshakes_are_refused() {
        for (text, why) in [
            (handshake("POST", "Content-Length: 0\r\n"), "GET"),
            // (A Content-Length body on GET is refused by the parser already.)
            (
                handshake("GET", "Transfer-Encoding: chunked\r\n"),
                "no body",
            ),
            (handshake("GET", "").replace(KEY, "short=="), "Key"),
            (
                handshake("GET", "").replace("Sec-WebSocket-Key", "X-Key"),
                "Key",
            ),
            (
                handshake("GET", "").replace("Version: 13", "Version: 8"),
                "13",
            ),
        ] {
            match classify(&request(&text)) {
                Upgrade::Malformed(reason) => assert!(reason.contains(why), "{reason}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn other_upgrades_and_http10_stay_ordinary_requests() {
        let h2c = handshake("GET", "").replace("Upgrade: websocket", "Upgrade: h2c");
        assert_eq!(classify(&request(&h2c)), Upgrade::None);
        let no_connection = handshake("GET", "").replace("Connection: Upgrade\r\n", "");
        assert_eq!(classify(&request(&no_connection)), Upgrade::None);
        let old = handshake("GET", "").replace("HTTP/1.1", "HTTP/1.0");
        assert_eq!(classify(&request(&old)), Upgrade::None);
        assert_eq!(
            classify(&request("GET / HTTP/1.1\r\nHost: a\r\n\r\n")),
            Upgrade::None
        );
    }

    #[test]
    fn only_a_complete_switch_to_websocket_opens_a_tunnel() {
        let ok = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                  Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
        let parse = |t: &str| {
            http1::parse_response(t.as_bytes(), &http1::Limits::default(), false)
                .unwrap()
                .unwrap()
                .0
        };
        assert!(accepts(&parse(ok), ok.as_bytes()));
        for bad in [
            ok.replace("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n", ""),
            ok.replace("Upgrade: websocket\r\n", ""),
            ok.replace("websocket", "h2c"),
            ok.replace("Connection: Upgrade\r\n", ""),
        ] {
            assert!(!accepts(&parse(&bad), bad.as_bytes()), "{bad}");
        }
    }
}
