//! Issue 12, item 6, through the real binary and the real `openssl s_client`: TLS session
//! tickets must not outlive a reload that replaced `tls_tickets secret`, and a ticket issued
//! under one SNI vhost must not resume a session under another. Rule: ticket keys belong to
//! the vhost's context and are replaced on reload.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use e2e::origin::Origin;
use e2e::proxy::{Proxy, Setup};
use e2e::{gen_cert, KeyKind};

const T: Duration = Duration::from_secs(5);

/// TLS versions the tests run with: tickets work differently in each.
const VERSIONS: [&str; 2] = ["-tls1_2", "-tls1_3"];

/// Runs `openssl s_client` against `addr` with SNI `sni`, sends one request and waits for the
/// proxy to close (bounded to 10 s). Saves the session to `sess_out`, offers the one in
/// `sess_in`. Returns whether the handshake resumed a session ("Reused," in the report), or
/// panics if the handshake did not complete.
fn s_client(
    addr: SocketAddr,
    sni: &str,
    version: &str,
    sess_out: Option<&Path>,
    sess_in: Option<&Path>,
) -> bool {
    let mut cmd = Command::new("openssl");
    cmd.args([
        "s_client",
        "-connect",
        &addr.to_string(),
        "-servername",
        sni,
        version,
    ])
    .arg("-ign_eof");
    if let Some(p) = sess_out {
        cmd.arg("-sess_out").arg(p);
    }
    if let Some(p) = sess_in {
        cmd.arg("-sess_in").arg(p);
    }
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run openssl s_client");
    if let Some(mut stdin) = child.stdin.take() {
        let req = format!("GET / HTTP/1.1\r\nHost: {sni}\r\nConnection: close\r\n\r\n");
        let _ = stdin.write_all(req.as_bytes());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if let Ok(None) = child.try_wait() {
        e2e::send_signal(child.id(), libc::SIGKILL);
    }
    let out = child.wait_with_output().expect("s_client output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout.contains("HTTP/1.1 200"),
        "s_client {sni} {version}: no response\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reused = stdout.lines().any(|l| l.starts_with("Reused,"));
    let new = stdout.lines().any(|l| l.starts_with("New,"));
    assert!(
        reused != new,
        "cannot tell whether the session resumed:\n{stdout}"
    );
    reused
}

/// Two vhosts with their own certificates, tickets from `secret`.
fn config(setup: &Setup, origin: SocketAddr, secret: &str) -> String {
    let dir = setup.dir.path();
    let (a_crt, a_key) = gen_cert(dir, "a", KeyKind::EcdsaP256, &["a.test"]);
    let (b_crt, b_key) = gen_cert(dir, "b", KeyKind::EcdsaP256, &["b.test"]);
    format!(
        "listen {http};\nlisten {https} proto=https;\n\
         srv_group default {{ server {origin}; }}\n\
         tls_tickets enable secret={secret};\n\
         vhost a.test {{ tls_certificate {ac}; tls_certificate_key {ak}; proxy_pass default; }}\n\
         vhost b.test {{ tls_certificate {bc}; tls_certificate_key {bk}; proxy_pass default; }}\n\
         http_chain {{ host == \"a.test\" -> a.test; host == \"b.test\" -> b.test; }}\n",
        http = setup.http,
        https = setup.https,
        ac = a_crt.display(),
        ak = a_key.display(),
        bc = b_crt.display(),
        bk = b_key.display(),
    )
}

fn start(tag: &str, origin: &Origin, secret: &str) -> (Proxy, SocketAddr) {
    let setup = Setup::new(tag);
    let conf = config(&setup, origin.addr(), secret);
    let https = setup.https;
    (setup.start(&conf), https)
}

/// Item 6 (confirmed): after SIGHUP with a new `tls_tickets secret`, tickets issued under the
/// old secret must not resume.
#[test]
fn item6_tickets_from_the_old_secret_do_not_resume_after_a_reload() {
    let origin = Origin::fixed(b"ok");
    let (mut proxy, https) = start("sec-tickets-reload", &origin, "first-secret-0123456789");
    for version in VERSIONS {
        let old = proxy.dir.join(&format!("old{version}.pem"));
        assert!(!s_client(https, "a.test", version, Some(&old), None));
        // Control: the ticket resumes before the reload.
        assert!(
            s_client(https, "a.test", version, None, Some(&old)),
            "{version}: tickets do not resume at all; the test would prove nothing\n{}",
            proxy.proc.logs()
        );
    }

    let text = std::fs::read_to_string(&proxy.config).expect("read config");
    let text = text.replace("first-secret-0123456789", "second-secret-9876543210");
    std::fs::write(&proxy.config, text).expect("write config");
    proxy.proc.signal(libc::SIGHUP);
    assert!(
        proxy.proc.wait_for_output("reloaded", T),
        "no reload\n{}",
        proxy.proc.logs()
    );

    let mut resumed = Vec::new();
    for version in VERSIONS {
        let old = proxy.dir.join(&format!("old{version}.pem"));
        if s_client(https, "a.test", version, None, Some(&old)) {
            resumed.push(version);
        }
        // Control: tickets under the new secret resume.
        let new = proxy.dir.join(&format!("new{version}.pem"));
        s_client(https, "a.test", version, Some(&new), None);
        assert!(
            s_client(https, "a.test", version, None, Some(&new)),
            "{version}: tickets under the new secret do not resume\n{}",
            proxy.proc.logs()
        );
    }
    assert!(
        resumed.is_empty(),
        "a ticket from the replaced secret resumed a session after the reload with {resumed:?}"
    );
}

/// Item 6 (confirmed): a ticket issued under SNI `a.test` must not resume a session under
/// SNI `b.test` (another vhost, another certificate), even with one `tls_tickets secret`.
#[test]
fn item6_a_ticket_from_one_vhost_does_not_resume_under_another() {
    let origin = Origin::fixed(b"ok");
    let (proxy, https) = start("sec-tickets-sni", &origin, "shared-secret-0123456789");
    let mut resumed = Vec::new();
    for version in VERSIONS {
        let a = proxy.dir.join(&format!("a{version}.pem"));
        assert!(!s_client(https, "a.test", version, Some(&a), None));
        assert!(
            s_client(https, "a.test", version, None, Some(&a)),
            "{version}: tickets do not resume at all; the test would prove nothing\n{}",
            proxy.proc.logs()
        );
        if s_client(https, "b.test", version, None, Some(&a)) {
            resumed.push(version);
        }
    }
    assert!(
        resumed.is_empty(),
        "a ticket issued for a.test resumed a session for b.test with {resumed:?}"
    );
}
