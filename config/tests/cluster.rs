//! The `cluster` block (an extension, docs/FLEET.md): Redis, the cache tier's peers, their
//! defaults. Its refusals are in errors.rs.

use std::path::Path;
use std::time::Duration;

use config::{parse_str, Config};

fn load(text: &str) -> Config {
    match parse_str("t.conf", text, Path::new("/etc/t")) {
        Ok(l) => l.config,
        Err(d) => panic!("refused:\n{text}\n{d}"),
    }
}

#[test]
fn cluster_block_and_its_defaults() {
    use config::{RedisFailure, DEFAULT_SYNC_INTERVAL};
    assert_eq!(load("listen 80;\n").cluster, None);
    let c = load("cluster { redis 127.0.0.2; }\n")
        .cluster
        .expect("cluster");
    assert_eq!(c.redis, Some("127.0.0.2:6379".parse().unwrap()));
    assert_eq!(c.tier(), None);
    assert_eq!(
        (c.sync_interval, c.on_redis_failure),
        (DEFAULT_SYNC_INTERVAL, RedisFailure::Open)
    );
    let c = load(
        "cluster {\n redis 127.0.0.1:7000;\n sync_interval 120ms;\n on_redis_failure closed;\n}\n",
    )
    .cluster
    .expect("cluster");
    assert_eq!(c.redis, Some("127.0.0.1:7000".parse().unwrap()));
    assert_eq!(c.sync_interval, Duration::from_millis(120));
    assert_eq!(c.on_redis_failure, RedisFailure::Closed);
}

#[test]
fn cluster_cache_tier_peers_without_redis() {
    // `self` may match a wildcard listener on its port; the peers keep their order.
    let c = load(
        "listen 8080;\nlisten 443 proto=https;\ntls_certificate a.crt;\ntls_certificate_key a.key;\n\
         cluster {\n peer 10.0.0.3:8080;\n peer 10.0.0.1:8080;\n self 10.0.0.1:8080;\n peer 10.0.0.2;\n}\n",
    )
    .cluster
    .expect("cluster");
    assert_eq!(c.redis, None);
    let peers: Vec<std::net::SocketAddr> = ["10.0.0.3:8080", "10.0.0.1:8080", "10.0.0.2:80"]
        .iter()
        .map(|p| p.parse().unwrap())
        .collect();
    let me: std::net::SocketAddr = "10.0.0.1:8080".parse().unwrap();
    assert_eq!(c.tier(), Some((peers.as_slice(), me)));
}

#[test]
fn the_toml_form_checks_the_tier_as_the_conf_form_does() {
    let listen = "[[listeners]]\naddr = \"127.0.0.2:8080\"\nprotos = [\"http\"]\n";
    let tier = "[cluster]\npeers = [\"127.0.0.2:8080\", \"127.0.0.3:8080\"]\n";
    let d = parse_str("t.toml", &format!("{listen}{tier}"), Path::new("/")).unwrap_err();
    assert!(
        d.errors[0].message.contains("not which one this node is"),
        "{d}"
    );
    let text = format!("{listen}{tier}self = \"127.0.0.2:8080\"\n");
    let c = match parse_str("t.toml", &text, Path::new("/")) {
        Ok(l) => l.config.cluster.expect("cluster"),
        Err(d) => panic!("refused:\n{text}\n{d}"),
    };
    assert_eq!(c.redis, None);
    assert_eq!(c.tier().map(|(peers, _)| peers.len()), Some(2));
    let d = parse_str("t.toml", "[cluster]\n", Path::new("/")).unwrap_err();
    assert!(
        d.errors[0].message.contains("neither a Redis server"),
        "{d}"
    );
}

#[test]
fn peer_timeout_defaults_to_two_seconds_and_needs_its_unit_within_bounds() {
    let tier = "listen 127.0.0.2:8080;\ncluster { peer 127.0.0.2:8080; self 127.0.0.2:8080; ";
    let c = load(&format!("{tier}}}\n")).cluster.expect("cluster");
    assert_eq!(c.peer_timeout, config::DEFAULT_PEER_TIMEOUT);
    assert_eq!(c.peer_probe().timeout, Duration::from_secs(2));
    let c = load(&format!("{tier}peer_timeout 500ms; }}\n"))
        .cluster
        .expect("cluster");
    assert_eq!(c.peer_timeout, Duration::from_millis(500));
    for bad in ["2", "50ms", "61s", "soon"] {
        let text = format!("{tier}peer_timeout {bad}; }}\n");
        let d = parse_str("t.conf", &text, Path::new("/etc/t")).unwrap_err();
        assert!(
            d.errors[0].message.contains("is not a peer timeout"),
            "{bad}: {d}"
        );
    }
    // TOML: milliseconds, as `sync_interval`.
    let text = "[[listeners]]\naddr = \"127.0.0.2:8080\"\nprotos = [\"http\"]\n[cluster]\n\
                peers = [\"127.0.0.2:8080\"]\nself = \"127.0.0.2:8080\"\npeer_timeout = 700\n";
    let c = match parse_str("t.toml", text, Path::new("/")) {
        Ok(l) => l.config.cluster.expect("cluster"),
        Err(d) => panic!("refused:\n{text}\n{d}"),
    };
    assert_eq!(c.peer_timeout, Duration::from_millis(700));
}

/// What a reload may change: the tier's part, not the Redis side.
#[test]
fn only_the_redis_side_of_the_block_takes_a_restart() {
    let tier = config::Cluster {
        peers: vec!["127.0.0.2:80".parse().unwrap()],
        self_addr: Some("127.0.0.2:80".parse().unwrap()),
        ..Default::default()
    };
    let other_peers = config::Cluster {
        peers: vec![],
        self_addr: None,
        peer_timeout: Duration::from_secs(5),
        ..tier.clone()
    };
    assert!(!tier.redis_side_differs(&other_peers));
    let redis = config::Cluster {
        redis: Some("127.0.0.1:6379".parse().unwrap()),
        ..tier.clone()
    };
    assert!(tier.redis_side_differs(&redis));
}
