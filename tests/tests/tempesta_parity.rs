//! Behaviour Tempesta FW has and the proxy matches (issue 35): `proxy_pass ... backup=`,
//! `*_hdr_set NAME;` removing a field, the cache's defaults under `cache_fulfill`, PURGE
//! without `cache_purge`, health monitors' CRC32, `block_action`'s custom pages and
//! `http_resp_code_block`, and the vhosts a top-level `sticky` block reaches. Each case is
//! written from Tempesta's documented or tested behaviour and runs the real binary.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use e2e::free_port;
use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::rawclient::{get, Outcome, RawClient, RawResponse};

const T: Duration = Duration::from_secs(5);

/// Sends `request` on a new connection and returns the response, or panics with the logs.
fn answer(addr: SocketAddr, request: &[u8], proxy: &Proxy) -> RawResponse {
    let mut c = RawClient::connect(addr).expect("connect");
    match c.request(request, T) {
        Outcome::Response(r) => r,
        other => panic!("expected a response, got {other}\n{}", proxy.proc.logs()),
    }
}

fn body_text(r: &RawResponse) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

/// `proxy_pass main backup=spare`: while no server of `main` accepts connections the
/// requests are answered by `spare`; once `main`'s server listens again they go back to it.
#[test]
fn backup_group_answers_while_the_main_group_is_down_and_main_takes_over_again() {
    let setup = Setup::new("parity-backup");
    let main_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let spare = Origin::start(|_| Response::ok("spare"));
    let text = format!(
        "listen {http};\n\
         srv_group main {{ server {main_addr}; }}\n\
         srv_group spare {{ server {spare}; }}\n\
         vhost site {{ proxy_pass main backup=spare; }}\n\
         http_chain {{ -> site; }}\n",
        http = setup.http,
        spare = spare.addr(),
    );
    let http = setup.http;
    let proxy = setup.start(&text);

    // Nobody listens on main's port: every request (on new connections, so both workers
    // see it) is the backup's, first ones included.
    for i in 0..6 {
        let r = answer(http, &get(&format!("/down{i}"), "site"), &proxy);
        assert_eq!(
            (r.status, body_text(&r).as_str()),
            (200, "spare"),
            "request {i}"
        );
    }
    assert_eq!(spare.total_requests(), 6);

    // Main comes back: within its probe backoff, requests are main's again.
    let main = Origin::start_at(main_addr, |_| Response::ok("main"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut consecutive = 0;
    while consecutive < 6 {
        assert!(
            Instant::now() < deadline,
            "main never took over again ({} of its requests)\n{}",
            main.total_requests(),
            proxy.proc.logs()
        );
        let r = answer(http, &get("/up", "site"), &proxy);
        assert_eq!(r.status, 200);
        if body_text(&r) == "main" {
            consecutive += 1;
        } else {
            consecutive = 0;
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The names a request or response carries, lower-cased, for assertions on absence.
fn names(headers: &[(String, String)]) -> Vec<&str> {
    headers.iter().map(|(n, _)| n.as_str()).collect()
}

/// A proxy with `edits` at top level in front of an origin that answers with the fields in
/// `response_fields` and the request's field names, one a line, as its body.
fn header_edit_proxy(
    tag: &str,
    edits: &str,
    response_fields: &'static [(&str, &str)],
) -> (Proxy, Origin, SocketAddr) {
    let setup = Setup::new(tag);
    let origin = Origin::start(move |r| {
        let seen: Vec<&str> = r.headers.iter().map(|(n, _)| n.as_str()).collect();
        response_fields
            .iter()
            .fold(Response::ok(seen.join("\n")), |resp, (n, v)| {
                resp.header(n, v)
            })
    });
    let text = setup.config(origin.addr(), "", edits);
    let http = setup.http;
    (setup.start(&text), origin, http)
}

/// `req_hdr_set NAME;` removes every field of that name from the forwarded request, special
/// ones too (If-None-Match, Forwarded), several names at once, repeated fields included;
/// the fields it does not name go on.
#[test]
fn req_hdr_set_without_a_value_removes_the_fields() {
    let (proxy, origin, http) = header_edit_proxy(
        "parity-req-hdr",
        "req_hdr_set x-my-hdr;\nreq_hdr_set if-none-match;\nreq_hdr_set forwarded;\n\
         req_hdr_set non-exist-header;\n",
        &[],
    );
    let request = b"GET /edit HTTP/1.1\r\nHost: site\r\nX-My-Hdr: original\r\nX-My-Hdr: again\r\n\
        If-None-Match: \"qwe\"\r\nForwarded: for=a.example\r\nForwarded: for=b.example\r\n\
        X-Kept: 1\r\n\r\n";
    let r = answer(http, request, &proxy);
    assert_eq!(r.status, 200, "{}", proxy.proc.logs());
    let seen = origin.requests();
    let last = seen.last().expect("the origin saw the request");
    let got = names(&last.headers);
    for gone in ["x-my-hdr", "if-none-match", "forwarded", "non-exist-header"] {
        assert!(!got.contains(&gone), "{gone} reached the origin: {got:?}");
    }
    assert_eq!(last.header("x-kept"), Some("1"), "{got:?}");
    assert!(got.contains(&"host"), "{got:?}");
}

/// `resp_hdr_set NAME;` removes the fields from the response, Set-Cookie (twice) included,
/// whether it comes from the origin or, under `cache_fulfill`, from the cache.
#[test]
fn resp_hdr_set_without_a_value_removes_the_fields_fresh_and_cached() {
    let (proxy, origin, http) = header_edit_proxy(
        "parity-resp-hdr",
        "cache 2;\ncache_fulfill * *;\nresp_hdr_set set-cookie;\nresp_hdr_set x-my-hdr;\n\
         resp_hdr_set non-exist-header;\n",
        &[
            ("Cache-Control", "max-age=60"),
            ("Set-Cookie", "a=1"),
            ("Set-Cookie", "b=2"),
            ("X-My-Hdr", "original"),
            ("X-Kept", "1"),
        ],
    );
    for round in ["from the origin", "from the cache"] {
        let r = answer(http, &get("/resp", "site"), &proxy);
        assert_eq!(r.status, 200, "{round}\n{}", proxy.proc.logs());
        let got = names(&r.headers);
        for gone in ["set-cookie", "x-my-hdr", "non-exist-header"] {
            assert!(
                !got.contains(&gone),
                "{round}: {gone} reached the client: {got:?}"
            );
        }
        assert_eq!(r.header("x-kept"), Some("1"), "{round}: {got:?}");
    }
    assert_eq!(
        origin.total_requests(),
        1,
        "the second answer is the cache's"
    );
}

/// Under `cache_fulfill`, a 200 with no Cache-Control, Expires or Last-Modified is stored
/// and served from the cache, as Tempesta does with its `cache_ttl` default (2147483647 s).
#[test]
fn a_response_without_freshness_information_is_served_from_the_cache() {
    let setup = Setup::new("parity-cache-unset");
    let origin = Origin::start(|r| Response::ok(format!("body of {}", r.path())));
    let text = setup.config(origin.addr(), "", "cache 2;\ncache_fulfill * *;\n");
    let http = setup.http;
    let proxy = setup.start(&text);
    for round in ["from the origin", "from the cache", "again from the cache"] {
        let r = answer(http, &get("/plain", "site"), &proxy);
        assert_eq!(
            (r.status, body_text(&r).as_str()),
            (200, "body of /plain"),
            "{round}"
        );
    }
    assert_eq!(origin.hits("/plain"), 1, "{:?}", origin.requests());
}

/// A PURGE where `cache_purge` is not configured gets 403 from the proxy while caching is
/// on, and never reaches the origin; with `cache 0` it is forwarded like any method (as in
/// Tempesta, whose cache code is not reached then).
#[test]
fn purge_without_cache_purge_is_refused_while_caching_is_on() {
    let purge = b"PURGE /page HTTP/1.1\r\nHost: site\r\n\r\n";
    // As in Tempesta, frang must let the method through first.
    let methods = "frang_limits { http_methods get head purge; }\n";
    for (cache, expected, forwarded) in [
        ("cache 2;\ncache_fulfill * *;\n", 403, 0),
        ("cache 0;\n", 200, 1),
    ] {
        let setup = Setup::new("parity-purge");
        let origin = Origin::start(|_| Response::ok("origin"));
        let text = setup.config(origin.addr(), "", &format!("{methods}{cache}"));
        let http = setup.http;
        let proxy = setup.start(&text);
        let r = answer(http, purge, &proxy);
        assert_eq!(r.status, expected, "{cache}");
        let purges = origin
            .requests()
            .iter()
            .filter(|r| r.method == "PURGE")
            .count();
        assert_eq!(purges, forwarded, "{cache}");
    }
}

/// Polls `/page` through the proxy until its status is `status`, for at most `within`.
fn wait_for_status(http: SocketAddr, status: u16, within: Duration, proxy: &Proxy) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if answer(http, &get("/page", "site"), proxy).status == status {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// An origin whose health page says "Hello" until `changed` is set, then something else.
fn origin_with_health_body(
    health_path: &'static str,
    changed: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Origin {
    Origin::start(move |r| {
        if r.path() != health_path {
            return Response::ok("page");
        }
        if changed.load(std::sync::atomic::Ordering::SeqCst) {
            Response::ok("Hello, changed")
        } else {
            Response::ok("Hello")
        }
    })
}

/// `resp_crc32 0x31f37e9f` is Tempesta's CRC32 of "Hello" (the kernel's crc32_le from 0,
/// no inversions): a server answering "Hello" stays up; a different body suspends it.
#[test]
fn resp_crc32_is_computed_as_tempesta_computes_it() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let changed = std::sync::Arc::new(AtomicBool::new(false));
    let origin = origin_with_health_body("/health", changed.clone());
    let setup = Setup::new("parity-crc32");
    let text = setup.config(origin.addr(), "health h;", "").replace(
        "srv_group default",
        "health_check h { request \"GET /health HTTP/1.0\\r\\n\\r\\n\"; resp_code 200; \
         resp_crc32 0x31f37e9f; timeout 1; }\nsrv_group default",
    );
    let http = setup.http;
    let proxy = setup.start(&text);
    let checked = Instant::now() + Duration::from_secs(10);
    while origin.hits("/health") < 4 && Instant::now() < checked {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(origin.hits("/health") >= 4, "{}", proxy.proc.logs());
    for _ in 0..5 {
        let r = answer(http, &get("/page", "site"), &proxy);
        assert_eq!(
            r.status,
            200,
            "a healthy server suspended\n{}",
            proxy.proc.logs()
        );
    }
    changed.store(true, Ordering::SeqCst);
    assert!(
        wait_for_status(http, 502, Duration::from_secs(8), &proxy),
        "a wrong body never suspended the server\n{}",
        proxy.proc.logs()
    );
}

/// Checks that a monitor with `resp_crc32 auto` learns the health body's CRC32 from its
/// first answer, suspends the server when the body changes and takes it back when the body
/// is the first one again.
fn auto_crc_follows_the_health_body(
    tag: &str,
    health_path: &'static str,
    group_extra: &str,
    monitor: &str,
    within: Duration,
) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let changed = std::sync::Arc::new(AtomicBool::new(false));
    let origin = origin_with_health_body(health_path, changed.clone());
    let setup = Setup::new(tag);
    let text = setup
        .config(origin.addr(), group_extra, "")
        .replace("srv_group default", &format!("{monitor}srv_group default"));
    let http = setup.http;
    let proxy = setup.start(&text);
    let learned = Instant::now() + within;
    while origin.hits(health_path) < 2 && Instant::now() < learned {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        origin.hits(health_path) >= 2,
        "never checked\n{}",
        proxy.proc.logs()
    );
    assert_eq!(answer(http, &get("/page", "site"), &proxy).status, 200);
    changed.store(true, Ordering::SeqCst);
    assert!(
        wait_for_status(http, 502, within, &proxy),
        "a changed body never suspended the server\n{}",
        proxy.proc.logs()
    );
    changed.store(false, Ordering::SeqCst);
    assert!(
        wait_for_status(http, 200, within, &proxy),
        "the first body again never brought the server back\n{}",
        proxy.proc.logs()
    );
}

/// `health_check auto { ... resp_crc32 auto; }` loads (the parser refused `auto` before)
/// and means what it means in Tempesta.
#[test]
fn resp_crc32_auto_learns_the_body_and_notices_a_change() {
    auto_crc_follows_the_health_body(
        "parity-crc-auto",
        "/health",
        "health auto;",
        "health_check auto { request \"GET /health HTTP/1.0\\r\\n\\r\\n\"; resp_code 200; \
         resp_crc32 auto; timeout 1; }\n",
        Duration::from_secs(8),
    );
}

/// The implicit `auto` monitor (no `health_check auto` block: `GET /` every 10 s, 200,
/// CRC32 learned) notices a changed body too. Takes about 30 s: Tempesta's interval.
#[test]
fn implicit_auto_monitor_notices_a_changed_body() {
    auto_crc_follows_the_health_body(
        "parity-implicit-auto",
        "/",
        "health auto;",
        "",
        Duration::from_secs(25),
    );
}

/// A health page larger than a read buffer (the implicit `auto` monitor checks `/`, often
/// a full page) is checked whole: the server stays up.
#[test]
fn a_large_health_body_is_checked_whole() {
    let origin = Origin::start(|r| match r.path() {
        "/health" => Response::pattern(200_000),
        _ => Response::ok("page"),
    });
    let setup = Setup::new("parity-crc-large");
    let text = setup.config(origin.addr(), "health auto;", "").replace(
        "srv_group default",
        "health_check auto { request \"GET /health HTTP/1.0\\r\\n\\r\\n\"; resp_code 200; \
         resp_crc32 auto; timeout 1; }\nsrv_group default",
    );
    let http = setup.http;
    let proxy = setup.start(&text);
    let checked = Instant::now() + Duration::from_secs(10);
    while origin.hits("/health") < 6 && Instant::now() < checked {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(origin.hits("/health") >= 6, "{}", proxy.proc.logs());
    for _ in 0..5 {
        let r = answer(http, &get("/page", "site"), &proxy);
        assert_eq!(
            r.status,
            200,
            "suspended for a large body\n{}",
            proxy.proc.logs()
        );
    }
}

/// `response_body 4* FILE` / `response_body 5* FILE` / `response_body 403 FILE`: the proxy's
/// own error responses carry the configured page (a later directive wins for the statuses it
/// names, as Tempesta applies them in order), over HTTP/1.1 and HTTP/2 alike.
#[test]
fn response_body_pages_are_served_for_the_proxys_own_errors() {
    let setup = Setup::new("parity-response-body");
    let dead = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let page = |name: &str, text: &str| {
        let path = setup.dir.join(name);
        std::fs::write(&path, text).expect("write page");
        path.display().to_string()
    };
    let (p4, p5, p403) = (
        page("4xx.html", "<p>client error page</p>"),
        page("5xx.html", "<p>server error page</p>"),
        page("403.html", "<p>forbidden page</p>"),
    );
    let text = format!(
        "listen {http};\nlisten {https} proto=\"h2,https\";\n\
         response_body 4* {p4};\nresponse_body 5* {p5};\nresponse_body 403 {p403};\n\
         block_action attack reply;\n\
         srv_group default {{ server {dead}; }}\n\
         tls_match_any_server_name;\n\
         vhost site {{ tls_certificate {cert}; tls_certificate_key {key}; proxy_pass default; }}\n\
         http_chain {{ uri == \"/forbidden\" -> block; -> site; }}\n",
        http = setup.http,
        https = setup.https,
        cert = setup.cert.display(),
        key = setup.key.display(),
    );
    let (http, https) = (setup.http, setup.https);
    let proxy = setup.start(&text);

    let r = answer(http, &get("/any", "site"), &proxy);
    assert_eq!(
        (r.status, body_text(&r).as_str()),
        (502, "<p>server error page</p>")
    );
    assert_eq!(r.header("content-length"), Some("24"));
    let r = answer(http, &get("/forbidden", "site"), &proxy);
    assert_eq!(
        (r.status, body_text(&r).as_str()),
        (403, "<p>forbidden page</p>")
    );
    // A malformed request line: 400, answered before any exchange exists.
    let r = answer(http, b"GET /a b c HTTP/1.1\r\nHost: site\r\n\r\n", &proxy);
    assert_eq!(
        (r.status, body_text(&r).as_str()),
        (400, "<p>client error page</p>")
    );

    // HTTP/2 (curl over TLS): the same pages.
    let url = format!("https://localhost:{}/forbidden", https.port());
    let resolve = format!("localhost:{}:127.0.0.1", https.port());
    let (_, out, err) = e2e::curl(
        &[
            "-sk",
            "--http2",
            "--resolve",
            &resolve,
            "-w",
            "\n%{http_code}",
            &url,
        ],
        10,
    );
    assert_eq!(out, "<p>forbidden page</p>\n403", "{err}");
}

/// `http_resp_code_block`: the response over the limit is not delivered; the client gets 403
/// and the connection closes (Tempesta's behaviour; the previous binary sent the origin's
/// response first).
#[test]
fn http_resp_code_block_replaces_the_offending_response() {
    let setup = Setup::new("parity-resp-code-block");
    let origin = Origin::start(|_| Response::ok("origin says not found").status(404));
    let text = setup.config(
        origin.addr(),
        "",
        "block_action attack reply;\nfrang_limits { http_resp_code_block 404 2 10; }\n",
    );
    let http = setup.http;
    let proxy = setup.start(&text);
    let mut c = RawClient::connect(http).expect("connect");
    for i in 1..=2 {
        match c.request(&get(&format!("/gone{i}"), "site"), T) {
            Outcome::Response(r) => assert_eq!(r.status, 404, "#{i}"),
            other => panic!("#{i}: {other}\n{}", proxy.proc.logs()),
        }
    }
    match c.request(&get("/gone3", "site"), T) {
        Outcome::Response(r) => {
            assert_eq!(r.status, 403, "{}", proxy.proc.logs());
            assert!(!body_text(&r).contains("origin says"), "{:?}", r.body);
        }
        other => panic!("#3: {other}\n{}", proxy.proc.logs()),
    }
    assert!(c.wait_closed(T).is_dropped(), "the connection stays open");
    assert_eq!(origin.total_requests(), 3);
}

/// `server_failover_http 404 3 10` on a monitored group: more than three 404s from the
/// server within 10 s suspend it (502 while no server is up); its health monitor brings it
/// back.
#[test]
fn server_failover_http_suspends_a_server_until_its_monitor_finds_it_alive() {
    let origin = Origin::start(|r| match r.path() {
        "/health" | "/ok" => Response::ok("fine"),
        _ => Response::ok("missing").status(404),
    });
    let setup = Setup::new("parity-failover-http");
    let text = setup.config(origin.addr(), "health h;", "").replace(
        "srv_group default",
        "health_check h { request \"GET /health HTTP/1.0\\r\\n\\r\\n\"; resp_code 200; \
         timeout 3; }\nserver_failover_http 404 3 10;\nsrv_group default",
    );
    let http = setup.http;
    let proxy = setup.start(&text);
    // One keep-alive connection: one worker sees every response.
    let mut c = RawClient::connect(http).expect("connect");
    let mut status = |path: &str| match c.request(&get(path, "site"), T) {
        Outcome::Response(r) => r.status,
        other => panic!("{path}: {other}\n{}", proxy.proc.logs()),
    };
    for i in 1..=4 {
        assert_eq!(status(&format!("/missing{i}")), 404, "#{i}");
    }
    assert_eq!(status("/ok"), 502, "the server was not suspended");
    let deadline = Instant::now() + Duration::from_secs(10);
    while status("/ok") != 200 {
        assert!(
            Instant::now() < deadline,
            "the monitor never brought the server back\n{}",
            proxy.proc.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A `response_body` file that cannot be read refuses the configuration (Tempesta refuses
/// it too), saying which file.
#[test]
fn a_missing_response_body_file_refuses_the_configuration() {
    let dir = e2e::TempDir::new("parity-response-body-missing");
    let path = dir.join("proxy.conf");
    let text = "listen 127.0.0.1:1;\nresponse_body 5* missing-5xx.html;\n\
                srv_group default { server 127.0.0.1:2; }\nvhost site { proxy_pass default; }\n\
                http_chain { -> site; }\n";
    std::fs::write(&path, text).expect("write config");
    let out = e2e::proxy_cmd(&path, &["-t"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot read response_body file") && stderr.contains("missing-5xx.html"),
        "{stderr}"
    );
}

/// A top-level `sticky` block reaches the vhosts whose sections end after it, and the
/// default vhost (resolved at the end of the file), not the vhosts before it: Tempesta
/// resolves a vhost's sticky settings when its section ends. The previous binary applied
/// the block to every vhost (`early` got the 302 too).
#[test]
fn a_top_level_sticky_block_reaches_only_the_vhosts_after_it() {
    let setup = Setup::new("parity-sticky-order");
    let origin = Origin::start(|_| Response::ok("origin"));
    let text = format!(
        "listen {http};\n\
         frang_limits {{ http_strict_host_checking false; }}\n\
         srv_group default {{ server {origin}; }}\n\
         vhost early {{ proxy_pass default; }}\n\
         sticky {{ cookie enforce; secret \"k\"; }}\n\
         vhost late {{ proxy_pass default; }}\n\
         http_chain {{ host == \"early\" -> early; host == \"late\" -> late; -> default; }}\n",
        http = setup.http,
        origin = origin.addr(),
    );
    let http = setup.http;
    let proxy = setup.start(&text);
    for (host, status) in [("early", 200), ("late", 302), ("other", 302)] {
        let r = answer(http, &get("/", host), &proxy);
        assert_eq!(r.status, status, "Host {host}: {r:?}");
    }
}
