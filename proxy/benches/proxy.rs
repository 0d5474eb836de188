//! Micro-benchmarks of the proxy's per-request decisions: the reference configuration's
//! http_chain (a redirect near the end of the chain, a request routed to the vhost, a host
//! that matches nothing).

use std::path::Path;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use proxy::router::{RequestView, Router};

struct Req {
    uri: &'static [u8],
    host: &'static [u8],
}

impl RequestView for Req {
    fn uri(&self) -> &[u8] {
        self.uri
    }
    fn host(&self) -> &[u8] {
        self.host
    }
    fn method(&self) -> &[u8] {
        b"GET"
    }
    fn scheme(&self) -> &[u8] {
        b"https"
    }
    fn any_header(&self, _name: &str, _f: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        false
    }
}

fn reference_router() -> Router {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../etc/tempesta.conf");
    let loaded = config::load_path(&path).unwrap_or_else(|d| panic!("{d}"));
    Router::new(&loaded.config).unwrap_or_else(|e| panic!("{e}"))
}

fn http_chain(c: &mut Criterion) {
    let router = reference_router();
    let cases = [
        (
            "routed_to_vhost",
            Req {
                uri: b"/index",
                host: b"tempesta-tech.com",
            },
        ),
        (
            "last_redirect",
            Req {
                uri: b"/blog/fast-programming-languages-c-c++-rust-assembly",
                host: b"tempesta-tech.com",
            },
        ),
        (
            "no_match",
            Req {
                uri: b"/",
                host: b"unknown.example",
            },
        ),
    ];
    let mut group = c.benchmark_group("http_chain_reference");
    for (name, req) in &cases {
        group.bench_function(*name, |b| {
            b.iter(|| black_box(router.route(black_box(req))))
        });
    }
    group.finish();
}

criterion_group!(benches, http_chain);
criterion_main!(benches);
