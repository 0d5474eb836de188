//! The example h2c server (built by `cargo test` with this crate) against
//! real peers: curl with prior knowledge for byte-exact bodies, and the
//! Python `h2` package for frame-level cases (tests/py/h2_cases.py),
//! including floods that must close only the flooding connection.
//! Every peer runs under a time bound; the server is killed by pid.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn example_path() -> PathBuf {
    // target/<profile>/deps/<this test> -> target/<profile>/examples/h2c_server
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|d| d.parent()).unwrap();
    profile_dir.join("examples").join("h2c_server")
}

fn start() -> Server {
    let mut child = Command::new(example_path())
        .arg("127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start examples/h2c_server (cargo test builds it)");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("listening line");
    Server { child, port }
}

fn curl(args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
    let mut child = Command::new("timeout")
        .arg("30")
        .arg("curl")
        .args(["-sS", "--http2-prior-knowledge"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl is installed (tests/run.sh installs it)");
    let mut input = child.stdin.take().unwrap();
    if let Some(data) = stdin {
        input.write_all(data).unwrap();
    }
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "curl {args:?} failed");
    out.stdout
}

fn python_cases(port: u16, cases: &[&str]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/h2_cases.py");
    let probe = Command::new("python3")
        .args(["-c", "import h2.connection"])
        .status();
    assert!(
        probe.is_ok_and(|s| s.success()),
        "the Python h2 package is missing: python3 -m pip install h2 (tests/run.sh does)"
    );
    let out = Command::new("timeout")
        .args(["120", "python3", script, &port.to_string()])
        .args(cases)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}{err}");
}

#[test]
fn curl_get_and_byte_exact_uploads() {
    let server = start();
    let port = server.port;
    let url = format!("http://127.0.0.1:{port}/");
    let head = curl(&["-i", &url], None);
    let text = String::from_utf8_lossy(&head);
    assert!(text.starts_with("HTTP/2 200"), "{text}");
    assert!(text.ends_with("hello from h2\n"));
    for size in [10usize, 26 * 1024, 5 << 20] {
        let body: Vec<u8> = (0..size).map(|i| (i * 7 + i / 251) as u8).collect();
        let echoed = curl(&["--data-binary", "@-", &url], Some(&body));
        assert!(echoed == body, "echo of {size} bytes differs");
    }
}

#[test]
fn python_h2_streams_windows_and_resets() {
    let server = start();
    let port = server.port;
    python_cases(port, &["get", "concurrent", "window", "reset_midbody"]);
}

#[test]
fn python_h2_protocol_errors() {
    let server = start();
    let port = server.port;
    python_cases(
        port,
        &["hpack_table_update", "bad_stream_reset", "header_list_431"],
    );
}

/// Each flood closes its own connection with ENHANCE_YOUR_CALM and the
/// case then checks a fresh connection is still served.
#[test]
fn python_h2_floods_close_only_the_flooder() {
    let server = start();
    let port = server.port;
    python_cases(
        port,
        &[
            "ping_flood",
            "settings_flood",
            "rapid_reset",
            "continuation_flood",
        ],
    );
}

/// The httpwg-cli conformance suite (~107 RFC 9113 cases, under a
/// second). Runs when `H2_CONFORMANCE=1`: tests/run.sh installs the tool
/// when missing (`cargo install --locked --debug httpwg-cli`) and sets it;
/// a plain `cargo test` does not need the tool.
#[test]
fn httpwg_conformance_suite() {
    if std::env::var_os("H2_CONFORMANCE").is_none() {
        eprintln!("httpwg conformance not run: set H2_CONFORMANCE=1 with httpwg installed");
        return;
    }
    let server = start();
    let addr = format!("127.0.0.1:{}", server.port);
    let out = Command::new("timeout")
        .args(["300", "httpwg", "-a", &addr, "--frame-timeout", "1000"])
        .output()
        .expect("httpwg is installed (cargo install --locked httpwg-cli)");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let summary = text
        .lines()
        .find(|l| l.contains("Passed"))
        .unwrap_or("no summary");
    eprintln!("httpwg: {summary}");
    let failed: Vec<&str> = text.lines().filter(|l| l.contains("Test failed")).collect();
    assert!(
        out.status.success() && failed.is_empty(),
        "{summary}\n{}",
        failed.join("\n")
    );
}

/// nghttp2's load generator: many streams on few connections, all 200.
#[test]
fn h2load_all_requests_succeed() {
    let server = start();
    let url = format!("http://127.0.0.1:{}/", server.port);
    let out = Command::new("timeout")
        .args(["60", "h2load", "-c", "4", "-m", "20", "-n", "2000", &url])
        .output()
        .expect("h2load is installed (Debian nghttp2-client; tests/run.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("2000 succeeded, 0 failed, 0 errored"),
        "{text}"
    );
    assert!(text.contains("status codes: 2000 2xx"), "{text}");
}
