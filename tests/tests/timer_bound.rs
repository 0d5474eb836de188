//! A client's request rate must not decide how much memory a worker's timer heap holds.
//! Every keep-alive request re-arms its connection's idle deadline, and a re-armed deadline
//! leaves its old heap entry behind until that entry's time comes (75 s for the idle
//! timeout): before compaction, 20 connections sending as fast as they can grew the heap
//! by one entry per request. This drives tens of thousands of requests through one worker and
//! reads the heap's size from `ktls_proxy_timers_queued`.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use e2e::origin::{Origin, Response};
use e2e::proxy::Setup;
use e2e::{bin_path, curl, free_port, metric_sum};

#[test]
fn the_timer_heap_follows_connections_not_requests() {
    let origin =
        Origin::start(|_| Response::ok(&b"0123456789"[..]).header("Cache-Control", "max-age=600"));
    let setup = Setup::new("timers");
    let http = setup.http;
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = setup.config(
        origin.addr(),
        "",
        &format!("worker_threads 1;\ncache 1;\ncache_fulfill * *;\nstats_listen {stats};\naccess_log off;\n"),
    );
    let proxy = setup.start(&conf);
    // The name the proxy's vhost serves (strict host checking refuses an address).
    let url = "http://site.test/".to_string();
    let connect = http.to_string();
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut requests = 0;
    while requests < 30_000 && Instant::now() < deadline {
        let out = Command::new(bin_path("http-perf"))
            .args([
                "-c",
                "20",
                "-t",
                "1",
                "-d",
                "2s",
                "--connect",
                &connect,
                &url,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run http-perf");
        assert!(out.success(), "http-perf failed\n{}", proxy.proc.logs());
        requests = metric_sum(stats, "ktls_proxy_requests_total");
    }
    assert!(
        requests >= 30_000,
        "only {requests} requests in 40 s: too slow a machine to tell"
    );
    let queued = metric_sum(stats, "ktls_proxy_timers_queued");
    // Live deadlines: 20 connections (closed ones leave entries too) and one upstream; the
    // heap may hold twice that plus 4096 before it is compacted.
    assert!(
        queued < 5_000,
        "{queued} timer entries after {requests} requests on 20 connections: the heap grows with the request rate"
    );
    let hits = metric_sum(stats, "ktls_proxy_responses_total{class=\"2xx\"}");
    assert!(
        hits * 10 >= requests * 9,
        "{hits} of {requests} answered 2xx\n{}",
        proxy.proc.logs()
    );
    let resolve = format!("site.test:{}:127.0.0.1", http.port());
    let (st, body, _) = curl(
        &[
            "--resolve",
            &resolve,
            &format!("http://site.test:{}/", http.port()),
        ],
        5,
    );
    assert!(
        st.success() && body == "0123456789",
        "the proxy still answers: {st:?} {body:?}\n{}",
        proxy.proc.logs()
    );
}
