//! The client role of the `h2` crate (`h2::ClientConnection`, issue 34) against a misbehaving
//! origin, `tests/py/h2_bad_origin.py` (python h2 and raw frames), through the example client
//! `h2/examples/h2c_client.rs` (build it first: `cargo build --release -p h2 --examples`):
//! streams the origin refuses (RST_STREAM REFUSED_STREAM) are reported retryable and answered
//! on the retry; an origin flooding PING frames is cut by the client's guard with GOAWAY
//! ENHANCE_YOUR_CALM, which the origin receives, within a bounded time and memory. What the
//! proxy's HTTP/2 upstream connections will rely on for their retries and flood bounds.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::{free_port, wait_for_port, workspace_root, Proc, TempDir};

const T: Duration = Duration::from_secs(5);

fn example(name: &str) -> PathBuf {
    let dirs: Vec<PathBuf> = match std::env::var_os("KTLS_PROXY_BIN_DIR") {
        Some(d) => vec![PathBuf::from(d).join("examples")],
        None => ["release", "debug"]
            .iter()
            .map(|p| workspace_root().join("target").join(p).join("examples"))
            .collect(),
    };
    dirs.iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{name} not in {dirs:?}: run `cargo build --release -p h2 --examples`")
        })
}

/// The bad origin in `mode` on a free port.
fn bad_origin(dir: &TempDir, mode: &[&str]) -> (Proc, SocketAddr) {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut cmd = Command::new("python3");
    cmd.arg(workspace_root().join("tests/py/h2_bad_origin.py"))
        .arg(addr.port().to_string())
        .args(mode);
    let proc = Proc::spawn("h2_bad_origin", cmd, dir.path());
    assert!(
        wait_for_port(addr, T),
        "h2_bad_origin did not start\n{}",
        proc.logs()
    );
    (proc, addr)
}

/// Runs the example client (bounded by `timeout 30`): its exit status, stdout and stderr.
fn client(addr: SocketAddr, args: &[&str], dir: &TempDir) -> (bool, String, String) {
    let mut cmd = Command::new("timeout");
    cmd.arg("30")
        .arg(example("h2c_client"))
        .arg(addr.to_string())
        .args(args);
    let mut proc = Proc::spawn("h2c_client", cmd, dir.path());
    let status = proc
        .wait_exit(Duration::from_secs(40))
        .unwrap_or_else(|| panic!("h2c_client {} hangs", proc.pid()));
    (status.success(), proc.stdout(), proc.stderr())
}

#[test]
fn refused_streams_are_retried_and_answered() {
    let dir = TempDir::new("h2client-refused");
    let (origin, addr) = bad_origin(&dir, &["refuse", "2"]);
    let (ok, out, err) = client(addr, &["--gets", "5", "/"], &dir);
    assert!(ok, "{out}\n{err}\n{}", origin.logs());
    assert!(out.contains("summary responses 5 failed 0"), "{out}");
    assert!(out.contains(" retried 2 "), "{out}");
    assert_eq!(
        origin.stdout().matches("refused").count(),
        2,
        "{}",
        origin.logs()
    );
}

#[test]
fn a_ping_flood_is_cut_with_enhance_your_calm() {
    let dir = TempDir::new("h2client-flood");
    let (origin, addr) = bad_origin(&dir, &["ping_flood"]);
    let started = Instant::now();
    let (ok, out, err) = client(addr, &["--get", "/"], &dir);
    assert!(!ok, "the flooded exchange cannot succeed: {out}");
    assert!(
        err.contains("ENHANCE_YOUR_CALM") && err.contains("PING rate"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "not cut promptly"
    );
    let deadline = Instant::now() + T;
    while !origin.stdout().contains("goaway code") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        origin.stdout().contains("goaway code 11"),
        "{}",
        origin.logs()
    );
}
