//! Issue 36 item 3 through the real binary: a vhost not named after the name in its
//! certificate. `proxy -t` warns about it; a client asking for the certificate's name is
//! refused (the handshake picks vhosts by name), and the proxy now says so in its log with
//! the reason and the name, and counts it by reason in /metrics; other handshake failures
//! (plain HTTP on the TLS port) get their own reason.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::Proxy;
use e2e::{bin_path, curl, free_port, gen_cert, metric_sum, KeyKind, TempDir};

#[test]
fn a_vhost_not_named_after_its_certificate_is_warned_about_and_its_failures_are_explained() {
    let origin = Origin::start(|_| Response::ok("app"));
    let dir = TempDir::new("sni-mismatch");
    let (cert, key) = gen_cert(dir.path(), "example", KeyKind::EcdsaP256, &["example.test"]);
    let https = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = format!(
        "listen {https} proto=https;\nstats_listen {stats};\n\
         srv_group default {{ server {}; }}\n\
         vhost app {{ tls_certificate {}; tls_certificate_key {}; proxy_pass default; }}\n\
         http_chain {{ -> app; }}\n",
        origin.addr(),
        cert.display(),
        key.display()
    );
    let config = dir.join("proxy.conf");
    e2e::write_file(&config, &conf);
    let out = Command::new(bin_path("proxy"))
        .args(["-t", "-c"])
        .arg(&config)
        .output()
        .expect("proxy -t");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "still a valid configuration: {said}");
    assert!(
        said.contains("warn vhost `app`: its certificate is for example.test")
            && said.contains("vhost example.test"),
        "{said}"
    );

    let mut proxy = Proxy::start(dir, &conf, https);
    // The certificate's name: refused during the handshake (curl: 35).
    let resolve = |name: &str| format!("{name}:{}:127.0.0.1", https.port());
    let url = |name: &str| format!("https://{name}:{}/", https.port());
    let (st, _, err) = curl(
        &[
            "-k",
            "--resolve",
            &resolve("example.test"),
            &url("example.test"),
        ],
        10,
    );
    assert_eq!(st.code(), Some(35), "{err}");
    assert!(
        proxy.proc.wait_for_output(
            "TLS handshake from 127.0.0.1 failed: unknown_server_name: no vhost is named \"example.test\"",
            Duration::from_secs(5)
        ),
        "{}",
        proxy.proc.logs()
    );
    // Plain HTTP on the TLS port: another reason.
    let _ = curl(&[&format!("http://127.0.0.1:{}/", https.port())], 10);
    assert!(
        proxy
            .proc
            .wait_for_output("failed: not_tls", Duration::from_secs(5)),
        "{}",
        proxy.proc.logs()
    );
    // The vhost's own name reaches it.
    let (st, body, err) = curl(&["-k", "--resolve", &resolve("app"), &url("app")], 10);
    assert!(st.success() && body == "app", "{err}");
    let failures = |reason: &str| {
        metric_sum(
            stats,
            &format!("ktls_proxy_tls_handshake_failures_total{{reason=\"{reason}\"}}"),
        )
    };
    assert_eq!(failures("unknown_server_name"), 1);
    assert_eq!(failures("not_tls"), 1);
}
