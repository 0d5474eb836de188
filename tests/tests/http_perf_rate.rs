//! `http-perf --rate` and `--h2`: latency counted from each request's intended send time
//! (coordinated omission corrected), the requests a run left unanswered, and HTTP/2 load
//! through the real proxy, closed-loop and at a rate. The rest of http-perf is in
//! `http_perf.rs`.

use std::net::SocketAddr;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use e2e::origin::{Origin, Response};
use e2e::{bin_path, free_port, gen_cert, KeyKind, Proc, TempDir};

const T: Duration = Duration::from_secs(5);

/// A TLS `origin` (HTTP/1.1 only: it offers no ALPN) on a fresh port.
fn start_tls_origin(
    dir: &TempDir,
    crt: &std::path::Path,
    key: &std::path::Path,
) -> (Proc, SocketAddr) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut cmd = Command::new(bin_path("origin"));
    cmd.arg("--listen")
        .arg(&listen)
        .arg("--cert")
        .arg(crt)
        .arg("--key")
        .arg(key);
    let mut p = Proc::spawn("origin", cmd, dir.path());
    assert!(
        p.wait_for_output(
            &format!("origin listening on {listen}"),
            Duration::from_secs(20)
        ),
        "origin did not start\n{}",
        p.logs()
    );
    (p, listen.parse().unwrap())
}

/// Runs http-perf to completion, killed (by pid) if it overruns `limit`.
fn http_perf(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(bin_path("http-perf"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start http-perf");
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return child.wait_with_output().expect("http-perf output");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    e2e::send_signal(child.id(), libc::SIGKILL);
    let out = child.wait_with_output().expect("http-perf output");
    panic!(
        "http-perf {args:?} overran {limit:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "http-perf failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn rate_mode_counts_latency_from_the_intended_send_time() {
    // One connection, one request at a time, a server that takes 50 ms per request, and
    // 100 requests/s asked: the requests queue up behind each other. Measured from when
    // each was due (not when it could be sent) the median latency is far above 50 ms; a
    // tool with coordinated omission would report about 50 ms.
    let origin = Origin::start(|_| Response::ok("0123456789").delay(Duration::from_millis(50)));
    let url = format!("http://{}/", origin.addr());
    let r = json(&http_perf(
        &[
            "-c", "1", "-t", "1", "-d", "2s", "--rate", "100", "--json", &url,
        ],
        Duration::from_secs(20),
    ));
    let p50 = r["latency_us"]["percentiles"]["p50"].as_u64().unwrap();
    let p999 = r["latency_us"]["percentiles"]["p99.9"].as_u64().unwrap();
    assert!(
        p50 > 200_000,
        "p50 {p50} us: not counted from the intended time: {r}"
    );
    assert!(p999 >= p50, "{r}");
    // About 200 due, about 40 answered: the rest is reported, not silently dropped.
    let unfinished = r["rate_unfinished"].as_u64().unwrap();
    assert!(unfinished > 100, "{unfinished} unfinished: {r}");
    assert_eq!(r["rate_target"].as_f64(), Some(100.0), "{r}");
}

#[test]
fn h2_load_closed_loop_and_at_a_rate_through_the_proxy() {
    use e2e::proxy::Setup;
    let origin =
        Origin::start(|_| Response::ok("0123456789").header("Cache-Control", "max-age=600"));
    let setup = Setup::new("hp-h2");
    let https = setup.https;
    let conf = setup
        .config(origin.addr(), "", "cache 1;\ncache_fulfill * *;")
        .replace("proto=https;", "proto=\"h2,https\";");
    let _proxy = setup.start(&conf);
    assert!(e2e::wait_for_port(https, T), "{https} listens");
    let connect = https.to_string();
    for extra in [&["--pipeline", "10"][..], &["--rate", "300"][..]] {
        let mut args = vec![
            "--h2",
            "-c",
            "2",
            "-t",
            "1",
            "-d",
            "2s",
            "--json",
            "--connect",
            &connect,
        ];
        args.extend_from_slice(extra);
        args.push("https://site.test/");
        let r = json(&http_perf(&args, Duration::from_secs(30)));
        let requests = r["requests"].as_u64().unwrap();
        assert!(requests >= 100, "{extra:?}: {requests} requests: {r}");
        assert_eq!(r["errors"]["read"], 0, "{extra:?}: {r}");
        assert_eq!(r["errors"]["connect"], 0, "{extra:?}: {r}");
        assert_eq!(r["non_2xx_3xx"], 0, "{extra:?}: {r}");
    }
    // An HTTP/1.1-only server refuses h2 in ALPN: every connection fails, none is served.
    let dir = TempDir::new("hp-h2-no");
    let (crt, key) = gen_cert(dir.path(), "o", KeyKind::EcdsaP256, &["tempesta-tech.com"]);
    let (_o, addr) = start_tls_origin(&dir, &crt, &key);
    let url = format!("https://127.0.0.1:{}/", addr.port());
    let out = http_perf(
        &["--h2", "-c", "1", "-t", "1", "-d", "1s", "--json", &url],
        Duration::from_secs(20),
    );
    let r = json(&out);
    assert_eq!(r["requests"], 0, "{r}");
    assert!(r["errors"]["connect"].as_u64().unwrap() > 0, "{r}");
}
