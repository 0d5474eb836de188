//! `block_action` and the refusals around it as Tempesta FW behaves (issue 35): a Forwarded
//! field Tempesta's parser does not read is 400 and closed; an
//! X-Forwarded-For whose first node is not an address is answered 400 with the connection
//! kept, a malformed one 400 and closed; a Content-Type (or a body) on a method without one is
//! 400 and closed; Tempesta's 403 has an empty body; `drop` resets the connection, over TLS
//! too, for errors as for attacks. Cases from tempesta-test's
//! tests/http_general/test_block_action.py and tests/http2_general/test_h2_block_action.py,
//! through the real binary.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::rawclient::{Outcome, RawClient};
use e2e::{free_port, wait_for_port};
use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};

const T: Duration = Duration::from_secs(5);

/// A proxy in front of an origin answering 200 "ok", `extra` at top level, with a plain, a
/// TLS and an h2c listener; `http_chain` blocks Host `bad` and sends the rest to `site`.
fn start(tag: &str, extra: &str) -> (Proxy, Origin, SocketAddr, SocketAddr, SocketAddr) {
    let setup = Setup::new(tag);
    let origin = Origin::start(|_| Response::ok("ok"));
    let h2c = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let text = format!(
        "listen {http};\nlisten {https} proto=https;\nlisten {h2c} proto=h2c;\n\
         srv_group default {{ server {origin}; }}\n\
         tls_match_any_server_name;\n{extra}\n\
         vhost site {{ tls_certificate {cert}; tls_certificate_key {key}; proxy_pass default; }}\n\
         http_chain {{ host == \"bad\" -> block; -> site; }}\n",
        http = setup.http,
        https = setup.https,
        origin = origin.addr(),
        cert = setup.cert.display(),
        key = setup.key.display(),
    );
    let (http, https) = (setup.http, setup.https);
    let proxy = setup.start(&text);
    assert!(wait_for_port(h2c, T), "{h2c} listens");
    (proxy, origin, http, https, h2c)
}

fn request(host: &str, extra: &str) -> Vec<u8> {
    format!("GET /p HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n").into_bytes()
}

fn expect_status(c: &mut RawClient, req: &[u8], status: u16, proxy: &Proxy) -> Vec<u8> {
    match c.request(req, T) {
        Outcome::Response(r) if r.status == status => r.body,
        other => panic!("expected {status}, got {other}\n{}", proxy.proc.logs()),
    }
}

/// nghttp over h2c: the statuses of `paths`, requested on one connection with `headers`
/// (`:authority: site`, as the vhost's strict host checking wants a name).
fn nghttp(h2c: SocketAddr, headers: &[&str], paths: &[&str]) -> Vec<u16> {
    let mut cmd = Command::new("timeout");
    cmd.args(["30", "nghttp", "-n", "-s", "-H", ":authority: site"]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    for p in paths {
        cmd.arg(format!("http://{h2c}{p}"));
    }
    let out = cmd.output().expect("nghttp");
    // The summary: "id  responseEnd requestStart  process code size request path".
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4)?.parse().ok())
        .collect()
}

/// tempesta-test `test_block_action_error_reply`: `X-Forwarded-For: 1.1.1.1.1.1` passes
/// Tempesta's XFF alphabet but is no address (fw/http.c, `tfw_http_req_client_link`): 400,
/// the connection goes on; the origin never sees the request. A list whose first node is an
/// address passes; a list with an empty element is malformed: 400 and closed.
#[test]
fn x_forwarded_for_must_start_with_an_address() {
    let (proxy, origin, http, _, h2c) = start("parity-xff", "");
    let mut c = RawClient::connect(http).expect("connect");
    expect_status(
        &mut c,
        &request("site", "X-Forwarded-For: 1.1.1.1.1.1\r\n"),
        400,
        &proxy,
    );
    expect_status(&mut c, &request("site", ""), 200, &proxy);
    let good = "X-Forwarded-For: 192.0.2.7:8080, proxy.example\r\nX-Forwarded-For: unknown\r\n";
    expect_status(&mut c, &request("site", good), 200, &proxy);
    for name in ["unknown", "_hidden", "1.1.1"] {
        let field = format!("X-Forwarded-For: {name}, 192.0.2.7\r\n");
        expect_status(&mut c, &request("site", &field), 400, &proxy);
    }
    expect_status(&mut c, &request("site", ""), 200, &proxy);
    assert_eq!(origin.total_requests(), 3);

    let mut c = RawClient::connect(http).expect("connect");
    let malformed = "X-Forwarded-For: 192.0.2.7,,192.0.2.8\r\n";
    expect_status(&mut c, &request("site", malformed), 400, &proxy);
    assert!(
        matches!(c.wait_closed(T), Outcome::Closed | Outcome::Reset),
        "a malformed X-Forwarded-For closes the connection"
    );

    // HTTP/2 alike: 400 on each stream, the connection going on to answer them all.
    let got = nghttp(h2c, &["x-forwarded-for: 1.1.1.1.1.1"], &["/a", "/b", "/c"]);
    assert_eq!(got, vec![400, 400, 400], "{}", proxy.proc.logs());
    let got = nghttp(h2c, &["x-forwarded-for: 192.0.2.7"], &["/a"]);
    assert_eq!(got, vec![200], "{}", proxy.proc.logs());
    assert_eq!(origin.total_requests(), 4);
}

/// A Forwarded field is read as Tempesta's parser reads it (fw/http_parser.c,
/// `__req_parse_forwarded`): `for`, `by`, `host`, `proto` once each, `;` with nothing
/// around it, nodes of the X-Forwarded-For alphabet. One that reads so is forwarded as
/// sent; one that does not is 400 and the connection closed, and over HTTP/2 400 on its
/// stream. The origin never sees a refused one.
#[test]
fn forwarded_must_read_as_tempesta_reads_it() {
    let (proxy, origin, http, _, h2c) = start("parity-forwarded", "");
    let good = [
        "for=192.0.2.60;proto=http;by=203.0.113.43",
        "For=\"[2001:db8:cafe::17]:4711\"",
        "host=example.com:8080;for=192.0.2.43, for=198.51.100.17",
        "for=_hidden, for=\"_other\"",
    ];
    let mut c = RawClient::connect(http).expect("connect");
    for value in good {
        let field = format!("Forwarded: {value}\r\n");
        expect_status(&mut c, &request("site", &field), 200, &proxy);
    }
    let seen: Vec<String> = origin
        .requests()
        .iter()
        .filter_map(|r| r.header("forwarded").map(str::to_string))
        .collect();
    assert_eq!(seen, good, "forwarded as sent");

    let bad = [
        "for=192.0.2.60; proto=http",
        "for=192.0.2.60;",
        "proto=https, for=192.0.2.60",
        "host=example.com:0",
        "host=[2001:db8::1]",
        "secret=1",
        "for=192.0.2.60;for=192.0.2.61",
        "for=\"><script>\"",
        "proto=h\"ttp\"",
    ];
    for value in bad {
        let mut c = RawClient::connect(http).expect("connect");
        let field = format!("Forwarded: {value}\r\n");
        expect_status(&mut c, &request("site", &field), 400, &proxy);
        assert!(
            matches!(c.wait_closed(T), Outcome::Closed | Outcome::Reset),
            "a malformed Forwarded ({value}) closes the connection"
        );
    }
    assert_eq!(origin.total_requests(), good.len());

    let got = nghttp(h2c, &["forwarded: for=192.0.2.60; proto=http"], &["/a"]);
    assert_eq!(got, vec![400], "{}", proxy.proc.logs());
    let got = nghttp(h2c, &["forwarded: for=192.0.2.60;proto=http"], &["/a"]);
    assert_eq!(got, vec![200], "{}", proxy.proc.logs());
    assert_eq!(origin.total_requests(), good.len() + 1);
}

/// tempesta-test `test_block_action_error_reply_with_conn_close`: a Content-Type on GET is
/// refused (fw/http_parser.c, `tfw_http_parse_check_bodyless_meth`): 400 and the connection
/// closed; so is content on GET, HEAD, DELETE or TRACE; `Content-Length: 0` is no content.
/// `http_allow_empty_body_content_type true` lets the Content-Type through.
#[test]
fn content_type_or_content_on_a_bodyless_method_is_refused() {
    let (proxy, origin, http, _, h2c) = start("parity-bodyless", "");
    for (head, why) in [
        (
            "GET /p HTTP/1.1\r\nHost: site\r\nContent-Type: invalid\r\n\r\n",
            "GET + type",
        ),
        (
            "DELETE /p HTTP/1.1\r\nHost: site\r\nContent-Length: 3\r\n\r\nabc",
            "DELETE + body",
        ),
        (
            "HEAD /p HTTP/1.1\r\nHost: site\r\nContent-Type: text/plain\r\n\r\n",
            "HEAD + type",
        ),
    ] {
        let mut c = RawClient::connect(http).expect("connect");
        match c.request(head.as_bytes(), T) {
            Outcome::Response(r) if r.status == 400 => {}
            other => panic!("{why}: expected 400, got {other}\n{}", proxy.proc.logs()),
        }
        assert!(
            matches!(c.wait_closed(T), Outcome::Closed | Outcome::Reset),
            "{why}: the connection closes"
        );
    }
    let mut c = RawClient::connect(http).expect("connect");
    let fine = "GET /p HTTP/1.1\r\nHost: site\r\nContent-Length: 0\r\n\r\n";
    expect_status(&mut c, fine.as_bytes(), 200, &proxy);
    let post =
        "POST /p HTTP/1.1\r\nHost: site\r\nContent-Type: invalid\r\nContent-Length: 1\r\n\r\nx";
    expect_status(&mut c, post.as_bytes(), 200, &proxy);
    assert_eq!(origin.total_requests(), 2);
    // HTTP/2: 400 on the stream.
    let got = nghttp(h2c, &["content-type: invalid"], &["/a"]);
    assert_eq!(got, vec![400], "{}", proxy.proc.logs());
    drop(proxy);

    let (proxy, _origin, http, _, _) = start(
        "parity-bodyless-allowed",
        "http_allow_empty_body_content_type true;",
    );
    let mut c = RawClient::connect(http).expect("connect");
    expect_status(
        &mut c,
        &request("site", "Content-Type: invalid\r\n"),
        200,
        &proxy,
    );
    let body = "GET /p HTTP/1.1\r\nHost: site\r\nContent-Length: 3\r\n\r\nabc";
    expect_status(&mut c, body.as_bytes(), 400, &proxy);
}

/// Tempesta's 403 carries no body (`Content-Length: 0`; tempesta-test's BlockActionReply
/// expects an empty body); a `response_body` page replaces it.
#[test]
fn forbidden_has_an_empty_body_unless_a_page_is_configured() {
    let (proxy, _origin, http, _, h2c) = start("parity-403", "block_action attack reply;");
    let mut c = RawClient::connect(http).expect("connect");
    match c.request(&request("bad", ""), T) {
        Outcome::Response(r) => {
            assert_eq!(r.status, 403);
            assert_eq!(r.header("content-length"), Some("0"));
            assert!(r.body.is_empty(), "{:?}", String::from_utf8_lossy(&r.body));
            assert_eq!(r.header("content-type"), None);
        }
        other => panic!("expected 403, got {other}\n{}", proxy.proc.logs()),
    }
    let out = Command::new("timeout")
        .args(["30", "curl", "-s", "-i", "--http2-prior-knowledge"])
        .arg(format!("http://bad:{}/p", h2c.port()))
        .args(["--resolve", &format!("bad:{}:127.0.0.1", h2c.port())])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.starts_with("HTTP/2 403"), "{text}");
    assert!(text.contains("content-length: 0"), "{text}");
    assert!(
        text.ends_with("\r\n\r\n"),
        "a body after the head: {text:?}"
    );
    drop(proxy);

    let dir = e2e::TempDir::new("parity-403-page");
    let page = dir.path().join("4xx.html");
    std::fs::write(&page, "a".repeat(1000)).expect("page");
    let extra = format!(
        "block_action attack reply;\nresponse_body 4* {};",
        page.display()
    );
    let (proxy, _origin, http, _, _) = start("parity-403-custom", &extra);
    let mut c = RawClient::connect(http).expect("connect");
    let body = expect_status(&mut c, &request("bad", ""), 403, &proxy);
    assert_eq!(body, "a".repeat(1000).into_bytes());
}

fn tls_client(https: SocketAddr) -> RawClient<openssl::ssl::SslStream<std::net::TcpStream>> {
    let mut b = SslConnector::builder(SslMethod::tls_client()).expect("connector");
    b.set_verify(SslVerifyMode::NONE);
    let tcp = std::net::TcpStream::connect(https).expect("connect");
    tcp.set_read_timeout(Some(T)).expect("timeout");
    let tls = b.build().connect("site", tcp).expect("handshake");
    RawClient::new(tls)
}

/// tempesta-test `test_block_action_attack_drop` / `test_block_action_error_drop`: with
/// `drop` the connection is reset (RST, no FIN, no close_notify over TLS) and nothing is
/// answered, for a blocked request (attack) as for a malformed one (error), plain and TLS.
#[test]
fn drop_resets_the_connection_plain_and_tls() {
    let (proxy, origin, http, https, _) = start(
        "parity-drop",
        "block_action attack drop;\nblock_action error drop;",
    );
    let blocked = request("bad", "");
    let malformed = b"GET /p HTTP/1.1\r\n\r\n".to_vec();
    for (req, what) in [(&blocked, "attack"), (&malformed, "error")] {
        let mut plain = RawClient::connect(http).expect("connect");
        let got = plain.request(req, T);
        assert!(
            matches!(got, Outcome::Reset),
            "plain {what}: {got}\n{}",
            proxy.proc.logs()
        );
        let mut tls = tls_client(https);
        let got = tls.request(req, T);
        assert!(
            matches!(got, Outcome::Reset),
            "TLS {what}: {got}\n{}",
            proxy.proc.logs()
        );
    }
    assert_eq!(origin.total_requests(), 0);
}
