//! Mapping a decoded header list to a request (RFC 9113 §8.2-8.3): the
//! protocol-neutral view the proxy turns into an exchange. A list that
//! breaks the rules is "malformed" (§8.1.1): the stream is reset with
//! PROTOCOL_ERROR and nothing reaches the application.

use crate::hpack::Field;

/// A request as the application sees it, whatever the protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub method: Vec<u8>,
    /// `:scheme`; absent only for CONNECT.
    pub scheme: Option<Vec<u8>>,
    /// `:authority`, or the Host field when `:authority` is absent.
    pub authority: Option<Vec<u8>>,
    /// `:path`; absent only for CONNECT.
    pub path: Option<Vec<u8>>,
    /// Regular fields in order, with `cookie` crumbs joined into one
    /// field (§8.2.3) placed where the first crumb was.
    pub fields: Vec<Field>,
    /// The `content-length` value, checked against the DATA received.
    pub content_length: Option<u64>,
    /// Fields in the header list as received, what a limit on the number of
    /// header fields counts (`http_header_cnt`): pseudo-headers one each, as
    /// Tempesta counts them over HTTP/2, and the `cookie` crumbs one in all,
    /// as the one Cookie field they are joined into. Browsers send a crumb
    /// per cookie (RFC 9113 §8.2.3); counting each would refuse over HTTP/2
    /// a browser with many cookies that HTTP/1.1 serves.
    pub field_count: usize,
}

impl Request {
    /// The first field named `name` (lowercase).
    pub fn field(&self, name: &[u8]) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .map(|f| &f.value[..])
    }
}

/// Why a header list is malformed.
pub type Malformed = &'static str;

/// Lowercase token characters (RFC 9110 §5.6.2 without A-Z), as a table:
/// this runs for every byte of every field name.
const TOKEN_LOWER: [bool; 256] = {
    let mut t = [false; 256];
    let extra = b"!#$%&'*+-.^_`|~";
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_lowercase() || b.is_ascii_digit();
        i += 1;
    }
    let mut j = 0;
    while j < extra.len() {
        t[extra[j] as usize] = true;
        j += 1;
    }
    t
};

fn is_token_lower(b: u8) -> bool {
    TOKEN_LOWER[b as usize]
}

/// §8.2.1: names are lowercase tokens; values carry no NUL, CR or LF and
/// neither start nor end with whitespace.
pub fn check_field(f: &Field) -> Result<(), Malformed> {
    let name = f.name.strip_prefix(b":").unwrap_or(&f.name);
    if name.is_empty() || !name.iter().all(|&b| is_token_lower(b)) {
        return Err("field name not a lowercase token");
    }
    if f.value.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n') {
        return Err("NUL, CR or LF in a field value");
    }
    let ws = |b: Option<&u8>| matches!(b, Some(b' ' | b'\t'));
    if ws(f.value.first()) || ws(f.value.last()) {
        return Err("field value starts or ends with whitespace");
    }
    Ok(())
}

/// Fields HTTP/2 forbids (§8.2.2): connection-specific ones, and TE
/// with anything but `trailers`.
pub(crate) fn check_regular(f: &Field) -> Result<(), Malformed> {
    match &f.name[..] {
        b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade" => {
            Err("connection-specific field")
        }
        b"te" if f.value != b"trailers" => Err("TE other than trailers"),
        _ => Ok(()),
    }
}

pub(crate) fn parse_content_length(v: &[u8], seen: Option<u64>) -> Result<u64, Malformed> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return Err("content-length is not a number");
    }
    let n = v.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    match seen {
        Some(prev) if prev != n => Err("differing content-length values"),
        _ => Ok(n),
    }
}

#[derive(Default)]
struct Pseudo {
    method: Option<Vec<u8>>,
    scheme: Option<Vec<u8>>,
    authority: Option<Vec<u8>>,
    path: Option<Vec<u8>>,
}

impl Pseudo {
    fn set(&mut self, f: Field) -> Result<(), Malformed> {
        let slot = match &f.name[..] {
            b":method" => &mut self.method,
            b":scheme" => &mut self.scheme,
            b":authority" => &mut self.authority,
            b":path" => &mut self.path,
            _ => return Err("unknown or response pseudo-header"),
        };
        if slot.is_some() {
            return Err("repeated pseudo-header");
        }
        *slot = Some(f.value);
        Ok(())
    }
}

/// Builds a request from a complete header list.
pub fn request_from_fields(list: Vec<Field>) -> Result<Request, Malformed> {
    let received = list.len();
    let mut joined_crumbs = 0;
    let mut pseudo = Pseudo::default();
    let mut fields: Vec<Field> = Vec::with_capacity(list.len());
    let mut cookie_at: Option<usize> = None;
    let mut content_length = None;
    for f in list {
        check_field(&f)?;
        if f.name.first() == Some(&b':') {
            if !fields.is_empty() || cookie_at.is_some() {
                return Err("pseudo-header after a regular field");
            }
            pseudo.set(f)?;
            continue;
        }
        check_regular(&f)?;
        if f.name == b"content-length" {
            content_length = Some(parse_content_length(&f.value, content_length)?);
        }
        if f.name == b"cookie" {
            if let Some(i) = cookie_at {
                fields[i].value.extend_from_slice(b"; ");
                fields[i].value.extend_from_slice(&f.value);
                joined_crumbs += 1;
                continue;
            }
            cookie_at = Some(fields.len());
        }
        fields.push(f);
    }
    let mut request = finish(pseudo, fields, content_length)?;
    request.field_count = received - joined_crumbs;
    Ok(request)
}

fn finish(
    p: Pseudo,
    fields: Vec<Field>,
    content_length: Option<u64>,
) -> Result<Request, Malformed> {
    let method = p.method.ok_or("missing :method")?;
    if method.is_empty() {
        return Err("empty :method");
    }
    let host = fields
        .iter()
        .find(|f| f.name == b"host")
        .map(|f| f.value.clone());
    if let (Some(a), Some(h)) = (&p.authority, &host) {
        if a != h {
            return Err("host differs from :authority");
        }
    }
    if method == b"CONNECT" {
        if p.scheme.is_some() || p.path.is_some() || p.authority.is_none() {
            return Err("CONNECT needs :authority only");
        }
    } else {
        let path = p.path.as_deref().ok_or("missing :path")?;
        if !matches!(p.scheme.as_deref(), Some(s) if !s.is_empty()) {
            return Err("missing :scheme");
        }
        let asterisk_ok = path == b"*" && method == b"OPTIONS";
        if path.first() != Some(&b'/') && !asterisk_ok {
            return Err(":path neither absolute nor * with OPTIONS");
        }
    }
    Ok(Request {
        method,
        scheme: p.scheme,
        authority: p.authority.or(host),
        path: p.path,
        fields,
        content_length,
        field_count: 0,
    })
}

/// Checks a trailer section (§8.1): no pseudo-headers, same field rules.
pub fn check_trailers(list: &[Field]) -> Result<(), Malformed> {
    for f in list {
        if f.name.first() == Some(&b':') {
            return Err("pseudo-header in trailers");
        }
        check_field(f)?;
        check_regular(f)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(pairs: &[(&str, &str)]) -> Vec<Field> {
        pairs
            .iter()
            .map(|(n, v)| Field::new(n.as_bytes(), v.as_bytes()))
            .collect()
    }

    fn base() -> Vec<(&'static str, &'static str)> {
        vec![
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", "a.test"),
            (":path", "/x"),
        ]
    }

    #[test]
    fn valid_request_with_cookies_joined() {
        let mut l = base();
        l.extend([
            ("cookie", "a=1"),
            ("accept", "*/*"),
            ("cookie", "b=2"),
            ("content-length", "0"),
        ]);
        let r = request_from_fields(list(&l)).unwrap();
        assert_eq!(r.method, b"GET");
        assert_eq!(r.authority.as_deref(), Some(&b"a.test"[..]));
        assert_eq!(r.field(b"cookie"), Some(&b"a=1; b=2"[..]));
        assert_eq!(r.fields.len(), 3);
        assert_eq!(r.content_length, Some(0));
        // Four pseudo-headers, the two crumbs as one Cookie, two fields.
        assert_eq!(r.field_count, 7);
    }

    /// Field lists no request may have, each with what is wrong with it.
    const MALFORMED: &[(&str, &[(&str, &str)])] = &[
        (
            "no :path",
            &[
                (":method", "GET"),
                (":scheme", "https"),
                (":authority", "a"),
            ],
        ),
        (
            "no :scheme",
            &[(":method", "GET"), (":path", "/"), (":authority", "a")],
        ),
        ("no :method", &[(":scheme", "https"), (":path", "/")]),
        (
            "empty :path",
            &[(":method", "GET"), (":scheme", "https"), (":path", "")],
        ),
        (
            "repeated :method",
            &[
                (":method", "GET"),
                (":method", "GET"),
                (":scheme", "h"),
                (":path", "/"),
            ],
        ),
        (
            "response pseudo-header in a request",
            &[
                (":method", "GET"),
                (":scheme", "h"),
                (":path", "/"),
                (":status", "200"),
            ],
        ),
        (
            "unknown pseudo-header",
            &[
                (":method", "GET"),
                (":scheme", "h"),
                (":path", "/"),
                (":foo", "1"),
            ],
        ),
        (
            "pseudo-header after a regular field",
            &[
                (":method", "GET"),
                (":scheme", "h"),
                ("a", "1"),
                (":path", "/"),
            ],
        ),
        (
            "upper-case field name",
            &[
                (":method", "GET"),
                (":scheme", "h"),
                (":path", "/"),
                ("Upper", "1"),
            ],
        ),
        (
            "connection-specific field",
            &[
                (":method", "GET"),
                (":scheme", "h"),
                (":path", "/"),
                ("connection", "close"),
            ],
        ),
        (
            "TE other than trailers",
            &[
                (":method", "GET"),
                (":scheme", "h"),
                (":path", "/"),
                ("te", "gzip"),
            ],
        ),
        (
            "value with leading blank",
            &[
                (":method", "GET"),
                (":scheme", "h"),
                (":path", "/"),
                ("x", " v"),
            ],
        ),
        (
            "Content-Length not a number",
            &[
                (":method", "GET"),
                (":scheme", "h"),
                (":path", "/"),
                ("content-length", "1x"),
            ],
        ),
        (
            "conflicting Content-Lengths",
            &[
                (":method", "GET"),
                (":scheme", "h"),
                (":path", "/"),
                ("content-length", "1"),
                ("content-length", "2"),
            ],
        ),
        (
            "Host unlike :authority",
            &[
                (":method", "GET"),
                (":scheme", "h"),
                (":authority", "a"),
                (":path", "/"),
                ("host", "b"),
            ],
        ),
        (
            "asterisk path for GET",
            &[(":method", "GET"), (":scheme", "h"), (":path", "*")],
        ),
        (
            "CONNECT with :path",
            &[
                (":method", "CONNECT"),
                (":authority", "a:1"),
                (":path", "/"),
            ],
        ),
    ];

    #[test]
    fn malformed_lists() {
        for (why, fields) in MALFORMED {
            assert!(
                request_from_fields(list(fields)).is_err(),
                "{why}: {fields:?}"
            );
        }
    }

    #[test]
    fn options_asterisk_connect_and_host_fallback() {
        let r = request_from_fields(list(&[
            (":method", "OPTIONS"),
            (":scheme", "h"),
            (":path", "*"),
            ("host", "h.test"),
        ]));
        assert_eq!(r.unwrap().authority.as_deref(), Some(&b"h.test"[..]));
        let c =
            request_from_fields(list(&[(":method", "CONNECT"), (":authority", "a:443")])).unwrap();
        assert!(c.path.is_none());
        assert!(request_from_fields(list(&[
            (":method", "GET"),
            (":scheme", "h"),
            (":path", "/"),
            ("te", "trailers")
        ]))
        .is_ok());
    }

    #[test]
    fn trailers_refuse_pseudo_headers() {
        assert!(check_trailers(&list(&[("x-sum", "1")])).is_ok());
        assert!(check_trailers(&list(&[(":path", "/")])).is_err());
        assert!(check_trailers(&list(&[("transfer-encoding", "chunked")])).is_err());
    }
}
