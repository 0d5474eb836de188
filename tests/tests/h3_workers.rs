//! QUIC connections stay with the worker that owns them (issue 33, "Workers"): a client
//! whose source port changes mid-connection (a NAT rebinding), with 2 workers, reaches the
//! other worker's socket about half of the time; that worker moves its datagrams to the
//! owner by connection ID, and every request is answered on the same connection.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::Setup;
use e2e::{free_port, metric_sum, wait_for_port};

#[test]
fn h3_connection_survives_new_source_ports_across_two_workers() {
    let origin = Origin::start(|_| Response::ok("ok"));
    let setup = Setup::new("h3-workers");
    let addr = || SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (h3, stats) = (addr(), addr());
    let conf = setup.config(
        origin.addr(),
        "",
        &format!("listen {h3} proto=\"h2,h3\";\nstats_listen {stats};\nworker_threads 2;\n"),
    );
    let proxy = setup.start(&conf);
    for a in [h3, stats] {
        assert!(wait_for_port(a, Duration::from_secs(10)), "{a} listens");
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/h3_migrate.py");
    // 12 new ports: the chance that none reaches the other worker is 1 in 4096.
    let out = Command::new("timeout")
        .args(["120", "python3", script, &h3.port().to_string(), "12"])
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("answered 13 of 13 on one connection"),
        "{stdout}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        proxy.proc.logs()
    );
    let metric = |name: &str| metric_sum(stats, name);
    // One connection, one handshake; datagrams moved between the workers.
    assert_eq!(
        metric("ktls_proxy_quic_handshakes_total{state=\"done\"}"),
        1
    );
    let moved = metric("ktls_proxy_quic_datagrams_moved_total{result=\"moved\"}");
    assert!(moved > 0, "no datagram reached the other worker");
    assert_eq!(
        metric("ktls_proxy_quic_datagrams_moved_total{result=\"dropped\"}"),
        0
    );
    assert_eq!(metric("ktls_proxy_quic_stateless_resets_total"), 0);
    let logs = proxy.proc.logs();
    assert!(!logs.contains("panic"), "{logs}");
}
