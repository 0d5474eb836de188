//! TLS termination by the real proxy, checked with independent peers: curl, `openssl
//! s_client`, and OpenSSL clients built here (user-space OpenSSL over std sockets).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use e2e::origin::Origin;
use e2e::proxy::{Proxy, Setup};
use e2e::{curl, free_port, gen_cert, KeyKind, TempDir};
use ktls::resume::ClientSession;
use openssl::ex_data::Index;
use openssl::ssl::{Ssl, SslContext, SslMethod, SslSessionCacheMode, SslVerifyMode, SslVersion};

fn https_url(addr: SocketAddr) -> String {
    format!("https://site.test:{}/hello", addr.port())
}

fn resolve(addr: SocketAddr) -> String {
    format!("site.test:{}:127.0.0.1", addr.port())
}

#[test]
fn tls12_and_tls13_with_ecdsa_and_rsa_certificates() {
    let origin = Origin::fixed(b"hello over tls");
    for kind in [KeyKind::EcdsaP256, KeyKind::Rsa2048] {
        let mut setup = Setup::new("tlsver");
        let (cert, key) = gen_cert(setup.dir.path(), "kind", kind, &["site.test"]);
        setup.cert = cert;
        setup.key = key;
        let conf = setup.config(origin.addr(), "", "");
        let https = setup.https;
        let proxy = setup.start(&conf);
        for (min, max) in [("--tlsv1.2", "1.2"), ("--tlsv1.3", "1.3")] {
            let (st, out, err) = curl(
                &[
                    "-k",
                    min,
                    "--tls-max",
                    max,
                    "--resolve",
                    &resolve(https),
                    "-w",
                    " %{ssl_verify_result}",
                    &https_url(https),
                ],
                10,
            );
            assert!(
                st.success() && out.starts_with("hello over tls"),
                "{kind:?} TLS {max}: {err}\n{}",
                proxy.proc.logs()
            );
        }
        // An independent check of the negotiated protocol.
        for (flag, expect) in [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")] {
            let out = s_client(https, &[flag, "-servername", "site.test"], b"");
            assert!(
                out.contains(&format!("Protocol  : {expect}"))
                    || out.contains(&format!("New, {expect}")),
                "{out}"
            );
        }
    }
}

/// Runs `openssl s_client` against `addr` with `args`, sending `input`; returns its output.
fn s_client(addr: SocketAddr, args: &[&str], input: &[u8]) -> String {
    let mut child = Command::new("timeout")
        .args(["10", "openssl", "s_client", "-connect", &addr.to_string()])
        .args(args)
        // With input, wait for the server to close instead of quitting at end of input.
        .args(if input.is_empty() {
            &[][..]
        } else {
            &["-ign_eof"][..]
        })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run openssl s_client");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input);
    }
    let out = child.wait_with_output().expect("s_client output");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn two_vhost_config(
    dir: &TempDir,
    http: SocketAddr,
    https: SocketAddr,
    origin: SocketAddr,
    match_any: bool,
) -> String {
    let (a_crt, a_key) = gen_cert(dir.path(), "a", KeyKind::EcdsaP256, &["a.test"]);
    let (b_crt, b_key) = gen_cert(dir.path(), "b", KeyKind::EcdsaP256, &["b.test"]);
    format!(
        "listen {http};\nlisten {https} proto=https;\nsrv_group default {{ server {origin}; }}\n{}\
         vhost a.test {{ tls_certificate {}; tls_certificate_key {}; proxy_pass default; }}\n\
         vhost b.test {{ tls_certificate {}; tls_certificate_key {}; proxy_pass default; }}\n\
         http_chain {{ host == \"b.test\" -> b.test; -> a.test; }}\n",
        if match_any {
            "tls_match_any_server_name;\n"
        } else {
            ""
        },
        a_crt.display(),
        a_key.display(),
        b_crt.display(),
        b_key.display()
    )
}

#[test]
fn sni_selects_the_vhost_certificate_and_unknown_names_are_refused() {
    let origin = Origin::fixed(b"sni");
    let dir = TempDir::new("sni");
    let http = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let https = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = two_vhost_config(&dir, http, https, origin.addr(), false);
    let proxy = Proxy::start(dir, &conf, http);
    for name in ["a.test", "b.test"] {
        let out = s_client(https, &["-servername", name], b"");
        assert!(
            out.contains(&format!("CN = {name}")),
            "SNI {name} got another certificate:\n{out}\n{}",
            proxy.proc.logs()
        );
    }
    // Unknown and missing SNI without tls_match_any_server_name: the handshake is refused.
    let out = s_client(https, &["-servername", "unknown.test"], b"");
    assert!(
        out.contains("unrecognized name") || out.contains("alert"),
        "unknown SNI was accepted:\n{out}"
    );
    assert!(
        !out.contains("CN = a.test") && !out.contains("CN = b.test"),
        "{out}"
    );
    let out = s_client(https, &["-noservername"], b"");
    assert!(
        !out.contains("CN = a.test") && !out.contains("CN = b.test"),
        "missing SNI was accepted:\n{out}"
    );
}

#[test]
fn match_any_server_name_serves_unknown_and_missing_sni() {
    let origin = Origin::fixed(b"any");
    let dir = TempDir::new("sniany");
    let http = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let https = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = two_vhost_config(&dir, http, https, origin.addr(), true);
    let _proxy = Proxy::start(dir, &conf, http);
    for args in [&["-servername", "unknown.test"][..], &["-noservername"][..]] {
        let out = s_client(
            https,
            args,
            b"GET /x HTTP/1.1\r\nHost: c.test\r\nConnection: close\r\n\r\n",
        );
        assert!(out.contains("HTTP/1.1 200"), "{args:?}:\n{out}");
    }
}

/// One HTTPS request with a client that keeps the session; returns (resumed?, session).
/// (A plain `Ssl`: `SslConnector`'s own session handling keeps it from offering ours.)
fn request_with_session(
    addr: SocketAddr,
    session: Option<&ClientSession>,
    version: SslVersion,
) -> (bool, ClientSession) {
    // A resumption is made from the session's own context (ClientSession::offer checks it).
    let ctx = match session {
        Some(s) => s.context().to_owned(),
        None => {
            let mut b = SslContext::builder(SslMethod::tls_client()).expect("context");
            b.set_verify(SslVerifyMode::NONE);
            b.set_min_proto_version(Some(version)).expect("min");
            b.set_max_proto_version(Some(version)).expect("max");
            // On AWS-LC the sessions that arrive (tickets) are kept on their connection: it
            // never puts a TLS 1.3 ticket's session in the connection's place, it only hands
            // it to this callback (which runs with the client cache mode on). Not on
            // OpenSSL: there that mode makes a resumed TLS 1.3 session single-use (marked not
            // resumable), and the connection's session is the ticket's anyway.
            if ktls::settings::is_aws_lc() {
                b.set_session_cache_mode(
                    SslSessionCacheMode::CLIENT | SslSessionCacheMode::NO_INTERNAL_STORE,
                );
                b.set_new_session_callback(|ssl, session| {
                    let received = ClientSession::received(ssl, session);
                    ssl.set_ex_data(received_session_index(), received);
                });
            }
            b.build()
        }
    };
    let mut ssl = Ssl::new(&ctx).expect("ssl");
    ssl.set_hostname("site.test").expect("sni");
    if let Some(s) = session {
        s.offer(&mut ssl).expect("offer the session");
    }
    let tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut tls = ssl.connect(tcp).expect("handshake");
    tls.write_all(b"GET / HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n")
        .expect("write");
    let mut response = Vec::new();
    let _ = tls.read_to_end(&mut response);
    assert!(
        response.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&response)
    );
    // A session is resumable only after a clean shutdown: OpenSSL marks the session of a
    // connection dropped without close_notify as not resumable.
    let _ = tls.shutdown();
    let resumed = tls.ssl().session_reused();
    // The newest ticket's session, else (a resumed TLS 1.2 handshake that brought no new
    // ticket) the connection's own.
    let session = match tls.ssl().ex_data(received_session_index()) {
        Some(received) => received.clone(),
        None => ClientSession::of(tls.ssl()).expect("a session after the exchange"),
    };
    (resumed, session)
}

fn received_session_index() -> Index<Ssl, ClientSession> {
    static INDEX: OnceLock<Index<Ssl, ClientSession>> = OnceLock::new();
    *INDEX.get_or_init(|| Ssl::new_ex_index().expect("ex_data index"))
}

fn ticket_proxy(origin: SocketAddr, secret: &str) -> (Proxy, SocketAddr) {
    let setup = Setup::new("tickets");
    let https = setup.https;
    let conf = setup.config(origin, "", "").replace(
        "proxy_pass default; }",
        &format!("proxy_pass default; tls_tickets secret=\"{secret}\" lifetime=3600; }}"),
    );
    (setup.start(&conf), https)
}

#[test]
fn tickets_resume_across_two_proxies_sharing_a_secret() {
    let origin = Origin::fixed(b"ok");
    let (_a, a) = ticket_proxy(origin.addr(), "one shared secret");
    let (_b, b) = ticket_proxy(origin.addr(), "one shared secret");
    let (_c, c) = ticket_proxy(origin.addr(), "a different secret");
    for version in [SslVersion::TLS1_2, SslVersion::TLS1_3] {
        let (resumed, session) = request_with_session(a, None, version);
        assert!(!resumed);
        let (resumed, _) = request_with_session(a, Some(&session), version);
        assert!(resumed, "{version:?}: same proxy did not resume");
        let (resumed, _) = request_with_session(b, Some(&session), version);
        assert!(
            resumed,
            "{version:?}: a proxy with the same secret did not resume"
        );
        let (resumed, _) = request_with_session(c, Some(&session), version);
        assert!(!resumed, "{version:?}: a proxy with another secret resumed");
        if version == SslVersion::TLS1_3 {
            // A TLS 1.3 ticket is for one use: a resumed handshake brings a fresh one.
            let (resumed, fresh) = request_with_session(a, Some(&session), version);
            assert!(resumed);
            assert_ne!(
                fresh.session().to_der().ok(),
                session.session().to_der().ok(),
                "no new ticket after resumption"
            );
            let (resumed, _) = request_with_session(b, Some(&fresh), version);
            assert!(resumed, "the ticket issued on resumption does not resume");
        }
    }
}

#[test]
fn plain_and_tls_listeners_serve_keep_alive() {
    let origin = Origin::fixed(b"k");
    let setup = Setup::new("tlska");
    let https = setup.https;
    let conf = setup.config(origin.addr(), "", "");
    let _proxy = setup.start(&conf);
    let url = https_url(https);
    let (st, out, err) = curl(
        &["-k", "-v", "--resolve", &resolve(https), &url, &url, &url],
        10,
    );
    assert!(st.success(), "{err}");
    assert_eq!(out, "kkk");
    assert!(
        err.contains("Re-using existing connection") || err.contains("Reusing existing connection"),
        "{err}"
    );
}

#[test]
fn cached_and_proxied_bodies_over_tls_are_byte_exact() {
    let origin = Origin::start(|r| {
        let len: u64 = r.path().trim_start_matches('/').parse().unwrap_or(10);
        e2e::origin::Response::pattern(len).header("Cache-Control", "max-age=60")
    });
    let setup = Setup::new("tlsbodies");
    let https = setup.https;
    let conf = setup.config(
        origin.addr(),
        "",
        "cache 1;\ncache_fulfill prefix \"/2\";\ncache_fulfill prefix \"/1\";",
    );
    let proxy = setup.start(&conf);
    for (path, len, repeats) in [
        ("/26000", 26_000u64, 20),
        ("/1048576", 1_048_576, 5),
        ("/5242880", 5_242_880, 2),
    ] {
        let url = format!("https://site.test:{}{path}", https.port());
        let files: Vec<String> = (0..repeats)
            .map(|i| {
                proxy
                    .dir
                    .join(&format!("body{i}.bin"))
                    .display()
                    .to_string()
            })
            .collect();
        let resolve_arg = resolve(https);
        let mut args = vec!["-k", "--resolve", resolve_arg.as_str()];
        for file in &files {
            args.extend(["-o", file.as_str(), url.as_str()]);
        }
        let (st, _, err) = curl(&args, 60);
        assert!(st.success(), "{path}: {err}\n{}", proxy.proc.logs());
        let expected = e2e::origin::pattern(len);
        for file in &files {
            let got = std::fs::read(file).expect("download");
            assert!(
                got == expected,
                "{path}: {} bytes differ from the origin's",
                got.len()
            );
        }
    }
    assert_eq!(
        origin.hits("/26000"),
        1,
        "26 KB must be served from the cache after the first"
    );
    assert_eq!(origin.hits("/1048576"), 1);
}
