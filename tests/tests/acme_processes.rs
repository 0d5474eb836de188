//! Issue 36 with `worker_processes 2`: one process orders (the one holding the order lock in
//! `state_dir`), every process answers the validation connections SO_REUSEPORT hands it,
//! and every process serves the certificate issued, without a restart. Pebble validates
//! each challenge once; the test holds that connection and meanwhile makes many new
//! connections itself, which reach both processes.

mod acme_common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use acme_common::*;
use e2e::free_port;
use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};

const TWO_PROCESSES: &str = "worker_processes 2;\nworker_threads 1;\n";
/// New connections per check: SO_REUSEPORT spreads them over the two processes by address,
/// so all of them reach the same one with a chance of 2^-23.
const CONNECTIONS: usize = 24;

fn acme_block(pebble: &Pebble, state_dir: &Path) -> String {
    format!(
        "acme {{ directory {dir}; state_dir {state}; ca_root {ca}; }}\n",
        dir = pebble.directory,
        state = state_dir.display(),
        ca = pebble.ca_root.display(),
    )
}

/// The proxy once both processes serve.
fn start_two(setup: Setup, conf: &str, wait: SocketAddr) -> Proxy {
    let proxy = Proxy::start(setup.dir, conf, wait);
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.proc.stderr().matches("serving with").count() < 2 {
        assert!(
            Instant::now() < deadline,
            "the second process did not start\n{}",
            proxy.proc.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    proxy
}

/// A plain-listener GET with `Connection: close`: the status line and the body.
fn plain_get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {DOMAIN}\r\nConnection: close\r\n\r\n");
    tcp.write_all(req.as_bytes()).unwrap();
    let mut text = String::new();
    let _ = tcp.read_to_string(&mut text);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// Within a few seconds of the issuance, every one of `CONNECTIONS` new handshakes gets
/// Pebble's certificate (the process that ordered swaps at once, the other when it sees
/// the file change).
fn every_process_serves_pebbles_certificate(https: SocketAddr, proxy: &Proxy) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let issuers: Vec<String> = (0..CONNECTIONS).map(|_| served_issuer(https)).collect();
        if issuers.iter().all(|i| i.contains("Pebble Intermediate CA")) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still served: {issuers:?}\n{}",
            proxy.proc.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One process took the order lock and ordered; the other took the stored certificate in.
fn one_process_ordered(proxy: &Proxy) {
    let logs = proxy.proc.stderr();
    for (line, times) in [
        ("orders and renews the certificates of", 1),
        ("acme: ordering a certificate for site.acme.test", 1),
        ("acme: new certificate for site.acme.test in service", 1),
        (
            "acme: stored certificate for site.acme.test taken into service",
            1,
        ),
    ] {
        assert_eq!(logs.matches(line).count(), times, "{line}\n{logs}");
    }
}

#[test]
fn with_two_processes_each_answers_http_01_and_serves_the_issued_certificate() {
    let origin = Origin::start(|_| Response::ok("app"));
    let setup = Setup::new("acme-procs-http");
    let relay = HoldingRelay::start(setup.http);
    let pebble = Pebble::start(&setup.dir, relay.port, None);
    let state_dir = setup.dir.join("acme-state");
    let conf = format!(
        "{TWO_PROCESSES}listen {http};\nlisten {https} proto=https;\n\
         srv_group default {{ server {origin}; }}\n{acme}\
         vhost {DOMAIN} {{ tls_certificate acme; proxy_pass default; }}\n\
         http_chain {{ -> {DOMAIN}; }}\n",
        http = setup.http,
        https = setup.https,
        origin = origin.addr(),
        acme = acme_block(&pebble, &state_dir),
    );
    let (http, https) = (setup.http, setup.https);
    let proxy = start_two(setup, &conf, http);
    assert!(
        relay.accepted.recv_timeout(Duration::from_secs(60)).is_ok(),
        "Pebble never came to validate\n{}\n{}",
        proxy.proc.logs(),
        pebble.proc.logs()
    );
    // Pending now: the token is the one file the ordering process published.
    let published: Vec<_> = std::fs::read_dir(state_dir.join(".challenges/http-01"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(published.len(), 1, "{published:?}");
    let mode = std::fs::metadata(&published[0])
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let token = published[0]
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let answer = std::fs::read_to_string(&published[0]).unwrap();
    for i in 0..CONNECTIONS {
        let got = plain_get(http, &format!("/.well-known/acme-challenge/{token}"));
        assert_eq!(
            got,
            ("HTTP/1.1 200 OK".to_string(), answer.clone()),
            "connection {i}\n{}",
            proxy.proc.logs()
        );
    }
    let _ = relay.release.send(());
    wait_issued(&proxy, &pebble);
    every_process_serves_pebbles_certificate(https, &proxy);
    one_process_ordered(&proxy);
    // A reload keeps the same process ordering, and both keep the certificate.
    proxy.proc.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.proc.stderr().matches("reloaded").count() < 2 {
        assert!(
            Instant::now() < deadline,
            "no reload\n{}",
            proxy.proc.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    every_process_serves_pebbles_certificate(https, &proxy);
    std::thread::sleep(Duration::from_millis(1500));
    one_process_ordered(&proxy);
}

#[test]
fn with_two_processes_each_answers_tls_alpn_01_and_serves_the_issued_certificate() {
    let origin = Origin::start(|_| Response::ok("app"));
    let setup = Setup::new("acme-procs-alpn");
    let relay = HoldingRelay::start(setup.https);
    // Nothing listens where HTTP-01 would be validated.
    let pebble = Pebble::start_on(&setup.dir, free_port(), relay.port, None);
    let state_dir = setup.dir.join("acme-state");
    let conf = format!(
        "{TWO_PROCESSES}listen {https} proto=https;\n\
         srv_group default {{ server {origin}; }}\n{acme}\
         vhost {DOMAIN} {{ tls_certificate acme; proxy_pass default; }}\n\
         http_chain {{ -> {DOMAIN}; }}\n",
        https = setup.https,
        origin = origin.addr(),
        acme = acme_block(&pebble, &state_dir),
    );
    let https = setup.https;
    let proxy = start_two(setup, &conf, https);
    assert!(
        relay.accepted.recv_timeout(Duration::from_secs(60)).is_ok(),
        "Pebble never came to validate\n{}\n{}",
        proxy.proc.logs(),
        pebble.proc.logs()
    );
    for i in 0..CONNECTIONS {
        let validation = handshake(https, DOMAIN, b"\x0aacme-tls/1")
            .unwrap_or_else(|e| panic!("validation handshake {i}: {e}\n{}", proxy.proc.logs()));
        let cert = validation.ssl().peer_certificate().unwrap();
        assert!(is_validation_certificate(&cert, DOMAIN), "{i}: {cert:?}");
    }
    let _ = relay.release.send(());
    wait_issued(&proxy, &pebble);
    every_process_serves_pebbles_certificate(https, &proxy);
    one_process_ordered(&proxy);
}

/// The order lock across instances: one started beside the running one with `--upgrade`
/// (same configuration, same `state_dir`) orders nothing while the old one runs, and takes
/// the orders over once it has gone. Pebble validates where nothing listens, so the old
/// instance's orders keep failing and being retried.
#[test]
fn an_instance_started_with_upgrade_orders_only_once_the_old_one_has_gone() {
    let origin = Origin::start(|_| Response::ok("app"));
    let setup = Setup::new("acme-procs-upgrade");
    let pebble = Pebble::start(&setup.dir, free_port(), None);
    let state_dir = setup.dir.join("acme-state");
    let conf = format!(
        "listen {http};\nlisten {https} proto=https;\n\
         srv_group default {{ server {origin}; }}\n{acme}\
         vhost {DOMAIN} {{ tls_certificate acme; proxy_pass default; }}\n\
         http_chain {{ -> {DOMAIN}; }}\n",
        http = setup.http,
        https = setup.https,
        origin = origin.addr(),
        acme = acme_block(&pebble, &state_dir),
    );
    let https = setup.https;
    let mut old = Proxy::start(setup.dir, &conf, https);
    assert!(
        old.proc
            .wait_for_output("(1 failure(s) in a row)", Duration::from_secs(30)),
        "{}",
        old.proc.logs()
    );
    let mut cmd = std::process::Command::new(e2e::bin_path("proxy"));
    cmd.arg("-c").arg(&old.config).arg("--upgrade");
    let mut new = e2e::Proc::spawn("proxy-new", cmd, old.dir.path());
    assert!(
        new.wait_for_output("serving with", Duration::from_secs(10)),
        "{}",
        new.logs()
    );
    // The old instance retries 5 s after its first failure, then 10 s after: the new one
    // would have ordered at once.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !new.stderr().contains("acme: ordering a certificate"),
        "both instances order\n{}",
        new.logs()
    );
    let out = e2e::proxy_cmd(&old.config, &["-s", "quit"]);
    assert!(out.status.success(), "{}", e2e::output_text(&out));
    assert!(
        old.proc.wait_exit(Duration::from_secs(20)).is_some(),
        "{}",
        old.proc.logs()
    );
    let taken_over = Instant::now();
    assert!(
        new.wait_for_output(
            "acme: ordering a certificate for site.acme.test",
            Duration::from_secs(5)
        ),
        "the new instance did not take the orders over\n{}",
        new.logs()
    );
    assert!(new
        .stderr()
        .contains("orders and renews the certificates of"));
    assert!(taken_over.elapsed() < Duration::from_secs(3));
}

/// The threads named `name` in the children of `parent` (read from /proc).
fn children_threads_named(parent: u32, name: &str) -> usize {
    let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
        .unwrap_or_default();
    children
        .split_whitespace()
        .filter_map(|pid| std::fs::read_dir(format!("/proc/{pid}/task")).ok())
        .flatten()
        .filter_map(Result::ok)
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
        .count()
}

/// A reload that adds the `acme` block starts the ACME thread in every process (the
/// certificate is ordered and served by both); one that removes it ends them.
#[test]
fn a_reload_that_adds_the_acme_block_starts_ordering_and_one_that_removes_it_stops() {
    let origin = Origin::start(|_| Response::ok("app"));
    let setup = Setup::new("acme-procs-reload");
    let pebble = Pebble::start(&setup.dir, setup.http.port(), None);
    let state_dir = setup.dir.join("acme-state");
    let listeners = format!(
        "{TWO_PROCESSES}listen {http};\nlisten {https} proto=https;\n\
         srv_group default {{ server {origin}; }}\n",
        http = setup.http,
        https = setup.https,
        origin = origin.addr(),
    );
    let from_files = format!(
        "{listeners}vhost {DOMAIN} {{ tls_certificate {cert}; tls_certificate_key {key}; \
         proxy_pass default; }}\nhttp_chain {{ -> {DOMAIN}; }}\n",
        cert = setup.cert.display(),
        key = setup.key.display(),
    );
    let with_acme = format!(
        "{listeners}{acme}vhost {DOMAIN} {{ tls_certificate acme; proxy_pass default; }}\n\
         http_chain {{ -> {DOMAIN}; }}\n",
        acme = acme_block(&pebble, &state_dir),
    );
    let (http, https) = (setup.http, setup.https);
    let proxy = start_two(setup, &from_files, http);
    let pid = proxy.proc.pid();
    assert_eq!(children_threads_named(pid, "acme"), 0);
    let mut reloads = 0;
    let mut reload = |text: &str| {
        std::fs::write(&proxy.config, text).unwrap();
        proxy.proc.signal(libc::SIGHUP);
        reloads += 2;
        let deadline = Instant::now() + Duration::from_secs(10);
        while proxy.proc.stderr().matches("reloaded").count() < reloads {
            assert!(
                Instant::now() < deadline,
                "no reload\n{}",
                proxy.proc.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    reload(&with_acme);
    // Started right after the reload's log line.
    let deadline = Instant::now() + Duration::from_secs(2);
    while children_threads_named(pid, "acme") < 2 {
        assert!(
            Instant::now() < deadline,
            "no ACME thread in each process
{}",
            proxy.proc.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_issued(&proxy, &pebble);
    every_process_serves_pebbles_certificate(https, &proxy);
    one_process_ordered(&proxy);
    reload(&from_files);
    let deadline = Instant::now() + Duration::from_secs(5);
    while children_threads_named(pid, "acme") > 0 {
        assert!(
            Instant::now() < deadline,
            "the ACME threads outlived the block"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
