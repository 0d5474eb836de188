//! A reload gives new QUIC connections the new certificate, and the connections open before
//! it finish what they carry: the runtime is rebuilt, the workers, their UDP sockets and
//! their keys stay, and each HTTP/3 connection gets GOAWAY, as HTTP/2 connections do
//! (docs/HTTP3.md, "Workers"). The client is aioquic (tests/py/quic_cert.py), holding one
//! connection across the reload.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::Setup;
use e2e::{free_port, gen_cert, need_aioquic, wait_for_port, KeyKind};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/py/quic_cert.py");

/// The held client: its input, its output lines, and the process, killed on drop.
struct HeldClient {
    child: Child,
    input: ChildStdin,
    lines: Receiver<String>,
}

impl HeldClient {
    fn start(port: u16) -> HeldClient {
        need_aioquic();
        let mut child = Command::new("timeout")
            .args(["60", "python3", SCRIPT, &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let input = child.stdin.take().expect("stdin piped");
        let output = child.stdout.take().expect("stdout piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(output).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        HeldClient {
            child,
            input,
            lines,
        }
    }

    /// The client's next line, within 15 s.
    fn line(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(15))
            .unwrap_or_else(|e| format!("no line from the client: {e}"))
    }

    /// Sends `command` to the client (tests/py/quic_cert.py); its answer.
    fn command(&mut self, command: &str) -> String {
        writeln!(self.input, "{command}").expect("client input");
        self.input.flush().expect("client input");
        self.line()
    }
}

impl Drop for HeldClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The SHA-256 of `cert`'s DER encoding, in lowercase hex, as the openssl tool computes it.
fn fingerprint(cert: &Path) -> String {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(cert)
        .output()
        .expect("openssl");
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text.split('=').nth(1).unwrap_or("").trim();
    hex.replace(':', "").to_ascii_lowercase()
}

#[test]
fn a_reload_serves_the_new_certificate_and_lets_open_quic_connections_finish() {
    let origin = Origin::start(|r| match r.path() {
        "/slow" => Response::ok("slow").delay(Duration::from_secs(5)),
        _ => Response::ok("up"),
    });
    let setup = Setup::new("quic-reload");
    let (second_cert, second_key) = gen_cert(
        setup.dir.path(),
        "second",
        KeyKind::EcdsaP256,
        &["site.test"],
    );
    let (first, second) = (fingerprint(&setup.cert), fingerprint(&second_cert));
    assert_eq!(first.len(), 64, "openssl fingerprint of {:?}", setup.cert);
    assert_ne!(first, second);
    let h3 = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = setup.config(origin.addr(), "", "").replacen(
        "listen",
        &format!("listen {h3} proto=\"h2,h3\";\nlisten"),
        1,
    );
    let (first_cert, first_key) = (setup.cert.clone(), setup.key.clone());
    let proxy = setup.start(&conf);
    assert!(wait_for_port(h3, Duration::from_secs(10)), "{h3} listens");

    let mut held = HeldClient::start(h3.port());
    let hello = held.line();
    let want = format!("cert {first} status 200 goaway no");
    assert_eq!(hello, want, "{}", proxy.proc.logs());
    assert_eq!(held.command("get"), "status 200 goaway no");
    // A request in flight across the reload (the origin answers it in 5 s).
    assert_eq!(held.command("start"), "started");

    let renewed = conf
        .replace(
            &first_cert.display().to_string(),
            &second_cert.display().to_string(),
        )
        .replace(
            &first_key.display().to_string(),
            &second_key.display().to_string(),
        );
    assert_ne!(renewed, conf);
    proxy.reload(&renewed);

    // A new connection gets the new certificate.
    let fresh = HeldClient::start(h3.port());
    let want = format!("cert {second} status 200 goaway no");
    assert_eq!(fresh.line(), want, "{}", proxy.proc.logs());
    // The connection opened before the reload got GOAWAY, as HTTP/2 clients do: its request
    // in flight is answered; a new request on it is refused as not processed
    // (H3_REQUEST_REJECTED, 0x10b = 267: RFC 9114 §5.2, safe to retry on a new connection).
    let (in_flight, after) = (held.command("wait"), held.command("get"));
    let logs = proxy.proc.logs();
    assert_eq!(in_flight, "status 200 goaway yes", "then {after}\n{logs}");
    assert_eq!(after, "reset 267 goaway yes", "{logs}");
    assert_eq!(origin.hits("/slow"), 1);
}
