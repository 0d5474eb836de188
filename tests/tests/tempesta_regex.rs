//! Tempesta's regular expressions, through the binary: `~ "/PATTERN/FLAGS"` in `http_chain`
//! (host, hdr, uri) and `location ~` / `location regex` in a vhost pick the server group as
//! Tempesta picks it (cases after tempesta-test's forwarding/test_match_host_forwarded_regex,
//! written anew), over HTTP/1.1 and HTTP/2; an expression Tempesta would not load is refused.

use std::net::SocketAddr;
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::rawclient::{get_with, Outcome, RawClient};

const T: Duration = Duration::from_secs(5);

/// Five origins answering their own number, as the groups grp1..grp5 of the config.
fn numbered_origins() -> Vec<Origin> {
    (0..5)
        .map(|n| Origin::start(move |_| Response::ok(n.to_string())))
        .collect()
}

fn groups(origins: &[Origin]) -> String {
    origins
        .iter()
        .enumerate()
        .map(|(i, o)| format!("srv_group grp{} {{ server {}; }}\n", i + 1, o.addr()))
        .collect()
}

fn start(tag: &str, origins: &[Origin], vhosts_and_chain: &str) -> (Proxy, SocketAddr, u16) {
    let setup = Setup::new(tag);
    let text = format!(
        "listen {http};\nlisten {https} proto=\"h2,https\";\n\
         tls_certificate {cert};\ntls_certificate_key {key};\ntls_match_any_server_name;\n\
         block_action attack reply;\n\
         frang_limits {{ http_strict_host_checking false; }}\n\
         {groups}{vhosts_and_chain}",
        http = setup.http,
        https = setup.https,
        cert = setup.cert.display(),
        key = setup.key.display(),
        groups = groups(origins),
    );
    let (http, port) = (setup.http, setup.https.port());
    (setup.start(&text), http, port)
}

/// Status and body of one HTTP/1.1 request.
fn h1(http: SocketAddr, path: &str, host: &str, extra: &str) -> (u16, String) {
    let mut c = RawClient::connect(http).expect("connect");
    match c.request(&get_with(path, host, extra), T) {
        Outcome::Response(r) => (r.status, String::from_utf8_lossy(&r.body).into_owned()),
        other => panic!("GET {path} Host {host}: {other}"),
    }
}

/// Status and body of one HTTP/2 request by curl, `:authority` = `host`.
fn h2(port: u16, path: &str, host: &str, headers: &[&str]) -> (u16, String) {
    let url = format!("https://127.0.0.1:{port}{path}");
    let authority = format!("Host: {host}");
    let mut args = vec!["-sk", "--http2", "-H", &authority, "-w", "\n%{http_code}"];
    for h in headers {
        args.extend(["-H", h]);
    }
    args.push(&url);
    let (_, out, err) = e2e::curl(&args, 10);
    let (body, code) = out.rsplit_once('\n').unwrap_or(("", &out));
    let status = code
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("curl {url}: {out} {err}"));
    (status, body.to_string())
}

const LOCATIONS: &str = "\
vhost test {
    proxy_pass grp5;
    location ~ \"/^/article/id/[0-9]+/\" { proxy_pass grp2; }
    location ~ \"/shop/\" { proxy_pass grp1; }
    location regex \"/wiki/\" { proxy_pass grp2; }
}
vhost work {
    proxy_pass grp5;
    location ~ \"/shop/i\" { proxy_pass grp3; }
    location ~ \"/wiki/\" { proxy_pass grp4; }
}
http_chain {
    host ~ \"/test/i\" -> test;
    host ~ \"/work/i\" -> work;
    host ~ \"/(a+)+$/\" -> work;
    -> block;
}
";

/// The host picks the vhost by regex, then the URI its location by regex, first match in
/// file order; a URI no location matches goes to the vhost's own group; a host no rule
/// matches is blocked (403), a ReDoS-shaped host too, at once. On the binary before this
/// change the `location ~` lines were refused as misplaced chain rules.
#[test]
fn regex_hosts_pick_the_vhost_and_regex_locations_the_group() {
    let origins = numbered_origins();
    let (proxy, http, port) = start("regex-locations", &origins, LOCATIONS);
    let cases = [
        ("/testwiki", "testwiki.com", "1"),
        ("/article/id/1234", "testapp.com", "1"),
        ("/article/id/abc", "testapp.com", "4"),
        ("/testshop", "testapp.com", "0"),
        ("/testapp", "testapp.com", "4"),
        ("/testwiki", "WorkShop.com", "3"),
        ("/testShop", "WorkWiki.com", "2"),
        ("/testapp", "workapp.com", "4"),
    ];
    for (path, host, body) in cases {
        let got = h1(http, path, host, "");
        assert_eq!(
            got,
            (200, body.to_string()),
            "HTTP/1.1 {host}{path}\n{}",
            proxy.proc.logs()
        );
        let got = h2(port, path, host, &[]);
        assert_eq!(got, (200, body.to_string()), "HTTP/2 {host}{path}");
    }
    let redos = format!("{}X", "a".repeat(60));
    for host in ["ordinary.com", redos.as_str()] {
        assert_eq!(h1(http, "/ignored", host, "").0, 403, "{host}");
        assert_eq!(h2(port, "/ignored", host, &[]).0, 403, "{host}");
    }
}

const HEADERS: &str = "\
vhost shop { proxy_pass grp1; }
vhost wiki { proxy_pass grp2; }
vhost app { proxy_pass grp3; }
vhost doc { proxy_pass grp4; }
http_chain {
    hdr cookie ~ \"/bad_cookie/i\" -> block;
    hdr host ~ \"/stap/\" -> app;
    host ~ \"/dho/\" -> block;
    host ~ \"/tsho/\" -> shop;
    hdr User-Agent ~ \"/ill/\" -> wiki;
    hdr forwarded ~ \"/t=se/\" -> doc;
    hdr forwarded ~ \"/host\\./\" -> app;
    host ~ \"/app|ad12:ca16/i\" -> app;
    hdr test_raw ~ \"/raw_value/\" -> app;
    -> block;
}
";

/// Header and host expressions, case as the flags say (`ill` does not match `MoziLla`).
#[test]
fn regex_header_rules_match_as_their_flags_say() {
    let origins = numbered_origins();
    let (proxy, http, _) = start("regex-headers", &origins, HEADERS);
    let cases: [(&str, &str, &str); 8] = [
        ("testshop.com", "Forwarded: host=testapp.com\r\n", "0"),
        ("testapp.com", "", "2"),
        ("testraw.headers", "test_raw: test_raw_value\r\n", "2"),
        ("testwiki.com", "User-Agent: Mozilla\r\n", "1"),
        ("TesTaPp.cOm", "Forwarded: host=sent.hhh.ignored\r\n", "3"),
        (
            "TesTaPp.cOm",
            "Forwarded: host=forwarded.host.ignored\r\n",
            "2",
        ),
        (
            "TesTaPp.cOm",
            "Forwarded: host=forwarded.hhh.ignored\r\n",
            "2",
        ),
        (
            "testshop.com",
            "Cookie: good_cookie=val; another=cookie\r\n",
            "0",
        ),
    ];
    for (host, extra, body) in cases {
        assert_eq!(
            h1(http, "/foo", host, extra),
            (200, body.to_string()),
            "{host} {extra:?}\n{}",
            proxy.proc.logs()
        );
    }
    for (host, extra) in [
        ("bobhost.com", ""),
        ("testwiki.com", "User-Agent: MoziLla\r\n"),
        ("unkhost.com", ""),
        ("testshop.com", "Cookie: bad_cookie=val; another=cookie\r\n"),
    ] {
        assert_eq!(h1(http, "/foo", host, extra).0, 403, "{host} {extra:?}");
    }
}

/// What Hyperscan would not compile, Tempesta does not load: the proxy refuses it with the
/// line, the column and the form to write.
#[test]
fn expressions_tempesta_would_not_load_are_refused() {
    let origins = numbered_origins();
    for (chain, says) in [
        ("host ~ \"^test\" -> block;", "does not start with `/`"),
        ("host ~ \"/api/v1\" -> block;", "unknown flag `v`"),
        ("uri ~ \"/a*/\" -> block;", "matches the empty string"),
        ("uri ~ \"//\" -> block;", "is empty"),
    ] {
        let setup = Setup::new("regex-refused");
        let text = format!(
            "listen {};\n{}vhost v {{ proxy_pass grp1; }}\nhttp_chain {{\n    {chain}\n    -> v;\n}}\n",
            setup.http,
            groups(&origins),
        );
        let path = setup.dir.path().join("refused.conf");
        std::fs::write(&path, text).expect("write config");
        let run = e2e::proxy_cmd(&path, &["-t"]);
        let out = e2e::output_text(&run);
        assert!(!run.status.success(), "{chain}: accepted\n{out}");
        assert!(out.contains("refused.conf:9:"), "{chain}: {out}");
        assert!(out.contains(says), "{chain}: {out}");
    }
}
