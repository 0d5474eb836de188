//! The request an exchange owns, in the one shape routing, frang, the cache and the upstream
//! writer read whatever protocol the client spoke: method, scheme, authority, target, fields
//! and body framing as spans over one buffer ([`http1::RequestHead`]). The HTTP/1 codec hands
//! over the head exactly as received and parsed; the HTTP/2 codec builds it from the decoded
//! header block with [`http1::RequestBuilder`] (no HTTP/1 text: the pieces end to end), which
//! checks each piece as the HTTP/1.1 parser does and the whole by the same limits, so every
//! rule sees one representation and a request gets one verdict whatever the protocol. Only
//! the upstream HTTP/1.1 writer renders a request as HTTP/1 text.

use http1::{BodyFraming, Method, RequestHead, Version};

use crate::router::RequestView;

/// How the client connection came: part of the cache key and of frang's facts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// A request head and the bytes its spans refer to.
#[derive(Clone)]
pub struct Request {
    head: RequestHead,
    bytes: Box<[u8]>,
    scheme: Scheme,
    /// The client spoke HTTP/2 or HTTP/3 (the head was built from its header block).
    h2: bool,
    /// The client spoke HTTP/3.
    h3: bool,
}

impl Request {
    /// `bytes` must be the buffer `head` was parsed from (at least its head).
    pub fn new(head: RequestHead, bytes: &[u8], scheme: Scheme) -> Request {
        let len = head.head_len().min(bytes.len());
        Request {
            bytes: bytes.get(..len).unwrap_or(&[]).into(),
            head,
            scheme,
            h2: false,
            h3: false,
        }
    }

    /// A head built with [`http1::RequestBuilder`], over `bytes` (taken as they are: no copy).
    #[inline]
    pub fn built(head: RequestHead, bytes: Vec<u8>, scheme: Scheme) -> Request {
        Request {
            head,
            bytes: bytes.into_boxed_slice(),
            scheme,
            h2: false,
            h3: false,
        }
    }

    /// A head built from an HTTP/2 header block.
    #[inline]
    pub fn from_h2(head: RequestHead, bytes: Vec<u8>, scheme: Scheme) -> Request {
        Request {
            h2: true,
            ..Request::built(head, bytes, scheme)
        }
    }

    /// A head built from an HTTP/3 field section (the HTTP/2 mapping).
    #[inline]
    pub fn from_h3(head: RequestHead, bytes: Vec<u8>, scheme: Scheme) -> Request {
        Request {
            h3: true,
            ..Request::from_h2(head, bytes, scheme)
        }
    }

    /// The protocol as the access log names it.
    pub fn version_label(&self) -> &'static str {
        match (self.h2, self.head.version()) {
            (true, _) if self.h3 => "HTTP/3.0",
            (true, _) => "HTTP/2.0",
            (false, Version::Http10) => "HTTP/1.0",
            (false, _) => "HTTP/1.1",
        }
    }

    pub fn head(&self) -> &RequestHead {
        &self.head
    }

    /// The head's bytes, for the accessors of [`RequestHead`].
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The scheme a cache tier peer says the client used (`tier_hop.rs`, `honour_hop`).
    pub fn set_scheme(&mut self, scheme: Scheme) {
        self.scheme = scheme;
    }

    pub fn method(&self) -> Method {
        self.head.method()
    }

    pub fn method_bytes(&self) -> &[u8] {
        self.head.method_bytes(&self.bytes)
    }

    /// The method token as text: a known method's without looking at the bytes, another's
    /// checked once (a parsed method is a token, so ASCII; empty if it were not).
    pub fn method_str(&self) -> &str {
        self.head
            .method()
            .as_str()
            .unwrap_or_else(|| std::str::from_utf8(self.method_bytes()).unwrap_or(""))
    }

    pub fn version(&self) -> Version {
        self.head.version()
    }

    /// Path and query.
    pub fn path(&self) -> &[u8] {
        self.head.path(&self.bytes)
    }

    /// The target as sent (origin or absolute form).
    pub fn target(&self) -> &[u8] {
        self.head.target(&self.bytes)
    }

    /// The authority: the absolute target's, else the Host field's.
    pub fn authority(&self) -> Option<&[u8]> {
        self.head.host(&self.bytes)
    }

    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.head.header(&self.bytes, name)
    }

    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.head.headers().fields(&self.bytes)
    }

    /// The field names in order (what a trailer field is compared with).
    pub fn field_names(&self) -> impl Iterator<Item = &[u8]> + Clone {
        self.head
            .headers()
            .iter()
            .map(|field| field.name.get(&self.bytes))
    }

    /// The fields the upstream receives as they are (hop-by-hop ones and those the
    /// Connection field names left out): what the cache keys variants on.
    pub fn forwarded_fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields()
            .filter(|(name, _)| http1::is_forwarded_field(&self.head, &self.bytes, name))
    }

    /// The method the cache keys and judges this request by. An origin that obeys a
    /// method-override field (`X-HTTP-Method-Override` and its kin, forwarded as received)
    /// handles `GET` as the method it names, so the answer is that method's, never the GET
    /// entry (issue 30). An unsafe method stays itself whatever it claims to be: `POST`
    /// naming `GET` is never answered from the cache, since an origin may ignore the field.
    pub fn cache_method(&self) -> &str {
        let method = self.method_str();
        match self.head.method_override(&self.bytes) {
            Some(named) if !cache::is_unsafe_method(method) => {
                std::str::from_utf8(named).unwrap_or("")
            }
            _ => method,
        }
    }

    pub fn framing(&self) -> BodyFraming {
        self.head.framing()
    }

    pub fn has_body(&self) -> bool {
        self.head.framing().has_body()
    }

    /// The client asked to keep the connection open after this exchange.
    pub fn keep_alive(&self) -> bool {
        self.head.keep_alive()
    }

    pub fn expect_continue(&self) -> bool {
        self.head.expect_continue()
    }
}

impl RequestView for Request {
    fn uri(&self) -> &[u8] {
        self.path()
    }
    fn host(&self) -> &[u8] {
        normalized_host(self.authority().unwrap_or(b""))
    }
    fn method(&self) -> &[u8] {
        self.method_bytes()
    }
    fn scheme(&self) -> &[u8] {
        self.scheme.as_str().as_bytes()
    }
    fn any_header(&self, name: &str, f: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        self.fields()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .any(|(_, v)| f(v))
    }
}

/// How many fields [`FieldPairs`] holds without a heap allocation: more than a typical
/// request carries.
const INLINE_PAIRS: usize = 16;

/// A request's fields as `(name, value)` pairs, the shape the cache reads, in order: on the
/// stack up to [`INLINE_PAIRS`] fields, in a `Vec` beyond (a cache hit then allocates nothing
/// for them).
pub struct FieldPairs<'r> {
    inline: [(&'r [u8], &'r [u8]); INLINE_PAIRS],
    inline_len: usize,
    spilled: Vec<(&'r [u8], &'r [u8])>,
}

impl Default for FieldPairs<'_> {
    fn default() -> Self {
        FieldPairs {
            inline: [(&[], &[]); INLINE_PAIRS],
            inline_len: 0,
            spilled: Vec::new(),
        }
    }
}

impl<'r> FieldPairs<'r> {
    /// Fills the pairs with `request`'s forwarded fields, in place (the caller's frame holds them:
    /// returning them by value would copy the array) and returns them.
    #[inline]
    pub fn fill(&mut self, request: &'r Request) -> &[(&'r [u8], &'r [u8])] {
        self.inline_len = 0;
        self.spilled.clear();
        if request.head.headers().len() > INLINE_PAIRS {
            self.spilled.extend(request.forwarded_fields());
        } else {
            for (slot, field) in self.inline.iter_mut().zip(request.forwarded_fields()) {
                *slot = field;
                self.inline_len += 1;
            }
        }
        self.as_slice()
    }

    pub fn as_slice(&self) -> &[(&'r [u8], &'r [u8])] {
        match self.inline.get(..self.inline_len) {
            Some(inline) if self.spilled.is_empty() => inline,
            _ => &self.spilled,
        }
    }
}

/// The host name rules compare: the port and one trailing dot removed (`Example.com.:8443`
/// names the same host as `example.com`; comparisons are case-insensitive).
pub fn normalized_host(host: &[u8]) -> &[u8] {
    let host = strip_port(host);
    host.strip_suffix(b".").unwrap_or(host)
}

/// `example.com:8443` -> `example.com`, `[::1]:443` -> `[::1]`: rules compare host names.
fn strip_port(host: &[u8]) -> &[u8] {
    let colon = match host.first() {
        Some(b'[') => host.iter().position(|&b| b == b']').map(|end| end + 1),
        _ => host.iter().position(|&b| b == b':'),
    };
    match colon {
        Some(i) if host.get(i) == Some(&b':') || i == host.len() => &host[..i],
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(head: &[u8]) -> Request {
        let (parsed, _) = http1::parse_request(head, &http1::Limits::default())
            .unwrap()
            .unwrap();
        Request::new(parsed, head, Scheme::Https)
    }

    #[test]
    fn field_pairs_keep_order_inline_and_spilled() {
        for count in [0, 1, INLINE_PAIRS - 1, INLINE_PAIRS, INLINE_PAIRS + 1, 40] {
            let mut head = b"GET / HTTP/1.1\r\nHost: a.example\r\n".to_vec();
            for i in 1..count {
                head.extend_from_slice(format!("X-F{i}: v{i}\r\n").as_bytes());
            }
            head.extend_from_slice(b"\r\n");
            let req = request(&head);
            let mut pairs = FieldPairs::default();
            let expected: Vec<_> = req.fields().collect();
            assert_eq!(pairs.fill(&req), &expected[..], "{count} fields");
            assert_eq!(pairs.as_slice().len(), count.max(1));
        }
    }

    #[test]
    fn the_cache_judges_by_the_method_the_origin_may_act_on() {
        let cases = [
            ("GET / HTTP/1.1\r\nHost: a\r\n\r\n", "GET"),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nX-HTTP-Method-Override: POST\r\n\r\n",
                "POST",
            ),
            (
                "HEAD / HTTP/1.1\r\nHost: a\r\nX-Method-Override: DELETE\r\n\r\n",
                "DELETE",
            ),
            (
                "POST / HTTP/1.1\r\nHost: a\r\nX-HTTP-Method: GET\r\n\r\n",
                "POST",
            ),
        ];
        for (head, want) in cases {
            assert_eq!(request(head.as_bytes()).cache_method(), want, "{head}");
        }
    }

    #[test]
    fn forwarded_fields_leave_out_hop_by_hop_and_connection_named_ones() {
        let req = request(
            b"GET / HTTP/1.1\r\nHost: a\r\nAccept-Language: de\r\nKeep-Alive: 5\r\n\
              Connection: accept-language, host\r\nAccept: */*\r\n\r\n",
        );
        let names: Vec<&[u8]> = req.forwarded_fields().map(|(n, _)| n).collect();
        assert_eq!(names, [&b"Host"[..], b"Accept"]);
        let mut pairs = FieldPairs::default();
        assert_eq!(pairs.fill(&req).len(), 2);
    }

    #[test]
    fn method_text_without_and_with_a_check() {
        assert_eq!(
            request(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").method_str(),
            "GET"
        );
        assert_eq!(
            request(b"PURGE / HTTP/1.1\r\nHost: a\r\n\r\n").method_str(),
            "PURGE"
        );
        assert_eq!(
            request(b"BREW / HTTP/1.1\r\nHost: a\r\n\r\n").method_str(),
            "BREW"
        );
        // Methods are case-sensitive: `get` is another method, kept as sent.
        assert_eq!(
            request(b"get / HTTP/1.1\r\nHost: a\r\n\r\n").method_str(),
            "get"
        );
    }

    #[test]
    fn hosts_lose_port_and_trailing_dot() {
        assert_eq!(normalized_host(b"admin.example.:443"), b"admin.example");
        assert_eq!(normalized_host(b"admin.example."), b"admin.example");
        assert_eq!(normalized_host(b"[::1]:80"), b"[::1]");
    }

    #[test]
    fn ports_are_stripped_from_hosts() {
        assert_eq!(strip_port(b"example.com:8443"), b"example.com");
        assert_eq!(strip_port(b"example.com"), b"example.com");
        assert_eq!(strip_port(b"[::1]:443"), b"[::1]");
        assert_eq!(strip_port(b"[::1]"), b"[::1]");
        assert_eq!(strip_port(b""), b"");
    }

    #[test]
    fn a_request_owns_only_its_head() {
        let buf = b"GET /a?b HTTP/1.1\r\nHost: Example.com.:8443\r\n\r\nGET /next HTTP/1.1\r\n";
        let (head, len) = http1::parse_request(buf, &http1::Limits::default())
            .unwrap()
            .unwrap();
        let req = Request::new(head, buf, Scheme::Https);
        assert_eq!(req.bytes().len(), len);
        assert_eq!(req.path(), b"/a?b");
        assert_eq!(RequestView::host(&req), b"Example.com");
        assert_eq!(req.scheme().as_str(), "https");
    }
}
