//! The proxy's own TLS record layer through the real binary (the default on a kernel without
//! the `tls` module): independent peers (curl, `openssl s_client`, Python's `ssl`, h2load,
//! OpenSSL clients built here) for TLS 1.2 and 1.3 × AES-128-GCM, AES-256-GCM and
//! ChaCha20-Poly1305, bodies byte-exact both ways, resumption, KeyUpdate from the client in
//! both forms, resumption, and the metrics that say which path each connection took. Attacks
//! on the layer: tls_record_attacks.rs.

mod tls_record_common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use e2e::curl;
use e2e::origin::pattern;
use openssl::ssl::{Ssl, SslContext, SslMethod, SslVerifyMode, SslVersion};
use tls_record_common::*;

/// Uploads of 10 B, 26 KB and 5 MB over `tls` (curl's version and suite arguments), each
/// echoed back byte-exact by the origin; returns the connections made.
fn uploads_echo(run: &Running, tls: &[String], suite: &str) -> u64 {
    let dir = run.proxy.dir.path().to_path_buf();
    let mut connections = 0;
    for len in [10usize, 26_000, 5_242_880] {
        let body: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        let input = dir.join("upload");
        std::fs::write(&input, &body).unwrap();
        let output = dir.join("echoed");
        let mut args: Vec<String> = vec!["-k".into(), "--resolve".into(), run.resolve()];
        args.extend(tls.iter().cloned());
        args.extend([
            "--data-binary".into(),
            format!("@{}", input.display()),
            "-H".into(),
            "Content-Type: application/octet-stream".into(),
            "-o".into(),
            output.display().to_string(),
            run.url("/echo"),
        ]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let (st, _, err) = curl(&refs, 60);
        connections += 1;
        assert!(
            st.success(),
            "{suite}: POST {len}: {err}\n{}",
            run.proxy.proc.logs()
        );
        let echoed = std::fs::read(&output).unwrap();
        assert!(
            echoed == body,
            "{suite}: POST {len}: {} bytes echoed differ",
            echoed.len()
        );
    }
    connections
}

#[test]
fn curl_every_version_and_aead_bodies_byte_exact_both_ways() {
    let origin = origin();
    let run = start(&origin, "");
    let dir = run.proxy.dir.path().to_path_buf();
    let before = run.path_count("records");
    let mut connections = 0;
    for (version, suite) in all_suites() {
        let tls = curl_version_args(version, suite);
        // Downloads: 10 B, 26 KB, 5 MB, each twice on one keep-alive connection (the second
        // from the cache: sealed straight from the stored body).
        let mut args: Vec<String> = vec!["-k".into(), "--resolve".into(), run.resolve()];
        args.extend(tls.iter().cloned());
        for len in [10u64, 26_000, 5_242_880] {
            for i in 0..2 {
                let file = dir.join(format!("get-{len}-{i}"));
                args.extend([
                    "-o".into(),
                    file.display().to_string(),
                    run.url(&format!("/bytes/{len}")),
                ]);
            }
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let (st, _, err) = curl(&refs, 60);
        connections += 1;
        assert!(st.success(), "{suite}: {err}\n{}", run.proxy.proc.logs());
        for len in [10u64, 26_000, 5_242_880] {
            for i in 0..2 {
                let got = std::fs::read(dir.join(format!("get-{len}-{i}"))).unwrap();
                assert!(
                    got == pattern(len),
                    "{suite}: GET {len} #{i}: {} bytes differ",
                    got.len()
                );
            }
        }
        // Uploads: the origin echoes the body back through the proxy.
        connections += uploads_echo(&run, &tls, suite);
    }
    assert_eq!(
        run.path_count("records") - before,
        connections,
        "{}",
        run.metrics()
    );
    assert_eq!(run.path_count("userspace"), 0);
    assert_eq!(
        run.sample("ktls_proxy_ktls_fallbacks_total{reason=\"no_kernel_support\"}"),
        run.path_count("records"),
        "this host has no kTLS: every connection says why"
    );
}

/// One write to s_client's stdin: after `after` whole responses came back, `text`, then a
/// pause (s_client takes a command letter only as the first byte of one stdin read).
struct Step<'a> {
    after: usize,
    text: &'a [u8],
    pause_ms: u64,
}

/// Runs `openssl s_client -quiet` feeding `steps` to its stdin, keeps
/// stdin open until `responses` whole responses came back (or 30 s), then closes it (the
/// interactive `k`/`K` commands work only with `-no_ign_eof`). Returns stdout (the raw HTTP
/// responses) and stderr.
fn s_client_steps(
    addr: SocketAddr,
    args: &[&str],
    steps: &[Step<'_>],
    responses: usize,
) -> (Vec<u8>, String) {
    let mut child = Command::new("timeout")
        .args(["30", "openssl", "s_client", "-quiet", "-no_ign_eof"])
        .args(["-connect", &addr.to_string(), "-servername", "site.test"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run openssl s_client");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = child.stdout.take().expect("stdout");
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let reader = {
        let seen = seen.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let wait_for = |n: usize| {
        while complete_responses(&seen.lock().unwrap()) < n && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    for step in steps {
        wait_for(step.after);
        let _ = stdin.write_all(step.text);
        let _ = stdin.flush();
        std::thread::sleep(Duration::from_millis(step.pause_ms));
    }
    wait_for(responses);
    drop(stdin);
    let out = child.wait_with_output().expect("s_client output");
    let _ = reader.join();
    let stdout = std::mem::take(&mut *seen.lock().unwrap());
    (stdout, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn s_client_resumes_every_version_and_suite() {
    let origin = origin();
    let run = start(
        &origin,
        "tls_tickets secret=\"record layer test\" lifetime=600;",
    );
    let conf = std::fs::read_to_string(&run.proxy.config).unwrap();
    assert!(conf.contains("tls_tickets"));
    let sess = run.proxy.dir.join("session.pem");
    let sess = sess.display().to_string();
    for (version, suite) in all_suites() {
        let (flag, cipher_flag) = if version == SslVersion::TLS1_3 {
            ("-tls1_3", "-ciphersuites")
        } else {
            ("-tls1_2", "-cipher")
        };
        let resumed_before = run.sample("ktls_proxy_tls_handshakes_total{result=\"resumed\"}");
        let request = get("/bytes/26000", true);
        let (out, err) = s_client_steps(
            run.https,
            &[flag, cipher_flag, suite, "-sess_out", &sess],
            &[Step {
                after: 0,
                text: &request,
                pause_ms: 0,
            }],
            1,
        );
        assert_eq!(bodies(&out), vec![pattern(26_000)], "{suite}: {err}");
        let request = get("/bytes/10", true);
        let (out, err) = s_client_steps(
            run.https,
            &[flag, cipher_flag, suite, "-sess_in", &sess],
            &[Step {
                after: 0,
                text: &request,
                pause_ms: 0,
            }],
            1,
        );
        assert_eq!(bodies(&out), vec![pattern(10)], "{suite} resumed: {err}");
        assert_eq!(
            run.sample("ktls_proxy_tls_handshakes_total{result=\"resumed\"}"),
            resumed_before + 1,
            "{suite}: the second connection did not resume"
        );
    }
    assert_eq!(run.path_count("userspace"), 0);
}

/// KeyUpdate from s_client between requests on one connection: `K` asks the proxy to update
/// its key too (it answers), `k` does not.
#[test]
fn s_client_key_updates_are_followed() {
    let origin = origin();
    let run = start(&origin, "");
    let (received, sent) = key_updates(&run);
    for suite in TLS13 {
        let first = get("/bytes/26000", false);
        let last = get("/bytes/5242880", true);
        let (out, err) = s_client_steps(
            run.https,
            &["-tls1_3", "-ciphersuites", suite],
            // The commands only once the handshake is done and the first answer is in.
            &[
                Step {
                    after: 0,
                    text: &first,
                    pause_ms: 0,
                },
                Step {
                    after: 1,
                    text: b"K\n",
                    pause_ms: 300,
                },
                Step {
                    after: 1,
                    text: b"k\n",
                    pause_ms: 300,
                },
                Step {
                    after: 1,
                    text: &last,
                    pause_ms: 0,
                },
            ],
            2,
        );
        assert_eq!(err.matches("KEYUPDATE").count(), 2, "{suite}: {err}");
        let got = bodies(&out);
        assert_eq!(got.len(), 2, "{suite}: {err}\n{}", run.proxy.proc.logs());
        assert!(
            got[0] == pattern(26_000),
            "{suite}: body before the KeyUpdates differs"
        );
        assert!(
            got[1] == pattern(5_242_880),
            "{suite}: 5 MB after the KeyUpdates differs"
        );
    }
    let (received_after, sent_after) = key_updates(&run);
    assert_eq!(
        received_after - received,
        6,
        "two KeyUpdates per connection"
    );
    assert_eq!(sent_after - sent, 3, "one answer to each update_requested");
    assert_eq!(run.path_count("userspace"), 0);
}

#[test]
fn key_updates_mid_transfer_are_followed_both_ways() {
    let origin = origin();
    let run = start(&origin, "");
    let (received, sent) = key_updates(&run);
    for suite in TLS13 {
        for requested in [true, false] {
            let mut b = SslContext::builder(SslMethod::tls_client()).unwrap();
            b.set_verify(SslVerifyMode::NONE);
            b.set_min_proto_version(Some(SslVersion::TLS1_3)).unwrap();
            ktls::settings::set_tls13_ciphersuites(&mut b, suite).unwrap();
            let tcp = TcpStream::connect(run.https).unwrap();
            tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut tls = Ssl::new(&b.build()).unwrap().connect(tcp).unwrap();
            tls.write_all(&get("/bytes/5242880", false)).unwrap();
            // A megabyte in, while the proxy is still sending: a KeyUpdate and the next
            // request go out together.
            let mut raw = vec![0u8; 1 << 20];
            tls.read_exact(&mut raw).unwrap();
            if requested {
                ktls::ossl::request_key_update(tls.ssl()).unwrap();
            } else {
                ktls::ossl::key_update(tls.ssl()).unwrap();
            }
            tls.write_all(&get("/bytes/26000", true)).unwrap();
            let _ = tls.read_to_end(&mut raw);
            let got = bodies(&raw);
            assert_eq!(got.len(), 2, "{suite} requested={requested}");
            assert!(
                got[0] == pattern(5_242_880),
                "{suite}: the 5 MB body differs"
            );
            assert!(
                got[1] == pattern(26_000),
                "{suite}: the body after the update differs"
            );
        }
    }
    let (received_after, sent_after) = key_updates(&run);
    assert_eq!(received_after - received, 6);
    assert_eq!(
        sent_after - sent,
        3,
        "the proxy answers each update_requested"
    );
}

#[test]
fn python_ssl_and_h2load_interoperate() {
    let origin = origin();
    let run = start(&origin, "");
    let script = r#"
import socket, ssl, sys
port = int(sys.argv[1])
for version, suite in [(ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-AES256-GCM-SHA384"),
                       (ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-CHACHA20-POLY1305"),
                       (ssl.TLSVersion.TLSv1_3, None)]:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ctx.maximum_version = version
    if suite:
        ctx.set_ciphers(suite)
    body = bytes((i * 13) % 251 for i in range(26000))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="site.test") as s:
            s.sendall(b"POST /echo HTTP/1.1\r\nHost: site.test\r\nContent-Length: %d\r\n"
                      b"Connection: close\r\n\r\n" % len(body) + body)
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
                negotiated = (s.version(), s.cipher()[0])
    head, _, got = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    assert got == body, (negotiated, len(got))
    print("ok", *negotiated)
"#;
    match Command::new("python3")
        .args(["-c", script, &run.https.port().to_string()])
        .output()
    {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.matches("ok ").count() == 3,
                "python ssl: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Err(e) => panic!("python3 is needed for this test (apt-get install python3): {e}"),
    }
    let out = Command::new("timeout")
        .args(["60", "h2load", "--h1", "-n", "400", "-c", "8", "-m", "1"])
        .args(["-H", ":authority: site.test"])
        .arg(run.url("/bytes/26000").replace("site.test", "127.0.0.1"))
        .output()
        .expect("h2load (apt-get install nghttp2-client)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("400 succeeded, 0 failed, 0 errored"),
        "h2load: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(run.path_count("userspace"), 0);
    assert_eq!(run.path_count("records"), 3 + 8);
}

#[test]
fn tls_ktls_off_keeps_openssl_and_user_takes_the_record_layer() {
    let origin = origin();
    for (mode, path, line) in [
        ("off", "userspace", "OpenSSL's record layer"),
        ("user", "records", "the proxy's record layer"),
        ("auto", "records", "the proxy's record layer"),
    ] {
        let run = start(&origin, &format!("tls_ktls {mode};"));
        let (st, out, err) = curl(
            &[
                "-k",
                "--resolve",
                &run.resolve(),
                "-o",
                "/dev/null",
                "-w",
                "%{size_download}",
                &run.url("/bytes/26000"),
            ],
            10,
        );
        assert!(st.success() && out == "26000", "{mode}: {out} {err}");
        assert_eq!(run.path_count(path), 1, "{mode}: {}", run.metrics());
        let logs = run.proxy.proc.logs();
        assert!(
            logs.contains("kTLS: ") && logs.contains(line),
            "{mode}: {logs}"
        );
    }
}
