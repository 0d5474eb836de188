//! Shared by the ACME suites (acme.rs: HTTP-01, acme_tls_alpn.rs: TLS-ALPN-01): Pebble,
//! Let's Encrypt's test server, and its DNS (pebble-challtestsrv, which resolves every name
//! to 127.0.0.1) on free loopback ports, and the TLS clients the tests read certificates with.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use e2e::proxy::Proxy;
use e2e::{free_port, wait_for_port, write_file, Proc, TempDir};
use openssl::ssl::{SslConnector, SslMethod, SslStream, SslVerifyMode};
use openssl::x509::X509;

pub const DOMAIN: &str = "site.acme.test";

/// Pebble and its DNS on free loopback ports; killed when dropped.
pub struct Pebble {
    _dns: Proc,
    pub proc: Proc,
    pub directory: String,
    /// Pebble's own TLS certificate, which the proxy's `ca_root` trusts.
    pub ca_root: std::path::PathBuf,
}

/// A self-signed ECDSA certificate for 127.0.0.1 (Pebble's own, for its ACME listener).
pub fn self_signed_for_loopback(cert: &std::path::Path, key: &std::path::Path) {
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-nodes",
            "-days",
            "2",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args([
            "-subj",
            "/CN=pebble",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(key)
        .arg("-out")
        .arg(cert)
        .output()
        .expect("run openssl req");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pebble {
    /// Pebble validating HTTP-01 challenges on `http01_port` of 127.0.0.1 (TLS-ALPN-01 on a
    /// port where nothing listens), issuing certificates valid for `validity_secs` (None:
    /// Pebble's default, years).
    pub fn start(dir: &TempDir, http01_port: u16, validity_secs: Option<u64>) -> Pebble {
        Pebble::start_on(dir, http01_port, free_port(), validity_secs)
    }

    /// Pebble validating HTTP-01 on `http01_port` and TLS-ALPN-01 on `tlsalpn01_port`.
    pub fn start_on(
        dir: &TempDir,
        http01_port: u16,
        tlsalpn01_port: u16,
        validity_secs: Option<u64>,
    ) -> Pebble {
        let (cert, key) = (dir.join("pebble.crt"), dir.join("pebble.key"));
        self_signed_for_loopback(&cert, &key);
        let dns = format!("127.0.0.1:{}", free_port());
        let mut challtest = Command::new("pebble-challtestsrv");
        challtest
            .args([
                "-dns01",
                &dns,
                "-http01",
                "",
                "-https01",
                "",
                "-tlsalpn01",
                "",
            ])
            .args(["-management", &format!("127.0.0.1:{}", free_port())])
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""]);
        let dns_proc = Proc::spawn("challtestsrv", challtest, dir.path());
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let config = dir.join("pebble.json");
        write_file(
            &config,
            &format!(
                r#"{{"pebble": {{"listenAddress": "{listen}", "managementListenAddress": "127.0.0.1:{mgmt}",
                "certificate": "{cert}", "privateKey": "{key}", "httpPort": {http01_port},
                "tlsPort": {tls}, "ocspResponderURL": "", "externalAccountBindingRequired": false{validity}}}}}"#,
                mgmt = free_port(),
                cert = cert.display(),
                key = key.display(),
                tls = tlsalpn01_port,
                validity = validity_secs
                    .map(|s| format!(r#", "certificateValidityPeriod": {s}"#))
                    .unwrap_or_default(),
            ),
        );
        let mut cmd = Command::new("pebble");
        cmd.arg("-config").arg(&config).args(["-dnsserver", &dns]);
        cmd.env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_VA_ALWAYS_VALID", "0");
        let mut proc = Proc::spawn("pebble", cmd, dir.path());
        assert!(
            wait_for_port(listen, Duration::from_secs(15))
                && proc.wait_for_output("ACME directory available", Duration::from_secs(5)),
            "pebble did not start\n{}",
            proc.logs()
        );
        Pebble {
            _dns: dns_proc,
            proc,
            directory: format!("https://{listen}/dir"),
            ca_root: cert,
        }
    }
}

/// A TLS connection to `addr` naming `DOMAIN`, certificates not verified (the test reads
/// them).
pub fn connect(addr: SocketAddr) -> SslStream<TcpStream> {
    let mut b = SslConnector::builder(SslMethod::tls_client()).unwrap();
    b.set_verify(SslVerifyMode::NONE);
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    b.build().connect(DOMAIN, tcp).unwrap()
}

pub fn issuer(cert: &X509) -> String {
    cert.issuer_name()
        .entries()
        .map(|e| String::from_utf8_lossy(e.data().as_slice()).into_owned())
        .collect::<Vec<_>>()
        .join(",")
}

/// The certificate a new handshake with `DOMAIN` gets.
pub fn served_certificate(addr: SocketAddr) -> X509 {
    let tls = connect(addr);
    tls.ssl().peer_certificate().expect("a server certificate")
}

pub fn served_issuer(addr: SocketAddr) -> String {
    issuer(&served_certificate(addr))
}

/// One keep-alive request on `tls`; the response's status line and body.
pub fn get(tls: &mut SslStream<TcpStream>) -> Result<(String, String), String> {
    let req = format!("GET /kept HTTP/1.1\r\nHost: {DOMAIN}\r\n\r\n");
    tls.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tls.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!("closed after {:?}", String::from_utf8_lossy(&buf)));
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0);
            if body.len() >= len {
                return Ok((
                    head.lines().next().unwrap_or("").to_string(),
                    body.to_string(),
                ));
            }
        }
    }
}

/// Pebble's validation port (HTTP-01 or TLS-ALPN-01): the first connection is held until the test releases it (at
/// most `HOLD`, within Pebble's 5 s validation timeout), then relayed to the proxy, so that
/// the test meets the challenge pending; later ones are relayed at once.
pub struct HoldingRelay {
    pub port: u16,
    pub accepted: mpsc::Receiver<()>,
    pub release: mpsc::Sender<()>,
    stop: Arc<AtomicBool>,
}

pub const HOLD: Duration = Duration::from_secs(3);

impl HoldingRelay {
    pub fn start(to: SocketAddr) -> HoldingRelay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (accepted_tx, accepted) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut first = true;
            while !stopped.load(Ordering::Relaxed) && Instant::now() < deadline {
                let Ok((client, _)) = listener.accept() else {
                    thread::sleep(Duration::from_millis(10));
                    continue;
                };
                if std::mem::take(&mut first) {
                    let _ = accepted_tx.send(());
                    let _ = release_rx.recv_timeout(HOLD);
                }
                relay(client, to);
            }
        });
        HoldingRelay {
            port,
            accepted,
            release,
            stop,
        }
    }
}

impl Drop for HoldingRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Copies bytes both ways between `client` and a new connection to `to`, until either
/// side ends (each direction bounded by a 10 s read timeout).
fn relay(client: TcpStream, to: SocketAddr) {
    let Ok(server) = TcpStream::connect(to) else {
        return;
    };
    let _ = client.set_nonblocking(false);
    let pipe = |mut from: TcpStream, mut into: TcpStream| {
        thread::spawn(move || {
            let _ = from.set_read_timeout(Some(Duration::from_secs(10)));
            let mut buf = [0u8; 4096];
            loop {
                match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) if into.write_all(&buf[..n]).is_err() => break,
                    Ok(_) => {}
                }
            }
            let _ = into.shutdown(Shutdown::Write);
        });
    };
    pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
    pipe(server, client);
}

/// id-pe-acmeIdentifier (06 08 ...), critical (01 01 ff), then the extension's value: an
/// OCTET STRING (04 22) holding the DER OCTET STRING of a SHA-256 (04 20 + 32 bytes).
pub const ACME_IDENTIFIER_CRITICAL: &[u8] = &[
    0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x01, 0x1f, 0x01, 0x01, 0xff, 0x04, 0x22, 0x04,
    0x20,
];

/// A handshake with `addr` naming `name` and offering `alpn` (wire format): the stream, or
/// the handshake's error.
pub fn handshake(
    addr: SocketAddr,
    name: &str,
    alpn: &[u8],
) -> Result<SslStream<TcpStream>, String> {
    let mut b = SslConnector::builder(SslMethod::tls_client()).unwrap();
    b.set_verify(SslVerifyMode::NONE);
    b.set_alpn_protos(alpn).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    b.build().connect(name, tcp).map_err(|e| e.to_string())
}

pub fn is_validation_certificate(cert: &X509, name: &str) -> bool {
    let der = cert.to_der().unwrap();
    let sans: Vec<String> = cert
        .subject_alt_names()
        .map(|s| {
            s.iter()
                .filter_map(|n| n.dnsname().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    sans == [name]
        && der
            .windows(ACME_IDENTIFIER_CRITICAL.len())
            .any(|w| w == ACME_IDENTIFIER_CRITICAL)
}

/// Waits for the proxy's log to say a certificate was put in service.
pub fn wait_issued(proxy: &Proxy, pebble: &Pebble) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !proxy.proc.stderr().contains("acme: new certificate for") {
        assert!(
            Instant::now() < deadline,
            "no certificate within 60 s\n{}\n{}",
            proxy.proc.logs(),
            pebble.proc.logs()
        );
        thread::sleep(Duration::from_millis(100));
    }
}
