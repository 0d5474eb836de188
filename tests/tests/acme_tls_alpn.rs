//! Issue 36, automatic certificates over TLS-ALPN-01 (RFC 8737): Pebble validates on the
//! proxy's TLS listener, which presents the validation certificate only to a ClientHello
//! offering exactly `acme-tls/1` for a name whose challenge is pending.

mod acme_common;

use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use acme_common::*;
use e2e::free_port;
use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};

/// A vhost with a certificate from files, beside the ACME one.
const OTHER: &str = "site.test";

fn acme_block(pebble: &Pebble, state_dir: &Path, extra: &str) -> String {
    format!(
        "acme {{ directory {dir}; state_dir {state}; ca_root {ca}; {extra} }}\n",
        dir = pebble.directory,
        state = state_dir.display(),
        ca = pebble.ca_root.display(),
    )
}

#[test]
fn a_vhost_behind_a_tls_listener_only_gets_its_certificate_over_tls_alpn_01() {
    let origin = Origin::start(|r| Response::ok(format!("app {}", r.target)));
    let setup = Setup::new("acme-alpn");
    // Nothing listens where HTTP-01 would be validated: only TLS-ALPN-01 can succeed.
    let pebble = Pebble::start_on(&setup.dir, free_port(), setup.https.port(), None);
    let state_dir = setup.dir.join("acme-state");
    // No `challenges`: with a TLS listener only, the default is tls-alpn-01.
    let conf = format!(
        "listen {https} proto=https;\nsrv_group default {{ server {origin}; }}\n{acme}\
         vhost {DOMAIN} {{ tls_certificate acme; proxy_pass default; }}\n\
         http_chain {{ -> {DOMAIN}; }}\n",
        https = setup.https,
        origin = origin.addr(),
        acme = acme_block(&pebble, &state_dir, ""),
    );
    let https = setup.https;
    let proxy = Proxy::start(setup.dir, &conf, https);
    wait_issued(&proxy, &pebble);
    let logs = proxy.proc.stderr();
    assert!(
        logs.contains("acme: tls-alpn-01 validation handshake from 127.0.0.1 for site.acme.test"),
        "{logs}"
    );
    assert!(
        served_issuer(https).contains("Pebble Intermediate CA"),
        "{}",
        proxy.proc.logs()
    );
    let mut tls = connect(https);
    assert_eq!(
        get(&mut tls).unwrap(),
        ("HTTP/1.1 200 OK".to_string(), "app /kept".to_string())
    );
}

/// What clients of the TLS listener get while `DOMAIN`'s challenge is pending.
fn probe_while_pending(https: SocketAddr) {
    let mut validator = handshake(https, DOMAIN, b"\x0aacme-tls/1").expect("validation handshake");
    assert_eq!(
        validator.ssl().selected_alpn_protocol(),
        Some(&b"acme-tls/1"[..])
    );
    let cert = validator.ssl().peer_certificate().unwrap();
    assert!(is_validation_certificate(&cert, DOMAIN), "{cert:?}");
    // No HTTP on that connection: the proxy closes it after the handshake.
    let req = format!("GET / HTTP/1.1\r\nHost: {DOMAIN}\r\n\r\n");
    let _ = validator.write_all(req.as_bytes());
    let mut buf = [0u8; 256];
    match validator.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() != ErrorKind::WouldBlock && e.kind() != ErrorKind::TimedOut => {}
        other => panic!("the validation connection answered: {other:?}"),
    }
    // A normal client of the same name: the temporary certificate, and HTTP.
    let mut normal = handshake(https, DOMAIN, b"\x02h2\x08http/1.1").expect("normal handshake");
    let normal_cert = normal.ssl().peer_certificate().unwrap();
    assert!(
        issuer(&normal_cert).contains("temporary"),
        "{normal_cert:?}"
    );
    assert!(!is_validation_certificate(&normal_cert, DOMAIN));
    assert_eq!(get(&mut normal).unwrap().0, "HTTP/1.1 200 OK");
    // `acme-tls/1` among other protocols is not a validation: the normal certificate.
    let mixed = handshake(https, DOMAIN, b"\x08http/1.1\x0aacme-tls/1").expect("mixed");
    assert!(!is_validation_certificate(
        &mixed.ssl().peer_certificate().unwrap(),
        DOMAIN
    ));
    // `acme-tls/1` for a name with no challenge pending: refused.
    let other = handshake(https, OTHER, b"\x0aacme-tls/1");
    assert!(
        other.is_err(),
        "served: {:?}",
        other.map(|s| s.ssl().peer_certificate())
    );
}

#[test]
fn during_the_challenge_only_an_acme_tls_1_client_of_that_name_gets_the_validation_certificate() {
    let origin = Origin::start(|_| Response::ok("app"));
    let setup = Setup::new("acme-alpn-pending");
    let relay = HoldingRelay::start(setup.https);
    let pebble = Pebble::start_on(&setup.dir, free_port(), relay.port, None);
    let state_dir = setup.dir.join("acme-state");
    // Both listeners; the block asks for tls-alpn-01 only (HTTP-01 would fail here).
    let conf = format!(
        "listen {http};\nlisten {https} proto=https;\n\
         srv_group default {{ server {origin}; }}\n{acme}\
         vhost {DOMAIN} {{ tls_certificate acme; proxy_pass default; }}\n\
         vhost {OTHER} {{ tls_certificate {cert}; tls_certificate_key {key}; proxy_pass default; }}\n\
         http_chain {{ -> {DOMAIN}; }}\n",
        http = setup.http,
        https = setup.https,
        origin = origin.addr(),
        acme = acme_block(&pebble, &state_dir, "challenges tls-alpn-01;"),
        cert = setup.cert.display(),
        key = setup.key.display(),
    );
    let https = setup.https;
    let proxy = Proxy::start(setup.dir, &conf, https);
    assert!(
        relay.accepted.recv_timeout(Duration::from_secs(60)).is_ok(),
        "Pebble never came to validate\n{}\n{}",
        proxy.proc.logs(),
        pebble.proc.logs()
    );
    // The challenge is pending now (Pebble's connection is held).
    probe_while_pending(https);
    let _ = relay.release.send(());
    wait_issued(&proxy, &pebble);
    assert!(served_issuer(https).contains("Pebble Intermediate CA"));
    // The challenge is over: the same name with `acme-tls/1` is refused too.
    let after = handshake(https, DOMAIN, b"\x0aacme-tls/1");
    assert!(
        after.is_err(),
        "served: {:?}",
        after.map(|s| s.ssl().peer_certificate())
    );
    assert!(proxy
        .proc
        .stderr()
        .contains("acme: tls-alpn-01 validation handshake from 127.0.0.1 for site.acme.test"));
}
