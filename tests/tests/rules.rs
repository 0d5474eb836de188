//! Tempesta rules end to end: the shipped etc/tempesta.conf (redirect chain, vhost, unknown
//! Host), vhosts chosen by SNI and Host, `http_chain` conditions and actions, and
//! `block_action` for malformed and blocked requests.

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::rawclient::{get, get_with, Outcome, RawClient, RawResponse};
use e2e::{curl, free_port, gen_cert, KeyKind, TempDir};
use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};

const T: Duration = Duration::from_secs(5);

/// Sends `request` on a new connection and returns the outcome.
fn once(addr: SocketAddr, request: &[u8]) -> Outcome {
    let mut c = RawClient::connect(addr).expect("connect");
    c.request(request, T)
}

fn expect_response(outcome: Outcome, status: u16, what: &str, proxy: &Proxy) -> RawResponse {
    match outcome {
        Outcome::Response(r) if r.status == status => r,
        other => panic!(
            "{what}: expected {status}, got {other}\n{}",
            proxy.proc.logs()
        ),
    }
}

/// An origin that answers 200 with the request path as its body.
fn echo_origin() -> Origin {
    Origin::start(|r| Response::ok(format!("origin:{}", r.path())))
}

const SHIPPED_REDIRECTS: [(&str, &str); 8] = [
    ("/blog", "/blog/1"),
    ("/blog/", "/blog/1"),
    ("/services", "/development-services"),
    ("/services.html", "/development-services"),
    ("/c++-services", "/development-services"),
    ("/index.html", "/index"),
    ("/company.html", "/company"),
    (
        "/blog/fast-programming-languages-c-c++-rust-assembly",
        "/blog/fast-programming-languages-c-cpp-rust-assembly",
    ),
];

/// An unknown Host matches no rule: 403, and the connection serves the next request, as in
/// Tempesta (no vhost is an error answered in place, not a block); POST, which the shipped
/// config forbids (http_methods GET HEAD), gets 403 too.
fn unknown_host_and_post_get_403(http: SocketAddr, proxy: &Proxy) {
    let mut c = RawClient::connect(http).expect("connect");
    let r = expect_response(
        c.request(&get("/blog", "example.com"), T),
        403,
        "unknown host",
        proxy,
    );
    assert!(r.body.len() < 1024);
    expect_response(
        c.request(&get("/after-403", "tempesta-tech.com"), T),
        200,
        "after 403",
        proxy,
    );
    let post = b"POST / HTTP/1.1\r\nHost: tempesta-tech.com\r\nContent-Length: 1\r\n\r\nx";
    expect_response(once(http, post), 403, "POST", proxy);
}

/// Every redirect of the shipped config on one keep-alive connection: exact status and
/// Location, a Date, an empty body, and the connection stays usable.
fn shipped_redirects_on_one_connection(c: &mut RawClient, proxy: &Proxy) {
    for (from, to) in SHIPPED_REDIRECTS {
        let r = expect_response(
            c.request(&get(from, "tempesta-tech.com"), T),
            301,
            from,
            proxy,
        );
        assert_eq!(r.header("location"), Some(to), "{from}: {:?}", r.headers);
        assert_eq!(r.header("content-length"), Some("0"), "{from}");
        assert!(
            r.header("date").is_some_and(|d| d.ends_with(" GMT")),
            "{from}: {:?}",
            r.headers
        );
        assert!(r.body.is_empty(), "{from}");
    }
}

#[test]
fn shipped_config_redirects_proxies_and_refuses_unknown_hosts() {
    let origin = echo_origin();
    let dir = TempDir::new("rules-shipped");
    let http = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let https = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let text = e2e::proxy::shipped_config(&dir, http, https, origin.addr());
    let proxy = Proxy::start(dir, &text, http);

    let mut c = RawClient::connect(http).expect("connect");
    shipped_redirects_on_one_connection(&mut c, &proxy);
    // Over TLS with SNI, too (HTTP/2: the listener is `proto="h2,https"`).
    let url = format!("https://tempesta-tech.com:{}/c++-services", https.port());
    let resolve = format!("tempesta-tech.com:{}:127.0.0.1", https.port());
    let (st, out, err) = curl(
        &[
            "-k",
            "-D",
            "-",
            "-o",
            "/dev/null",
            "--resolve",
            &resolve,
            &url,
        ],
        10,
    );
    assert!(st.success(), "{err}\n{}", proxy.proc.logs());
    let lower = out.to_ascii_lowercase();
    // The shipped listener offers h2 first (ALPN), and curl takes it.
    assert!(lower.starts_with("http/2 301"), "{out}");
    assert!(
        lower.contains("\r\nlocation: /development-services\r\n"),
        "{out}"
    );
    assert_eq!(
        origin.total_requests(),
        0,
        "a redirect reached the origin: {:?}",
        origin.requests()
    );

    // Everything else for the site is proxied (the rule matches exact URIs only).
    for path in ["/", "/blog/1", "/blogs", "/services/x", "/index"] {
        let r = expect_response(
            c.request(&get(path, "tempesta-tech.com"), T),
            200,
            path,
            &proxy,
        );
        assert_eq!(r.body, format!("origin:{path}").into_bytes());
        assert_eq!(
            r.header("strict-transport-security"),
            Some("max-age=31536000; includeSubDomains")
        );
    }
    assert_eq!(origin.total_requests(), 5);
    let url = format!("https://tempesta-tech.com:{}/company", https.port());
    let (st, body, err) = curl(&["-k", "--resolve", &resolve, &url], 10);
    assert!(st.success(), "{err}");
    assert_eq!(body, "origin:/company");

    unknown_host_and_post_get_403(http, &proxy);
    assert_eq!(origin.hits("/blog"), 0);
    assert_eq!(origin.total_requests(), 7);
}

/// Two vhosts with their own certificates and server groups: SNI picks the certificate, Host
/// picks the vhost.
#[test]
fn sni_selects_certificates_and_host_selects_vhosts() {
    let a = Origin::start(|r| Response::ok(format!("A{}", r.path())));
    let b = Origin::start(|r| Response::ok(format!("B{}", r.path())));
    let setup = Setup::new("rules-sni");
    let (a_crt, a_key) = gen_cert(setup.dir.path(), "a", KeyKind::EcdsaP256, &["a.test"]);
    let (b_crt, b_key) = gen_cert(setup.dir.path(), "b", KeyKind::Rsa2048, &["b.test"]);
    let conf = format!(
        "listen {http};\nlisten {https} proto=https;\n\
         srv_group ga {{ server {a}; }}\nsrv_group gb {{ server {b}; }}\n\
         block_action attack reply;\n\
         vhost a.test {{ tls_certificate {ac}; tls_certificate_key {ak}; proxy_pass ga; }}\n\
         vhost b.test {{ tls_certificate {bc}; tls_certificate_key {bk}; proxy_pass gb; }}\n\
         http_chain {{ host == \"a.test\" -> a.test; host == \"b.test\" -> b.test; }}\n",
        http = setup.http,
        https = setup.https,
        a = a.addr(),
        b = b.addr(),
        ac = a_crt.display(),
        ak = a_key.display(),
        bc = b_crt.display(),
        bk = b_key.display(),
    );
    let https = setup.https;
    let proxy = setup.start(&conf);
    for (name, body) in [("a.test", "A/x"), ("b.test", "B/x")] {
        let mut builder = SslConnector::builder(SslMethod::tls_client()).expect("connector");
        builder.set_verify(SslVerifyMode::NONE);
        let connector = builder.build();
        let tcp = TcpStream::connect(https).expect("connect");
        tcp.set_read_timeout(Some(T)).expect("timeout");
        let tls = connector.connect(name, tcp).expect("handshake");
        let cert = tls.ssl().peer_certificate().expect("a certificate");
        let cn = cert
            .subject_name()
            .entries_by_nid(openssl::nid::Nid::COMMONNAME)
            .next()
            .and_then(|e| e.data().to_string().ok());
        assert_eq!(
            cn.as_deref(),
            Some(name),
            "SNI {name} got the wrong certificate"
        );
        let mut c = RawClient::new(tls);
        let r = expect_response(c.request(&get("/x", name), T), 200, name, &proxy);
        assert_eq!(r.body, body.as_bytes());
    }
    assert_eq!((a.total_requests(), b.total_requests()), (1, 1));
    // Host, not SNI, chooses among vhosts on plain HTTP; a third name matches nothing.
    let http = SocketAddr::from(([127, 0, 0, 1], proxy_http_port(&conf)));
    let r = expect_response(once(http, &get("/y", "B.TEST")), 200, "B.TEST", &proxy);
    assert_eq!(r.body, b"B/y");
    expect_response(once(http, &get("/y", "c.test")), 403, "c.test", &proxy);
    assert_eq!((a.total_requests(), b.total_requests()), (1, 2));
}

fn proxy_http_port(conf: &str) -> u16 {
    let line = conf.lines().next().expect("listen line");
    line.trim_start_matches("listen ")
        .trim_end_matches(';')
        .parse::<SocketAddr>()
        .expect("listen address")
        .port()
}

/// A proxy whose main chain exercises every kind of condition; each vhost names itself in an
/// `X-Vhost` response header.
fn chain_proxy(tag: &str, block_action: &str) -> (Origin, Proxy, SocketAddr) {
    let origin = echo_origin();
    let setup = Setup::new(tag);
    let mut conf = format!(
        "listen {http};\nsrv_group default {{ server {origin}; }}\n{block_action}\n",
        http = setup.http,
        origin = origin.addr(),
    );
    for v in [
        "app", "static", "php", "named", "cookie", "post", "regex", "notapi", "jumped", "case",
    ] {
        conf.push_str(&format!(
            "vhost {v} {{ proxy_pass default; resp_hdr_set X-Vhost {v}; }}\n"
        ));
    }
    conf.push_str(
        "http_chain redirects {\n\
             uri == \"/old/*\" -> 302 = https://$host/new$request_uri;\n\
             uri == \"/temp\" -> 307 = http://$host/elsewhere;\n\
             uri == \"/perm*\" -> 308 = https://static.example$request_uri;\n\
             -> jumped;\n\
         }\n\
         http_chain api {\n\
             method == post -> post;\n\
             -> app;\n\
         }\n\
         http_chain {\n\
             uri == \"/blocked*\" -> block;\n\
             host == \"redirect.test\" -> redirects;\n\
             host == \"api.test\" -> api;\n\
             host == \"MiXeD.Test\" -> case;\n\
             uri == \"/static/*\" -> static;\n\
             uri == \"*.php\" -> php;\n\
             hdr \"X-Name\" == \"v\" -> named;\n\
             cookie \"session\" == \"admin\" -> cookie;\n\
             method == post -> post;\n\
             uri ~ \"/^/re/[0-9]+$/\" -> regex;\n\
             host != \"api*\" -> notapi;\n\
         }\n",
    );
    let http = setup.http;
    let proxy = setup.start(&conf);
    (origin, proxy, http)
}

fn vhost_of(r: &RawResponse) -> Option<&str> {
    r.header("x-vhost")
}

#[test]
fn http_chain_conditions_route_to_vhosts() {
    let (origin, proxy, http) = chain_proxy("rules-chain", "block_action attack reply;");
    let cases: [(&str, &str, &str, &str); 14] = [
        // (method+target, host, extra header lines, expected vhost)
        ("GET /static/a.css", "x.test", "", "static"),
        ("GET /STATIC/b.css", "x.test", "", "static"),
        ("GET /dir/index.php", "x.test", "", "php"),
        ("GET /index.PHP", "x.test", "", "php"),
        ("GET /h", "x.test", "X-Name: v\r\n", "named"),
        ("GET /h", "x.test", "x-name: V\r\n", "named"),
        (
            "GET /c",
            "x.test",
            "Cookie: a=1; session=admin; b=2\r\n",
            "cookie",
        ),
        ("POST /p", "x.test", "Content-Length: 2\r\n", "post"),
        ("GET /re/123", "x.test", "", "regex"),
        ("GET /anything", "x.test", "", "notapi"),
        ("GET /m", "mixed.test", "", "case"),
        // Named chain reached by a jump; its own conditions, then its default rule.
        ("GET /x", "api.test", "", "app"),
        ("POST /x", "API.test", "Content-Length: 2\r\n", "post"),
        ("GET /not-redirected", "redirect.test", "", "jumped"),
    ];
    for (line, host, extra, vhost) in cases {
        let body = if line.starts_with("POST") { "ab" } else { "" };
        let req = format!("{line} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n{body}");
        let r = expect_response(once(http, req.as_bytes()), 200, &req, &proxy);
        assert_eq!(vhost_of(&r), Some(vhost), "{req}: {:?}", r.headers);
    }
    assert_eq!(origin.total_requests(), cases.len());
    // Near misses fall through to the last rule (`host != "api*"`), or match nothing.
    for (req, vhost) in [
        (get("/static", "x.test"), Some("notapi")),
        (get("/index.php5", "x.test"), Some("notapi")),
        (get_with("/h", "x.test", "X-Name: vv\r\n"), Some("notapi")),
        (
            get_with("/c", "x.test", "Cookie: session=admin2\r\n"),
            Some("notapi"),
        ),
        (get("/re/12a", "x.test"), Some("notapi")),
        (get("/re/", "x.test"), Some("notapi")),
    ] {
        let text = String::from_utf8_lossy(&req).into_owned();
        let r = expect_response(once(http, &req), 200, &text, &proxy);
        assert_eq!(vhost_of(&r), vhost, "{text}");
    }
}

#[test]
fn http_chain_block_replies_403_and_closes_and_no_match_keeps_the_connection() {
    let (origin, proxy, http) = chain_proxy("rules-block", "block_action attack reply;");
    for req in [get("/blocked", "x.test"), get("/blocked/deeper", "x.test")] {
        let text = String::from_utf8_lossy(&req).into_owned();
        let mut c = RawClient::connect(http).expect("connect");
        expect_response(c.request(&req, T), 403, &text, &proxy);
        let after = c.wait_closed(T);
        assert!(after.is_dropped(), "{text}: after the 403: {after}");
    }
    // `host != "api*"` is false and nothing else matches: no vhost, 403 in place (Tempesta's
    // error path, not a block), and the connection goes on.
    let mut c = RawClient::connect(http).expect("connect");
    expect_response(
        c.request(&get("/none", "apix.test"), T),
        403,
        "no rule",
        &proxy,
    );
    expect_response(
        c.request(&get("/none", "apix.test"), T),
        403,
        "again",
        &proxy,
    );
    assert_eq!(origin.total_requests(), 0);
    // With the access log off (this config has none) the warning still names the client.
    let logs = proxy.proc.logs();
    assert!(
        logs.contains("http_chain blocked 127.0.0.1 host \"x.test\" \"/blocked\""),
        "{logs}"
    );
}

#[test]
fn http_chain_block_with_default_block_action_drops_the_connection() {
    let (origin, proxy, http) = chain_proxy("rules-drop", "");
    let text = "GET /blocked";
    let outcome = once(http, &get("/blocked", "x.test"));
    assert!(
        matches!(outcome, Outcome::Reset | Outcome::Closed),
        "{text}: expected the connection dropped without a response, got {outcome}\n{}",
        proxy.proc.logs()
    );
    // No rule matching is not an attack: 403 under the default `block_action` too.
    let r = once(http, &get("/none", "apix.test"));
    assert_eq!(r.status(), Some(403), "no rule: {r}");
    // A routed request on the same proxy still works.
    expect_response(once(http, &get("/ok", "x.test")), 200, "routed", &proxy);
    assert_eq!(origin.total_requests(), 1);
}

#[test]
fn http_chain_redirects_substitute_host_and_request_uri() {
    let (origin, proxy, http) = chain_proxy("rules-redirect", "block_action attack reply;");
    let port = proxy_http_port_from(&proxy);
    let host_port = format!("redirect.test:{port}");
    let cases = [
        (
            "/old/page?q=1",
            "redirect.test",
            302,
            "https://redirect.test/new/old/page?q=1",
        ),
        (
            "/old/x",
            host_port.as_str(),
            302,
            &*format!("https://{host_port}/new/old/x"),
        ),
        (
            "/temp",
            "redirect.test",
            307,
            "http://redirect.test/elsewhere",
        ),
        (
            "/permanent/a?b",
            "redirect.test",
            308,
            "https://static.example/permanent/a?b",
        ),
    ];
    let mut c = RawClient::connect(http).expect("connect");
    for (path, host, status, location) in cases {
        let r = expect_response(c.request(&get(path, host), T), status, path, &proxy);
        assert_eq!(
            r.header("location"),
            Some(location),
            "{path}: {:?}",
            r.headers
        );
        assert_eq!(r.header("content-length"), Some("0"));
        assert!(r.header("date").is_some());
        assert!(r.body.is_empty());
    }
    assert_eq!(origin.total_requests(), 0);
}

fn proxy_http_port_from(proxy: &Proxy) -> u16 {
    let text = std::fs::read_to_string(&proxy.config).expect("config");
    proxy_http_port(&text)
}

/// A config with `block_action` lines and one proxied vhost.
fn block_action_proxy(tag: &str, actions: &str) -> (Origin, Proxy, SocketAddr) {
    let origin = echo_origin();
    let setup = Setup::new(tag);
    let conf = setup.config(origin.addr(), "", actions);
    let http = setup.http;
    let proxy = setup.start(&conf);
    (origin, proxy, http)
}

const MALFORMED: &[&[u8]] = &[
    b"GET / HTTP/1.1\r\nHost: site.test\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: site.test\r\nBad Name: x\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: site.test\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy",
];

#[test]
fn block_action_error_reply_sends_400_then_closes() {
    let (origin, proxy, http) = block_action_proxy("rules-err-reply", "block_action error reply;");
    for req in MALFORMED {
        let text = String::from_utf8_lossy(req).into_owned();
        let mut c = RawClient::connect(http).expect("connect");
        expect_response(c.request(req, T), 400, &text, &proxy);
        let after = c.wait_closed(T);
        assert!(after.is_dropped(), "{text:?}: after the 400: {after}");
    }
    expect_response(once(http, &get("/", "site.test")), 200, "good", &proxy);
    assert_eq!(origin.total_requests(), 1);
}

#[test]
fn block_action_error_drop_closes_without_a_response() {
    let (origin, proxy, http) = block_action_proxy("rules-err-drop", "block_action error drop;");
    for req in MALFORMED {
        let text = String::from_utf8_lossy(req).into_owned();
        let outcome = once(http, req);
        assert!(
            matches!(outcome, Outcome::Reset | Outcome::Closed),
            "{text:?}: expected no response, got {outcome}\n{}",
            proxy.proc.logs()
        );
    }
    expect_response(once(http, &get("/", "site.test")), 200, "good", &proxy);
    assert_eq!(origin.total_requests(), 1);
}

#[test]
fn block_action_attack_reply_and_error_drop_are_independent() {
    // Malformed requests are dropped, blocked ones answered: each kind follows its own line.
    let (_origin, proxy, http) = block_action_proxy(
        "rules-mixed",
        "block_action error drop;\nblock_action attack reply;\nfrang_limits { http_methods GET; }",
    );
    let outcome = once(http, MALFORMED[0]);
    assert!(
        matches!(outcome, Outcome::Reset | Outcome::Closed),
        "malformed: {outcome}"
    );
    let post = b"POST / HTTP/1.1\r\nHost: site.test\r\nContent-Length: 0\r\n\r\n";
    expect_response(once(http, post), 403, "POST", &proxy);
}
