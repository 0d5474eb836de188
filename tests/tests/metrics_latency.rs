//! Issue 36 item 9 through the binary: `/metrics` carries the request-latency histogram, the
//! upstream response-time histogram per server group and each server's health, and the
//! dashboard shows the version, the uptime, latency percentiles and the servers' health.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use e2e::origin::{Origin, Response};
use e2e::proxy::Setup;
use e2e::{curl, free_port, raw_exchange};

/// `/fast` at once, `/slow` after 300 ms; neither stored.
fn timed_origin() -> Origin {
    Origin::start(|r| match r.path() {
        "/slow" => Response::ok("slow")
            .header("Cache-Control", "no-store")
            .delay(Duration::from_millis(300)),
        _ => Response::ok("fast").header("Cache-Control", "no-store"),
    })
}

fn get(http: SocketAddr, path: &str) -> Vec<u8> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n");
    raw_exchange(http, request.as_bytes(), Duration::from_secs(10)).expect("exchange")
}

fn scrape(stats: SocketAddr) -> String {
    let (st, out, err) = curl(&["-s", &format!("http://{stats}/metrics")], 5);
    assert!(st.success(), "metrics: {err}");
    out
}

/// The value of the sample written exactly `sample` (name and labels).
fn value(metrics: &str, sample: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {sample}:\n{metrics}"))
}

#[test]
fn a_slow_origin_lands_in_the_latency_buckets_above_the_fast_ones() {
    let origin = timed_origin();
    let setup = Setup::new("latency");
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let http = setup.http;
    let conf = setup.config(origin.addr(), "", &format!("stats_listen {stats};"));
    let _proxy = setup.start(&conf);
    for path in ["/fast", "/fast", "/fast", "/slow"] {
        assert!(get(http, path).starts_with(b"HTTP/1.1 200"));
    }
    let m = scrape(stats);
    for (name, labels) in [
        ("ktls_proxy_request_duration_seconds", ""),
        ("ktls_proxy_upstream_response_seconds", "group=\"default\","),
    ] {
        assert!(m.contains(&format!("# TYPE {name} histogram")), "{m}");
        let bucket = |le: &str| value(&m, &format!("{name}_bucket{{{labels}le=\"{le}\"}}"));
        // The three fast ones under 250 ms, the slow one (300 ms) above it.
        assert_eq!(bucket("0.25"), 3.0, "{name}\n{m}");
        assert_eq!(bucket("+Inf"), 4.0, "{name}\n{m}");
        assert!(bucket("0.0005") <= bucket("0.001"), "cumulative\n{m}");
        let plain = labels.trim_end_matches(',');
        let braces = if plain.is_empty() {
            String::new()
        } else {
            format!("{{{plain}}}")
        };
        assert_eq!(value(&m, &format!("{name}_count{braces}")), 4.0, "{m}");
        assert!(value(&m, &format!("{name}_sum{braces}")) >= 0.3, "{m}");
    }
}

#[test]
fn a_server_that_refuses_connections_is_shown_down_and_the_live_one_up() {
    let origin = timed_origin();
    let setup = Setup::new("health-gauge");
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    // Nothing listens there: each connect is refused.
    let dead = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let http = setup.http;
    let conf = setup.config(
        origin.addr(),
        &format!("server {dead};"),
        &format!("stats_listen {stats};"),
    );
    let _proxy = setup.start(&conf);
    let up = |server: SocketAddr| {
        format!("ktls_proxy_upstream_server_up{{group=\"default\",server=\"{server}\"}}")
    };
    let m = scrape(stats);
    assert_eq!(value(&m, &up(dead)), 1.0, "nothing failed yet\n{m}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut m = m;
    while value(&m, &up(dead)) != 0.0 && Instant::now() < deadline {
        // Round robin sends some of these to the dead server, whose refusal takes it out.
        get(http, "/fast");
        m = scrape(stats);
    }
    assert_eq!(value(&m, &up(dead)), 0.0, "{m}");
    assert_eq!(value(&m, &up(origin.addr())), 1.0, "{m}");
}

#[test]
fn the_dashboard_shows_version_uptime_latency_and_server_health() {
    let origin = timed_origin();
    let setup = Setup::new("dashboard-fields");
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = setup.config(origin.addr(), "", &format!("stats_listen {stats};"));
    let _proxy = setup.start(&conf);
    let m = scrape(stats);
    // The version `proxy --version` prints.
    let out = std::process::Command::new(e2e::bin_path("proxy"))
        .arg("--version")
        .output()
        .expect("proxy --version");
    let printed = String::from_utf8_lossy(&out.stdout);
    let version = printed.split_whitespace().nth(1).unwrap_or("?");
    assert_eq!(
        value(
            &m,
            &format!("ktls_proxy_build_info{{version=\"{version}\"}}")
        ),
        1.0
    );
    assert!(value(&m, "ktls_proxy_uptime_seconds") >= 0.0, "{m}");
    assert!(value(&m, "ktls_proxy_start_time_seconds") > 1.7e9, "{m}");
    let (st, page, err) = curl(&["-s", &format!("http://{stats}/")], 5);
    assert!(st.success(), "{err}");
    // The page reads these from /metrics and shows them (ops_service.rs runs it in a browser
    // when chromium is installed).
    for shown in [
        "ktls_proxy_build_info",
        "ktls_proxy_uptime_seconds",
        "\"ktls_proxy_request_duration_seconds\"",
        "p99",
        "\"ktls_proxy_upstream_server_up\"",
        "\"ktls_proxy_upstream_response_seconds\"",
        "Upstream servers",
    ] {
        assert!(page.contains(shown), "the dashboard lacks {shown}");
    }
}
