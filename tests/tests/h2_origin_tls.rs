//! HTTP/2 over TLS to origins (`server_proto h2` with `server_tls on`, issue 34): the proxy
//! offers ALPN `h2` only, and nginx (`listen ... ssl http2`, in front of an echo origin)
//! chooses it: requests with and without a body on one connection, nginx's `$ssl_alpn_protocol`
//! saying `h2`. A server that does not choose `h2` (nginx's plain `ssl` port, which ends the
//! handshake with a no_application_protocol alert) gets no request: the proxy logs the
//! reason and answers 502.

// Shared with upstream_tls.rs, which uses the rest of it.
#[allow(dead_code)]
mod upstream_tls_common;

use std::net::SocketAddr;

use e2e::proxy::Setup;
use e2e::{free_port, TempDir};
use upstream_tls_common::*;

#[test]
fn h2_is_chosen_by_alpn_and_exchanges_share_the_connection() {
    let dir = TempDir::new("h2-origin-tls-pki");
    let pki = Pki::new(dir.path());
    let origin = echo();
    let h2 = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let extra = format!("listen {h2} ssl http2;");
    let nginx = Nginx::start(dir.path(), &pki.server, &extra, origin.addr());
    let ca = pki.ca.display().to_string();
    let over_h2 = Nginx {
        proc: nginx.proc,
        addr: h2,
    };
    let tls = format!("server_proto h2; server_tls on; server_tls_ca {ca};");
    let (proxy, http, stats) = start_proxy(Setup::new("h2-origin-tls"), &over_h2, &tls);
    let get = exchange(http, "GET", "");
    let logs = || format!("{}\n{}", proxy.proc.logs(), over_h2.proc.logs());
    assert_eq!(get.status, 200, "{}\n{}", get.head, logs());
    assert_eq!(get.body, "GET ");
    assert_eq!(get.header("x-alpn"), Some("h2"), "{}", get.head);
    let post = exchange(http, "POST", "a body over h2 and TLS");
    assert_eq!(post.status, 200, "{}\n{}", post.head, logs());
    assert_eq!(post.body, "POST a body over h2 and TLS");
    assert_eq!(
        get.header("x-conn"),
        post.header("x-conn"),
        "one connection"
    );
    assert_eq!(handshakes(stats, "full"), 1);
}

#[test]
fn a_server_that_does_not_choose_h2_gets_no_request() {
    let dir = TempDir::new("h2-origin-tls-no-pki");
    let pki = Pki::new(dir.path());
    let origin = echo();
    let nginx = Nginx::start(dir.path(), &pki.server, "", origin.addr());
    let ca = pki.ca.display().to_string();
    let tls = format!("server_proto h2; server_tls on; server_tls_ca {ca};");
    let (proxy, http, _) = start_proxy(Setup::new("h2-origin-tls-no"), &nginx, &tls);
    let get = exchange(http, "GET", "");
    assert_eq!(get.status, 502, "{}\n{}", get.head, proxy.proc.logs());
    assert!(
        logged(&proxy, "no application protocol"),
        "{}",
        proxy.proc.logs()
    );
    assert_eq!(origin.total_requests(), 0);
}
