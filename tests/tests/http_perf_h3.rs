//! `http-perf --h3` (its own QUIC client: quinn-proto, rustls, its own HTTP/3 framing and
//! QPACK) against the real proxy's HTTP/3 listener in front of the suite's origin,
//! cross-checked with aioquic: every response of the load is a 200 with the whole page,
//! and aioquic fetches the same page byte for byte; `--rate` holds its rate; `--hold`
//! keeps 300 idle QUIC connections and runs rounds of requests on them. A UDP port where nothing listens, a
//! QUIC server without `h3`, and a silent UDP socket each give a clear error quickly.

use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use e2e::origin::{pattern, Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{bin_path, free_port, need_aioquic, wait_for_port, Proc};

const PAGE: u64 = 26_624;

fn origin() -> Origin {
    Origin::start(|r| match r.path().strip_prefix("/pattern/") {
        Some(n) => Response::pattern(n.parse().unwrap_or(0)),
        None => Response::ok("ok"),
    })
}

/// A proxy with `listen PORT proto="h2,h3"` in front of `origin`.
fn start(origin: &Origin) -> (Proxy, SocketAddr, SocketAddr) {
    let setup = Setup::new("hp-h3");
    let both = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let http = setup.http;
    let conf = format!(
        "listen {http};\nlisten {both} proto=\"h2,h3\";\n\
         srv_group default {{ server {origin}; }}\n\
         tls_match_any_server_name;\n\
         vhost site {{ tls_certificate {cert}; tls_certificate_key {key}; proxy_pass default; }}\n\
         http_chain {{ -> site; }}\n",
        origin = origin.addr(),
        cert = setup.cert.display(),
        key = setup.key.display(),
    );
    let proxy = setup.start(&conf);
    assert!(
        wait_for_port(both, Duration::from_secs(10)),
        "{both} listens"
    );
    (proxy, both, http)
}

/// Runs http-perf to completion, killed (by pid) if it overruns `limit`.
fn http_perf(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(bin_path("http-perf"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start http-perf");
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return child.wait_with_output().expect("http-perf output");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    e2e::send_signal(child.id(), libc::SIGKILL);
    let out = child.wait_with_output().expect("http-perf output");
    panic!(
        "http-perf {args:?} overran {limit:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n{}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

const PY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/py");

#[test]
fn h3_load_gets_every_page_whole_and_aioquic_agrees() {
    need_aioquic();
    let origin = origin();
    let (proxy, both, _) = start(&origin);
    let url = format!("https://site.test:{}/pattern/{PAGE}", both.port());
    let connect = both.to_string();
    let out = http_perf(
        &[
            "--h3",
            "--json",
            "-c",
            "4",
            "-t",
            "2",
            "--pipeline",
            "8",
            "-d",
            "2s",
            "--connect",
            &connect,
            &url,
        ],
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out),
        proxy.proc.logs()
    );
    let rep: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let requests = rep["requests"].as_u64().unwrap_or(0);
    assert!(requests >= 50, "{rep}");
    for kind in ["connect", "read", "write", "timeout"] {
        assert_eq!(rep["errors"][kind], 0, "{kind} errors: {rep}");
    }
    assert_eq!(rep["non_2xx_3xx"], 0, "{rep}");
    // Every response had the whole page as its body.
    assert_eq!(rep["body_bytes"].as_u64(), Some(requests * PAGE), "{rep}");
    // The proxy relayed them from the origin (the responses are not cacheable).
    assert!(
        origin.hits(&format!("/pattern/{PAGE}")) as u64 >= requests,
        "{rep}"
    );
    // aioquic fetches the same URL: the same length, and the origin's bytes exactly.
    aioquic_fetch(&proxy, both, &format!("/pattern/{PAGE}"), &pattern(PAGE));
    // The text report of a small page, as wrk's.
    let small = format!("https://site.test:{}/", both.port());
    let out = http_perf(
        &[
            "--h3",
            "-c",
            "1",
            "-t",
            "1",
            "-d",
            "1s",
            "--connect",
            &connect,
            &small,
        ],
        Duration::from_secs(30),
    );
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("requests in 1.00s"), "{report}");
    assert!(!report.contains("errors"), "{report}");
    assert!(
        !proxy.proc.logs().contains("panic"),
        "{}",
        proxy.proc.logs()
    );
}

#[test]
fn h3_rate_mode_holds_the_rate() {
    let origin = origin();
    let (proxy, both, _) = start(&origin);
    let url = format!("https://site.test:{}/", both.port());
    let connect = both.to_string();
    let out = http_perf(
        &[
            "--h3",
            "--json",
            "-c",
            "4",
            "-t",
            "1",
            "--pipeline",
            "4",
            "-d",
            "2s",
            "--rate",
            "300",
            "--connect",
            &connect,
            &url,
        ],
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out),
        proxy.proc.logs()
    );
    let rep: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let requests = rep["requests"].as_u64().unwrap_or(0);
    // 300/s for 2 s: 600 due, a few left in flight at the end.
    assert!((550..=610).contains(&requests), "{rep}");
    assert_eq!(rep["rate_target"].as_f64(), Some(300.0), "{rep}");
    assert_eq!(rep["errors"]["timeout"], 0, "{rep}");
    assert_eq!(rep["body_bytes"].as_u64(), Some(requests * 2), "{rep}");
}

#[test]
fn h3_hold_keeps_idle_quic_connections_and_measures_the_server() {
    let origin = origin();
    let (proxy, both, _) = start(&origin);
    let url = format!("https://site.test:{}/", both.port());
    let (connect, pid) = (both.to_string(), proxy.proc.pid().to_string());
    let out = http_perf(
        &[
            "--h3",
            "--json",
            "--hold",
            "300",
            "--hold-secs",
            "2",
            "--rounds",
            "2",
            "-t",
            "1",
            "--handshakes",
            "64",
            "--connect",
            &connect,
            "--server-pid",
            &pid,
            &url,
        ],
        Duration::from_secs(60),
    );
    let rep: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}\n{}", text(&out), proxy.proc.logs()));
    assert_eq!(rep["pass"], true, "{rep}");
    assert_eq!(rep["established"], 300, "{rep}");
    assert_eq!(rep["dropped"], 0, "{rep}");
    for round in rep["rounds"].as_array().expect("rounds") {
        assert_eq!(round["answered"], 300, "{rep}");
    }
    // The proxy holds some memory for each QUIC connection.
    let per = rep["server"]["bytes_per_connection"].as_u64().unwrap_or(0);
    assert!(per > 0, "{rep}");
    assert!(
        !proxy.proc.logs().contains("panic"),
        "{}",
        proxy.proc.logs()
    );
}

/// aioquic (tests/py/h3_fetch.py) GETs `path` from the proxy's h3 listener: 200, `want`.
fn aioquic_fetch(proxy: &Proxy, both: SocketAddr, path: &str, want: &[u8]) {
    let body = proxy.dir.path().join("aioquic.body");
    let fetched = Command::new("timeout")
        .args(["30", "python3", &format!("{PY}/h3_fetch.py")])
        .arg(both.port().to_string())
        .arg(path)
        .arg(&body)
        .output()
        .expect("python3");
    let said = String::from_utf8_lossy(&fetched.stdout);
    assert!(
        said.contains(&format!("status 200 length {}", want.len())),
        "{said}{}",
        String::from_utf8_lossy(&fetched.stderr)
    );
    assert!(std::fs::read(&body).unwrap_or_default() == want);
}

/// http-perf --h3 fails, with `want` in its error, within a few seconds.
fn refused(connect: SocketAddr, extra: &[&str], want: &str) {
    let connect = connect.to_string();
    let mut args = vec![
        "--h3",
        "-c",
        "2",
        "-t",
        "1",
        "-d",
        "2s",
        "--connect",
        &connect,
    ];
    args.extend_from_slice(extra);
    args.push("https://site.test/");
    let started = Instant::now();
    let out = http_perf(&args, Duration::from_secs(20));
    let report = text(&out);
    assert_eq!(out.status.code(), Some(2), "{report}");
    assert!(report.contains(want), "want {want:?}: {report}");
    assert!(started.elapsed() < Duration::from_secs(8), "{report}");
}

#[test]
fn h3_without_an_h3_server_is_a_clear_error_not_a_hang() {
    need_aioquic();
    let origin = origin();
    // The proxy's plain HTTP port: TCP only, nothing on its UDP port.
    let (proxy, _, http) = start(&origin);
    refused(http, &[], "no QUIC server at udp");
    // A QUIC server that speaks only hq-interop: the handshake is refused.
    let port = free_port();
    let (cert, key) = (
        proxy.dir.path().join("site.crt"),
        proxy.dir.path().join("site.key"),
    );
    let mut cmd = Command::new("python3");
    cmd.arg(format!("{PY}/quic_other_alpn.py"))
        .arg(port.to_string())
        .arg(&cert)
        .arg(&key)
        .arg("60");
    let mut server = Proc::spawn("quic-other-alpn", cmd, proxy.dir.path());
    assert!(
        server.wait_for_output(&format!("listening {port}"), Duration::from_secs(20)),
        "{}",
        server.logs()
    );
    let quic = SocketAddr::from(([127, 0, 0, 1], port));
    refused(quic, &[], "the server refused ALPN h3");
    drop(server);
    // A UDP socket that never answers: the probe's --timeout, then the error.
    let silent = UdpSocket::bind("127.0.0.1:0").expect("udp");
    let addr = silent.local_addr().expect("addr");
    refused(addr, &["--timeout", "1s"], "no QUIC handshake with udp");
    // HTTP/3 is always over TLS: an http:// URL is a usage error.
    let out = http_perf(
        &["--h3", "-d", "1s", &format!("http://{http}/")],
        Duration::from_secs(10),
    );
    assert!(
        text(&out).contains("needs an https:// URL"),
        "{}",
        text(&out)
    );
}
