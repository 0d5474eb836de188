//! HTTP/3 to clients through the real proxy (issue 33), with aioquic as the client
//! (tests/py/h3_cases.py): GETs of a small and a 100 KB body from the test origin, POSTs
//! with and without a length, a cache hit, two concurrent streams, a request without
//! `:path` refused on its stream; and `Alt-Svc` on the TCP listener's responses exactly when
//! an h3 listener exists.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{free_port, wait_for_port};

fn origin() -> Origin {
    Origin::start(|r| {
        let path = r.path().to_string();
        if let Some(n) = path.strip_prefix("/pattern/") {
            return Response::pattern(n.parse().unwrap_or(0));
        }
        match path.as_str() {
            "/echo" => Response::ok(r.body.clone()),
            "/slow" => Response::ok("slow").delay(Duration::from_millis(1500)),
            "/cached" => Response::ok("cached body").header("Cache-Control", "max-age=600"),
            _ => Response::ok("ok"),
        }
    })
}

/// A proxy with `listen PORT proto="h2,h3"` (TCP h2 and UDP h3 on one address) and the
/// test's plain listener; `extra` at top level.
fn start(origin: &Origin, tag: &str, protos: &str, extra: &str) -> (Proxy, SocketAddr) {
    let setup = Setup::new(tag);
    let both = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = format!(
        "listen {http};\n\
         listen {both} proto=\"{protos}\";\n\
         srv_group default {{ server {origin}; }}\n\
         tls_match_any_server_name;\n\
         cache 1;\ncache_fulfill eq /cached;\n\
         frang_limits {{ http_methods get head post; }}\n\
         {extra}\n\
         vhost site {{ tls_certificate {cert}; tls_certificate_key {key}; proxy_pass default; }}\n\
         http_chain {{ -> site; }}\n",
        http = setup.http,
        origin = origin.addr(),
        cert = setup.cert.display(),
        key = setup.key.display(),
    );
    let proxy = setup.start(&conf);
    assert!(
        wait_for_port(both, Duration::from_secs(10)),
        "{both} listens"
    );
    (proxy, both)
}

/// Runs `cases` of tests/py/h3_cases.py against UDP `port`; fails loudly without aioquic.
fn h3_cases(port: u16, cases: &[&str], proxy: &Proxy) -> String {
    let probe = Command::new("python3")
        .args(["-c", "import aioquic"])
        .status();
    assert!(
        probe.is_ok_and(|s| s.success()),
        "aioquic is missing: python3 -m pip install aioquic (tests/run.sh does)"
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/h3_cases.py");
    let out = Command::new("timeout")
        .args(["90", "python3", script, &port.to_string()])
        .args(cases)
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        proxy.proc.logs()
    );
    for case in cases {
        assert!(stdout.contains(&format!("ok {case}\n")), "{case}: {stdout}");
    }
    eprintln!("{stdout}");
    stdout
}

/// The response head curl got over TCP (HTTP/2) from `addr` for `path`.
fn tcp_head(addr: SocketAddr, path: &str) -> String {
    let resolve = format!("site.test:{}:127.0.0.1", addr.port());
    let url = format!("https://site.test:{}{path}", addr.port());
    let out = Command::new("timeout")
        .args(["30", "curl", "-sk", "--http2", "-D", "-", "-o", "/dev/null"])
        .args(["--resolve", &resolve, &url])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).to_ascii_lowercase()
}

#[test]
fn h3_requests_are_served_through_the_exchange_pipeline() {
    let origin = origin();
    let (proxy, both) = start(&origin, "h3-serve", "h2,h3", "");
    let cases = [
        "get_small",
        "get_large",
        "post",
        "post_large",
        "post_chunked",
        "get_huge",
        "cache_hit",
        "concurrent",
        "no_path",
    ];
    h3_cases(both.port(), &cases, &proxy);
    // The cache answered the second /cached: the origin saw it once.
    assert_eq!(origin.hits("/cached"), 1, "{}", proxy.proc.logs());
}

#[test]
fn alt_svc_advertises_the_h3_listener_only_when_there_is_one() {
    let origin = origin();
    let (proxy, both) = start(&origin, "h3-altsvc", "h2,h3", "");
    let head = tcp_head(both, "/");
    let expected = format!("alt-svc: h3=\":{}\"; ma=86400", both.port());
    assert!(head.contains(&expected), "{head}\n{}", proxy.proc.logs());
    // A stored response keeps it: the second /cached is a hit (Age), with the field.
    tcp_head(both, "/cached");
    let head = tcp_head(both, "/cached");
    assert!(head.contains("age:") && head.contains(&expected), "{head}");
    drop(proxy);
    let (proxy, both) = start(&origin, "h3-altsvc-age", "h2,h3", "h3_alt_svc max_age=60;");
    let head = tcp_head(both, "/");
    let expected = format!("alt-svc: h3=\":{}\"; ma=60", both.port());
    assert!(head.contains(&expected), "{head}\n{}", proxy.proc.logs());
    drop(proxy);
    let (proxy, both) = start(&origin, "h3-altsvc-off", "h2,h3", "h3_alt_svc off;");
    let head = tcp_head(both, "/");
    assert!(
        head.starts_with("http/2 200") && !head.contains("alt-svc"),
        "{head}"
    );
    drop(proxy);
    let (proxy, both) = start(&origin, "h3-altsvc-none", "h2,https", "");
    let head = tcp_head(both, "/");
    assert!(
        head.starts_with("http/2 200") && !head.contains("alt-svc"),
        "{head}"
    );
    drop(proxy);
}
