//! Issue 36 item 1 through the real binary: nginx's first-day
//! `return 301 https://$host$request_uri` written in the proxy's language, with the
//! `scheme` condition (an extension) of `http_chain`: a plain-HTTP request, over HTTP/1.1 or
//! h2c, is sent to the same host, path and query over https; an https one is served.

use std::net::SocketAddr;
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::Setup;
use e2e::{curl, free_port, wait_for_port};

/// `curl -sk` at `url` through `addr` with `Host: HOST` as a client on the default port
/// sends it; returns (status, Location, body).
fn fetch(addr: SocketAddr, url: &str, flags: &[&str]) -> (String, String, String) {
    let resolve = format!("site.test:{}:127.0.0.1", addr.port());
    let mut args = vec!["-k", "--resolve", &resolve, "-H", "Host: site.test"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["-w", "\n%{http_code} %{redirect_url}", url]);
    let (status, out, err) = curl(&args, 10);
    assert!(status.success(), "{url}: {err}");
    let (body, meta) = out.rsplit_once('\n').unwrap_or_default();
    let (code, location) = meta.split_once(' ').unwrap_or((meta, ""));
    (code.to_string(), location.to_string(), body.to_string())
}

#[test]
fn plain_http_is_redirected_to_the_same_uri_over_https_and_https_is_served() {
    let origin = Origin::start(|r| Response::ok(format!("app saw {}", r.target)));
    let setup = Setup::new("redirect-https");
    let (http, https) = (setup.http, setup.https);
    let h2c = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = setup
        .config(origin.addr(), "", "")
        .replacen("listen ", &format!("listen {h2c} proto=h2c;\nlisten "), 1)
        .replace(
            "http_chain { -> site; }",
            "http_chain {\n  scheme == \"http\" -> 301 = https://$host$request_uri;\n  -> site;\n}",
        );
    let proxy = setup.start(&conf);
    assert!(wait_for_port(h2c, Duration::from_secs(10)));
    let target = "/a/b.html?x=1&y=%20z";
    for (addr, flags) in [(http, &[][..]), (h2c, &["--http2-prior-knowledge"][..])] {
        let url = format!("http://site.test:{}{target}", addr.port());
        let (code, location, _) = fetch(addr, &url, flags);
        assert_eq!(code, "301", "{url} {flags:?}\n{}", proxy.proc.logs());
        assert_eq!(location, format!("https://site.test{target}"), "{flags:?}");
    }
    let url = format!("https://site.test:{}{target}", https.port());
    let (code, _, body) = fetch(https, &url, &[]);
    assert_eq!(code, "200", "{}", proxy.proc.logs());
    assert_eq!(body, "app saw /a/b.html?x=1&y=%20z");
    assert_eq!(
        origin.total_requests(),
        1,
        "only the https request reached the app"
    );
}
