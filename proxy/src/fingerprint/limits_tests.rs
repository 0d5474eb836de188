//! The per-fingerprint limits and the blocklist, with a clock the tests move.

use std::time::{Duration, Instant};

use config::{Config, FingerprintLimit, FingerprintLimits};

use super::Fingerprints;
use crate::fingerprint::{Tfh, Tft};

fn limits(hash: u64, connections: u32, records: u32) -> Option<FingerprintLimits> {
    Some(FingerprintLimits {
        hashes: vec![FingerprintLimit {
            hash,
            connections,
            records,
        }],
        ..FingerprintLimits::default()
    })
}

#[test]
fn the_connection_over_the_limit_is_refused_and_the_next_second_passes() {
    let config = Config {
        tft: limits(0xabc, 1, 100),
        ..Config::default()
    };
    let f = Fingerprints::build(&config).expect("no blocklist");
    let t0 = Instant::now();
    assert!(f.on_tls_connection(Tft(0xabc), t0).is_ok());
    let refused = f
        .on_tls_connection(Tft(0xabc), t0)
        .expect_err("second in a second");
    assert_eq!(refused.limit, "tft");
    assert!(
        refused.detail.contains("2 connections/s > 1"),
        "{}",
        refused.detail
    );
    // Another fingerprint has no limit.
    for _ in 0..10 {
        assert!(f.on_tls_connection(Tft(0xdef), t0).is_ok());
    }
    assert!(f
        .on_tls_connection(Tft(0xabc), t0 + Duration::from_secs(2))
        .is_ok());
}

#[test]
fn records_and_requests_count_against_the_third_number() {
    let config = Config {
        tft: limits(1, 100, 5),
        tfh: limits(2, 0, 2),
        ..Config::default()
    };
    let f = Fingerprints::build(&config).expect("no blocklist");
    let now = Instant::now();
    assert!(f.on_tls_records(Tft(1), 5, now).is_ok());
    assert!(f.on_tls_records(Tft(1), 1, now).is_err());
    assert!(f.on_request(Tfh(2), now).is_ok());
    assert!(f.on_request(Tfh(2), now).is_ok());
    let third = f.on_request(Tfh(2), now).expect_err("third request");
    assert_eq!(third.limit, "tfh");
    assert_eq!(third.status, 403);
    assert!(f.judges_requests());
}

#[test]
fn storage_size_zero_turns_the_limits_off() {
    let mut tft = limits(1, 0, 0);
    if let Some(l) = tft.as_mut() {
        l.storage_size = 0;
    }
    let f = Fingerprints::build(&Config {
        tft,
        ..Config::default()
    })
    .expect("no blocklist");
    assert!(f.on_tls_connection(Tft(1), Instant::now()).is_ok());
}

#[test]
fn the_blocklist_file_refuses_its_fingerprints_and_reports_bad_lines() {
    let dir = std::env::temp_dir().join(format!("tf-blocklist-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("list");
    std::fs::write(
        &path,
        "# refused clients\ntft 66cb9fd8d4250000\n\ntfh 0x55 # a bot\n",
    )
    .expect("write");
    let config = Config {
        tf_blocklist: Some(path.clone()),
        ..Config::default()
    };
    let f = Fingerprints::build(&config).expect("valid list");
    let now = Instant::now();
    let refused = f
        .on_tls_connection(Tft(0x66cb_9fd8_d425_0000), now)
        .expect_err("listed");
    assert!(refused.detail.contains("blocklist"));
    assert!(f.on_tls_connection(Tft(0x66cb_9fd8_d425_0001), now).is_ok());
    assert!(f.on_request(Tfh(0x55), now).is_err());
    assert!(f.judges_requests());

    std::fs::write(&path, "tft 1\ntft zz\n").expect("write");
    let err = Fingerprints::build(&config).expect_err("bad line");
    assert!(
        err.ends_with("list:2: not a fingerprint (up to 16 hex digits)"),
        "{err}"
    );
    std::fs::write(&path, "ja5t 1\n").expect("write");
    assert!(Fingerprints::build(&config).is_err());
    let _ = std::fs::remove_dir_all(&dir);
    let gone = Fingerprints::build(&config).expect_err("missing file");
    assert!(gone.starts_with("tf_blocklist "), "{gone}");
}

#[test]
fn with_cluster_each_configured_fingerprint_s_events_are_taken_for_the_fleet_once() {
    let alone = Config {
        tfh: limits(0xabc, 0, 100),
        ..Config::default()
    };
    let f = Fingerprints::build(&alone).expect("no blocklist");
    assert!(f.on_request(Tfh(0xabc), Instant::now()).is_ok());
    assert!(
        f.fleet_drain().is_empty(),
        "nothing is shared without cluster"
    );

    let fleet = Config {
        tfh: limits(0xabc, 0, 100),
        tft: limits(0xdef, 100, 100),
        cluster: Some(config::Cluster {
            redis: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 6379))),
            ..config::Cluster::default()
        }),
        ..Config::default()
    };
    let f = Fingerprints::build(&fleet).expect("no blocklist");
    let now = Instant::now();
    for _ in 0..3 {
        assert!(f.on_request(Tfh(0xabc), now).is_ok());
    }
    assert!(
        f.on_request(Tfh(0x123), now).is_ok(),
        "not configured: not counted"
    );
    assert!(f.on_tls_connection(Tft(0xdef), now).is_ok());
    let mut deltas = f.fleet_drain();
    deltas.sort_by_key(|d| d.hash);
    let events: Vec<(u64, u32)> = deltas
        .iter()
        .map(|d| (d.hash, d.slots.iter().map(|&(_, n)| n).sum()))
        .collect();
    assert_eq!(events, [(0xabc, 3), (0xdef, 1)]);
    assert!(f.fleet_drain().is_empty(), "taken once");
}

/// The review's case (issue 37): after a step of the wall clock (NTP), a fingerprint's
/// events go to the slots the side thread reads (it numbers the frame by the wall clock of
/// its turn, `fleet/link.rs`), from the next turn on; and the fleet's counts read before a
/// step back do not stay in the frame.
#[test]
fn after_a_wall_clock_step_a_fingerprint_s_events_go_to_the_slots_the_side_thread_reads() {
    use std::sync::atomic::Ordering::Relaxed;
    let _redis = crate::frang::fleet_tests::redis_answers();
    let (wall, clock) = crate::frang::fleet_tests::stepped_clock(1_700_000_000_060);
    let fleet = Config {
        tfh: limits(0xabc, 0, 100),
        cluster: Some(config::Cluster {
            redis: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 6379))),
            ..config::Cluster::default()
        }),
        ..Config::default()
    };
    let f = Fingerprints::build(&fleet)
        .expect("no blocklist")
        .with_fleet_clock(clock);
    // `Turn::fingerprint_counts` reads the frame ending at the wall clock's slot.
    let read_slot = || wall.load(Relaxed) / 125;
    let slots = |f: &Fingerprints| -> Vec<(u64, u32)> {
        f.fleet_drain().into_iter().flat_map(|d| d.slots).collect()
    };
    assert!(f.on_request(Tfh(0xabc), Instant::now()).is_ok());
    assert_eq!(slots(&f), [(read_slot(), 1)]);
    // An hour ahead: the turn after the step ties the clock again.
    wall.store(1_700_003_600_060, Relaxed);
    assert_eq!(slots(&f), []);
    assert!(f.on_request(Tfh(0xabc), Instant::now()).is_ok());
    let s1 = read_slot();
    assert_eq!(slots(&f), [(s1, 1)]);
    // The fleet counted 100 in that slot (the limit). Two hours back, they are an hour in
    // the future: no count of the frame, and the next request passes.
    f.fleet_update(
        super::Kind::Http,
        0xabc,
        super::Counter::Records,
        crate::frang::FleetTotal {
            slots: vec![(s1, 100)],
        },
    );
    wall.store(1_699_996_400_060, Relaxed);
    assert_eq!(slots(&f), []);
    assert!(f.on_request(Tfh(0xabc), Instant::now()).is_ok());
    assert_eq!(slots(&f), [(read_slot(), 1)]);
}
