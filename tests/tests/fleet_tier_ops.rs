//! The cache tier's operations (docs/FLEET.md, "Cache tier"): a peer that accepts
//! connections and never answers (stopped with SIGSTOP) costs a request at most
//! `peer_timeout` and is used again once it answers; `-s reload` (SIGHUP) changes the peer
//! set without a restart; the vhost's response edits are made once, by the owner.

mod fleet_tier_common;

use std::time::{Duration, Instant};

use fleet_tier_common::*;

/// How many times node `n` logged a successful reload.
fn reloads(t: &Tier, n: usize) -> usize {
    let p = t.nodes[n].as_ref().expect("node running");
    p.proc.logs().matches("reloaded ").count()
}

/// Node `n`'s configuration with `from` replaced by `to`, loaded by SIGHUP; waits until the
/// node logs the reload (`refused`: its refusal instead).
fn reload(t: &Tier, n: usize, (from, to): (&str, &str), refused: bool) {
    let p = t.nodes[n].as_ref().expect("node running");
    let text = std::fs::read_to_string(&p.config).expect("the node's configuration");
    assert!(text.contains(from), "{from} not in {text}");
    e2e::write_file(&p.config, &text.replace(from, to));
    let (done, refusals) = (reloads(t, n), p.proc.logs().matches("refused:").count());
    p.proc.signal(libc::SIGHUP);
    let deadline = Instant::now() + T;
    while Instant::now() < deadline {
        let logs = p.proc.logs();
        if logs.matches("reloaded ").count() > done || logs.matches("refused:").count() > refusals {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let logs = p.proc.logs();
    assert_eq!(
        logs.matches("refused:").count() > refusals,
        refused,
        "reload of node {n}:\n{logs}"
    );
    assert_eq!(logs.matches("reloaded ").count() > done, !refused, "{logs}");
}

#[test]
fn a_stopped_peer_costs_at_most_peer_timeout_and_is_used_again_once_it_answers() {
    let ports = ports();
    let t = tier_with(
        &ports,
        "tier-stop",
        (&[0, 1, 2], "peer_timeout 1s;", ""),
        &[0, 1, 2],
    );
    let stopped = t.nodes[2].as_ref().expect("node 2").proc.pid();
    e2e::send_signal(stopped, libc::SIGSTOP);
    let fallback = "ktls_proxy_cache_tier_total{kind=\"fallback\"}";
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    for path in paths("stopped") {
        let asked = Instant::now();
        t.get_ok(t.addrs[0], &path, "");
        slowest = slowest.max(asked.elapsed());
        // At most one peer_timeout (1 s) per request, and only until node 2 is out.
        assert!(
            asked.elapsed() < Duration::from_millis(2500),
            "{path}: {:?}",
            asked.elapsed()
        );
    }
    let fell_back = e2e::metric_sum(t.stats[0], fallback);
    eprintln!(
        "node 2 stopped: {PATHS} requests in {:?}, the slowest {slowest:?}, {fell_back} fallbacks",
        started.elapsed()
    );
    // Node 2 owns about a third of the keys; once out, its keys go to the origin at once.
    assert!(fell_back >= 3, "{fell_back} fallbacks");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?} for {PATHS} requests, {fell_back} of them node 2's: each waited?",
        started.elapsed()
    );
    e2e::send_signal(stopped, libc::SIGCONT);
    let resumed = Instant::now();
    // Probed every peer_timeout: back within a few seconds.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut back = false;
    for (i, path) in paths("again").iter().cycle().enumerate() {
        let path = format!("{path}/{i}");
        t.get_ok(t.addrs[0], &path, "");
        if t.at_origin(&path).iter().any(|r| fetcher(r) == "node2") {
            back = true;
            break;
        }
        if Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(back, "node 2 not used after SIGCONT\n{}", t.logs());
    eprintln!("node 2 used again {:?} after SIGCONT", resumed.elapsed());
}

#[test]
fn a_reload_changes_the_peer_set_without_a_restart() {
    let ports = ports();
    let t = tier_on(&ports, "tier-reload", &[0, 1, 2], &[0, 1, 2]);
    let (three, two) = (peer_lines(&ports, &[0, 1, 2]), peer_lines(&ports, &[0, 1]));
    // Node 2 removed from node 0's set: none of node 0's misses goes there.
    reload(&t, 0, (&three, &two), false);
    let fetchers = |tag: &str| -> Vec<String> {
        paths(tag)
            .iter()
            .map(|p| {
                t.get_ok(t.addrs[0], p, "");
                let fetched = t.at_origin(p);
                assert_eq!(fetched.len(), 1, "{p}: {fetched:?}\n{}", t.logs());
                fetcher(&fetched[0])
            })
            .collect()
    };
    let after_removal = fetchers("two");
    assert!(
        !after_removal.iter().any(|f| f == "node2"),
        "{after_removal:?}"
    );
    assert!(
        after_removal.iter().any(|f| f == "node1"),
        "{after_removal:?}"
    );
    // Added back: node 2 owns its keys again.
    reload(&t, 0, (&two, &three), false);
    let after_adding = fetchers("three");
    assert!(
        after_adding.iter().any(|f| f == "node2"),
        "{after_adding:?}"
    );
    // A `self` the process has not bound, and the Redis side, still take a restart.
    let (me, unbound) = (
        t.addrs[0].to_string(),
        format!("127.0.0.2:{}", e2e::free_port()),
    );
    let listen = format!("listen {me};\n");
    reload(
        &t,
        0,
        (&listen, &format!("{listen}listen {unbound};\n")),
        false,
    );
    let moved = format!("{} self {unbound};", three.replace(&me, &unbound));
    reload(&t, 0, (&format!("{three} self {me};"), &moved), true);
    let logs = t.nodes[0]
        .as_ref()
        .map(|p| p.proc.logs())
        .unwrap_or_default();
    assert!(logs.contains("process has bound"), "{logs}");
    reload(&t, 0, ("self ", "redis 127.0.0.1:1; self "), true);
}

/// `resp_hdr_add` is made by the owner, whose response the asking node relays and stores as
/// it came: a client sees the field once, on a miss and on a hit, through any node.
#[test]
fn a_response_through_the_owner_has_the_vhosts_edits_once() {
    let ports = ports();
    let edits = "resp_hdr_add x-edit yes; resp_hdr_set x-set one;";
    let t = tier_with(&ports, "tier-edits", (&[0, 1, 2], "", edits), &[0, 1, 2]);
    let mut through_owner = 0;
    for path in paths("edits") {
        for round in ["miss", "hit"] {
            let got = t.get(t.addrs[0], &path, "");
            let Some(r) = got.response() else {
                panic!("{path}: {got}\n{}", t.logs());
            };
            let count = |name: &str| r.headers.iter().filter(|(n, _)| n == name).count();
            assert_eq!(
                (r.status, count("x-edit"), count("x-set")),
                (200, 1, 1),
                "{path} ({round}): {:?}",
                r.headers
            );
        }
        through_owner += usize::from(t.at_origin(&path).iter().any(|r| fetcher(r) != "node0"));
    }
    assert!(
        through_owner >= 5,
        "{through_owner} of {PATHS} went through an owner"
    );
    // The origin sees the chain: the client and the asking node in X-Forwarded-For, and
    // both nodes in Via (each proxy adds itself, RFC 9110 section 7.6.3).
    let sent_on = paths("edits")
        .iter()
        .flat_map(|p| t.at_origin(p))
        .find(|r| fetcher(r) != "node0")
        .expect("a request through an owner");
    let xff = sent_on.header("x-forwarded-for").unwrap_or_default();
    assert_eq!(xff.split(',').count(), 2, "{xff}");
    let via = sent_on.header("via").unwrap_or_default();
    assert!(
        via.contains("node0") && via.split(',').count() == 2,
        "{via}"
    );
}
