//! gRPC end to end through the proxy (issue 34): a grpcio client over h2c to the proxy, the
//! proxy over h2c (`server_proto h2`) to a grpcio server, `tests/py/grpc_peers.py`: a unary
//! call, server streaming (50 messages), client streaming (40 messages of 20 kB, more than
//! the windows hold: nothing is buffered whole), a bidirectional stream whose every answer
//! is awaited before the next message goes, a deadline exceeded (the client's cancel reaches
//! the server, which says so), a status with details and binary metadata in the trailers,
//! then a call on the same channel again. grpcio is required when
//! `KTLS_PROXY_REQUIRE_GRPC=1` (tests/run.sh installs it), else the test says it skipped.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::proxy::Setup;
use e2e::{free_port, wait_for_port, workspace_root, Proc, TempDir};

const T: Duration = Duration::from_secs(10);

fn has_grpc() -> bool {
    let has = Command::new("python3")
        .args(["-c", "import grpc"])
        .status()
        .is_ok_and(|s| s.success());
    if !has {
        assert!(
            std::env::var_os("KTLS_PROXY_REQUIRE_GRPC").is_none(),
            "python3 grpcio missing"
        );
        eprintln!("skipped: python3 has no grpcio (pip install grpcio)");
    }
    has
}

/// A peer of `tests/py/grpc_peers.py`, run directly: the test's bounds (`wait_exit`, and
/// the SIGKILL of `Proc`'s drop) reach the Python process itself.
fn peers(dir: &TempDir, args: &[&str], name: &str) -> Proc {
    let mut cmd = Command::new("python3");
    cmd.arg(workspace_root().join("tests/py/grpc_peers.py"))
        .args(args);
    Proc::spawn(name, cmd, dir.path())
}

#[test]
fn grpc_calls_of_every_kind_through_an_h2c_origin() {
    if !has_grpc() {
        return;
    }
    let dir = TempDir::new("h2-origin-grpc");
    let port = free_port();
    let origin = SocketAddr::from(([127, 0, 0, 1], port));
    let server = peers(&dir, &["server", &port.to_string()], "grpc_server");
    assert!(wait_for_port(origin, T), "{}", server.logs());
    let setup = Setup::new("h2-origin-grpc");
    let h2c = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = setup.config(
        origin,
        "server_proto h2;",
        &format!("listen {h2c} proto=h2c;"),
    );
    let proxy = setup.start(&conf);
    assert!(wait_for_port(h2c, T), "{}", proxy.proc.logs());
    let mut client = peers(&dir, &["client", &h2c.to_string()], "grpc_client");
    let status = client.wait_exit(Duration::from_secs(50));
    let out = client.stdout();
    for case in [
        "unary",
        "server_streaming",
        "client_streaming",
        "bidi",
        "deadline",
        "status_details",
        "unary_after",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(&format!("{case} ok "))),
            "{case} failed:\n{out}\n{}\n{}",
            client.logs(),
            proxy.proc.logs()
        );
    }
    assert!(status.is_some_and(|s| s.success()), "{out}");
    // The client's cancel at its deadline reached the server through the proxy.
    let deadline = Instant::now() + T;
    while !server.stdout().contains("cancelled Slow") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        server.stdout().contains("cancelled Slow"),
        "{}",
        server.logs()
    );
}
