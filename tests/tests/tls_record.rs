//! The proxy's own TLS record layer through the real binary (the default on a kernel without
//! the `tls` module): independent peers (curl, `openssl s_client`, Python's `ssl`, h2load,
//! OpenSSL clients built here) for TLS 1.2 and 1.3 × AES-128-GCM, AES-256-GCM and
//! ChaCha20-Poly1305, bodies byte-exact both ways, resumption, KeyUpdate from the client in
//! both forms, a pipelined first request, tampered records, and the metrics that say which
//! path each connection took.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use e2e::origin::{pattern, Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{curl, free_port};
use openssl::ssl::{Ssl, SslContext, SslMethod, SslVerifyMode, SslVersion};

/// TLS 1.2 (OpenSSL name) and TLS 1.3 (IANA name) suites of the three AEADs.
const TLS12: [&str; 3] = [
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
];
const TLS13: [&str; 3] = [
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// `/bytes/N` answers N bytes of the origin's pattern (cacheable); `/echo` answers the body.
fn origin() -> Origin {
    Origin::start(|r| {
        if r.path() == "/echo" {
            return Response::ok(r.body.clone());
        }
        let len: u64 = r.path().trim_start_matches("/bytes/").parse().unwrap_or(10);
        Response::pattern(len).header("Cache-Control", "max-age=300")
    })
}

struct Running {
    proxy: Proxy,
    https: SocketAddr,
    stats: SocketAddr,
}

fn start(origin: &Origin, extra: &str) -> Running {
    let setup = Setup::new("tlsrec");
    let https = setup.https;
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = setup.config(
        origin.addr(),
        "",
        &format!("cache 1;\ncache_fulfill * *;\nstats_listen {stats};\n{extra}"),
    );
    Running {
        proxy: setup.start(&conf),
        https,
        stats,
    }
}

impl Running {
    fn metrics(&self) -> String {
        let (st, out, err) = curl(&[&format!("http://{}/metrics", self.stats)], 5);
        assert!(st.success(), "metrics: {err}");
        out
    }

    /// The value of the sample `name{labels}` (0 when absent).
    fn sample(&self, name_and_labels: &str) -> u64 {
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name_and_labels} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    fn path_count(&self, path: &str) -> u64 {
        self.sample(&format!(
            "ktls_proxy_tls_connections_total{{path=\"{path}\"}}"
        ))
    }

    fn url(&self, path: &str) -> String {
        format!("https://site.test:{}{path}", self.https.port())
    }

    fn resolve(&self) -> String {
        format!("site.test:{}:127.0.0.1", self.https.port())
    }
}

fn curl_version_args(version: SslVersion, suite: &str) -> Vec<String> {
    if version == SslVersion::TLS1_3 {
        ["--tlsv1.3", "--tls-max", "1.3", "--tls13-ciphers", suite]
    } else {
        ["--tlsv1.2", "--tls-max", "1.2", "--ciphers", suite]
    }
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn all_suites() -> Vec<(SslVersion, &'static str)> {
    TLS12
        .iter()
        .map(|s| (SslVersion::TLS1_2, *s))
        .chain(TLS13.iter().map(|s| (SslVersion::TLS1_3, *s)))
        .collect()
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

/// How many whole `Content-Length` responses `raw` holds.
fn complete_responses(raw: &[u8]) -> usize {
    let mut rest = raw;
    let mut n = 0;
    while let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n") {
        let len = content_length(&rest[..end]);
        if rest.len() < end + 4 + len {
            break;
        }
        n += 1;
        rest = &rest[end + 4 + len..];
    }
    n
}

fn content_length(head: &[u8]) -> usize {
    String::from_utf8_lossy(head)
        .to_ascii_lowercase()
        .lines()
        .find_map(|l| l.strip_prefix("content-length:").map(str::to_string))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The bodies of the `Content-Length` responses in `raw`, in order.
fn bodies(mut raw: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
        let len = content_length(&raw[..end]);
        let body = &raw[end + 4..];
        let take = len.min(body.len());
        out.push(body[..take].to_vec());
        raw = &body[take..];
    }
    out
}

fn get(path: &str, close: bool) -> Vec<u8> {
    format!(
        "GET {path} HTTP/1.1\r\nHost: site.test\r\n{}\r\n",
        if close { "Connection: close\r\n" } else { "" }
    )
    .into_bytes()
}

#[test]
fn s_client_resumes_and_its_key_updates_are_followed() {
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
    // KeyUpdate from s_client between requests on one connection: `K` asks the proxy to
    // update its key too (it answers), `k` does not.
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

/// Issue 30: a client that never reads and only asks for KeyUpdates made the record layer
/// queue one 27-byte answer per request, without limit. One answer covers every request
/// until the proxy sends data again (RFC 8446 §4.6.3), and a run of KeyUpdates with no data
/// between them ends the connection with unexpected_message.
#[test]
fn a_key_update_flood_gets_one_answer_then_a_close() {
    let origin = origin();
    let run = start(&origin, "tls_ktls user;\n");
    let flood_errors = "ktls_proxy_tls_record_errors_total{reason=\"unexpected_message\"}";
    let (received, sent) = key_updates(&run);
    let errors = run.sample(flood_errors);

    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&run.https.into()).unwrap();
    let tcp: TcpStream = sock.into();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut tls = Ssl::new(&client_ctx(SslVersion::TLS1_3))
        .unwrap()
        .connect(tcp)
        .unwrap();
    let mut written = 0;
    for _ in 0..200 {
        // Each KeyUpdate goes out at once; sending fails once the proxy closed.
        if ktls::ossl::send_key_update(tls.ssl()).is_err() {
            break;
        }
        written += 1;
    }
    assert!(written > 32, "only {written} KeyUpdates went out");

    let mut sink = vec![0u8; 4096];
    let end = loop {
        match tls.read(&mut sink) {
            Ok(0) => break "end of stream".to_string(),
            Ok(_) => continue,
            Err(e) => break format!("{e:?}"),
        }
    };
    let (received_after, sent_after) = key_updates(&run);
    assert_eq!(
        sent_after - sent,
        1,
        "one answer for {} requests ({written} sent)",
        received_after - received
    );
    assert_eq!(
        received_after - received,
        33,
        "the 33rd update without data is the last one read"
    );
    assert_eq!(run.sample(flood_errors) - errors, 1, "{}", run.metrics());
    assert!(
        !end.contains("WouldBlock") && !end.contains("TimedOut"),
        "the flooding connection was left open: {end}"
    );
}

/// The record layer opens at most 32 records without data per read call, then returns to
/// let the worker serve others (issue 30). The request behind 32 KeyUpdates arrives in the
/// same segment, so no readiness event follows the yield: the worker must come back by
/// itself. (Before the worker did, the request waited for the client's next bytes: none.)
#[test]
fn a_request_behind_a_run_of_records_without_data_is_answered() {
    let origin = origin();
    let run = start(&origin, "tls_ktls user;\n");
    let (sock, _) = meddler(run.https, true);
    let mut tls = Ssl::new(&client_ctx(SslVersion::TLS1_3))
        .unwrap()
        .connect(sock)
        .unwrap();
    let (received, _) = key_updates(&run);
    for _ in 0..ktls::record::MAX_RECORDS_WITHOUT_DATA_PER_READ {
        ktls::ossl::send_key_update(tls.ssl()).unwrap();
    }
    // The Finished, 32 KeyUpdates and the request leave in one write, at the first read.
    tls.write_all(&get("/bytes/100", true)).unwrap();
    let mut response = Vec::new();
    let _ = tls.read_to_end(&mut response);
    assert_eq!(bodies(&response), vec![pattern(100)], "{}", run.metrics());
    let (received_after, _) = key_updates(&run);
    assert_eq!(received_after - received, 32);
}

fn key_updates(run: &Running) -> (u64, u64) {
    (
        run.sample("ktls_proxy_tls_key_updates_total{direction=\"received\"}"),
        run.sample("ktls_proxy_tls_key_updates_total{direction=\"sent\"}"),
    )
}

/// A socket that flips one bit of the next write once armed, and that can hold writes until
/// the next read (so that a TLS client's Finished and first request leave in one segment).
#[derive(Debug)]
struct Meddler {
    stream: TcpStream,
    tamper: Arc<AtomicBool>,
    cork: bool,
    held: Vec<u8>,
}

impl Read for Meddler {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.release()?;
        self.stream.read(buf)
    }
}

impl Write for Meddler {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut bytes = buf.to_vec();
        if self.tamper.swap(false, Ordering::SeqCst) {
            // The last byte is in the record's authentication tag.
            let last = bytes.len() - 1;
            bytes[last] ^= 0x01;
        }
        if self.cork {
            self.held.extend_from_slice(&bytes);
        } else {
            self.stream.write_all(&bytes)?;
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Meddler {
    fn release(&mut self) -> io::Result<()> {
        if !self.held.is_empty() {
            self.stream.write_all(&self.held)?;
            self.held.clear();
        }
        Ok(())
    }
}

fn client_ctx(version: SslVersion) -> SslContext {
    let mut b = SslContext::builder(SslMethod::tls_client()).unwrap();
    b.set_verify(SslVerifyMode::NONE);
    b.set_min_proto_version(Some(version)).unwrap();
    b.set_max_proto_version(Some(version)).unwrap();
    b.build()
}

fn meddler(addr: SocketAddr, cork: bool) -> (Meddler, Arc<AtomicBool>) {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.set_nodelay(true).unwrap();
    let tamper = Arc::new(AtomicBool::new(false));
    (
        Meddler {
            stream,
            tamper: tamper.clone(),
            cork,
            held: Vec::new(),
        },
        tamper,
    )
}

#[test]
fn a_flipped_bit_is_answered_with_bad_record_mac_and_counted() {
    let origin = origin();
    let run = start(&origin, "");
    let counter = "ktls_proxy_tls_record_errors_total{reason=\"bad_record_mac\"}";
    let before = run.sample(counter);
    for version in [SslVersion::TLS1_2, SslVersion::TLS1_3] {
        let (sock, tamper) = meddler(run.https, false);
        let mut tls = Ssl::new(&client_ctx(version))
            .unwrap()
            .connect(sock)
            .unwrap();
        // One good exchange first: the connection is on the proxy's record layer.
        tls.write_all(&get("/bytes/10", false)).unwrap();
        let mut buf = vec![0u8; 4096];
        let mut first = Vec::new();
        while complete_responses(&first) < 1 {
            let n = tls.read(&mut buf).unwrap();
            assert!(n > 0, "{version:?}: closed before the first response");
            first.extend_from_slice(&buf[..n]);
        }
        assert_eq!(bodies(&first), vec![pattern(10)]);
        tamper.store(true, Ordering::SeqCst);
        tls.write_all(&get("/bytes/10", false)).unwrap();
        let err = match tls.read(&mut buf) {
            Ok(n) => panic!("{version:?}: a tampered request got {n} bytes back"),
            Err(e) => format!("{e:?}"),
        };
        // OpenSSL says "bad record mac", AWS-LC "SSLV3_ALERT_BAD_RECORD_MAC".
        assert!(
            err.to_ascii_lowercase()
                .replace('_', " ")
                .contains("bad record mac"),
            "{version:?}: expected the bad_record_mac alert, got {err}"
        );
    }
    assert_eq!(run.sample(counter) - before, 2, "{}", run.metrics());
    assert_eq!(
        origin.hits("/bytes/10"),
        1,
        "tampered requests never reach the origin"
    );
}

#[test]
fn a_request_sent_with_the_clients_finished_is_answered() {
    let origin = origin();
    let run = start(&origin, "");
    for suite in TLS13 {
        let (sock, _) = meddler(run.https, true);
        let mut b = SslContext::builder(SslMethod::tls_client()).unwrap();
        b.set_verify(SslVerifyMode::NONE);
        b.set_min_proto_version(Some(SslVersion::TLS1_3)).unwrap();
        ktls::settings::set_tls13_ciphersuites(&mut b, suite).unwrap();
        let mut tls = Ssl::new(&b.build()).unwrap().connect(sock).unwrap();
        // The Finished is still held: it leaves with the request, in one write.
        assert!(
            !tls.get_ref().held.is_empty(),
            "the Finished was not held back"
        );
        tls.write_all(&get("/bytes/26000", true)).unwrap();
        let mut response = Vec::new();
        let _ = tls.read_to_end(&mut response);
        assert_eq!(bodies(&response), vec![pattern(26_000)], "{suite}");
    }
    assert_eq!(run.path_count("records"), 3);
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
