//! TLS to origins (`server_tls`, issue 34) through the real binary, with nginx as the TLS
//! origin in front of a plain echo origin: requests with and without a body, a kept-alive
//! connection, a resumed session, certificates refused (another CA, another name, expired),
//! a client certificate the origin asks for, verification off, health checks over TLS and a
//! reload that changes the TLS settings. Certificates are made here with the `openssl` tool.

mod upstream_tls_common;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;

use e2e::proxy::Setup;
use e2e::{free_port, metric_sum, wait_for_port, write_file, Proc, TempDir};
use upstream_tls_common::*;

#[test]
fn get_and_post_go_over_tls_on_one_kept_alive_connection() {
    let dir = TempDir::new("up-tls-basic-pki");
    let pki = Pki::new(dir.path());
    let setup = Setup::new("up-tls-basic");
    let origin = echo();
    let nginx = Nginx::start(dir.path(), &pki.server, "", origin.addr());
    let ca = pki.ca.display().to_string();
    let (proxy, http, stats) = start_proxy(
        setup,
        &nginx,
        &format!("server_tls on; server_tls_ca {ca};"),
    );
    let get = exchange(http, "GET", "");
    assert_eq!(
        get.status,
        200,
        "{}\n{}\n{}",
        get.head,
        proxy.proc.logs(),
        nginx.proc.logs()
    );
    assert_eq!(get.body, "GET ");
    assert_eq!(get.header("x-alpn"), Some("http/1.1"), "ALPN offered");
    assert_eq!(get.header("x-sni"), None, "no SNI for an IP address");
    let post = exchange(http, "POST", "a body over TLS");
    assert_eq!(post.status, 200, "{}\n{}", post.head, proxy.proc.logs());
    assert_eq!(post.body, "POST a body over TLS");
    assert_eq!(
        get.header("x-conn"),
        post.header("x-conn"),
        "the second request went on the kept connection"
    );
    assert_eq!(handshakes(stats, "full"), 1);
    assert_eq!(origin.total_requests(), 2);
}

/// The second connection to a server resumes its session: a TLS 1.3 ticket (which arrives
/// after the handshake), or a TLS 1.2 session.
#[test]
fn a_new_connection_resumes_the_servers_session() {
    let dir = TempDir::new("up-tls-resume-pki");
    let pki = Pki::new(dir.path());
    let origin = echo();
    let ca = pki.ca.display().to_string();
    for version in ["TLSv1.3", "TLSv1.2"] {
        // nginx closes each connection after one response: the second request needs another.
        let once = format!("keepalive_requests 1; ssl_protocols {version};");
        let nginx = Nginx::start(dir.path(), &pki.server, &once, origin.addr());
        let tls = format!("server_tls on; server_tls_ca {ca};");
        let (proxy, http, stats) = start_proxy(Setup::new("up-tls-resume"), &nginx, &tls);
        let first = exchange(http, "GET", "");
        let second = exchange(http, "GET", "");
        let logs = proxy.proc.logs();
        assert_eq!((first.status, second.status), (200, 200), "{logs}");
        assert_ne!(first.header("x-conn"), second.header("x-conn"));
        assert_eq!(first.header("x-reused"), Some("."), "{version}: full first");
        assert_eq!(
            second.header("x-reused"),
            Some("r"),
            "{version}: then resumed"
        );
        let counts = (handshakes(stats, "full"), handshakes(stats, "resumed"));
        assert_eq!(counts, (1, 1), "{version}");
    }
}

/// An origin presenting `cert` (from `pki`, in `dir`) that verification refuses: 502, the log
/// line names `reason`, the refusal is counted, and nothing reaches the origin.
fn refused_certificate(
    name: &str,
    (dir, pki): (&TempDir, &Pki),
    cert: &(PathBuf, PathBuf),
    reason: &str,
) {
    let setup = Setup::new(name);
    let origin = echo();
    let nginx = Nginx::start(dir.path(), cert, "", origin.addr());
    let ca = pki.ca.display().to_string();
    let extra = format!("server_tls on; server_tls_ca {ca}; server_connect_retries 1;");
    let (proxy, http, stats) = start_proxy(setup, &nginx, &extra);
    let got = exchange(http, "GET", "");
    assert_eq!(got.status, 502, "{}", got.head);
    let line = format!(
        "upstream {} TLS: certificate verify failed: {reason}",
        nginx.addr
    );
    assert!(logged(&proxy, &line), "no {line:?}\n{}", proxy.proc.logs());
    assert!(handshakes(stats, "verify_failed") >= 1);
    assert!(metric_sum(stats, "ktls_proxy_upstream_errors_total{kind=\"connect\"}") >= 1);
    assert_eq!(
        origin.total_requests(),
        0,
        "nothing was sent to an unverified server"
    );
}

#[test]
fn a_certificate_from_another_ca_is_a_502_with_its_reason() {
    let dir = TempDir::new("up-tls-rogue-pki");
    let pki = Pki::new(dir.path());
    let reason = "unable to get local issuer certificate";
    refused_certificate("up-tls-rogue", (&dir, &pki), &pki.rogue, reason);
}

/// An origin whose certificate expired: 502, and the log line says so (issue 34).
#[test]
fn an_expired_certificate_is_a_502_with_its_reason() {
    let dir = TempDir::new("up-tls-expired-pki");
    let pki = Pki::new(dir.path());
    let san = "DNS:origin.test,IP:127.0.0.1";
    let expired = make_expired_leaf(dir.path(), ("expired", "ca"), san);
    refused_certificate(
        "up-tls-expired",
        (&dir, &pki),
        &expired,
        "certificate has expired",
    );
}

#[test]
fn the_name_checked_is_the_sni_and_a_wrong_one_is_refused() {
    let dir = TempDir::new("up-tls-sni-pki");
    let pki = Pki::new(dir.path());
    let setup = Setup::new("up-tls-sni");
    let origin = echo();
    let nginx = Nginx::start(dir.path(), &pki.server, "", origin.addr());
    let ca = pki.ca.display().to_string();
    let extra = format!("server_tls on; server_tls_ca {ca}; server_tls_sni wrong.test;");
    let (proxy, http, _) = start_proxy(setup, &nginx, &extra);
    assert_eq!(exchange(http, "GET", "").status, 502);
    let line = format!(
        "upstream {} TLS: certificate verify failed: hostname mismatch",
        nginx.addr
    );
    assert!(logged(&proxy, &line), "no {line:?}\n{}", proxy.proc.logs());
    drop(proxy);
    let setup = Setup::new("up-tls-sni-ok");
    let extra = format!("server_tls on; server_tls_ca {ca}; server_tls_sni origin.test;");
    let (proxy, http, _) = start_proxy(setup, &nginx, &extra);
    let got = exchange(http, "GET", "");
    assert_eq!(got.status, 200, "{}", proxy.proc.logs());
    assert_eq!(got.header("x-sni"), Some("origin.test"));
}

/// A server given by name (`server localhost:PORT`, looked up by the system) is sent and
/// checked as that name when `server_tls_sni` sets none: its certificate need not carry the
/// address.
#[test]
fn a_server_given_by_name_is_checked_as_that_name() {
    let dir = TempDir::new("up-tls-name-pki");
    let pki = Pki::new(dir.path());
    let by_name = make_leaf(dir.path(), ("by-name", "ca"), "DNS:localhost", "serverAuth");
    let setup = Setup::new("up-tls-name");
    let origin = echo();
    let nginx = Nginx::start(dir.path(), &by_name, "", origin.addr());
    let ca = pki.ca.display().to_string();
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = setup
        .config(
            nginx.addr,
            &format!("server_tls on; server_tls_ca {ca};"),
            &format!("worker_threads 1;\nstats_listen {stats};"),
        )
        .replace(
            &format!("server {};", nginx.addr),
            &format!("server localhost:{};", nginx.addr.port()),
        );
    let http = setup.http;
    let proxy = setup.start(&conf);
    let got = exchange(http, "GET", "");
    assert_eq!(got.status, 200, "{}", proxy.proc.logs());
    assert_eq!(got.header("x-sni"), Some("localhost"));
}

#[test]
fn verify_off_accepts_an_untrusted_certificate() {
    let dir = TempDir::new("up-tls-noverify-pki");
    let pki = Pki::new(dir.path());
    let setup = Setup::new("up-tls-noverify");
    let origin = echo();
    let nginx = Nginx::start(dir.path(), &pki.rogue, "", origin.addr());
    let (proxy, http, _) = start_proxy(setup, &nginx, "server_tls on; server_tls_verify off;");
    let got = exchange(http, "GET", "");
    assert_eq!(got.status, 200, "{}", proxy.proc.logs());
}

/// nginx with `ssl_verify_client on` finishes the handshake without a client certificate
/// and refuses at the HTTP level (400); with `server_tls_cert` the proxy is let in.
#[test]
fn a_client_certificate_is_sent_to_an_origin_that_asks() {
    let dir = TempDir::new("up-tls-mtls-pki");
    let pki = Pki::new(dir.path());
    let setup = Setup::new("up-tls-mtls");
    let origin = echo();
    let ca = pki.ca.display().to_string();
    let asks = format!("ssl_verify_client on; ssl_client_certificate {ca};");
    let nginx = Nginx::start(dir.path(), &pki.server, &asks, origin.addr());
    let tls = format!("server_tls on; server_tls_ca {ca};");
    let (proxy, http, _) = start_proxy(setup, &nginx, &tls);
    let without = exchange(http, "GET", "");
    assert_eq!(
        without.status,
        400,
        "{}\n{}",
        without.head,
        proxy.proc.logs()
    );
    assert_eq!(origin.total_requests(), 0);
    drop(proxy);
    let setup = Setup::new("up-tls-mtls-ok");
    let (crt, key) = (pki.client.0.display(), pki.client.1.display());
    let (proxy, http, _) = start_proxy(
        setup,
        &nginx,
        &format!("{tls} server_tls_cert {crt} {key};"),
    );
    let with = exchange(http, "GET", "");
    assert_eq!(with.status, 200, "{}\n{}", with.head, proxy.proc.logs());
    assert_eq!(with.header("x-client"), Some("success"));
}

/// Health checks connect with the handshake: a server whose certificate is refused is out
/// (though its port accepts), the trusted one is in, without any client traffic; a reload
/// turning verification off brings the refused one back.
#[test]
fn health_checks_do_the_handshake_and_a_reload_changes_tls() {
    let dir = TempDir::new("up-tls-health-pki");
    let pki = Pki::new(dir.path());
    let origin = echo();
    let good = Nginx::start(dir.path(), &pki.server, "", origin.addr());
    let rogue = Nginx::start(dir.path(), &pki.rogue, "", origin.addr());
    let setup = Setup::new("up-tls-health");
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let ca = pki.ca.display().to_string();
    let conf = setup
        .config(
            good.addr,
            &format!("server {}; health h; server_tls on; server_tls_ca {ca};", rogue.addr),
            &format!("worker_threads 1;\nstats_listen {stats};"),
        )
        .replace(
            "srv_group default",
            "health_check h { request \"GET / HTTP/1.1\\r\\nHost: o\\r\\n\\r\\n\"; resp_code 200; timeout 1; }\nsrv_group default",
        );
    let proxy = setup.start(&conf);
    let up = |s: &Nginx| {
        format!(
            "ktls_proxy_upstream_server_up{{group=\"default\",server=\"{}\"}}",
            s.addr
        )
    };
    assert!(
        wait_metric(stats, &up(&rogue), 0),
        "the refused server is still up\n{}",
        proxy.proc.logs()
    );
    assert_eq!(metric_sum(stats, &up(&good)), 1);
    assert!(handshakes(stats, "full") >= 1, "the checks' handshakes");
    assert!(handshakes(stats, "verify_failed") >= 1);
    assert!(
        origin.total_requests() >= 1,
        "a check went through the trusted server"
    );
    let text = std::fs::read_to_string(&proxy.config).expect("read config");
    let off = text.replace(&format!("server_tls_ca {ca};"), "server_tls_verify off;");
    write_file(&proxy.config, &off);
    proxy.proc.signal(libc::SIGHUP);
    assert!(
        logged(&proxy, "reloaded"),
        "no reload\n{}",
        proxy.proc.logs()
    );
    assert!(
        wait_metric(stats, &up(&rogue), 1),
        "verification off, the server is still out\n{}",
        proxy.proc.logs()
    );
}

/// `openssl s_server` wanting a client certificate (`-Verify 1`) refuses a handshake without
/// one: in TLS 1.2 the handshake fails (502, counted as failed), in TLS 1.3 the refusal
/// comes after it, at the first read (502 too); both logged with the server's alert.
#[test]
fn an_origin_refusing_the_missing_client_certificate_is_a_502_with_its_alert() {
    let dir = TempDir::new("up-tls-sserver-pki");
    let pki = Pki::new(dir.path());
    for (version, alert) in [
        ("-tls1_2", "alert handshake failure"),
        ("-tls1_3", "alert certificate required"),
    ] {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let mut cmd = Command::new("openssl");
        cmd.args([
            "s_server", "-quiet", "-www", "-Verify", "1", version, "-accept",
        ])
        .arg(addr.to_string())
        .arg("-cert")
        .arg(&pki.server.0)
        .arg("-key")
        .arg(&pki.server.1)
        .arg("-CAfile")
        .arg(&pki.ca);
        let server = Proc::spawn("s_server", cmd, dir.path());
        assert!(wait_for_port(addr, T), "s_server\n{}", server.logs());
        let peer = Nginx { proc: server, addr };
        let ca = pki.ca.display();
        let tls = format!("server_tls on; server_tls_ca {ca}; server_connect_retries 0;");
        let (proxy, http, stats) = start_proxy(Setup::new("up-tls-sserver"), &peer, &tls);
        let got = exchange(http, "GET", "");
        assert_eq!(got.status, 502, "{version}: {}", got.head);
        // OpenSSL says `tlsv13 alert ...`, AWS-LC `tlsv1 alert ...`, the same words after.
        let line = format!("upstream {addr} TLS: ");
        assert!(
            logged(&proxy, &line) && logged(&proxy, alert),
            "{version}: no {line:?}\n{}\n{}",
            proxy.proc.logs(),
            peer.proc.logs()
        );
        if version == "-tls1_2" {
            assert_eq!(handshakes(stats, "failed"), 1);
        }
        drop(proxy);
        let (crt, key) = (pki.client.0.display(), pki.client.1.display());
        let with = format!("{tls} server_tls_cert {crt} {key};");
        let (proxy, http, _) = start_proxy(Setup::new("up-tls-sserver-ok"), &peer, &with);
        let got = exchange(http, "GET", "");
        assert_eq!(
            got.status,
            200,
            "{version}: {}\n{}",
            got.head,
            proxy.proc.logs()
        );
    }
}

/// Bodies of many records both ways: the request's written across partial TLS writes, the
/// response read across many records.
#[test]
fn large_bodies_cross_many_records_both_ways() {
    let dir = TempDir::new("up-tls-large-pki");
    let pki = Pki::new(dir.path());
    let origin = echo();
    let big = "client_max_body_size 8m;";
    let nginx = Nginx::start(dir.path(), &pki.server, big, origin.addr());
    let ca = pki.ca.display().to_string();
    let tls = format!("server_tls on; server_tls_ca {ca};");
    let (proxy, http, _) = start_proxy(Setup::new("up-tls-large"), &nginx, &tls);
    let body: String = (0..600_000u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let got = exchange(http, "POST", &body);
    assert_eq!(got.status, 200, "{}\n{}", got.head, proxy.proc.logs());
    assert_eq!(got.body.len(), body.len() + 5);
    assert!(
        got.body == format!("POST {body}"),
        "the body came back altered"
    );
}

/// A WebSocket tunnel through a TLS upstream connection (nginx passing `/ws/` on to a
/// WebSocket origin): the 101, then frames both ways, a large one across many records.
#[test]
fn a_websocket_tunnel_runs_over_a_tls_upstream() {
    use e2e::websocket::{connect, frame, open, read_frame, WsOrigin, OP_BINARY, OP_TEXT};
    let dir = TempDir::new("up-tls-ws-pki");
    let pki = Pki::new(dir.path());
    let origin = echo();
    let ws = WsOrigin::start("ws-behind-nginx");
    let pass = format!(
        "location /ws/ {{ proxy_pass http://{}; proxy_http_version 1.1;\n\
         proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection upgrade; }}",
        ws.addr()
    );
    let nginx = Nginx::start(dir.path(), &pki.server, &pass, origin.addr());
    let ca = pki.ca.display().to_string();
    let tls = format!("server_tls on; server_tls_ca {ca};");
    let (proxy, http, _) = start_proxy(Setup::new("up-tls-ws"), &nginx, &tls);
    let mut s = connect(http, false);
    let head = open(&mut *s, "/ws/chat");
    assert!(
        head.starts_with("HTTP/1.1 101"),
        "{head}\n{}",
        proxy.proc.logs()
    );
    let mask = Some([1, 2, 3, 4]);
    s.write_all(&frame(OP_TEXT, b"hello", mask)).expect("send");
    assert_eq!(
        read_frame(&mut s).expect("echo"),
        (OP_TEXT, b"hello".to_vec())
    );
    let big = e2e::origin::pattern(1 << 20);
    s.write_all(&frame(OP_BINARY, &big, mask))
        .expect("send large");
    let (op, echoed) = read_frame(&mut s).expect("large echo");
    assert!(
        op == OP_BINARY && echoed == big,
        "the 1 MiB frame came back altered"
    );
}
