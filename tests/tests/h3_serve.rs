//! HTTP/3 to clients through the real proxy (issue 33), with aioquic as the client
//! (tests/py/h3_cases.py): GETs of 2 B, 100 KB and 3 MB from the test origin, POSTs with
//! and without a length, a cache hit, two concurrent streams, a request without `:path`
//! reset on its stream, a malformed method answered 400, streams the client stops before and
//! during the answer, the access log; a graceful stop with an idle connection; and `Alt-Svc`
//! on the TCP listener's responses exactly when an h3 listener exists.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{free_port, metric_sum, wait_for_port, Proc};
use e2e::{gen_cert, need_aioquic, KeyKind};

fn origin() -> Origin {
    Origin::start(|r| {
        let path = r.path().to_string();
        if let Some(n) = path.strip_prefix("/pattern/") {
            return Response::pattern(n.parse().unwrap_or(0));
        }
        if let Some(n) = path.strip_prefix("/text/") {
            return Response::ok("a".repeat(n.parse().unwrap_or(0)));
        }
        match path.as_str() {
            "/echo" => Response::ok(r.body.clone()),
            "/slow" => Response::ok("slow").delay(Duration::from_millis(1500)),
            "/cached" => Response::ok("cached body").header("Cache-Control", "max-age=600"),
            "/cached-big" => Response::pattern(1_000_000).header("Cache-Control", "max-age=600"),
            "/origin-alt" => Response::ok("alt").header("Alt-Svc", "h2=\":9999\""),
            _ => Response::ok("ok"),
        }
    })
}

/// A proxy with `listen PORT proto="h2,h3"` (TCP h2 and UDP h3 on one address) and the
/// test's plain listener; `extra` at top level.
fn start(origin: &Origin, tag: &str, protos: &str, extra: &str) -> (Proxy, SocketAddr) {
    let setup = Setup::new(tag);
    let both = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let log = setup.dir.join("access.log");
    let conf = format!(
        "listen {http};\n\
         listen {both} proto=\"{protos}\";\n\
         access_log_file {log};\n\
         srv_group default {{ server {origin}; }}\n\
         tls_match_any_server_name;\n\
         cache 1;\ncache_fulfill prefix /cached;\n\
         frang_limits {{ http_methods get head post; }}\n\
         {extra}\n\
         vhost site {{ tls_certificate {cert}; tls_certificate_key {key}; proxy_pass default; }}\n\
         http_chain {{ -> site; }}\n",
        http = setup.http,
        log = log.display(),
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

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/py/h3_cases.py");

/// Runs `cases` of tests/py/h3_cases.py against UDP `port`.
fn h3_cases(port: u16, cases: &[&str], proxy: &Proxy) -> String {
    need_aioquic();
    let script = SCRIPT;
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
        "cache_hit_shared",
        "concurrent",
        "no_path",
        "bad_method",
        "cancel",
        "abandon",
        "no_datagrams",
    ];
    h3_cases(both.port(), &cases, &proxy);
    // The cache answered the second /cached: the origin saw it once.
    assert_eq!(origin.hits("/cached"), 1, "{}", proxy.proc.logs());
    assert_eq!(origin.hits("/cached-big"), 1, "{}", proxy.proc.logs());
    let logs = proxy.proc.logs();
    assert!(!logs.contains("panic"), "{logs}");
    // Each request has its access log line, named HTTP/3.
    let log = std::fs::read_to_string(proxy.dir.join("access.log")).unwrap_or_default();
    assert!(
        log.contains("\"POST /echo HTTP/3.0\" 200 50000")
            && log.contains("\"GET /pattern/100000 HTTP/3.0\" 200 100000"),
        "{log}"
    );
}

#[test]
fn alt_svc_advertises_the_h3_listener_only_when_there_is_one() {
    let origin = origin();
    let (proxy, both) = start(&origin, "h3-altsvc", "h2,h3", "");
    let head = tcp_head(both, "/");
    let expected = format!("alt-svc: h3=\":{}\"; ma=86400", both.port());
    assert!(head.contains(&expected), "{head}\n{}", proxy.proc.logs());
    // The origin's own Alt-Svc names its services, not the proxy's: replaced.
    let head = tcp_head(both, "/origin-alt");
    assert!(head.contains(&expected) && !head.contains("9999"), "{head}");
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

/// A graceful stop: the idle HTTP/3 connection gets GOAWAY, then CONNECTION_CLOSE once the
/// last call is over, and does not hold the stop (which waits at most 10 s for work in
/// flight).
#[test]
fn a_graceful_stop_closes_an_idle_h3_connection() {
    need_aioquic();
    let origin = origin();
    let (mut proxy, both) = start(&origin, "h3-stop", "h2,h3", "");
    let mut cmd = Command::new("timeout");
    cmd.args(["30", "python3", SCRIPT, &both.port().to_string(), "hold"]);
    let mut client = Proc::spawn("h3-client", cmd, proxy.dir.path());
    assert!(
        client.wait_for_output("ok hold_request", Duration::from_secs(10)),
        "{}\n{}",
        client.logs(),
        proxy.proc.logs()
    );
    let stop = Instant::now();
    proxy.proc.signal(15);
    let exited = proxy.proc.wait_exit(Duration::from_secs(12));
    let took = stop.elapsed();
    assert!(exited.is_some(), "{}", proxy.proc.logs());
    eprintln!("stopped in {took:?}");
    assert!(took < Duration::from_secs(3), "stopped in {took:?}");
    assert!(
        client.wait_for_output("ok hold\n", Duration::from_secs(10)),
        "the client saw the connection closed: {}",
        client.logs()
    );
}

/// Strict host checking over HTTP/3 as over TLS on TCP (tests/security_rules.rs item 9):
/// the vhost the QUIC handshake's server name chose must be the one the request's
/// authority routes to; a request for the other vhost is refused and reaches neither origin.
#[test]
fn h3_host_must_select_the_vhost_sni_chose() {
    need_aioquic();
    let a = Origin::start(|r| Response::ok(format!("A{}", r.path())));
    let b = Origin::start(|r| Response::ok(format!("B{}", r.path())));
    let setup = Setup::new("h3-sni");
    let (a_crt, a_key) = gen_cert(setup.dir.path(), "a", KeyKind::EcdsaP256, &["a.test"]);
    let (b_crt, b_key) = gen_cert(setup.dir.path(), "b", KeyKind::EcdsaP256, &["b.test"]);
    let udp = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = format!(
        "listen {http};\nlisten {udp} proto=h3;\n\
         srv_group ga {{ server {a}; }}\nsrv_group gb {{ server {b}; }}\n\
         block_action attack reply;\nblock_action error reply;\n\
         vhost a.test {{ tls_certificate {ac}; tls_certificate_key {ak}; proxy_pass ga; }}\n\
         vhost b.test {{ tls_certificate {bc}; tls_certificate_key {bk}; proxy_pass gb; }}\n\
         http_chain {{ host == \"a.test\" -> a.test; host == \"b.test\" -> b.test; }}\n",
        http = setup.http,
        a = a.addr(),
        b = b.addr(),
        ac = a_crt.display(),
        ak = a_key.display(),
        bc = b_crt.display(),
        bk = b_key.display(),
    );
    let proxy = setup.start(&conf);
    let script = SCRIPT;
    let out = Command::new("timeout")
        .args(["60", "python3", script, &udp.port().to_string()])
        .args(["sni_control", "sni_cross"])
        .env("H3_SNI", "a.test")
        .env("H3_CROSS", "b.test")
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("ok sni_cross\n"),
        "{stdout}\n{}",
        proxy.proc.logs()
    );
    assert_eq!((a.total_requests(), b.total_requests()), (1, 0));
    // A name no vhost has (no tls_match_any_server_name): the handshake is refused.
    let out = Command::new("timeout")
        .args(["60", "python3", script, &udp.port().to_string(), "refused"])
        .env("H3_SNI", "c.test")
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout.contains("ok refused"),
        "{stdout}\n{}",
        proxy.proc.logs()
    );
    eprintln!("{stdout}");
}

/// frang judges HTTP/3 requests (a method it does not allow: 403 with `block_action attack
/// reply`), and they count in the metrics as requests and connections.
#[test]
fn h3_requests_meet_frang_and_count_in_the_metrics() {
    let origin = origin();
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let extra = format!(
        "stats_listen {stats};\nblock_action attack reply;\n\
         frang_limits {{ http_methods get head; }}\n"
    );
    let setup = Setup::new("h3-frang");
    let udp = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = format!(
        "listen {http};\nlisten {udp} proto=h3;\n\
         srv_group default {{ server {origin}; }}\n\
         tls_match_any_server_name;\n{extra}\
         vhost site {{ tls_certificate {cert}; tls_certificate_key {key}; proxy_pass default; }}\n\
         http_chain {{ -> site; }}\n",
        http = setup.http,
        origin = origin.addr(),
        cert = setup.cert.display(),
        key = setup.key.display(),
    );
    let proxy = setup.start(&conf);
    assert!(wait_for_port(stats, Duration::from_secs(10)));
    let before = metric_sum(stats, "ktls_proxy_requests_total");
    h3_cases(udp.port(), &["get_small", "post_blocked"], &proxy);
    assert_eq!(origin.hits("/echo"), 0);
    assert_eq!(metric_sum(stats, "ktls_proxy_requests_total") - before, 2);
    assert!(metric_sum(stats, "ktls_proxy_connections_accepted_total") >= 1);
    assert!(metric_sum(stats, "ktls_proxy_blocks_total") >= 1);
}

/// frang's trailer-split check on HTTP/3 request trailers, as on HTTP/1.1 and HTTP/2: a
/// trailer field the head also has is a block (`http_trailer_split_allowed` off: 403 with
/// `block_action attack reply`); other trailers end the body and the request is served.
#[test]
fn h3_request_trailers_meet_the_trailer_split_check() {
    let origin = origin();
    let (proxy, both) = start(
        &origin,
        "h3-trailer-split",
        "h2,h3",
        "block_action attack reply;",
    );
    h3_cases(both.port(), &["trailer_kept", "trailer_split"], &proxy);
    let logs = proxy.proc.logs();
    assert!(!logs.contains("panic"), "{logs}");
}

/// A chunked origin response's trailer section goes to the HTTP/3 client as trailing
/// HEADERS after the body: its end-to-end fields only (RFC 9110 §6.5: no framing,
/// connection-specific, response control or cookie fields).
#[test]
fn h3_response_trailers_follow_the_body() {
    let origin = e2e::evil_origin::EvilOrigin::start(|conn| {
        conn.serve(|conn, seen| {
            if seen.target != "/trailers" {
                return false;
            }
            conn.write(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n\
                  b\r\nhello world\r\n0\r\nX-Checksum: abc123\r\nGrpc-Status: 0\r\n\
                  Content-Type: text/evil\r\nSet-Cookie: s=1\r\nConnection: close\r\n\
                  Content-Length: 99\r\n\r\n",
            )
        })
    });
    let setup = Setup::new("h3-trailers");
    let udp = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = format!(
        "listen {http};\nlisten {udp} proto=h3;\n\
         srv_group default {{ server {origin}; }}\n\
         tls_match_any_server_name;\n\
         vhost site {{ tls_certificate {cert}; tls_certificate_key {key}; proxy_pass default; }}\n\
         http_chain {{ -> site; }}\n",
        http = setup.http,
        origin = origin.addr(),
        cert = setup.cert.display(),
        key = setup.key.display(),
    );
    let proxy = setup.start(&conf);
    h3_cases(udp.port(), &["trailers"], &proxy);
}

/// Chromium as the HTTP/3 client (`--origin-to-force-quic-on`, the test certificate's key
/// pinned): a page of 2 bytes and one of 100 KB, each logged as an HTTP/3 request of
/// HeadlessChrome. Run where Chromium is installed (Debian's `chromium-headless-shell` or
/// `chromium`), as the JS-challenge test does; `KTLS_PROXY_REQUIRE_CHROMIUM=1` makes its
/// absence a failure.
#[test]
fn chromium_fetches_over_h3() {
    let Some(chromium) = e2e::chromium("HTTP/3") else {
        return;
    };
    let origin = origin();
    let (proxy, both) = start(&origin, "h3-chromium", "h2,h3", "");
    // Setup's certificate, for site.test.
    let cert = proxy.dir.join("site.crt");
    let profile = proxy.dir.join("chrome-profile");
    for (path, want) in [
        ("/small", "ok".to_string()),
        ("/text/100000", "a".repeat(100_000)),
    ] {
        let out = e2e::chromium_over_quic(chromium, (&cert, &profile), both.port(), path);
        let dom = String::from_utf8_lossy(&out.stdout);
        assert!(
            dom.contains(&format!(">{want}</pre>")),
            "{path}: {}\n{}",
            &dom[..dom.len().min(300)],
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let log = std::fs::read_to_string(proxy.dir.join("access.log")).unwrap_or_default();
    for line in [
        "\"GET /small HTTP/3.0\" 200 2",
        "\"GET /text/100000 HTTP/3.0\" 200 100000",
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains(line) && l.contains("HeadlessChrome")),
            "{line}: {log}"
        );
    }
}
