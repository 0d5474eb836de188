//! Tempesta's fingerprints through the binary (issue 35): the access log shows `tft` and
//! `tfh`, and FoxIO's JA4 as an extension (`ja4=`, the line's last field); a `tft { hash ...; }` limit resets one client's connections while a client with
//! another fingerprint passes; a `tfh` limit answers one request shape 403 while another
//! passes; the `tf_blocklist` file (an extension) refuses a fingerprint until a reload
//! reads it without it; an invalid hash is refused with its position. The clients are
//! real ones whose ClientHellos differ: curl and Python's `ssl` (both OpenSSL 3.0, with
//! different cipher lists and extensions), and over HTTP/2 h2load and curl.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{curl, free_port, metric_sum, proxy_cmd, write_file};

const T: Duration = Duration::from_secs(10);

struct Site {
    proxy: Proxy,
    https: SocketAddr,
    stats: SocketAddr,
    log: PathBuf,
    list: PathBuf,
    /// The configuration without the fingerprint directives, which `reload` appends (and
    /// `tf_blocklist`, when the test uses it).
    base: String,
}

fn start(origin: &Origin, blocklist: bool) -> Site {
    let setup = Setup::new("fingerprints");
    let log = setup.dir.join("access.log");
    let list = setup.dir.join("blocklist");
    write_file(&list, "# nothing refused yet\n");
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let base = format!(
        "listen {http};\nlisten {https} proto=h2,https;\n\
         srv_group default {{ server {origin}; }}\n\
         tls_match_any_server_name;\n\
         access_log_file {log};\n\
         stats_listen {stats};\n\
         frang_limits {{ http_strict_host_checking false; }}\n\
         vhost site {{ tls_certificate {cert}; tls_certificate_key {key}; proxy_pass default; }}\n\
         http_chain {{ -> site; }}\n",
        http = setup.http,
        https = setup.https,
        origin = origin.addr(),
        log = log.display(),
        cert = setup.cert.display(),
        key = setup.key.display(),
    );
    let base = if blocklist {
        format!("{base}tf_blocklist {};\n", list.display())
    } else {
        base
    };
    let https = setup.https;
    let proxy = setup.start(&base);
    Site {
        proxy,
        https,
        stats,
        log,
        list,
        base,
    }
}

impl Site {
    /// Rewrites the configuration with `extra` appended and waits for the reload.
    fn reload(&self, extra: &str) {
        let before = self.reloads();
        write_file(&self.proxy.config, &format!("{}{extra}", self.base));
        self.proxy.proc.signal(libc::SIGHUP);
        let deadline = Instant::now() + T;
        while self.reloads() == before {
            assert!(
                Instant::now() < deadline,
                "no reload\n{}",
                self.proxy.proc.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn reloads(&self) -> usize {
        self.proxy.proc.logs().matches("reloaded").count()
    }

    /// curl over HTTP/1.1 with `headers`: the body on success, `Err(stderr)` otherwise.
    fn curl(&self, headers: &[&str]) -> Result<String, String> {
        let url = format!("https://site.test:{}/", self.https.port());
        let resolve = format!("site.test:{}:127.0.0.1", self.https.port());
        let mut args = vec!["-k", "--http1.1", "--resolve", &resolve, &url];
        for h in headers {
            args.extend(["-H", h]);
        }
        let (status, out, err) = curl(&args, 5);
        if status.success() {
            Ok(out)
        } else {
            Err(err)
        }
    }

    /// One request from Python's `ssl` (no ALPN): the body, or the error Python saw. A reset
    /// right after the handshake reads as an empty body where the server sent its session
    /// tickets first (OpenSSL), as an error where it did not (AWS-LC): both are refusals.
    fn python(&self) -> Result<String, String> {
        let script = format!(
            "import socket, ssl\n\
             ctx = ssl.create_default_context()\n\
             ctx.check_hostname = False\n\
             ctx.verify_mode = ssl.CERT_NONE\n\
             s = socket.create_connection(('127.0.0.1', {port}), timeout=5)\n\
             t = ctx.wrap_socket(s, server_hostname='site.test')\n\
             t.sendall(b'GET / HTTP/1.1\\r\\nHost: site.test\\r\\nConnection: close\\r\\n\\r\\n')\n\
             data = b''\n\
             while True:\n\
             \x20   chunk = t.recv(65536)\n\
             \x20   if not chunk:\n\
             \x20       break\n\
             \x20   data += chunk\n\
             print(data.split(b'\\r\\n\\r\\n', 1)[-1].decode())\n",
            port = self.https.port()
        );
        let out = Command::new("timeout")
            .args(["10", "python3", "-c", &script])
            .output()
            .map_err(|e| e.to_string())?;
        let body = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !body.is_empty() {
            Ok(body)
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// The access log's lines, once it has `n` (lines are written as exchanges end).
    fn log_lines(&self, n: usize) -> Vec<String> {
        e2e::lines_once(&self.log, n, T)
    }

    /// The `tft=` and `tfh=` values of access log line `i` (waiting for it).
    fn prints(&self, i: usize) -> (String, String) {
        let lines = self.log_lines(i + 1);
        let line = lines.get(i).cloned().unwrap_or_default();
        let field = |key: &str| {
            line.split(&format!("\"{key}="))
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or("")
                .to_string()
        };
        (field("tft"), field("tfh"))
    }

    /// The `ja4=` value of access log line `i` (waiting for it), checked to have JA4's form:
    /// TLS over TCP, a version, `d`/`i`, two counts, two ALPN characters, two hashes.
    fn ja4(&self, i: usize) -> String {
        let lines = self.log_lines(i + 1);
        let line = lines.get(i).cloned().unwrap_or_default();
        let value = line.rsplit(" ja4=").next().unwrap_or("").to_string();
        let form = regex::Regex::new(
            "^t(13|12|11|10|s3|s2|s1|00)[di][0-9]{4}[0-9a-z]{2}_[0-9a-f]{12}_[0-9a-f]{12}$",
        );
        assert!(form.is_ok_and(|re| re.is_match(&value)), "ja4 of {line:?}");
        value
    }

    fn blocks(&self, limit: &str) -> u64 {
        metric_sum(
            self.stats,
            &format!("ktls_proxy_blocks_total{{limit=\"{limit}\"}}"),
        )
    }
}

fn origin() -> Origin {
    Origin::start(|_| Response::ok("hello"))
}

#[test]
fn the_access_log_shows_each_clients_fingerprints() {
    let origin = origin();
    let site = start(&origin, false);
    assert_eq!(site.curl(&[]).as_deref(), Ok("hello"));
    assert_eq!(site.python().as_deref(), Ok("hello"));
    assert_eq!(site.curl(&["X-Extra: 1"]).as_deref(), Ok("hello"));
    let (curl_tft, curl_tfh) = site.prints(0);
    let (python_tft, python_tfh) = site.prints(1);
    let (extra_tft, extra_tfh) = site.prints(2);
    let lines = site.log_lines(3).join("\n");
    // Python's ssl without ALPN has the value Tempesta's own tests expect of their Python
    // client (tempesta-test tests/tf/test_tf.py); curl's differs (another cipher list).
    assert_eq!(python_tft, "66cb9fd8d4250000", "{lines}");
    assert!(curl_tft.len() == 16 && curl_tft != python_tft, "{lines}");
    assert_eq!(extra_tft, curl_tft, "{lines}");
    // One more field changes the HTTP fingerprint, not the TLS one.
    assert!(
        !curl_tfh.is_empty() && curl_tfh != extra_tfh && curl_tfh != python_tfh,
        "{lines}"
    );
    // JA4: the same client twice has the same value; the two clients differ. Both send a
    // server name and offer TLS 1.3; curl --http1.1 offers `http/1.1` (h1), Python no ALPN.
    let (curl_ja4, python_ja4, extra_ja4) = (site.ja4(0), site.ja4(1), site.ja4(2));
    assert_eq!(curl_ja4, extra_ja4, "{lines}");
    assert_ne!(curl_ja4, python_ja4, "{lines}");
    assert!(
        curl_ja4.starts_with("t13d") && curl_ja4[8..].starts_with("h1_"),
        "{lines}"
    );
    // The values other JA4 implementations publish for these OpenSSL 3.0 clients (curl's
    // with `h2` where it offers that first).
    assert_eq!(curl_ja4, "t13d3112h1_e8f1e7e78f70_b26ce05bbdd6", "{lines}");
    assert_eq!(
        python_ja4, "t13d181100_85036bcba153_d41ae481755e",
        "{lines}"
    );
}

#[test]
fn http2_clients_are_fingerprinted_too() {
    let origin = origin();
    let site = start(&origin, false);
    let url = format!("https://site.test:{}/", site.https.port());
    let resolve = format!("site.test:{}:127.0.0.1", site.https.port());
    let h2load = Command::new("timeout")
        .args(["20", "h2load", "-n", "1", "-c", "1"])
        .arg(format!("https://127.0.0.1:{}/", site.https.port()))
        .output()
        .expect("h2load (nghttp2-client)");
    let text = String::from_utf8_lossy(&h2load.stdout);
    assert!(text.contains("1 succeeded"), "{text}");
    let (st, out, err) = curl(&["-k", "--http2", "--resolve", &resolve, &url], 5);
    assert!(st.success() && out == "hello", "{out} {err}");
    let (h2load_tft, h2load_tfh) = site.prints(0);
    let (curl_tft, curl_tfh) = site.prints(1);
    let lines = site.log_lines(2).join("\n");
    assert_eq!(lines.matches("HTTP/2.0").count(), 2, "{lines}");
    assert!(h2load_tft.len() >= 8 && h2load_tft != curl_tft, "{lines}");
    // curl offers h2 then http/1.1: Tempesta's ALPN bits (2 << 1) + 1.
    assert!(curl_tft.ends_with('5'), "{lines}");
    for tfh in [&h2load_tfh, &curl_tfh] {
        let value = u64::from_str_radix(tfh, 16).unwrap_or(0);
        assert_ne!(value & 1 << 23, 0, "the HTTP/2 bit of {tfh}: {lines}");
    }
    assert_ne!(h2load_tfh, curl_tfh, "{lines}");
    // JA4's ALPN characters: curl's first protocol is h2; h2load sends no server name.
    assert!(site.ja4(1)[8..].starts_with("h2_"), "{lines}");
    assert!(site.ja4(0).starts_with("t13i"), "{lines}");
}

#[test]
fn a_limited_tls_fingerprint_is_reset_while_another_passes() {
    let origin = origin();
    let site = start(&origin, false);
    assert_eq!(site.curl(&[]).as_deref(), Ok("hello"));
    let (curl_tft, _) = site.prints(0);
    // One connection per second for curl's fingerprint (Tempesta's `hash HEX 1 N`).
    site.reload(&format!("tft {{ hash {curl_tft} 1 1000; }}\n"));
    assert_eq!(site.curl(&[]).as_deref(), Ok("hello"));
    let refused = site.curl(&[]);
    assert!(
        refused.is_err(),
        "a second connection within the second: {refused:?}"
    );
    for _ in 0..3 {
        assert_eq!(
            site.python().as_deref(),
            Ok("hello"),
            "another fingerprint passes"
        );
    }
    assert!(site.blocks("tft") >= 1);
    // No record at all for it (`hash HEX N 0`): refused at its first record.
    site.reload(&format!("tft {{ hash {curl_tft} 1000 0; }}\n"));
    assert!(site.curl(&[]).is_err());
    assert_eq!(site.python().as_deref(), Ok("hello"));
}

#[test]
fn a_limited_http_fingerprint_gets_403_while_another_passes() {
    let origin = origin();
    let site = start(&origin, false);
    assert_eq!(site.curl(&["X-Bot: 1"]).as_deref(), Ok("hello"));
    let (_, bot_tfh) = site.prints(0);
    // One request per second of that shape (the second number is not enforced for tfh).
    // Tempesta's default `block_action attack drop` resets the connection.
    site.reload(&format!("tfh {{ hash {bot_tfh} 0 1; }}\n"));
    let url = format!("https://site.test:{}/", site.https.port());
    let resolve = format!("site.test:{}:127.0.0.1", site.https.port());
    let status = |headers: &[&str]| {
        let mut args = vec!["-k", "--http1.1", "--resolve", &resolve, "-o", "/dev/null"];
        args.extend(["-w", "%{http_code}", &url]);
        for h in headers {
            args.extend(["-H", h]);
        }
        curl(&args, 5).1
    };
    assert_eq!(status(&["X-Bot: 1"]), "200");
    assert_eq!(status(&["X-Bot: 1"]), "000", "reset");
    assert_eq!(status(&["X-Person: 1"]), "200");
    // `block_action attack reply`: a 403 instead.
    site.reload(&format!(
        "block_action attack reply;\ntfh {{ hash {bot_tfh} 0 1; }}\n"
    ));
    assert_eq!(status(&["X-Bot: 1"]), "200");
    assert_eq!(status(&["X-Bot: 1"]), "403");
    assert_eq!(status(&["X-Person: 1"]), "200");
    assert_eq!(status(&["X-Person: 1"]), "200");
    assert!(site.blocks("tfh") >= 1);
}

#[test]
fn the_blocklist_refuses_a_fingerprint_until_a_reload_drops_it() {
    let origin = origin();
    let site = start(&origin, true);
    assert_eq!(site.python().as_deref(), Ok("hello"));
    let (python_tft, _) = site.prints(0);
    write_file(&site.list, &format!("# a scraper\ntft {python_tft}\n"));
    site.reload("");
    let refused = site.python();
    assert!(refused.is_err(), "blocklisted: {refused:?}");
    assert_eq!(site.curl(&[]).as_deref(), Ok("hello"));
    // The file is read again on every reload.
    write_file(&site.list, "\n");
    site.reload("");
    assert_eq!(site.python().as_deref(), Ok("hello"));
    assert!(site.blocks("tft") >= 1);
    // A bad line makes the reload fail; the proxy keeps the list it has.
    write_file(&site.list, &format!("tft {python_tft}\ntft not-hex\n"));
    site.proxy.proc.signal(libc::SIGHUP);
    let deadline = Instant::now() + T;
    while !site
        .proxy
        .proc
        .logs()
        .contains("blocklist:2: not a fingerprint")
    {
        assert!(Instant::now() < deadline, "{}", site.proxy.proc.logs());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(site.python().as_deref(), Ok("hello"));
}

#[test]
fn an_invalid_hash_is_refused_with_its_position() {
    let dir = e2e::TempDir::new("fingerprints-bad");
    let conf = dir.join("bad.conf");
    write_file(
        &conf,
        "listen 127.0.0.1:1;\ntft {\n    hash 66cb9fd8d4250000 1 1;\n    hash invalid_hash 5 5;\n}\n",
    );
    let out = proxy_cmd(&conf, &["-t"]);
    let text = e2e::output_text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("bad.conf:4:10:"), "{text}");
    assert!(text.contains("not a valid fingerprint"), "{text}");
}
