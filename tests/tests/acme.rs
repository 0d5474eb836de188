//! Issue 36, automatic certificates: the proxy's ACME client (RFC 8555) against Pebble, Let's
//! Encrypt's test server, on loopback. Pebble validates HTTP-01 on the proxy's plain
//! listener and resolves every name to 127.0.0.1 through pebble-challtestsrv's DNS.

mod acme_common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use acme_common::*;
use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{free_port, write_file};

/// A proxy with vhost `DOMAIN` certified by `pebble`, its state under `state_dir`.
fn config(setup: &Setup, origin: SocketAddr, pebble: &Pebble, state_dir: &Path) -> String {
    format!(
        "listen {http};\nlisten {https} proto=https;\n\
         srv_group default {{ server {origin}; }}\n\
         acme {{ directory {dir}; contact mailto:ops@{DOMAIN}; state_dir {state}; ca_root {ca}; }}\n\
         vhost {DOMAIN} {{ tls_certificate acme; proxy_pass default; }}\n\
         http_chain {{ -> {DOMAIN}; }}\n",
        http = setup.http,
        https = setup.https,
        dir = pebble.directory,
        state = state_dir.display(),
        ca = pebble.ca_root.display(),
    )
}

/// curl gets the app over the certificate Pebble issued.
fn curl_gets_the_app_over_pebbles_certificate(https: SocketAddr) {
    let (status, out, err) = e2e::curl(
        &[
            "-skv",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--resolve",
            &format!("{DOMAIN}:{}:127.0.0.1", https.port()),
            &format!("https://{DOMAIN}:{}/x", https.port()),
        ],
        10,
    );
    assert!(status.success() && out == "200", "{out} {err}");
    assert!(err.contains("issuer: CN=Pebble Intermediate CA"), "{err}");
}

/// The issuer of the certificate the QUIC listener on `port` serves for `DOMAIN`, and the
/// status of a GET over HTTP/3 (tests/py/h3_resume.py, aioquic).
fn h3_issuer(port: u16) -> (String, String) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/h3_resume.py");
    let port = port.to_string();
    let out = Command::new("timeout")
        .args(["30", "python3", script, &port, &port, DOMAIN])
        .output()
        .expect("python3");
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let field = |name: &str| {
        let line = out.lines().find_map(|l| l.strip_prefix(name));
        line.unwrap_or_else(|| panic!("no {name}in h3_resume.py's output: {out}"))
            .to_string()
    };
    (field("issuer "), field("first status "))
}

/// The state directory and the keys in it are private to the proxy's user.
fn assert_private(state_dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(state_dir), 0o700);
    assert_eq!(mode(&state_dir.join("account.key")), 0o600);
    assert_eq!(mode(&state_dir.join(DOMAIN).join("key.pem")), 0o600);
}

#[test]
fn a_vhost_gets_its_certificate_from_pebble_and_a_kept_connection_is_not_disturbed() {
    let origin = Origin::start(|r| Response::ok(format!("app {}", r.target)));
    let setup = Setup::new("acme-issue");
    let pebble = Pebble::start(&setup.dir, setup.http.port(), None);
    let state_dir = setup.dir.join("acme-state");
    // The TLS listener's address serves HTTP/3 on UDP too: after the swap the QUIC handshake
    // must take the certificate issued, as TCP's does, without a reload (the endpoint was
    // built with the temporary one).
    let conf = config(&setup, origin.addr(), &pebble, &state_dir)
        .replace("proto=https;", "proto=\"https,h3\";");
    let https = setup.https;
    let proxy = Proxy::start(setup.dir, &conf, setup.https);
    // A client connected before the certificate arrives, making requests throughout.
    let mut kept = connect(https);
    let first_issuer = kept
        .ssl()
        .peer_certificate()
        .map(|c| issuer(&c))
        .unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut requests = 0;
    while !proxy.proc.stderr().contains("acme: new certificate for") {
        assert!(
            Instant::now() < deadline,
            "no certificate within 60 s\n{}\n{}",
            proxy.proc.logs(),
            pebble.proc.logs()
        );
        let (status, body) = get(&mut kept).unwrap_or_else(|e| {
            panic!(
                "kept connection, request {requests}: {e}\n{}",
                proxy.proc.logs()
            )
        });
        assert_eq!(
            (status.as_str(), body.as_str()),
            ("HTTP/1.1 200 OK", "app /kept")
        );
        requests += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..20 {
        let (status, _) = get(&mut kept).unwrap_or_else(|e| {
            panic!("kept connection after the swap: {e}\n{}", proxy.proc.logs())
        });
        assert_eq!(status, "HTTP/1.1 200 OK");
    }
    assert!(
        first_issuer.contains("temporary"),
        "before issuance: {first_issuer}"
    );
    let now_issuer = served_issuer(https);
    assert!(
        now_issuer.contains("Pebble Intermediate CA"),
        "after issuance: {now_issuer}\n{}",
        proxy.proc.logs()
    );
    curl_gets_the_app_over_pebbles_certificate(https);
    let (quic_issuer, status) = h3_issuer(https.port());
    let issued = quic_issuer.contains("Pebble Intermediate CA") && status == "200";
    assert!(issued, "HTTP/3 after issuance: {quic_issuer}, {status}");
    // A reload loads the certificate issued, not the temporary one.
    proxy.proc.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !proxy.proc.stderr().contains("reloaded") {
        assert!(
            Instant::now() < deadline,
            "no reload\n{}",
            proxy.proc.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let after_reload = served_issuer(https);
    assert!(
        after_reload.contains("Pebble Intermediate CA"),
        "after a reload: {after_reload}"
    );
    assert_private(&state_dir);
}

#[test]
fn a_failed_challenge_is_logged_and_retried_while_the_current_certificate_serves() {
    let origin = Origin::start(|_| Response::ok("app"));
    let setup = Setup::new("acme-fail");
    // Pebble validates on a port where nothing listens: every challenge fails.
    let pebble = Pebble::start(&setup.dir, free_port(), None);
    let state_dir = setup.dir.join("acme-state");
    let conf = config(&setup, origin.addr(), &pebble, &state_dir);
    let https = setup.https;
    let mut proxy = Proxy::start(setup.dir, &conf, setup.https);
    assert!(
        proxy
            .proc
            .wait_for_output("(2 failure(s) in a row)", Duration::from_secs(60)),
        "no retry logged\n{}\n{}",
        proxy.proc.logs(),
        pebble.proc.logs()
    );
    let logs = proxy.proc.stderr();
    assert!(
        logs.contains("acme: certificate for site.acme.test not obtained (1 failure(s) in a row)"),
        "{logs}"
    );
    assert!(logs.contains("authorization invalid"), "{logs}");
    assert!(served_issuer(https).contains("temporary"));
    let mut tls = connect(https);
    assert_eq!(get(&mut tls).unwrap().0, "HTTP/1.1 200 OK");
}

/// Two http-perf loads of 40 s at most on `url` through `https`: one over keep-alive
/// connections, one with a new handshake per request; each thread returns its output.
fn http_perf_loads(
    url: &str,
    https: SocketAddr,
) -> Vec<std::thread::JoinHandle<std::process::Output>> {
    [&[][..], &["-H", "Connection: close"][..]]
        .into_iter()
        .map(|extra| {
            let mut cmd = Command::new("timeout");
            cmd.arg("40").arg(e2e::bin_path("http-perf"));
            cmd.args([
                "-c",
                "2",
                "-t",
                "1",
                "-d",
                "16",
                "--json",
                "--connect",
                &https.to_string(),
            ]);
            cmd.args(extra).arg(url);
            std::thread::spawn(move || cmd.output().expect("run http-perf"))
        })
        .collect()
}

#[test]
fn a_certificate_is_renewed_after_two_thirds_of_its_lifetime() {
    let origin = Origin::start(|_| Response::ok("app"));
    let setup = Setup::new("acme-renew");
    // 15 s certificates: each is renewed about 10 s after it was issued.
    let pebble = Pebble::start(&setup.dir, setup.http.port(), Some(15));
    let state_dir = setup.dir.join("acme-state");
    let conf = config(&setup, origin.addr(), &pebble, &state_dir);
    let https = setup.https;
    let proxy = Proxy::start(setup.dir, &conf, setup.https);
    let issued = |p: &Proxy| p.proc.stderr().matches("acme: new certificate for").count();
    let deadline = Instant::now() + Duration::from_secs(60);
    while issued(&proxy) < 1 {
        assert!(
            Instant::now() < deadline,
            "no certificate\n{}",
            proxy.proc.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let first = served_certificate(https);
    assert!(
        issuer(&first).contains("Pebble Intermediate CA"),
        "{}",
        issuer(&first)
    );
    // Load across the renewal's swap: keep-alive connections and a new handshake per request.
    let url = format!("https://{DOMAIN}:{}/", https.port());
    let loads = http_perf_loads(&url, https);
    // Not renewed at once: the first third of the lifetime has not passed.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(issued(&proxy), 1, "{}", proxy.proc.logs());
    while issued(&proxy) < 2 {
        assert!(
            Instant::now() < deadline,
            "not renewed\n{}",
            proxy.proc.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let second = served_certificate(https);
    assert!(issuer(&second).contains("Pebble Intermediate CA"));
    assert_ne!(
        first.serial_number().to_bn().unwrap(),
        second.serial_number().to_bn().unwrap(),
        "new handshakes get the renewed certificate"
    );
    assert!(second.not_after() > first.not_after());
    for load in loads {
        let out = load.join().expect("http-perf thread");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value =
            serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
        assert!(report["requests"].as_u64().unwrap_or(0) > 10, "{report}");
        assert_eq!(report["non_2xx_3xx"], 0, "{report}");
        let errors = report["errors"].as_object().expect("errors in the report");
        assert!(
            errors.values().all(|n| n.as_u64() == Some(0)),
            "errors across the swap: {report}\n{}",
            proxy.proc.logs()
        );
    }
}

#[test]
fn a_state_dir_that_cannot_be_made_stops_the_start_with_the_reason() {
    let setup = Setup::new("acme-state");
    let blocker = setup.dir.join("not-a-dir");
    write_file(
        &blocker,
        "a file where the state directory's parent should be",
    );
    let conf = format!(
        "listen {};\nlisten {} proto=https;\nsrv_group default {{ server 127.0.0.1:9; }}\n\
         acme {{ directory https://127.0.0.1:9/dir; state_dir {}/acme; }}\n\
         vhost {DOMAIN} {{ tls_certificate acme; proxy_pass default; }}\n",
        setup.http,
        setup.https,
        blocker.display()
    );
    let path = setup.dir.join("proxy.conf");
    write_file(&path, &conf);
    let out = e2e::proxy_cmd(&path, &["-t"]);
    let text = e2e::output_text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("acme state_dir") && text.contains("cannot create it"),
        "{text}"
    );
}
