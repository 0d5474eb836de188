//! Parser and serialiser micro-benchmarks: a typical browser GET, a small
//! response head, and the two heads the proxy writes per exchange.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use http1::{
    parse_request, parse_response, write_request_head, write_response_head, BodyFraming,
    ChunkedDecoder, ConnectionOption, Forwarding, HeaderEdits, Limits,
};

/// ~500 bytes, 10 fields: what a browser sends for a page.
const BROWSER_GET: &[u8] = b"GET /articles/2024/http-request-smuggling.html?ref=home HTTP/1.1\r\n\
Host: www.example.com\r\n\
User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n\
Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n\
Accept-Language: en-US,en;q=0.5\r\n\
Accept-Encoding: gzip, deflate, br, zstd\r\n\
Connection: keep-alive\r\n\
Cookie: session=4f7c2a9e1b3d5f60; theme=dark; consent=yes\r\n\
Upgrade-Insecure-Requests: 1\r\n\
Sec-Fetch-Dest: document\r\n\
Sec-Fetch-Mode: navigate\r\n\
\r\n";

const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\n\
Date: Mon, 30 Nov 2026 12:00:00 GMT\r\n\
Server: nginx\r\n\
Content-Type: text/html; charset=utf-8\r\n\
Content-Length: 5120\r\n\
Cache-Control: max-age=3600\r\n\
ETag: \"5f3e-1a2b\"\r\n\
\r\n";

/// Parsing a head: this crate, and bare httparse as the baseline.
fn parse_benches(c: &mut Criterion) {
    let limits = Limits::default();
    let mut group = c.benchmark_group("parse");
    group.throughput(Throughput::Bytes(BROWSER_GET.len() as u64));
    group.bench_function("request_browser_get", |b| {
        b.iter(|| parse_request(black_box(BROWSER_GET), &limits))
    });
    // The same input through bare httparse: the baseline this crate's
    // strictness and derived facts are measured against (the machine is
    // shared, so compare ratios rather than absolute times).
    group.bench_function("request_browser_get_httparse_only", |b| {
        b.iter(|| {
            let mut fields = [httparse::EMPTY_HEADER; 32];
            let mut request = httparse::Request::new(&mut fields);
            request
                .parse(black_box(BROWSER_GET))
                .map(|s| s.is_complete())
        })
    });
    group.throughput(Throughput::Bytes(RESPONSE.len() as u64));
    group.bench_function("response_small", |b| {
        b.iter(|| parse_response(black_box(RESPONSE), &limits, false))
    });
    group.finish();
}

/// Writing the heads the proxy forwards, from parsed ones.
fn write_benches(c: &mut Criterion) {
    let limits = Limits::default();
    let edits = HeaderEdits::new();
    let (request, _) = parse_request(BROWSER_GET, &limits).unwrap().unwrap();
    let (response, _) = parse_response(RESPONSE, &limits, false).unwrap().unwrap();
    let mut out = Vec::with_capacity(1024);
    let mut group = c.benchmark_group("write");
    group.bench_function("upstream_request", |b| {
        let fwd = Forwarding {
            forwarded_for: Some(b"203.0.113.45"),
            forwarded_proto: None,
            via: Some(b"ktls-proxy"),
            edits: &edits,
            framing: request.framing(),
            connection: ConnectionOption::Default,
            limits: &limits,
        };
        b.iter(|| {
            out.clear();
            write_request_head(&mut out, black_box(&request), BROWSER_GET, &fwd).unwrap();
            out.len()
        })
    });
    group.bench_function("client_response", |b| {
        let fwd = Forwarding {
            forwarded_for: None,
            forwarded_proto: None,
            via: Some(b"ktls-proxy"),
            edits: &edits,
            framing: BodyFraming::Length(5120),
            connection: ConnectionOption::Default,
            limits: &limits,
        };
        b.iter(|| {
            out.clear();
            write_response_head(&mut out, black_box(&response), RESPONSE, &fwd).unwrap();
            out.len()
        })
    });
    group.finish();
}

/// Decoding a chunked body: the framing cost per body.
fn body_benches(c: &mut Criterion) {
    let limits = Limits::default();
    // 16 chunks of 1 KiB.
    let mut chunked = Vec::new();
    for _ in 0..16 {
        chunked.extend_from_slice(b"400\r\n");
        chunked.extend_from_slice(&[b'x'; 1024]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let mut group = c.benchmark_group("body");
    group.throughput(Throughput::Bytes(chunked.len() as u64));
    group.bench_function("chunked_16x1k", |b| {
        b.iter(|| {
            let mut total = 0;
            ChunkedDecoder::new(&limits)
                .decode_all(black_box(&chunked), |d| total += d.len())
                .map(|_| total)
        })
    });
    group.finish();
}

criterion_group!(http1_benches, parse_benches, write_benches, body_benches);
criterion_main!(http1_benches);
