//! HTTP/2 through the real proxy: ALPN per listener (h2 only, h2 and HTTP/1.1, HTTP/1.1
//! only), cleartext h2c by prior knowledge, byte-exact bodies both ways with curl, frame-level
//! cases with the Python `h2` package (100 concurrent streams, uploads through the windows,
//! slow and fast streams interleaved, window exhaustion and resumption, RST_STREAM mid-body,
//! redirects, frang blocks, malformed header blocks), h2load, the cache, the access log,
//! GOAWAY on a graceful stop, and the metrics.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use e2e::origin::{pattern, Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{free_port, python_h2_cases, wait_for_port};

struct H2Site {
    proxy: Proxy,
    /// `proto="h2,https"`
    both: SocketAddr,
    /// `proto=h2`
    h2_only: SocketAddr,
    /// `proto=https`
    https: SocketAddr,
    /// `proto=h2c`
    h2c: SocketAddr,
    stats: SocketAddr,
    log: std::path::PathBuf,
}

fn origin() -> Origin {
    Origin::start(|r| {
        let path = r.path().to_string();
        if let Some(n) = path.strip_prefix("/pattern/") {
            return Response::pattern(n.parse().unwrap_or(0));
        }
        match path.as_str() {
            "/echo" => Response::ok(r.body.clone()),
            "/slow" => Response::ok("slow").delay(Duration::from_millis(1500)),
            "/cached" => Response::ok("cached body").header("Cache-Control", "max-age=600"),
            _ => Response::ok("ok"),
        }
    })
}

fn start(origin: &Origin, tag: &str) -> H2Site {
    let setup = Setup::new(tag);
    let addr = || SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (both, h2_only, h2c, stats) = (addr(), addr(), addr(), addr());
    let log = setup.dir.join("access.log");
    let conf = format!(
        "listen {http};\n\
         listen {https} proto=https;\n\
         listen {both} proto=\"h2,https\";\n\
         listen {h2_only} proto=h2;\n\
         listen {h2c} proto=h2c;\n\
         stats_listen {stats};\n\
         srv_group default {{ server {origin}; }}\n\
         tls_match_any_server_name;\n\
         access_log_file {log};\n\
         cache 1;\ncache_fulfill eq /cached;\n\
         block_action attack reply;\n\
         frang_limits {{ http_methods get head post; }}\n\
         vhost site {{ tls_certificate {cert}; tls_certificate_key {key}; proxy_pass default; }}\n\
         http_chain {{ uri == \"/old\" -> 301 = https://$host/new; -> site; }}\n",
        http = setup.http,
        https = setup.https,
        origin = origin.addr(),
        log = log.display(),
        cert = setup.cert.display(),
        key = setup.key.display(),
    );
    let https = setup.https;
    let proxy = setup.start(&conf);
    for a in [both, h2_only, h2c, stats] {
        assert!(wait_for_port(a, Duration::from_secs(10)), "{a} listens");
    }
    H2Site {
        proxy,
        both,
        h2_only,
        https,
        h2c,
        stats,
        log,
    }
}

/// curl through `site.test` at `addr`: (exit code, HTTP version, status, body).
fn curl(addr: SocketAddr, scheme: &str, path: &str, flags: &[&str]) -> (i32, String, u16, Vec<u8>) {
    let resolve = format!("site.test:{}:127.0.0.1", addr.port());
    let url = format!("{scheme}://site.test:{}{path}", addr.port());
    let out = Command::new("timeout")
        .args(["30", "curl", "-sk", "--resolve", &resolve])
        .args(flags)
        .args(["-w", "\n%{http_version} %{http_code}", &url])
        .output()
        .expect("curl");
    let mut body = out.stdout;
    let split = body.iter().rposition(|&b| b == b'\n').unwrap_or(0);
    let meta = String::from_utf8_lossy(&body[split + 1..]).into_owned();
    body.truncate(split);
    let mut words = meta.split_whitespace();
    let version = words.next().unwrap_or("").to_string();
    let status = words.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    (out.status.code().unwrap_or(-1), version, status, body)
}

#[test]
fn alpn_chooses_the_protocol_each_listener_serves() {
    let origin = origin();
    let site = start(&origin, "h2-alpn");
    let (_, v, status, _) = curl(site.both, "https", "/", &["--http2"]);
    assert_eq!((v.as_str(), status), ("2", 200), "h2 offered and taken");
    let (_, v, status, _) = curl(site.both, "https", "/", &["--http1.1"]);
    assert_eq!(
        (v.as_str(), status),
        ("1.1", 200),
        "HTTP/1.1 on the shared listener"
    );
    let (_, v, _, _) = curl(site.h2_only, "https", "/", &["--http2"]);
    assert_eq!(v, "2");
    let (code, _, status, _) = curl(site.h2_only, "https", "/", &["--http1.1"]);
    assert!(
        code != 0 && status == 0,
        "an HTTP/1.1-only client is refused by an h2 listener"
    );
    let (_, v, status, _) = curl(site.https, "https", "/", &["--http2"]);
    assert_eq!(
        (v.as_str(), status),
        ("1.1", 200),
        "proto=https stays HTTP/1.1"
    );
    let (_, v, status, _) = curl(site.h2c, "http", "/", &["--http2-prior-knowledge"]);
    assert_eq!((v.as_str(), status), ("2", 200), "h2c by prior knowledge");
    // The startup lines name what each listener was just seen to offer (issue 36 item 9).
    let logs = site.proxy.proc.logs();
    for (addr, what) in [
        (site.both, "https (TLS 1.2/1.3, ALPN h2, http/1.1)"),
        (site.h2_only, "https (TLS 1.2/1.3, ALPN h2)"),
        (site.https, "https (TLS 1.2/1.3, ALPN http/1.1)"),
        (site.h2c, "h2c (HTTP/2 by prior knowledge)"),
    ] {
        assert!(
            logs.contains(&format!("listening on {addr} {what}\n")),
            "{addr}: {what}\n{logs}"
        );
    }
    drop(site.proxy);
}

#[test]
fn bodies_are_byte_exact_over_h2_and_h2c() {
    let origin = origin();
    let site = start(&origin, "h2-bodies");
    for n in [10u64, 26 * 1024, 5_000_000] {
        let path = format!("/pattern/{n}");
        let (_, v, status, body) = curl(site.both, "https", &path, &["--http2"]);
        assert_eq!((v.as_str(), status), ("2", 200));
        assert!(body == pattern(n), "{n} bytes over h2: got {}", body.len());
        let (_, _, _, body) = curl(site.h2c, "http", &path, &["--http2-prior-knowledge"]);
        assert!(body == pattern(n), "{n} bytes over h2c: got {}", body.len());
    }
    let (_, v, status, _) = curl(site.both, "https", "/old", &["--http2"]);
    assert_eq!((v.as_str(), status), ("2", 301));
    // The cache serves h2 from the entry an HTTP/1.1 request stored (same origin: same
    // listener, so the same authority in the key).
    let (_, _, _, first) = curl(site.both, "https", "/cached", &["--http1.1"]);
    let (_, v, _, second) = curl(site.both, "https", "/cached", &["--http2"]);
    assert_eq!(
        (v.as_str(), &first, &second),
        ("2", &b"cached body".to_vec(), &first)
    );
    assert_eq!(origin.hits("/cached"), 1, "the h2 request was a hit");
    let log = std::fs::read_to_string(&site.log).unwrap_or_default();
    assert!(
        log.contains("\"GET /pattern/5000000 HTTP/2.0\" 200 5000000"),
        "access log: {log}"
    );
}

#[test]
fn frame_level_cases_with_python_h2() {
    let origin = origin();
    let site = start(&origin, "h2-frames");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/h2_proxy_cases.py");
    let cases = [
        "concurrent",
        "upload",
        "interleaved",
        "small_window",
        "window_stall_then_resume",
        "reset_mid_body",
        "redirect",
        "frang_block",
        "malformed",
        "websocket",
    ];
    python_h2_cases(script, site.h2c.port(), &cases, 180, || {
        site.proxy.proc.logs()
    });
    // The reset stream's upstream connection was not reused mid-body: every request the
    // origin saw was answered.
    let metrics = Command::new("timeout")
        .args([
            "10",
            "curl",
            "-s",
            &format!("http://{}/metrics", site.stats),
        ])
        .output()
        .expect("curl metrics");
    let metrics = String::from_utf8_lossy(&metrics.stdout);
    assert!(
        metrics.contains("ktls_proxy_h2_connections_total"),
        "{metrics}"
    );
}

#[test]
fn h2load_many_streams_all_succeed() {
    let origin = origin();
    let site = start(&origin, "h2-load");
    let url = format!("https://127.0.0.1:{}/pattern/1000", site.both.port());
    let out = Command::new("timeout")
        .args([
            "60",
            "h2load",
            "-c",
            "4",
            "-m",
            "50",
            "-n",
            "4000",
            "-H",
            ":authority: site.test",
            &url,
        ])
        .output()
        .expect("h2load (nghttp2-client) is installed by tests/run.sh");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("4000 succeeded, 0 failed, 0 errored"),
        "{text}\n{}",
        site.proxy.proc.logs()
    );
}

#[test]
fn a_graceful_stop_lets_streams_in_flight_finish() {
    let origin = origin();
    let site = start(&origin, "h2-stop");
    let h2c = site.h2c;
    let slow = std::thread::spawn(move || curl(h2c, "http", "/slow", &["--http2-prior-knowledge"]));
    std::thread::sleep(Duration::from_millis(500));
    site.proxy.proc.signal(15);
    let (code, v, status, body) = slow.join().expect("curl thread");
    assert_eq!(
        (code, v.as_str(), status, body),
        (0, "2", 200, b"slow".to_vec())
    );
}

/// CPU time (user + system, in clock ticks) of process `pid`.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces) start at ") ".
    let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
    get(11) + get(12)
}

#[test]
fn a_stream_stalled_on_its_window_costs_no_cpu() {
    let origin = origin();
    let site = start(&origin, "h2-stall");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/h2_proxy_cases.py");
    let mut client = Command::new("timeout")
        .args([
            "30",
            "python3",
            script,
            &site.h2c.port().to_string(),
            "stall_hold",
        ])
        .spawn()
        .expect("python3");
    std::thread::sleep(Duration::from_millis(1200));
    let pid = site.proxy.proc.pid();
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_millis(1500));
    let spent = cpu_ticks(pid) - before;
    let _ = client.wait();
    // A stalled stream waits for WINDOW_UPDATE without polling: a busy loop would burn the
    // whole 1.5 s (150 ticks).
    assert!(
        spent < 50,
        "{spent} ticks of CPU while a stream waited for its window"
    );
}

/// The httpwg-cli conformance suite (RFC 9113, 107 cases) against the proxy's h2c
/// listener, when `httpwg` is installed (`cargo install --locked --debug httpwg-cli`;
/// tests/run.sh installs it when missing and sets KTLS_PROXY_REQUIRE_HTTPWG=1, which makes
/// its absence a failure).
#[test]
fn httpwg_conformance_through_the_proxy() {
    let installed = Command::new("sh")
        .args(["-c", "command -v httpwg"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        assert!(
            std::env::var("KTLS_PROXY_REQUIRE_HTTPWG").is_err(),
            "httpwg is not installed"
        );
        eprintln!("httpwg conformance not run: httpwg is not installed");
        return;
    }
    // The suite sends requests with an IP address as authority and methods of all kinds:
    // frang's defaults would block them, which is not what it tests. The origin is the
    // bundled benchmark origin (it answers every request at once, whatever its body).
    let setup = Setup::new("h2-httpwg");
    let origin_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut cmd = Command::new(e2e::bin_path("origin"));
    cmd.args(["--listen", &origin_addr.to_string()]);
    let _origin = e2e::Proc::spawn("origin", cmd, setup.dir.path());
    assert!(wait_for_port(origin_addr, Duration::from_secs(10)));
    let h2c = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = format!(
        "listen {http};\nlisten {h2c} proto=h2c;\n\
         srv_group default {{ server {origin}; }}\n\
         frang_limits {{ http_strict_host_checking false; }}\n\
         vhost site {{ proxy_pass default; }}\n\
         http_chain {{ -> site; }}\n",
        http = setup.http,
        origin = origin_addr,
    );
    let _proxy = setup.start(&conf);
    assert!(wait_for_port(h2c, Duration::from_secs(10)));
    let addr = h2c.to_string();
    let out = Command::new("timeout")
        .args(["300", "httpwg", "-a", &addr, "--frame-timeout", "1000"])
        .output()
        .expect("httpwg");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let plain: String = {
        // Drop the ANSI colours around the counts.
        let mut s = String::new();
        let mut esc = false;
        for ch in text.chars() {
            match (esc, ch) {
                (false, '\u{1b}') => esc = true,
                (true, 'm') => esc = false,
                (true, _) => {}
                (false, c) => s.push(c),
            }
        }
        s
    };
    let summary = plain
        .lines()
        .find(|l| l.contains("Passed "))
        .unwrap_or("no summary")
        .to_string();
    let counts: Vec<u32> = summary
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        counts.len() >= 2 && counts[0] == counts[1] && counts[0] > 100,
        "{summary}\n{}",
        plain
            .lines()
            .filter(|l| l.contains("Test failed"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_shipped_config_serves_http2_to_curl() {
    let origin = origin();
    let dir = e2e::TempDir::new("h2-shipped");
    let http = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let https = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let text = e2e::proxy::shipped_config(&dir, http, https, origin.addr());
    assert!(
        text.contains("proto=\"h2,https\""),
        "etc/tempesta.conf offers h2"
    );
    let proxy = Proxy::start(dir, &text, https);
    let resolve = format!("tempesta-tech.com:{}:127.0.0.1", https.port());
    let get = |path: &str| {
        let url = format!("https://tempesta-tech.com:{}{path}", https.port());
        let out = Command::new("timeout")
            .args([
                "30",
                "curl",
                "-sk",
                "--http2",
                "--resolve",
                &resolve,
                "-o",
                "/dev/null",
            ])
            .args(["-w", "%{http_version} %{http_code}", &url])
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(get("/"), "2 200", "{}", proxy.proc.logs());
    assert_eq!(get("/index.html"), "2 301", "a shipped redirect over h2");
}

/// The h2 crate's flood cases (h2/tests/py/h2_cases.py) against the proxy: PING, SETTINGS,
/// rapid reset and CONTINUATION floods each end the flooding connection with GOAWAY
/// ENHANCE_YOUR_CALM, and a fresh connection is served at once; the protocol errors get
/// their codes; the trips are counted in the metrics.
#[test]
fn floods_close_only_the_flooder() {
    let origin = origin();
    let site = start(&origin, "h2-floods");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../h2/tests/py/h2_cases.py");
    let cases = [
        "ping_flood",
        "settings_flood",
        "rapid_reset",
        "continuation_flood",
        "hpack_table_update",
        "bad_stream_reset",
        "header_list_431",
    ];
    let out = Command::new("timeout")
        .args(["180", "python3", script, &site.h2c.port().to_string()])
        .args(cases)
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        site.proxy.proc.logs()
    );
    let metrics = Command::new("timeout")
        .args([
            "10",
            "curl",
            "-s",
            &format!("http://{}/metrics", site.stats),
        ])
        .output()
        .expect("curl metrics");
    let metrics = String::from_utf8_lossy(&metrics.stdout);
    for kind in ["ping", "settings", "rapid_reset", "continuation"] {
        let line = metrics
            .lines()
            .find(|l| {
                l.starts_with("ktls_proxy_h2_floods_total")
                    && l.contains(&format!("kind=\"{kind}\""))
            })
            .unwrap_or("");
        let count: u64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        assert!(count >= 1, "{kind} flood counted: {line:?}\n{metrics}");
    }
}
