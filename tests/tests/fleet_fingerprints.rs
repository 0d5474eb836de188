//! The fingerprint limits (`tfh`, issue 35) shared by a fleet through Redis (issue 37,
//! docs/FLEET.md): a client whose requests go to three proxies in turn meets the limit of
//! its HTTP fingerprint across the three, not three times over.

mod fleet_common;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use e2e::origin::{Origin, Response};
use e2e::proxy::Setup;
use e2e::rawclient::{get_with, Outcome, RawClient};

use fleet_common::*;

/// The `tfh` of the fleet harness's requests (`GET`, Host, `Connection: close`), read from
/// the access log of a proxy of its own.
fn harness_tfh() -> String {
    let origin = Origin::start(|_| Response::ok(Vec::new()));
    let setup = Setup::new("fleet-tfh-probe");
    let log = setup.dir.join("access.log");
    let conf = setup.config(
        origin.addr(),
        "",
        &format!("access_log_file {};", log.display()),
    );
    let http = setup.http;
    let proxy = setup.start(&conf);
    let mut c = RawClient::connect(http).expect("connect to the probe");
    let request = get_with("/probe", HOST, "Connection: close\r\n");
    match c.request(&request, T) {
        Outcome::Response(r) if r.status == 200 => {}
        other => panic!("probe: {other}\n{}", proxy.proc.logs()),
    }
    let deadline = Instant::now() + T;
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let tfh = text
            .split("\"tfh=")
            .nth(1)
            .and_then(|rest| rest.split('"').next());
        if let Some(tfh) = tfh {
            return tfh.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no tfh in the access log: {text:?}\n{}",
            proxy.proc.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Requests a second that `tfh` allows the harness's fingerprint.
const PER_SECOND: usize = 3;
/// A request every 120 ms, node after node: each node alone sees one every 360 ms (fewer
/// than `PER_SECOND` a second, all served), the fleet about eight a second.
const GAP: Duration = Duration::from_millis(120);
const REQUESTS: usize = 24;

#[test]
fn a_client_spread_over_the_fleet_meets_its_http_fingerprint_limit_once() {
    let tfh = harness_tfh();
    let redis = Redis::start();
    let top = format!("tfh {{ hash {tfh} 0 {PER_SECOND}; }}");
    let f = fleet_with(3, "fleet-tfh", redis.addr, "", "", &top);
    f.wait_redis_up(1, FLEET_WAIT);
    let started = Instant::now();
    let served = f.alternate(Ipv4Addr::new(127, 3, 9, 1), REQUESTS, GAP);
    let seconds = started.elapsed().as_secs_f64().ceil() as usize;
    // The fleet admits PER_SECOND a second, plus what the other nodes admit within one sync
    // interval before a node learns of it (two a second at most at this pace); lone nodes
    // would have served all of them.
    let most = seconds * (PER_SECOND + 2);
    eprintln!("{served} of {REQUESTS} served in {seconds} s (at most {most})");
    assert!(
        served <= most && served < REQUESTS,
        "{served} of {REQUESTS} served in {seconds} s under `tfh` {PER_SECOND}/s across three nodes (at most {most})\n{}",
        f.logs()
    );
    assert!(
        served >= PER_SECOND,
        "{served} served: the limit's own first requests pass"
    );
    assert!(
        e2e::metric_sum(f.stats, "ktls_proxy_blocks_total") >= 1,
        "node 0 counted its refusals"
    );
}
