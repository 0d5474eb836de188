//! Mapping a decoded field section to a request (RFC 9114 §4.3): the same neutral
//! `h2::Request` the HTTP/2 codec gives, built by the same function
//! (`h2::request_from_fields`), because HTTP/3's rules are HTTP/2's: the pseudo-headers
//! `:method :scheme :authority :path` once each and before the fields, CONNECT with
//! `:authority` only, connection-specific fields and TE other than `trailers` malformed
//! (§4.2), names lowercase tokens (§4.2: uppercase is malformed), `cookie` crumbs joined
//! (§4.2.1), Content-Length values agreeing. One request gets one verdict whichever of the
//! two protocols carried it. §4.3.1 adds what is checked here: with `http` or `https`, an
//! authority (`:authority` or Host) is required and not empty.
//!
//! A malformed request is a stream error H3_MESSAGE_ERROR (§4.1.2).

use h2::{Field, Request};

/// Why a field section is not a request (as h2's).
pub type Malformed = &'static str;

/// Builds a request from a complete field section.
pub fn request_from_fields(list: Vec<Field>) -> Result<Request, Malformed> {
    let request = h2::request_from_fields(list)?;
    let web = matches!(request.scheme.as_deref(), Some(b"http" | b"https"));
    if web && request.authority.as_deref().is_none_or(<[u8]>::is_empty) {
        return Err("http or https without an authority");
    }
    if request.field(b"host").is_some_and(<[u8]>::is_empty) {
        return Err("empty host");
    }
    Ok(request)
}

/// Checks a trailer section: no pseudo-headers, the field rules of a head (§4.1).
pub fn check_trailers(list: &[Field]) -> Result<(), Malformed> {
    h2::check_trailers(list)
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

    const GET: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "a.test"),
        (":path", "/x"),
    ];

    /// §4.3.1 and §4.2.1: a request, its cookie crumbs joined.
    #[test]
    fn rfc9114_4_3_1_request_with_cookie_crumbs_joined() {
        let mut l = GET.to_vec();
        l.extend([
            ("cookie", "a=1"),
            ("cookie", "b=2"),
            ("content-length", "3"),
        ]);
        let r = request_from_fields(list(&l)).unwrap();
        assert_eq!(r.path.as_deref(), Some(&b"/x"[..]));
        assert_eq!(r.field(b"cookie"), Some(&b"a=1; b=2"[..]));
        assert_eq!(r.content_length, Some(3));
    }

    /// §4.3.1: https needs an authority; §4.2: uppercase names and connection-specific
    /// fields are malformed; CONNECT takes :authority only (§4.4).
    #[test]
    fn rfc9114_4_2_and_4_3_malformed_requests() {
        let cases: &[(&str, &[(&str, &str)])] = &[
            (
                "no authority",
                &[(":method", "GET"), (":scheme", "https"), (":path", "/")],
            ),
            (
                "empty host",
                &[
                    (":method", "GET"),
                    (":scheme", "https"),
                    (":path", "/"),
                    ("host", ""),
                ],
            ),
            (
                "uppercase",
                &[GET[0], GET[1], GET[2], GET[3], ("X-Up", "1")],
            ),
            (
                "connection",
                &[GET[0], GET[1], GET[2], GET[3], ("connection", "close")],
            ),
            (
                "keep-alive",
                &[GET[0], GET[1], GET[2], GET[3], ("keep-alive", "1")],
            ),
            (
                "transfer-encoding",
                &[
                    GET[0],
                    GET[1],
                    GET[2],
                    GET[3],
                    ("transfer-encoding", "chunked"),
                ],
            ),
            (
                "upgrade",
                &[GET[0], GET[1], GET[2], GET[3], ("upgrade", "h2c")],
            ),
            ("te gzip", &[GET[0], GET[1], GET[2], GET[3], ("te", "gzip")]),
            (
                "connect with path",
                &[
                    (":method", "CONNECT"),
                    (":authority", "a:443"),
                    (":path", "/"),
                ],
            ),
            ("connect without authority", &[(":method", "CONNECT")]),
            (
                "pseudo after field",
                &[GET[0], GET[1], ("a", "1"), GET[2], GET[3]],
            ),
            (
                "protocol pseudo",
                &[GET[0], GET[1], GET[2], GET[3], (":protocol", "websocket")],
            ),
        ];
        for (why, fields) in cases {
            assert!(request_from_fields(list(fields)).is_err(), "{why}");
        }
        let connect = request_from_fields(list(&[(":method", "CONNECT"), (":authority", "a:443")]));
        assert!(connect.unwrap().path.is_none());
    }

    #[test]
    fn rfc9114_4_1_trailers_take_no_pseudo_headers() {
        assert!(check_trailers(&list(&[("x-sum", "1")])).is_ok());
        assert!(check_trailers(&list(&[(":status", "200")])).is_err());
    }
}
