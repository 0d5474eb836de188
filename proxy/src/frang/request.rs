//! Request-level frang checks against the limits of the request's
//! location (or vhost): Tempesta's `frang_http_req_process` once the head
//! is parsed, and its trailer check once the body is complete.

use std::net::IpAddr;

use config::FrangHttp;
use http1::Version;

use super::Violation;

/// What the worker extracted from a parsed request head. Build with
/// [`RequestFacts::new`] and struct update syntax.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts<'a> {
    /// The method token as sent (case-sensitive).
    pub method: &'a [u8],
    /// The path and query (Tempesta's `uri_path`); an absolute-form target
    /// is accepted too and its `scheme://authority` is not counted.
    pub uri: &'a [u8],
    pub version: Version,
    /// The Host field's value.
    pub host_header: Option<&'a [u8]>,
    /// The authority of an absolute-form target (`GET http://a.com/ ...`).
    pub uri_host: Option<&'a [u8]>,
    pub content_type: Option<&'a [u8]>,
    /// Informational: `http_ct_required` applies to every POST, with a body
    /// or not, as in Tempesta.
    pub has_body: bool,
    /// Checked against `http_body_len` before the body is read.
    pub content_length: Option<u64>,
    /// The value of the first of [`http1::METHOD_OVERRIDE_FIELDS`] present.
    pub method_override: Option<&'a [u8]>,
    /// Method-override fields disagree: `http_methods` cannot vouch for the
    /// one an origin obeys.
    pub method_override_conflict: bool,
    /// The connection is TLS: a Host without a port means 443, else 80.
    pub tls: bool,
    /// The listener's port; under strict host checking the Host port must
    /// equal it. `None` skips that comparison.
    pub local_port: Option<u16>,
    /// The vhost chosen by SNI differs from the vhost chosen by the Host
    /// (domain fronting); the worker knows both.
    pub sni_vhost_differs: bool,
}

impl<'a> RequestFacts<'a> {
    /// Facts for an HTTP/1.1 request with no headers of interest.
    pub fn new(method: &'a [u8], uri: &'a [u8]) -> RequestFacts<'a> {
        RequestFacts {
            method,
            uri,
            version: Version::Http11,
            host_header: None,
            uri_host: None,
            content_type: None,
            has_body: false,
            content_length: None,
            method_override: None,
            method_override_conflict: false,
            tls: false,
            local_port: None,
            sni_vhost_differs: false,
        }
    }
}

/// Checks a parsed request head against `limits`, in Tempesta's order:
/// method, URI length, Host (strict checking), method override,
/// Content-Type, then the declared body length. On `Err` reply
/// `Violation::status` (403, or 400 for a missing Host), close the
/// connection and call [`super::Frang::on_violation`] for `ip_block`.
pub fn check_request(limits: &FrangHttp, facts: &RequestFacts<'_>) -> Result<(), Violation> {
    if !method_allowed(limits, facts.method) {
        return Err(Violation::block(
            "http_methods",
            format!("method {}", show(facts.method)),
        ));
    }
    let uri_len = path_of(facts.uri).len();
    if let Some(max) = limits.http_uri_len.filter(|&n| n > 0) {
        if u64::try_from(uri_len).unwrap_or(u64::MAX) > u64::from(max) {
            return Err(Violation::exceeded("http_uri_len", uri_len, max));
        }
    }
    if limits.http_strict_host_checking {
        check_host(facts)?;
    }
    if let Some(method) = facts.method_override {
        if !limits.http_method_override_allowed {
            return Err(Violation::block(
                "http_method_override_allowed",
                format!("override to {}", show(method)),
            ));
        }
        if !method_allowed(limits, method) {
            return Err(Violation::block(
                "http_methods",
                format!("overridden method {}", show(method)),
            ));
        }
        // A list restricts (`http_methods unknown;` alone too): the origin may obey any of
        // the fields, so they must agree.
        let restricted = !limits.http_methods.is_empty() || limits.http_methods_unknown;
        if facts.method_override_conflict && restricted {
            return Err(Violation::block(
                "http_methods",
                "method-override fields naming different methods".to_string(),
            ));
        }
        // A safe method must not hide an unsafe one (Tempesta's tfw_http_req_process: 400,
        // "unsafe method override", through its block path): the cache and the rules see
        // the safe one.
        if is_safe(facts.method) && !is_safe(method) {
            return Err(Violation {
                limit: "method_override",
                detail: format!(
                    "unsafe method override: {} to {}",
                    show(facts.method),
                    show(method)
                ),
                status: 400,
            });
        }
    }
    if limits.http_ct_required || !limits.http_ct_vals.is_empty() {
        check_content_type(limits, facts)?;
    }
    if let (Some(len), Some(max)) = (
        facts.content_length,
        limits.http_body_len.filter(|&n| n > 0),
    ) {
        if len > max {
            return Err(Violation::exceeded("http_body_len", len, max));
        }
    }
    Ok(())
}

/// Once a chunked body with trailer fields is complete: unless
/// `http_trailer_split_allowed`, refuse a field that appears both in the
/// head and in the trailer (what the backend reads would depend on
/// whether it looks at trailers).
pub fn check_trailers<'h, 't>(
    limits: &FrangHttp,
    head_names: impl Iterator<Item = &'h [u8]> + Clone,
    trailer_names: impl IntoIterator<Item = &'t [u8]>,
) -> Result<(), Violation> {
    if limits.http_trailer_split_allowed {
        return Ok(());
    }
    for name in trailer_names {
        if head_names
            .clone()
            .any(|head| head.eq_ignore_ascii_case(name))
        {
            return Err(Violation::block(
                "http_trailer_split_allowed",
                format!("{} in both head and trailer", show(name)),
            ));
        }
    }
    Ok(())
}

/// Whether `method` passes `http_methods`: a method of Tempesta's list if listed, any other
/// token if `unknown` is (Tempesta compares method tokens case-sensitively: `get` is unknown).
pub fn method_allowed(limits: &FrangHttp, method: &[u8]) -> bool {
    if limits.http_methods.is_empty() && !limits.http_methods_unknown {
        return true;
    }
    match config::Method::ALL
        .into_iter()
        .find(|m| m.as_str().as_bytes() == method)
    {
        Some(known) => limits.http_methods.contains(&known),
        None => limits.http_methods_unknown,
    }
}

/// Tempesta's safe methods (TFW_HTTP_IS_METH_SAFE): GET, HEAD, OPTIONS, PROPFIND.
fn is_safe(method: &[u8]) -> bool {
    [&b"GET"[..], b"HEAD", b"OPTIONS", b"PROPFIND"]
        .iter()
        .any(|m| m.eq_ignore_ascii_case(method))
}

/// The path and query of a target, without an absolute form's prefix.
fn path_of(target: &[u8]) -> &[u8] {
    let scheme_len = [&b"http://"[..], b"https://"]
        .into_iter()
        .find(|scheme| {
            target
                .get(..scheme.len())
                .is_some_and(|t| t.eq_ignore_ascii_case(scheme))
        })
        .map_or(0, <[u8]>::len);
    if scheme_len == 0 {
        return target;
    }
    let rest = target.get(scheme_len..).unwrap_or(&[]);
    let authority_len = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(rest.len());
    rest.get(authority_len..).unwrap_or(&[])
}

/// `http_strict_host_checking`, as Tempesta's `frang_http_host_check`.
fn check_host(facts: &RequestFacts<'_>) -> Result<(), Violation> {
    const LIMIT: &str = "http_strict_host_checking";
    if facts.version == Version::Http10 {
        // Host routing with an HTTP/1.0 request is suspicious: backends may
        // route it differently.
        if facts.host_header.is_some() || facts.uri_host.is_some() {
            return Err(Violation::block(
                LIMIT,
                "Host in a request prior to HTTP/1.1",
            ));
        }
        return Ok(());
    }
    let Some(header) = facts.host_header else {
        // RFC 9112 §3.2: a server must answer 400 to HTTP/1.1 without Host.
        return Err(Violation {
            status: 400,
            ..Violation::block(LIMIT, "HTTP/1.1 request without Host")
        });
    };
    let default_port = if facts.tls { 443 } else { 80 };
    let invalid = || Violation::block(LIMIT, format!("invalid Host {}", show(header)));
    let (header_name, header_port) = split_authority(header).ok_or_else(invalid)?;
    let host_port = header_port.unwrap_or(default_port);
    let mut name = header_name;
    if let Some(authority) = facts.uri_host {
        let (uri_name, uri_port) = split_authority(authority).ok_or_else(invalid)?;
        if uri_port.unwrap_or(default_port) != host_port {
            return Err(Violation::block(
                LIMIT,
                "port of the absolute URI differs from the Host port",
            ));
        }
        if !uri_name.eq_ignore_ascii_case(header_name) {
            return Err(Violation::block(
                LIMIT,
                "host of the absolute URI differs from Host",
            ));
        }
        name = uri_name;
    }
    if is_ip_literal(name) {
        return Err(Violation::block(
            LIMIT,
            format!("Host is an IP address: {}", show(name)),
        ));
    }
    if let Some(local) = facts.local_port.filter(|&p| p != host_port) {
        return Err(Violation::block(
            LIMIT,
            format!("Host port {host_port} is not the listener's {local}"),
        ));
    }
    if facts.sni_vhost_differs {
        return Err(Violation::block(
            LIMIT,
            "vhost by SNI differs from vhost by Host",
        ));
    }
    Ok(())
}

/// Whether a Host name (brackets already removed) is an IPv4 or IPv6 address. Only hex
/// digits, dots and colons can spell one, so a host name fails that byte check, usually on
/// its first letters, and is never handed to the address parser.
pub(super) fn is_ip_literal(name: &[u8]) -> bool {
    name.iter()
        .all(|&b| b.is_ascii_hexdigit() || b == b'.' || b == b':')
        && std::str::from_utf8(name).is_ok_and(|s| s.parse::<IpAddr>().is_ok())
}

/// Splits `host[:port]` or `[v6]:port` into the name (without brackets)
/// and port. `None` when malformed.
fn split_authority(value: &[u8]) -> Option<(&[u8], Option<u16>)> {
    let value = value.trim_ascii();
    let (name, port) = match value.strip_prefix(b"[") {
        Some(bracketed) => {
            let close = bracketed.iter().position(|&b| b == b']')?;
            let after = bracketed.get(close.checked_add(1)?..)?;
            let port = match after {
                [] => None,
                [b':', port @ ..] => Some(port),
                _ => return None,
            };
            (bracketed.get(..close)?, port)
        }
        None => match value.iter().position(|&b| b == b':') {
            Some(colon) => (
                value.get(..colon)?,
                Some(value.get(colon.checked_add(1)?..)?),
            ),
            None => (value, None),
        },
    };
    let port = match port {
        // `host:` with an empty port means the default (RFC 3986 §3.2.3).
        None | Some([]) => None,
        Some(digits) if digits.iter().all(u8::is_ascii_digit) => {
            Some(std::str::from_utf8(digits).ok()?.parse::<u16>().ok()?)
        }
        Some(_) => return None,
    };
    Some((name, port))
}

/// `http_ct_required` / `http_ct_vals`: POST requests only.
fn check_content_type(limits: &FrangHttp, facts: &RequestFacts<'_>) -> Result<(), Violation> {
    if facts.method != b"POST" {
        return Ok(());
    }
    // An empty `Content-Type:` is present, as Tempesta's TFW_STR_EMPTY sees it (tempesta-test
    // frang/test_http_ct_required.py serves it); only an absent field is missing.
    let Some(value) = facts.content_type.map(<[u8]>::trim_ascii) else {
        return Err(Violation::block(
            "http_ct_required",
            "POST without Content-Type",
        ));
    };
    // A prefix match so that parameters (`; charset=utf-8`) pass, as in
    // Tempesta; case-insensitive because media types are.
    let allowed = limits.http_ct_vals.is_empty()
        || limits.http_ct_vals.iter().any(|allowed| {
            value
                .get(..allowed.len())
                .is_some_and(|prefix| prefix.eq_ignore_ascii_case(allowed.as_bytes()))
        });
    if !allowed {
        return Err(Violation::block(
            "http_ct_vals",
            format!("Content-Type {}", show(value)),
        ));
    }
    Ok(())
}

/// Client bytes for a log line: lossy, and short.
fn show(bytes: &[u8]) -> String {
    let shown = bytes.get(..64).unwrap_or(bytes);
    format!("{:?}", String::from_utf8_lossy(shown))
}
