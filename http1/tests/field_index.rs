//! The fields a request's path reads on every request (Host, Content-Type, a method
//! override) are found during the parse: each accessor must answer exactly what a scan of
//! the fields by name would, whatever the case, order, duplication or form of the fields.

use http1::{parse_request, Limits, Method, ParseError, METHOD_OVERRIDE_FIELDS};

fn head(buf: &[u8]) -> http1::RequestHead {
    match parse_request(buf, &Limits::default()) {
        Ok(Some((head, _))) => head,
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
    }
}

fn refused(buf: &[u8]) -> ParseError {
    parse_request(buf, &Limits::default())
        .err()
        .unwrap_or_else(|| panic!("accepted: {:?}", String::from_utf8_lossy(buf)))
}

/// The first field named `name`, by a scan: what the index replaces.
fn scanned<'b>(head: &http1::RequestHead, buf: &'b [u8], name: &str) -> Option<&'b [u8]> {
    head.header(buf, name)
}

#[test]
fn host_field_whatever_the_case_and_the_target_form() {
    for buf in [
        &b"GET / HTTP/1.1\r\nhOsT: Example.COM:8443\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nX-A: 1\r\nHOST: Example.COM:8443\r\nX-B: 2\r\n\r\n",
    ] {
        let h = head(buf);
        assert_eq!(h.host_field(buf), Some(&b"Example.COM:8443"[..]));
        assert_eq!(h.host_field(buf), scanned(&h, buf, "host"));
    }
    // Absolute form: the request's host is the target's, the Host field stays what it was
    // (strict host checking compares the two).
    let buf = b"GET http://a.example/x HTTP/1.1\r\nHost: b.example\r\n\r\n";
    let h = head(buf);
    assert_eq!(h.host(buf), Some(&b"a.example"[..]));
    assert_eq!(h.host_field(buf), Some(&b"b.example"[..]));
    // HTTP/1.0 may come without one.
    let buf = b"GET / HTTP/1.0\r\n\r\n";
    assert_eq!(head(buf).host_field(buf), None);
}

#[test]
fn host_ip_literal_forms_are_kept_as_sent() {
    for host in [
        &b"127.0.0.1"[..],
        b"127.0.0.1:8080",
        b"[::1]",
        b"[::1]:443",
        b"[FE80::1]",
        b"[::ffff:10.0.0.1]:8443",
    ] {
        let mut buf = b"GET / HTTP/1.1\r\nHost: ".to_vec();
        buf.extend_from_slice(host);
        buf.extend_from_slice(b"\r\n\r\n");
        assert_eq!(head(&buf).host_field(&buf), Some(host));
    }
}

#[test]
fn a_second_host_or_a_bad_one_is_refused_as_before() {
    assert_eq!(
        refused(b"GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n"),
        ParseError::DuplicateHost
    );
    assert_eq!(
        refused(b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\nHOST: b\r\n\r\n"),
        ParseError::DuplicateHost
    );
    assert_eq!(
        refused(b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n"),
        ParseError::InvalidHost
    );
}

#[test]
fn obs_fold_is_refused_before_any_field_is_indexed() {
    for buf in [
        &b"GET / HTTP/1.1\r\nHost: a\r\nContent-Type: text/plain\r\n continued\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: a\r\nX-HTTP-Method-Override: PUT\r\n\tDELETE\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
    ] {
        assert_eq!(refused(buf), ParseError::ObsFold, "{buf:?}");
    }
}

#[test]
fn content_type_is_the_first_field_of_that_name() {
    let buf = b"POST / HTTP/1.1\r\nHost: a\r\ncontent-TYPE: text/plain\r\nContent-Type: a/b\r\nContent-Length: 0\r\n\r\n";
    let h = head(buf);
    assert_eq!(h.method(), Method::Post);
    assert_eq!(h.content_type(buf), Some(&b"text/plain"[..]));
    assert_eq!(h.content_type(buf), scanned(&h, buf, "content-type"));
    let buf = b"GET / HTTP/1.1\r\nHost: a\r\nContent-Typo: x\r\n\r\n";
    assert_eq!(head(buf).content_type(buf), None);
}

#[test]
fn method_override_prefers_by_name_then_by_order() {
    let cases: [(&[u8], Option<&[u8]>); 7] = [
        (b"", None),
        (b"X-Method-Override: A\r\n", Some(b"A")),
        (b"x-http-method: B\r\nX-Method-Override: A\r\n", Some(b"B")),
        (
            b"X-Method-Override: A\r\nX-HTTP-Method: B\r\nX-HTTP-METHOD-OVERRIDE: C\r\n",
            Some(b"C"),
        ),
        (
            b"X-HTTP-Method-Override: C1\r\nX-HTTP-Method-Override: C2\r\n",
            Some(b"C1"),
        ),
        // Near names of the same lengths are other fields.
        (b"X-HTTP-Methox: B\r\nX-Method-Overrida: A\r\n", None),
        (b"Transfer-Encodin: x\r\nX-HTTP-Method-Overrid: x\r\n", None),
    ];
    for (fields, want) in cases {
        let mut buf = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
        buf.extend_from_slice(fields);
        buf.extend_from_slice(b"\r\n");
        let h = head(&buf);
        assert_eq!(
            h.method_override(&buf),
            want,
            "{:?}",
            String::from_utf8_lossy(fields)
        );
        // The same as taking the first present name of the list by a scan.
        let by_scan = METHOD_OVERRIDE_FIELDS
            .iter()
            .find_map(|name| scanned(&h, &buf, name));
        assert_eq!(h.method_override(&buf), by_scan);
    }
}

/// Override fields that name different methods (under several names, or one name repeated)
/// are flagged: an origin may obey any of them. The same method repeated is not a conflict.
#[test]
fn method_override_fields_naming_different_methods_conflict() {
    let cases: [(&[u8], bool); 7] = [
        (b"", false),
        (b"X-HTTP-Method-Override: GET\r\n", false),
        (
            b"X-HTTP-Method-Override: GET\r\nX-HTTP-Method: GET\r\n",
            false,
        ),
        (
            b"X-HTTP-Method-Override: GET\r\nX-HTTP-Method: DELETE\r\n",
            true,
        ),
        (
            b"X-Method-Override: DELETE\r\nX-HTTP-Method-Override: GET\r\n",
            true,
        ),
        (
            b"X-HTTP-Method-Override: GET\r\nX-HTTP-Method-Override: PUT\r\n",
            true,
        ),
        (
            b"X-HTTP-Method: GET\r\nX-HTTP-Method: GET\r\nX-Method-Override: PUT\r\n",
            true,
        ),
    ];
    for (fields, want) in cases {
        let mut buf = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
        buf.extend_from_slice(fields);
        buf.extend_from_slice(b"\r\n");
        let h = head(&buf);
        assert_eq!(
            h.method_override_conflict(),
            want,
            "{:?}",
            String::from_utf8_lossy(fields)
        );
    }
}

#[test]
fn the_index_survives_many_fields() {
    let mut buf = b"POST / HTTP/1.1\r\n".to_vec();
    for i in 0..60 {
        buf.extend_from_slice(format!("X-F{i}: {i}\r\n").as_bytes());
    }
    buf.extend_from_slice(b"Content-Type: late\r\nX-HTTP-Method: M\r\nHost: h\r\n\r\n");
    let h = head(&buf);
    assert_eq!(h.host_field(&buf), Some(&b"h"[..]));
    assert_eq!(h.content_type(&buf), Some(&b"late"[..]));
    assert_eq!(h.method_override(&buf), Some(&b"M"[..]));
}
