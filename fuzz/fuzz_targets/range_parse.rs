//! Fuzz the cache's Range handling with one input: the first two bytes pick
//! the stored body's length, the rest is split on '\n' into a Range value,
//! an If-Range value and an If-None-Match value. Any panic is a bug: all of
//! it is peer-controlled. Checked: every resolved part lies inside the body,
//! and a composed 206's Content-Length equals the bytes its parts hold.
#![no_main]
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use cache::range::{parse_range, resolve, MAX_RANGE_SPECS};
use cache::{Answer, Entry, ExchangeTimes, Policy, RangeResolution, Reply, Request, Response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((len_bytes, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let len = usize::from(u16::from_le_bytes(*len_bytes)) % 4096;
    let mut lines = rest.split(|&b| b == b'\n');
    let range = lines.next().unwrap_or_default();
    let if_range = lines.next();
    let if_none_match = lines.next();

    if let Ok(specs) = parse_range(range) {
        assert!(!specs.is_empty() && specs.len() <= MAX_RANGE_SPECS);
        if let RangeResolution::Satisfiable(parts) = resolve(&specs, len) {
            let total: usize = parts.iter().map(|p| p.byte_count()).sum();
            assert!(parts.iter().all(|p| p.first <= p.last && p.last < len));
            assert!(parts.len() == 1 || total <= len);
        }
    }

    let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let stored_headers: [(&str, &[u8]); 4] = [
        ("Cache-Control", b"max-age=60"),
        ("ETag", b"\"v1\""),
        ("Last-Modified", b"Tue, 14 Nov 2023 20:00:00 GMT"),
        ("Content-Type", b"text/plain"),
    ];
    let no_headers: [(&str, &[u8]); 0] = [];
    let get = Request {
        vhost: "v",
        scheme: "https",
        authority: b"example.com",
        method: "GET",
        uri: b"/",
        headers: &no_headers[..],
    };
    let body: Arc<[u8]> = (0..len).map(|i| i as u8).collect::<Vec<u8>>().into();
    let resp = Response { status: 200, reason: b"", headers: &stored_headers[..], body_len: len };
    let times = ExchangeTimes { request_time: at, response_time: at };
    let Ok(entry) = Entry::build(&Policy::default(), &get, &resp, body, times) else {
        return;
    };
    let mut headers: Vec<(&str, &[u8])> = vec![("Range", range)];
    if let Some(v) = if_range {
        headers.push(("If-Range", v));
    }
    if let Some(v) = if_none_match {
        headers.push(("If-None-Match", v));
    }
    let req = Request { headers: &headers[..], ..get };
    let answer = entry.answer(&req);
    if let Reply::Composed(reply) = entry.reply(&answer) {
        let mut head = Vec::new();
        reply.write_head(&mut head);
        let body = reply.body_to_vec();
        assert_eq!(body.len(), reply.body_len());
        let length = format!("Content-Length: {}\r\n", body.len());
        assert!(head.windows(length.len()).any(|w| w == length.as_bytes()));
        if let Answer::Partial(parts) = &answer {
            assert!(parts.iter().all(|p| p.last < len));
        }
    }
});
