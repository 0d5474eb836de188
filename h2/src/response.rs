//! Mapping a decoded header list from an origin to a response head (RFC
//! 9113 §8.3.2), as strict as `request_from_fields` is for requests: one
//! `:status` of three digits and no other pseudo-header, pseudo-headers
//! first, field names and values as §8.2.1 wants them, no
//! connection-specific field, one `content-length` value. A head that
//! breaks a rule is malformed: the stream is reset with PROTOCOL_ERROR.

use crate::hpack::Field;
use crate::request::{check_field, check_regular, parse_content_length, Malformed};

/// A response head as the application sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Regular fields in order.
    pub fields: Vec<Field>,
    /// The `content-length` value, checked against the DATA received
    /// (unless the request was HEAD or the status is 304).
    pub content_length: Option<u64>,
}

impl Response {
    /// The first field named `name` (lowercase).
    pub fn field(&self, name: &[u8]) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .map(|f| &f.value[..])
    }

    /// A 1xx head: an interim response, the final one is still to come.
    pub fn is_interim(&self) -> bool {
        (100..=199).contains(&self.status)
    }
}

fn parse_status(v: &[u8]) -> Result<u16, Malformed> {
    if v.len() != 3 || !v.iter().all(u8::is_ascii_digit) || v[0] == b'0' {
        return Err(":status is not three digits");
    }
    Ok(v.iter().fold(0u16, |n, &d| n * 10 + u16::from(d - b'0')))
}

/// Builds a response head from a complete header list.
pub fn response_from_fields(list: Vec<Field>) -> Result<Response, Malformed> {
    let mut status = None;
    let mut fields: Vec<Field> = Vec::with_capacity(list.len());
    let mut content_length = None;
    for f in list {
        check_field(&f)?;
        if f.name.first() == Some(&b':') {
            if !fields.is_empty() {
                return Err("pseudo-header after a regular field");
            }
            if f.name != b":status" {
                return Err("request or unknown pseudo-header in a response");
            }
            if status.is_some() {
                return Err("repeated :status");
            }
            status = Some(parse_status(&f.value)?);
            continue;
        }
        check_regular(&f)?;
        if f.name == b"content-length" {
            content_length = Some(parse_content_length(&f.value, content_length)?);
        }
        fields.push(f);
    }
    let status = status.ok_or("missing :status")?;
    if status == 101 {
        // §8.6: HTTP/2 has no protocol switch.
        return Err("101 in HTTP/2");
    }
    Ok(Response {
        status,
        fields,
        content_length,
    })
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

    #[test]
    fn valid_head() {
        let r = response_from_fields(list(&[
            (":status", "200"),
            ("content-length", "5"),
            ("x-a", "b"),
        ]))
        .unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.content_length, Some(5));
        assert_eq!(r.field(b"x-a"), Some(&b"b"[..]));
        assert!(!r.is_interim());
        let early = response_from_fields(list(&[(":status", "103"), ("link", "</a>")])).unwrap();
        assert!(early.is_interim());
    }

    #[test]
    fn malformed_heads() {
        let cases: &[&[(&str, &str)]] = &[
            &[],
            &[("x", "y")],
            &[(":status", "200"), (":status", "200")],
            &[(":status", "20")],
            &[(":status", "2000")],
            &[(":status", "abc")],
            &[(":status", "099")],
            &[(":status", "101")],
            &[(":status", "200"), (":path", "/")],
            &[(":method", "GET"), (":status", "200")],
            &[("x", "y"), (":status", "200")],
            &[(":status", "200"), ("connection", "close")],
            &[(":status", "200"), ("transfer-encoding", "chunked")],
            &[(":status", "200"), ("keep-alive", "1")],
            &[(":status", "200"), ("upgrade", "h2c")],
            &[(":status", "200"), ("Upper", "x")],
            &[(":status", "200"), ("x", "a\r\nb")],
            &[
                (":status", "200"),
                ("content-length", "1"),
                ("content-length", "2"),
            ],
            &[(":status", "200"), ("content-length", "-1")],
        ];
        for c in cases {
            assert!(response_from_fields(list(c)).is_err(), "{c:?}");
        }
    }
}
