//! The upstream request head rendered as an HTTP/2 request (RFC 9113 §8.3.1) from the pieces
//! `http1::forward_request_fields` decides, the same pieces the HTTP/1.1 writer renders as
//! text: one decision (hop-by-hop fields dropped, X-Forwarded-For, X-Forwarded-Proto, Via,
//! the vhost's edits, the sticky cookie and the tier hop field as edits), two renderings.
//! HTTP/2's own rules: `:method`, `:scheme` (the upstream connection's), `:authority` from
//! Host, `:path`; names in lower case; no connection-specific field (Connection, Upgrade,
//! Transfer-Encoding); TE only as `trailers`; `content-length` only for a known length (the
//! body's end is END_STREAM).
//!
//! Called by the worker for `server_proto h2` groups (`worker/h2_origin.rs`, h2c). The
//! response half, [`response_head`], gives the one relay an HTTP/2 origin's heads
//! (`worker/response/head.rs`, from `worker/upstream/h2_pieces.rs`).

use http1::{BodyFraming, ConnectionOption, RequestSink};

/// Builds an [`h2::Request`] from the pieces of a forwarded request head.
pub struct H2Head {
    request: h2::Request,
    /// A joined field being assembled ([`RequestSink::value_start`]).
    joined: Option<h2::Field>,
}

impl H2Head {
    /// `scheme`: what the upstream connection is (`https` over TLS, else `http`), not what
    /// the client's was (that one goes as X-Forwarded-Proto).
    pub fn new(scheme: &'static [u8]) -> H2Head {
        H2Head {
            request: h2::Request {
                method: Vec::new(),
                scheme: Some(scheme.to_vec()),
                authority: None,
                path: None,
                fields: Vec::new(),
                content_length: None,
                field_count: 0,
            },
            joined: None,
        }
    }

    /// The request, once [`RequestSink::end`] was given.
    pub fn into_request(self) -> h2::Request {
        self.request
    }

    fn push(&mut self, name: &[u8], value: &[u8]) {
        let name = name.to_ascii_lowercase();
        if name == b"host" {
            // The first Host is the authority; HTTP/2 carries no Host beside it.
            if self.request.authority.is_none() {
                self.request.authority = Some(value.to_vec());
            }
            return;
        }
        self.request.field_count += 1;
        self.request.fields.push(h2::Field {
            name,
            value: value.to_vec(),
        });
    }
}

impl RequestSink for H2Head {
    fn start(&mut self, method: &[u8], target: &[u8]) {
        self.request.method = method.to_vec();
        self.request.path = Some(target.to_vec());
    }

    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.push(name, value);
    }

    fn value_start(&mut self, name: &[u8]) {
        self.joined = Some(h2::Field {
            name: name.to_vec(),
            value: Vec::with_capacity(64),
        });
    }

    fn value_part(&mut self, part: &[u8]) {
        if let Some(f) = self.joined.as_mut() {
            f.value.extend_from_slice(part);
        }
    }

    fn value_end(&mut self) {
        if let Some(f) = self.joined.take() {
            self.push(&f.name, &f.value);
        }
    }

    fn te_trailers(&mut self) {
        self.push(b"te", b"trailers");
    }

    fn framing(&mut self, framing: BodyFraming) {
        if let BodyFraming::Length(n) = framing {
            self.request.content_length = Some(n);
            let mut digits = [0u8; 20];
            let len = http1::decimal_len(n, &mut digits);
            self.push(b"content-length", digits.get(..len).unwrap_or(&[]));
        }
    }

    /// Connection options are HTTP/1.1's: HTTP/2 has none to say (a WebSocket handshake is
    /// never sent on an HTTP/2 connection: the pick gives it an HTTP/1.1 one).
    fn connection(&mut self, _: ConnectionOption) {}

    fn end(&mut self) {}
}

/// An origin's HTTP/2 response head (its HEADERS, already checked by the h2 codec per RFC 9113
/// §8.3.2) as the relay's head: status and fields assembled by [`http1::ResponseBuilder`]
/// (no HTTP/1 text), judged by the limits a parsed head meets (`is_head`: the request was
/// HEAD). Its framing is the stream's: a Content-Length, else chunked for an HTTP/1.1 client.
pub fn response_head(
    response: &h2::Response,
    limits: &http1::Limits,
    is_head: bool,
) -> Result<(http1::ResponseHead, Vec<u8>), http1::ParseError> {
    let capacity = response
        .fields
        .iter()
        .map(|f| f.name.len() + f.value.len())
        .sum();
    let mut b = http1::ResponseBuilder::new(response.status, capacity)?;
    for f in &response.fields {
        b.field(&f.name, &f.value)?;
    }
    b.finish(limits, is_head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http1::{parse_request, Forwarding, HeaderEdits, Limits};

    fn render(raw: &[u8], edits: &HeaderEdits) -> h2::Request {
        let limits = Limits::default();
        let Ok(Some((head, _))) = parse_request(raw, &limits) else {
            panic!("not a request: {raw:?}");
        };
        let fwd = Forwarding {
            forwarded_for: Some(b"192.0.2.7"),
            forwarded_proto: Some(b"https"),
            via: Some(b"p"),
            edits,
            framing: head.framing(),
            connection: ConnectionOption::Default,
            limits: &limits,
        };
        let mut sink = H2Head::new(b"http");
        http1::forward_request_fields(&mut sink, &head, raw, &fwd);
        sink.into_request()
    }

    fn names(r: &h2::Request) -> Vec<String> {
        let text = |f: &h2::Field| format!("{}: {}", f.name.escape_ascii(), f.value.escape_ascii());
        r.fields.iter().map(text).collect()
    }

    #[test]
    fn pseudo_headers_and_the_proxys_fields() {
        let mut edits = HeaderEdits::new();
        let _ = edits.set(b"X-Set", b"1").and_then(|e| e.remove(b"Cookie"));
        let raw = b"POST /a?b HTTP/1.1\r\nHost: Origin.test\r\nConnection: keep-alive, X-Gone\r\n\
                    X-Gone: 1\r\nCookie: sticky=1\r\nX-Forwarded-For: 10.0.0.1\r\nTE: trailers\r\n\
                    Content-Length: 3\r\nAccept: */*\r\n\r\nabc";
        let r = render(raw, &edits);
        assert_eq!(r.method, b"POST");
        assert_eq!(r.scheme.as_deref(), Some(&b"http"[..]));
        assert_eq!(r.authority.as_deref(), Some(&b"Origin.test"[..]));
        assert_eq!(r.path.as_deref(), Some(&b"/a?b"[..]));
        assert_eq!(r.content_length, Some(3));
        assert_eq!(
            names(&r),
            [
                "accept: */*",
                "te: trailers",
                "x-forwarded-for: 10.0.0.1, 192.0.2.7",
                "x-forwarded-proto: https",
                "via: 1.1 p",
                "x-set: 1",
                "content-length: 3"
            ]
        );
    }

    #[test]
    fn a_response_head_from_headers() {
        let response = h2::Response {
            status: 200,
            fields: vec![
                h2::Field::new(b"content-type", b"application/grpc"),
                h2::Field::new(b"grpc-encoding", b"identity"),
            ],
            content_length: None,
        };
        let limits = Limits::default();
        let Ok((head, buf)) = response_head(&response, &limits, false) else {
            panic!("refused");
        };
        assert_eq!(head.status(), 200);
        assert_eq!(
            head.header(&buf, "content-type"),
            Some(&b"application/grpc"[..])
        );
        assert_eq!(head.framing(), BodyFraming::Chunked);
    }

    #[test]
    fn chunked_has_no_field_and_an_absolute_target_gives_the_authority() {
        let raw = b"PUT http://abs.test:8080/u HTTP/1.1\r\nHost: other\r\n\
                    Transfer-Encoding: chunked\r\n\r\n";
        let r = render(raw, &HeaderEdits::new());
        assert_eq!(r.authority.as_deref(), Some(&b"abs.test:8080"[..]));
        assert_eq!(r.path.as_deref(), Some(&b"/u"[..]));
        assert_eq!(r.content_length, None);
        let fields = names(&r);
        assert!(
            !fields
                .iter()
                .any(|f| f.starts_with("transfer-encoding") || f.starts_with("host")),
            "{fields:?}"
        );
    }
}
