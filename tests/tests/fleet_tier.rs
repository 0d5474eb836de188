//! The cache tier of `cluster { peer ...; self ...; }` end to end (docs/FLEET.md, "Cache
//! tier"): three proxies on 127.0.0.2-4 in front of one origin, each listing the three as
//! peers (tests/tests/fleet_tier_common).

mod fleet_tier_common;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use e2e::curl;
use fleet_tier_common::*;

#[test]
fn a_page_requested_through_all_three_nodes_reaches_the_origin_once() {
    let t = tier("tier-once", &[0, 1, 2], &[0, 1, 2]);
    for path in paths("once") {
        for &node in &t.addrs {
            t.get_ok(node, &path, "");
        }
        let fetched = t.at_origin(&path);
        assert_eq!(fetched.len(), 1, "{path}: {fetched:?}\n{}", t.logs());
        assert_eq!(fetched[0].header("ktls-tier"), None, "{fetched:?}");
    }
    // Every node fetched some: the keys are spread over the owners.
    let mut owners: Vec<String> = paths("once")
        .iter()
        .flat_map(|p| t.at_origin(p))
        .map(|r| fetcher(&r))
        .collect();
    owners.sort();
    owners.dedup();
    assert_eq!(owners, ["node0", "node1", "node2"], "{}", t.logs());
    // Each object was sent to its owner by the two other nodes, and never fell back.
    assert_eq!(t.tier_count("owner"), 2 * PATHS as u64);
    assert_eq!(t.tier_count("fallback"), 0);
}

/// The owner keys a peer's request under the scheme the client used at the first node: an
/// object asked over TLS of every node is one object, fetched once, as `https`.
#[test]
fn a_page_requested_over_tls_through_all_three_nodes_reaches_the_origin_once_as_https() {
    let t = tier("tier-tls", &[0, 1, 2], &[0, 1, 2]);
    for path in paths("tls").iter().take(12) {
        for &node in &t.tls {
            let url = format!("https://{HOST}:{}{path}", node.port());
            let resolve = format!("{HOST}:{}:127.0.0.1", node.port());
            // The same Host at every node, as behind one balancer (the port is part of the
            // key).
            let host = format!("Host: {HOST}");
            let args = [
                "-k",
                "--resolve",
                &resolve,
                "-H",
                &host,
                "-w",
                " %{http_code}",
                &url,
            ];
            let (status, out, err) = curl(&args, 10);
            assert!(
                status.success() && out == "object 200",
                "{url}: {out} {err}\n{}",
                t.logs()
            );
        }
        let fetched = t.at_origin(path);
        assert_eq!(fetched.len(), 1, "{path}: {fetched:?}\n{}", t.logs());
        assert_eq!(
            fetched[0].header("x-forwarded-proto"),
            Some("https"),
            "{fetched:?}"
        );
    }
}

#[test]
fn the_owner_killed_the_others_answer_from_the_origin_without_an_error() {
    let mut t = tier("tier-kill", &[0, 1, 2], &[0, 1, 2]);
    // Node 0 keeps connections to both peers.
    for path in paths("warm") {
        t.get_ok(t.addrs[0], &path, "");
    }
    drop(t.nodes[2].take());
    let started = Instant::now();
    let mut from_the_origin = 0;
    for path in paths("after") {
        for node in [t.addrs[0], t.addrs[1]] {
            t.get_ok(node, &path, "");
        }
        let fetched = t.at_origin(&path);
        // Node 2's objects are fetched by each node that misses them: twice, never lost.
        assert!(
            (1..=2).contains(&fetched.len()),
            "{path}: {fetched:?}\n{}",
            t.logs()
        );
        from_the_origin += usize::from(fetched.len() == 2);
        assert!(fetched.iter().all(|r| r.header("ktls-tier").is_none()));
    }
    // Each of node 2's objects fell back once at node 0 and once at node 1.
    assert_eq!(
        t.tier_count("fallback"),
        2 * from_the_origin as u64,
        "{}",
        t.logs()
    );
    assert!(
        from_the_origin >= 3,
        "only {from_the_origin} of {PATHS} objects were node 2's?\n{}",
        t.logs()
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?} for {} requests: a dead owner must not cost a timeout each",
        started.elapsed(),
        2 * PATHS
    );
}

#[test]
fn a_request_with_the_hop_field_is_not_sent_on_and_the_field_never_reaches_the_origin() {
    let t = tier("tier-hop", &[0, 1, 2], &[0, 1, 2]);
    // On node 0's `self` listener from a peer's address (node 1's, which its connections to
    // the peers come from) the field is a peer's: node 0 fetches every object itself,
    // whoever owns it.
    let node1 = Ipv4Addr::new(127, 0, 0, 3);
    for path in paths("hop") {
        t.get_ok_from(node1, t.addrs[0], &path, "Ktls-Tier: http\r\n");
        let fetched = t.at_origin(&path);
        assert_eq!(fetched.len(), 1, "{path}: {fetched:?}");
        assert_eq!(fetcher(&fetched[0]), "node0", "{path}: {fetched:?}");
        assert_eq!(fetched[0].header("ktls-tier"), None, "{fetched:?}");
        let via = fetched[0].header("via").unwrap_or_default();
        assert!(!via.contains("node1") && !via.contains("node2"), "{via}");
    }
    // On another listener, or on `self` from an address that is no peer's (127.0.0.1, a
    // client's), it is a client's and means nothing: the objects go to their owners, and
    // the origin still never sees the field.
    for (batch, to) in [("forged", t.public[0]), ("forged-self", t.addrs[0])] {
        let mut sent_on = 0;
        for path in paths(batch) {
            t.get_ok(to, &path, "Ktls-Tier: http\r\n");
            let fetched = t.at_origin(&path);
            assert_eq!(fetched.len(), 1, "{path}: {fetched:?}");
            assert_eq!(fetched[0].header("ktls-tier"), None, "{fetched:?}");
            sent_on += usize::from(fetcher(&fetched[0]) != "node0");
        }
        assert!(
            sent_on >= 5,
            "{sent_on} of {PATHS} forged hops through {to} went to their owner"
        );
    }
}

#[test]
fn a_node_removed_from_the_peer_set_moves_only_its_keys() {
    // The owners with nodes 0, 1, 2 as peers, as node 0 sees them...
    let ports = ports();
    let before = tier_on(&ports, "tier-set3", &[0, 1, 2], &[0, 1, 2]);
    let owners = |t: &Tier| -> Vec<String> {
        paths("moved")
            .iter()
            .map(|p| {
                t.get_ok(t.addrs[0], p, "");
                let fetched = t.at_origin(p);
                assert_eq!(fetched.len(), 1, "{p}: {fetched:?}");
                fetcher(&fetched[0])
            })
            .collect()
    };
    let was = owners(&before);
    drop(before);
    // ...and with node 2 gone from the set.
    let after = tier_on(&ports, "tier-set2", &[0, 1], &[0, 1]);
    let is = owners(&after);
    let mut moved = 0;
    for ((path, was), is) in paths("moved").iter().zip(&was).zip(&is) {
        if was == "node2" {
            moved += 1;
            assert_ne!(is, "node2");
        } else {
            assert_eq!(was, is, "{path} moved though its owner stayed");
        }
    }
    assert!(moved >= 3, "{moved} of {PATHS} were node 2's: {was:?}");
}

/// Issue 37's review: a client's head at the edge of `http_header_cnt` and `http_hdr_len`
/// passes the node it reached, which adds its fields (the hop field, `X-Forwarded-For`,
/// `Via`, `X-Forwarded-Proto`) and sends it to the key's owner. The owner reads a peer's hop
/// request with the share of those fields: the client gets the object, not the owner's 431
/// (61de3bb's binary: a 431 for the first object another node owned, in each batch). A head
/// over the limits is still refused, a client's at the node it reached and one from a
/// peer's address without the hop field at the owner.
#[test]
fn a_head_at_the_edge_of_the_limits_goes_through_its_owner_without_a_431() {
    let limits = "frang_limits { http_header_cnt 6; http_hdr_len 64; }";
    let t = tier_top(
        &ports(),
        "tier-edge",
        (&[0, 1, 2], "", ""),
        &[0, 1, 2],
        limits,
    );
    // Host and Connection (`Tier::get`), and four more: six fields, to which the node adds
    // its own. Then an X-Forwarded-For line of 64 bytes, to which it appends an address.
    let count = "Accept: */*\r\nX-A: 1\r\nX-B: 1\r\nX-C: 1\r\n".to_string();
    let xff = "X-Forwarded-For: 192.0.2.10, 192.0.2.11, 192.0.2.12, 192.0.2.133";
    assert_eq!(xff.len(), 64);
    for (batch, edge) in [
        ("edge-count", &count),
        ("edge-length", &format!("{xff}\r\n")),
    ] {
        let mut through_owner = 0;
        for path in paths(batch) {
            t.get_ok(t.addrs[0], &path, edge);
            let fetched = t.at_origin(&path);
            assert_eq!(fetched.len(), 1, "{path}: {fetched:?}");
            through_owner += usize::from(fetcher(&fetched[0]) != "node0");
        }
        assert!(
            through_owner >= 5,
            "{batch}: {through_owner} of {PATHS} went through their owner"
        );
    }
    assert_eq!(t.tier_count("fallback"), 0, "{}", t.logs());
    // One field more: refused where the client sent it, whoever owns the object.
    let over = format!("{count}X-D: 1\r\n");
    for path in paths("over").iter().take(5) {
        let got = t.get(t.addrs[0], path, &over);
        assert_ne!(got.status(), Some(200), "{path}: {got}");
    }
    // From node 1's address on node 0's `self` listener: the share of the added fields is a
    // hop request's only.
    let node1 = Ipv4Addr::new(127, 0, 0, 3);
    let got = t.get_from(node1, t.addrs[0], "/peer-over", &over);
    assert_ne!(got.status(), Some(200), "{got}");
    t.get_ok_from(
        node1,
        t.addrs[0],
        "/peer-hop",
        &format!("{over}Ktls-Tier: http\r\n"),
    );
}
