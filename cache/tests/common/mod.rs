//! Helpers shared by the integration tests: a fixed clock and terse
//! request/response builders over `(&str, String)` header pairs.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cache::httpdate::write_http_date;
use cache::{Entry, ExchangeTimes, Policy, Request, Response};

pub type Hdr = (&'static str, String);

pub const VHOST: &str = "default";

/// Test clock: `t(0)` is an arbitrary fixed instant.
pub fn t(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
}

pub fn http_date(at: SystemTime) -> String {
    let mut v = Vec::new();
    write_http_date(at, &mut v);
    String::from_utf8(v).unwrap()
}

pub fn hdrs(pairs: &[(&'static str, &str)]) -> Vec<Hdr> {
    pairs.iter().map(|(n, v)| (*n, v.to_string())).collect()
}

pub fn req<'a>(method: &'a str, uri: &'a str, headers: &'a [Hdr]) -> Request<'a, Hdr> {
    Request {
        vhost: VHOST,
        scheme: "https",
        authority: b"example.com",
        method,
        uri: uri.as_bytes(),
        headers,
    }
}

pub fn resp(status: u16, headers: &[Hdr], body_len: usize) -> Response<'_, Hdr> {
    Response {
        status,
        reason: b"",
        headers,
        body_len,
    }
}

/// Request sent and response received at `t(at)`.
pub fn times_at(at: u64) -> ExchangeTimes {
    ExchangeTimes {
        request_time: t(at),
        response_time: t(at),
    }
}

pub fn body(text: &str) -> Arc<[u8]> {
    Arc::from(text.as_bytes())
}

/// Builds an entry for `GET uri` answered 200 at `t(0)` with `headers` (a
/// Date of `t(0)` is added unless given).
pub fn entry(
    policy: &Policy,
    req_headers: &[Hdr],
    resp_headers: &[(&'static str, &str)],
    text: &str,
) -> Entry {
    let mut headers = hdrs(resp_headers);
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("date")) {
        headers.push(("Date", http_date(t(0))));
    }
    let request = req("GET", "/r", req_headers);
    Entry::build(
        policy,
        &request,
        &resp(200, &headers, text.len()),
        body(text),
        times_at(0),
    )
    .unwrap()
}
