//! The Debian package's configuration (etc/debian/ktls-proxy.conf), moved onto this test's
//! ports and files, served by the real binary: HTTP/2 over TLS, and a request whose Host is
//! an IP address answered from the backend, not refused (issue 36 item 8).

use std::net::SocketAddr;

use e2e::origin::{Origin, Response};
use e2e::proxy::Proxy;
use e2e::{curl, free_port, gen_cert, workspace_root, KeyKind, TempDir};

/// The packaged file with its addresses, certificate, pid file and log moved into `dir`.
fn packaged(dir: &TempDir, http: SocketAddr, https: SocketAddr, origin: SocketAddr) -> String {
    let text = std::fs::read_to_string(workspace_root().join("etc/debian/ktls-proxy.conf"))
        .expect("read etc/debian/ktls-proxy.conf");
    let (crt, key) = gen_cert(dir.path(), "pkg", KeyKind::EcdsaP256, &["localhost"]);
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let replaced = [
        ("listen 443 ", format!("listen {https} ")),
        ("listen 80;", format!("listen {http};")),
        ("127.0.0.1:8000", origin.to_string()),
        ("127.0.0.1:9100", stats.to_string()),
        (
            "/etc/ktls-proxy/certs/ktls-proxy.crt",
            crt.display().to_string(),
        ),
        (
            "/etc/ktls-proxy/certs/ktls-proxy.key",
            key.display().to_string(),
        ),
        (
            "/run/ktls-proxy/ktls-proxy.pid",
            dir.join("p.pid").display().to_string(),
        ),
        (
            "/var/log/ktls-proxy/access.log",
            dir.join("a.log").display().to_string(),
        ),
    ];
    let mut text = text;
    for (from, to) in replaced {
        assert!(text.contains(from), "the packaged config has no {from}");
        text = text.replace(from, &to);
    }
    text
}

#[test]
fn the_packaged_config_serves_http2_and_an_ip_literal_host() {
    let origin = Origin::start(|_| Response::ok("from the app"));
    let dir = TempDir::new("packaged");
    let http = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let https = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let text = packaged(&dir, http, https, origin.addr());
    let _proxy = Proxy::start(dir, &text, http);
    // HTTPS by the address: HTTP/2 negotiated, Host an IP literal.
    let (st, out, err) = curl(
        &[
            "-sk",
            "--http2",
            "-w",
            " %{http_code} %{http_version}",
            &format!("https://{https}/"),
        ],
        10,
    );
    assert!(st.success(), "{err}");
    assert_eq!(out, "from the app 200 2", "{err}");
    // Plain HTTP by the address.
    let (st, out, err) = curl(
        &["-s", "-w", " %{http_code}", &format!("http://{http}/")],
        10,
    );
    assert!(st.success(), "{err}");
    assert_eq!(out, "from the app 200");
}
