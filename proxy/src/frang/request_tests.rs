//! Tests of the request-level checks, each with Tempesta's semantics.

use config::{FrangHttp, Method};
use http1::Version;

use super::request::is_ip_literal;
use super::{check_request, check_trailers, RequestFacts};

fn host(facts: RequestFacts<'_>) -> RequestFacts<'_> {
    RequestFacts {
        host_header: Some(b"example.com"),
        ..facts
    }
}

fn limit_of(limits: &FrangHttp, facts: &RequestFacts<'_>) -> Option<&'static str> {
    check_request(limits, facts).err().map(|v| v.limit)
}

#[test]
fn defaults_pass_an_ordinary_request() {
    let facts = host(RequestFacts::new(b"GET", b"/index.html"));
    assert_eq!(limit_of(&FrangHttp::default(), &facts), None);
}

#[test]
fn method_not_allowed() {
    let limits = FrangHttp::default(); // GET POST HEAD
    assert_eq!(
        limit_of(&limits, &host(RequestFacts::new(b"HEAD", b"/"))),
        None
    );
    let v = check_request(&limits, &host(RequestFacts::new(b"PUT", b"/"))).unwrap_err();
    assert_eq!((v.limit, v.status), ("http_methods", 403));
    // Methods are case-sensitive tokens.
    assert_eq!(
        limit_of(&limits, &host(RequestFacts::new(b"get", b"/"))),
        Some("http_methods")
    );
    let any = FrangHttp {
        http_methods: Vec::new(),
        ..FrangHttp::default()
    };
    assert_eq!(limit_of(&any, &host(RequestFacts::new(b"PUT", b"/"))), None);
}

#[test]
fn uri_too_long() {
    let limits = FrangHttp {
        http_uri_len: Some(5),
        ..FrangHttp::default()
    };
    assert_eq!(
        limit_of(&limits, &host(RequestFacts::new(b"GET", b"/abcd"))),
        None
    );
    assert_eq!(
        limit_of(&limits, &host(RequestFacts::new(b"GET", b"/abcde"))),
        Some("http_uri_len")
    );
    // Only the path counts in an absolute-form target.
    let absolute = RequestFacts {
        uri_host: Some(b"example.com"),
        ..host(RequestFacts::new(b"GET", b"http://example.com/abcd"))
    };
    assert_eq!(limit_of(&limits, &absolute), None);
}

#[test]
fn missing_host_with_strict_checking() {
    let limits = FrangHttp::default();
    let v = check_request(&limits, &RequestFacts::new(b"GET", b"/")).unwrap_err();
    assert_eq!((v.limit, v.status), ("http_strict_host_checking", 400));
    let lax = FrangHttp {
        http_strict_host_checking: false,
        ..FrangHttp::default()
    };
    assert_eq!(limit_of(&lax, &RequestFacts::new(b"GET", b"/")), None);
    // HTTP/1.0 needs no Host, and must not carry one under strict checking.
    let old = RequestFacts {
        version: Version::Http10,
        ..RequestFacts::new(b"GET", b"/")
    };
    assert_eq!(limit_of(&limits, &old), None);
    assert_eq!(
        limit_of(&limits, &host(old)),
        Some("http_strict_host_checking")
    );
    assert_eq!(limit_of(&lax, &host(old)), None);
}

#[test]
fn absolute_uri_host_must_match_host_header() {
    let limits = FrangHttp::default();
    let base = host(RequestFacts::new(b"GET", b"http://example.com/"));
    let same = RequestFacts {
        uri_host: Some(b"EXAMPLE.com:80"),
        ..base
    };
    assert_eq!(limit_of(&limits, &same), None);
    let other = RequestFacts {
        uri_host: Some(b"evil.com"),
        ..base
    };
    assert_eq!(limit_of(&limits, &other), Some("http_strict_host_checking"));
    let other_port = RequestFacts {
        uri_host: Some(b"example.com:8080"),
        ..base
    };
    assert_eq!(
        limit_of(&limits, &other_port),
        Some("http_strict_host_checking")
    );
    let lax = FrangHttp {
        http_strict_host_checking: false,
        ..FrangHttp::default()
    };
    assert_eq!(limit_of(&lax, &other), None);
}

#[test]
fn host_port_ip_and_fronting() {
    let limits = FrangHttp::default();
    let tls = RequestFacts {
        tls: true,
        local_port: Some(443),
        ..host(RequestFacts::new(b"GET", b"/"))
    };
    assert_eq!(limit_of(&limits, &tls), None);
    let explicit = RequestFacts {
        host_header: Some(b"example.com:443"),
        ..tls
    };
    assert_eq!(limit_of(&limits, &explicit), None);
    let wrong_port = RequestFacts {
        local_port: Some(8443),
        ..tls
    };
    assert_eq!(
        limit_of(&limits, &wrong_port),
        Some("http_strict_host_checking")
    );
    for ip_host in [
        &b"127.0.0.1:443"[..],
        b"[::1]:443",
        b"10.0.0.1",
        b"[FE80::1]",
        b"[::ffff:10.0.0.1]:8443",
        b"[2001:DB8::A]:",
    ] {
        let facts = RequestFacts {
            host_header: Some(ip_host),
            local_port: None,
            ..tls
        };
        assert_eq!(
            limit_of(&limits, &facts),
            Some("http_strict_host_checking"),
            "{ip_host:?}"
        );
    }
    for bad in [&b"example.com:99999"[..], b"example.com:8x", b"[::1"] {
        let facts = RequestFacts {
            host_header: Some(bad),
            ..tls
        };
        assert_eq!(
            limit_of(&limits, &facts),
            Some("http_strict_host_checking"),
            "{bad:?}"
        );
    }
    let fronted = RequestFacts {
        sni_vhost_differs: true,
        ..tls
    };
    assert_eq!(
        limit_of(&limits, &fronted),
        Some("http_strict_host_checking")
    );
}

#[test]
fn content_type_required_for_post() {
    let limits = FrangHttp {
        http_ct_required: true,
        ..FrangHttp::default()
    };
    let post = host(RequestFacts::new(b"POST", b"/form"));
    assert_eq!(limit_of(&limits, &post), Some("http_ct_required"));
    let with_ct = RequestFacts {
        content_type: Some(b"application/json"),
        ..post
    };
    assert_eq!(limit_of(&limits, &with_ct), None);
    // An empty field is there, as Tempesta sees it: not missing.
    let empty = RequestFacts {
        content_type: Some(b""),
        ..post
    };
    assert_eq!(limit_of(&limits, &empty), None);
    // Only POST is checked.
    assert_eq!(
        limit_of(&limits, &host(RequestFacts::new(b"GET", b"/"))),
        None
    );
}

#[test]
fn content_type_not_in_allowed_values() {
    let limits = FrangHttp {
        http_ct_vals: vec!["text/plain".into(), "text/html".into()],
        ..FrangHttp::default()
    };
    let post = |ct: &'static [u8]| RequestFacts {
        content_type: Some(ct),
        ..host(RequestFacts::new(b"POST", b"/"))
    };
    assert_eq!(limit_of(&limits, &post(b"text/html")), None);
    // Prefix, case-insensitive: parameters pass.
    assert_eq!(limit_of(&limits, &post(b"Text/Plain; charset=utf-8")), None);
    assert_eq!(
        limit_of(&limits, &post(b"application/json")),
        Some("http_ct_vals")
    );
    // A list of values implies the header is required for POST.
    let none = host(RequestFacts::new(b"POST", b"/"));
    assert_eq!(limit_of(&limits, &none), Some("http_ct_required"));
}

#[test]
fn method_override_refused_unless_allowed() {
    let limits = FrangHttp::default();
    let overridden = RequestFacts {
        method_override: Some(b"GET"),
        ..host(RequestFacts::new(b"POST", b"/"))
    };
    assert_eq!(
        limit_of(&limits, &overridden),
        Some("http_method_override_allowed")
    );
    let allowed = FrangHttp {
        http_method_override_allowed: true,
        ..FrangHttp::default()
    };
    assert_eq!(limit_of(&allowed, &overridden), None);
    // The overriding method must itself be allowed.
    let to_delete = RequestFacts {
        method_override: Some(b"DELETE"),
        ..overridden
    };
    assert_eq!(limit_of(&allowed, &to_delete), Some("http_methods"));
    let with_delete = FrangHttp {
        http_methods: vec![Method::Post, Method::Delete],
        ..allowed
    };
    assert_eq!(limit_of(&with_delete, &to_delete), None);
    // Override fields that disagree: the method list cannot vouch for the one obeyed.
    let conflicting = RequestFacts {
        method_override_conflict: true,
        ..to_delete
    };
    assert_eq!(limit_of(&with_delete, &conflicting), Some("http_methods"));
    // `http_methods unknown;` alone restricts too: an unknown method named by one field
    // must not carry a DELETE named by another past the check.
    let unknown_only = FrangHttp {
        http_method_override_allowed: true,
        http_methods_unknown: true,
        ..FrangHttp::default()
    };
    let to_unknown = RequestFacts {
        method_override: Some(b"FOO"),
        method_override_conflict: true,
        ..conflicting
    };
    assert_eq!(limit_of(&unknown_only, &to_unknown), Some("http_methods"));
}

#[test]
fn a_safe_method_may_not_hide_an_unsafe_one() {
    let limits = FrangHttp {
        http_method_override_allowed: true,
        http_methods: vec![Method::Get, Method::Post, Method::Head],
        ..FrangHttp::default()
    };
    let get_as_post = RequestFacts {
        method_override: Some(b"POST"),
        ..host(RequestFacts::new(b"GET", b"/"))
    };
    let refused = check_request(&limits, &get_as_post).expect_err("GET hiding POST");
    assert_eq!((refused.limit, refused.status), ("method_override", 400));
    // Unsafe to safe, and safe to safe, pass.
    let post_as_get = RequestFacts {
        method_override: Some(b"GET"),
        ..host(RequestFacts::new(b"POST", b"/"))
    };
    assert_eq!(limit_of(&limits, &post_as_get), None);
    let head_as_get = RequestFacts {
        method_override: Some(b"GET"),
        ..host(RequestFacts::new(b"HEAD", b"/"))
    };
    assert_eq!(limit_of(&limits, &head_as_get), None);
}

#[test]
fn declared_body_too_long() {
    let limits = FrangHttp {
        http_body_len: Some(100),
        ..FrangHttp::default()
    };
    let post = |len| RequestFacts {
        content_length: Some(len),
        has_body: true,
        ..host(RequestFacts::new(b"POST", b"/"))
    };
    assert_eq!(limit_of(&limits, &post(100)), None);
    assert_eq!(limit_of(&limits, &post(101)), Some("http_body_len"));
    assert_eq!(limit_of(&limits, &post(u64::MAX)), Some("http_body_len"));
}

#[test]
fn trailer_split() {
    let head: [&[u8]; 2] = [b"Host", b"Content-Type"];
    let limits = FrangHttp::default();
    let v = check_trailers(&limits, head.iter().copied(), [&b"content-type"[..]]).unwrap_err();
    assert_eq!(v.limit, "http_trailer_split_allowed");
    assert!(check_trailers(&limits, head.iter().copied(), [&b"X-Checksum"[..]]).is_ok());
    let allowed = FrangHttp {
        http_trailer_split_allowed: true,
        ..FrangHttp::default()
    };
    assert!(check_trailers(&allowed, head.iter().copied(), [&b"Content-Type"[..]]).is_ok());
}

#[test]
fn ip_literals_are_told_from_host_names() {
    for ip in [
        &b"127.0.0.1"[..],
        b"0.0.0.0",
        b"::1",
        b"::",
        b"FE80::1",
        b"fe80::aB:1",
        b"::ffff:1.2.3.4",
        b"2001:db8:0:0:0:0:0:1",
    ] {
        assert!(is_ip_literal(ip), "{ip:?}");
    }
    // Names made only of address bytes, and near-addresses, are still names: what the byte
    // check lets through, the parser decides.
    for name in [
        &b""[..],
        b"cafe.be",
        b"dead.beef",
        b"1.2.3",
        b"1.2.3.4.5",
        b"256.1.1.1",
        b"01.2.3.4",
        b"0x7f.0.0.1",
        b"1.2.3.4 ",
        b"example.com",
        b":::",
        b"fe80::1%eth0",
        b"\xff\xfe",
        "\u{0661}.2.3.4".as_bytes(),
    ] {
        assert!(!is_ip_literal(name), "{name:?}");
    }
}

#[test]
fn unknown_in_http_methods_passes_methods_outside_tempestas_list() {
    let get_and_unknown = FrangHttp {
        http_methods: vec![Method::Get],
        http_methods_unknown: true,
        ..FrangHttp::default()
    };
    let of = |m: &'static [u8]| host(RequestFacts::new(m, b"/"));
    assert_eq!(limit_of(&get_and_unknown, &of(b"FOO")), None);
    assert_eq!(limit_of(&get_and_unknown, &of(b"CONNECT")), None);
    assert_eq!(limit_of(&get_and_unknown, &of(b"GET")), None);
    // A listed method stays refused when not listed, whatever `unknown` says.
    assert_eq!(
        limit_of(&get_and_unknown, &of(b"PUT")),
        Some("http_methods")
    );
    let only_unknown = FrangHttp {
        http_methods: Vec::new(),
        ..get_and_unknown.clone()
    };
    assert_eq!(limit_of(&only_unknown, &of(b"GET")), Some("http_methods"));
    assert_eq!(limit_of(&only_unknown, &of(b"BREW")), None);
    // Without `unknown`, the default list refuses other tokens.
    assert_eq!(
        limit_of(&FrangHttp::default(), &of(b"FOO")),
        Some("http_methods")
    );
}
