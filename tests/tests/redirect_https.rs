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

/// The configuration block of docs/OPERATIONS.md's first "From nginx" recipe, as written there.
fn operations_recipe() -> String {
    let text = std::fs::read_to_string(e2e::workspace_root().join("docs/OPERATIONS.md"))
        .expect("read docs/OPERATIONS.md");
    let start = text
        .find("      listen 80;")
        .expect("the recipe starts with `listen 80;`");
    text[start..]
        .lines()
        .take_while(|l| l.starts_with("      ") || l.is_empty())
        .take_while(|l| !l.is_empty())
        .map(|l| format!("{}\n", &l[6..]))
        .collect()
}

/// OPERATIONS.md's recipe with its listeners, backend and certificate moved to this test's
/// (each of which the recipe must name).
fn recipe_on(
    http: SocketAddr,
    https: SocketAddr,
    origin: SocketAddr,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> String {
    let recipe = operations_recipe();
    for needle in [
        "listen 80;",
        "listen 443 ",
        "127.0.0.1:8000",
        "/etc/ktls-proxy/certs/example.com.crt",
        "/etc/ktls-proxy/certs/example.com.key",
    ] {
        assert!(
            recipe.contains(needle),
            "the recipe has no {needle}:\n{recipe}"
        );
    }
    recipe
        .replace("listen 80;", &format!("listen {http};"))
        .replace("listen 443 ", &format!("listen {https} "))
        .replace("127.0.0.1:8000", &origin.to_string())
        .replace(
            "/etc/ktls-proxy/certs/example.com.crt",
            &cert.display().to_string(),
        )
        .replace(
            "/etc/ktls-proxy/certs/example.com.key",
            &key.display().to_string(),
        )
}

#[test]
fn the_operations_recipe_redirects_and_serves_as_documented() {
    let origin = Origin::start(|r| {
        Response::ok(format!(
            "{} over {}",
            r.target,
            r.header("x-forwarded-proto").unwrap_or("?")
        ))
    });
    let dir = e2e::TempDir::new("recipe-https");
    let (cert, key) = e2e::gen_cert(
        dir.path(),
        "example",
        e2e::KeyKind::EcdsaP256,
        &["example.com"],
    );
    let http = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let https = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = recipe_on(http, https, origin.addr(), &cert, &key);
    let proxy = e2e::proxy::Proxy::start(dir, &conf, http);
    assert!(wait_for_port(https, Duration::from_secs(10)));
    let resolve = |addr: SocketAddr| format!("example.com:{}:127.0.0.1", addr.port());
    let url =
        |scheme: &str, addr: SocketAddr| format!("{scheme}://example.com:{}/x?y=1", addr.port());
    // A client on port 80 sends `Host: example.com`.
    let (st, out, err) = curl(
        &[
            "--resolve",
            &resolve(http),
            "-H",
            "Host: example.com",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{redirect_url}",
            &url("http", http),
        ],
        10,
    );
    assert!(st.success(), "{err}");
    assert_eq!(
        out,
        "301 https://example.com/x?y=1",
        "{}",
        proxy.proc.logs()
    );
    // The certificate verifies for the name the vhost is named after.
    let (st, out, err) = curl(
        &[
            "--cacert",
            &cert.display().to_string(),
            "--resolve",
            &resolve(https),
            &url("https", https),
        ],
        10,
    );
    assert!(st.success(), "{err}\n{}", proxy.proc.logs());
    assert_eq!(out, "/x?y=1 over https");
}
