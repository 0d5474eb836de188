//! The Grafana dashboard (etc/grafana/ktls-proxy.json, shipped in the .deb) queries only
//! metrics the proxy exposes: every metric name in every panel's expression is a sample of
//! a running proxy's `/metrics`, fleet gauges included (a `cluster` block whose Redis is not
//! there still exports them). A renamed metric would leave a panel empty without this.

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::Setup;
use e2e::{curl, free_port, raw_exchange};

/// The metric names a PromQL expression reads: the `ktls_` identifiers not followed by `(`.
fn metric_names(expr: &str) -> Vec<String> {
    let bytes = expr.as_bytes();
    let mut names = Vec::new();
    let mut at = 0;
    while let Some(found) = expr[at..].find("ktls_") {
        let start = at + found;
        let end = bytes[start..]
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
            .map_or(bytes.len(), |n| start + n);
        names.push(expr[start..end].to_string());
        at = end;
    }
    names
}

/// The names a Prometheus text exposition has: its samples' (a histogram's `_bucket` among
/// them) and its families' (`# TYPE NAME`, there before a labelled counter has a sample).
fn exposed(metrics: &str) -> BTreeSet<String> {
    metrics
        .lines()
        .filter_map(|line| match line.strip_prefix("# TYPE ") {
            Some(declared) => declared.split(' ').next(),
            None if line.starts_with('#') => None,
            None => line.split(['{', ' ']).next(),
        })
        .filter(|name| !name.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn every_panel_queries_a_metric_the_proxy_exposes() {
    let dashboard = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../etc/grafana/ktls-proxy.json"
    );
    let text = std::fs::read_to_string(dashboard).expect("the dashboard is in the repository");
    let json: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let panels = json["panels"].as_array().expect("panels");
    let queried: BTreeSet<String> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(metric_names))
        .flatten()
        .collect();
    assert!(queried.len() >= 15, "{queried:?}");

    let origin = Origin::start(|_| Response::ok("x"));
    let setup = Setup::new("grafana");
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    // Nothing listens on the Redis port: the fleet gauges say so (redis_up 0).
    let redis = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = setup.config(
        origin.addr(),
        "",
        &format!("stats_listen {stats};\ncluster {{ redis {redis}; }}"),
    );
    let http = setup.http;
    let _proxy = setup.start(&conf);
    let req = b"GET / HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n";
    let answer = raw_exchange(http, req, Duration::from_secs(5)).expect("an answer");
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    assert!(TcpStream::connect(stats).is_ok(), "{stats} listens");
    let (status, metrics, err) = curl(&["-s", &format!("http://{stats}/metrics")], 5);
    assert!(status.success(), "{err}");
    let exposed = exposed(&metrics);
    let missing: Vec<&String> = queried.iter().filter(|m| !exposed.contains(*m)).collect();
    assert!(
        missing.is_empty(),
        "panels query metrics /metrics does not have: {missing:?}\n{metrics}"
    );
}
