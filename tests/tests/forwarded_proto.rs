//! Issue 36 item 2 through the real binary: X-Forwarded-Proto reaches the origin as the
//! scheme of the client's own connection, whatever the client wrote there: `http` for a plain
//! listener, `https` for a TLS one, over HTTP/1.1, HTTP/2 and h2c alike, once.

use std::net::SocketAddr;
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::Setup;
use e2e::{curl, free_port, wait_for_port};

/// The X-Forwarded-Proto values of every request the origin received, in order.
fn seen_protos(origin: &Origin) -> Vec<Vec<String>> {
    origin
        .requests()
        .iter()
        .map(|r| {
            r.headers
                .iter()
                .filter(|(name, _)| name.eq_ignore_ascii_case("x-forwarded-proto"))
                .map(|(_, value)| value.clone())
                .collect()
        })
        .collect()
}

#[test]
fn x_forwarded_proto_says_the_scheme_of_the_clients_connection_not_what_it_claims() {
    let origin = Origin::start(|_| Response::ok("ok"));
    let setup = Setup::new("xfp");
    let (http, https) = (setup.http, setup.https);
    let (both, h2c) = (
        SocketAddr::from(([127, 0, 0, 1], free_port())),
        SocketAddr::from(([127, 0, 0, 1], free_port())),
    );
    let conf = setup.config(origin.addr(), "", "").replacen(
        "listen ",
        &format!("listen {both} proto=\"h2,https\";\nlisten {h2c} proto=h2c;\nlisten "),
        1,
    );
    let proxy = setup.start(&conf);
    for addr in [both, h2c] {
        assert!(
            wait_for_port(addr, Duration::from_secs(10)),
            "{addr} listens"
        );
    }
    let cases: [(&str, SocketAddr, &[&str], &str, &str); 5] = [
        ("HTTP/1.1", http, &[], "http", "https"),
        ("HTTP/1.1 over TLS", https, &[], "https", "http"),
        ("h2 over TLS", both, &["--http2"], "https", "http"),
        ("h2c", h2c, &["--http2-prior-knowledge"], "http", "https"),
        (
            "HTTP/1.1 over TLS",
            both,
            &["--http1.1"],
            "https",
            "ftp, http",
        ),
    ];
    for (n, (what, addr, flags, scheme, claimed)) in cases.iter().enumerate() {
        let url = format!("{scheme}://site.test:{}/{n}", addr.port());
        let resolve = format!("site.test:{}:127.0.0.1", addr.port());
        let claim = format!("X-Forwarded-Proto: {claimed}");
        let mut args = vec!["-k", "--resolve", &resolve, "-H", &claim, "-o", "/dev/null"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["-w", "%{http_code}", &url]);
        let (status, out, err) = curl(&args, 10);
        assert!(
            status.success() && out == "200",
            "{what}: {out} {err}\n{}",
            proxy.proc.logs()
        );
        let seen = seen_protos(&origin);
        assert_eq!(seen.len(), n + 1, "{what}: one request more at the origin");
        assert_eq!(
            seen[n],
            vec![scheme.to_string()],
            "{what}: the client claimed {claimed}"
        );
    }
}
