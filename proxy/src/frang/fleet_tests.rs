//! Tests of frang's side of `cluster`: the counts a sync takes, the fleet's totals judged,
//! blocks from other nodes. (Redis itself: tests/tests/fleet.rs.)

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use config::{FrangGlobal, IpBlock};

use super::{redis_up, set_redis_up, FleetDelta, FleetTotal, Frang};

fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
}

/// Held by the tests that set the process-wide Redis state, one at a time.
static REDIS_STATE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn redis_state(up: bool) -> std::sync::MutexGuard<'static, ()> {
    let guard = REDIS_STATE.lock().unwrap_or_else(|e| e.into_inner());
    set_redis_up(up);
    guard
}

fn fleet_frang(global: FrangGlobal, fail_closed: bool) -> (Frang, Instant) {
    let epoch = Instant::now();
    let global = FrangGlobal {
        concurrent_tcp_connections: None,
        ..global
    };
    (
        Frang::with_epoch(&global, 1000, epoch).with_fleet(fail_closed),
        epoch,
    )
}

#[test]
fn the_fleet_total_limits_while_redis_answers_and_local_counts_when_not() {
    let (frang, t0) = fleet_frang(
        FrangGlobal {
            request_rate: Some(10),
            ..FrangGlobal::default()
        },
        false,
    );
    let _redis = redis_state(true);
    assert!(frang.on_request(ip(1), t0).is_ok());
    // The other nodes counted 8 for this address: two more requests make 11 > 10.
    let drained = frang.fleet_drain();
    assert_eq!(
        drained,
        [FleetDelta {
            ip: ip(1),
            requests: 1,
            connections: 0
        }]
    );
    let nine = FleetTotal { frame: 9, slot: 9 };
    frang.fleet_update(ip(1), nine, FleetTotal::default(), t0);
    assert!(frang.on_request(ip(1), t0).is_ok());
    let v = frang.on_request(ip(1), t0).unwrap_err();
    assert_eq!(v.limit, "request_rate");
    assert!(v.detail.contains("across the cluster"), "{}", v.detail);
    // Redis away: this node's own 3 requests are far under the limit.
    let (frang, t0) = fleet_frang(
        FrangGlobal {
            request_rate: Some(10),
            ..FrangGlobal::default()
        },
        true,
    );
    frang.on_request(ip(2), t0).unwrap();
    frang.fleet_drain();
    frang.fleet_update(
        ip(2),
        FleetTotal {
            frame: 50,
            slot: 50,
        },
        FleetTotal::default(),
        t0,
    );
    set_redis_up(false);
    assert!(frang.on_request(ip(2), t0).is_ok());
    // on_redis_failure closed: new connections are refused, and the address not blocked.
    let v = frang.on_connect(ip(3), t0).unwrap_err();
    assert_eq!(v.limit, "cluster");
    assert!(!frang.is_blocked(ip(3), t0));
    set_redis_up(true);
    assert!(frang.on_connect(ip(3), t0).is_ok());
    assert!(redis_up());
}

#[test]
fn a_sync_takes_the_pending_counts_once_and_old_totals_age_out() {
    let _redis = redis_state(true);
    let (frang, t0) = fleet_frang(
        FrangGlobal {
            request_rate: Some(10),
            tcp_connection_rate: Some(100),
            ..FrangGlobal::default()
        },
        false,
    );
    frang.on_connect(ip(1), t0).unwrap();
    frang.on_request(ip(1), t0).unwrap();
    frang.on_request(ip(1), t0).unwrap();
    let expected = FleetDelta {
        ip: ip(1),
        requests: 2,
        connections: 1,
    };
    assert_eq!(frang.fleet_drain(), [expected]);
    // Nothing new: nothing to sync, whatever the totals.
    frang.fleet_update(
        ip(1),
        FleetTotal { frame: 10, slot: 0 },
        FleetTotal::default(),
        t0,
    );
    assert_eq!(frang.fleet_drain(), []);
    // Totals read a time frame ago (1 s) no longer count; younger ones do.
    let (early, late) = (
        t0 + Duration::from_millis(900),
        t0 + Duration::from_millis(1000),
    );
    assert_eq!(frang.on_request(ip(2), early).map(drop), Ok(()));
    frang.fleet_update(
        ip(2),
        FleetTotal { frame: 10, slot: 0 },
        FleetTotal::default(),
        t0,
    );
    assert!(frang.on_request(ip(2), early).is_err());
    frang.fleet_update(
        ip(1),
        FleetTotal { frame: 10, slot: 0 },
        FleetTotal::default(),
        t0,
    );
    assert!(frang
        .on_request(ip(1), late + Duration::from_secs(1))
        .is_ok());
}

#[test]
fn blocks_go_out_once_and_blocks_from_other_nodes_count_as_ours() {
    let (frang, t0) = fleet_frang(
        FrangGlobal {
            request_rate: Some(1),
            ip_block: IpBlock::For(Duration::from_secs(60)),
            ..FrangGlobal::default()
        },
        false,
    );
    frang.on_request(ip(1), t0).unwrap();
    assert!(frang.on_request(ip(1), t0).is_err());
    assert_eq!(
        frang.fleet_take_blocks(),
        [(ip(1), Some(Duration::from_secs(60)))]
    );
    assert_eq!(frang.fleet_take_blocks(), []);
    // Another node's block: refused at accept, the workers' count moves, not published.
    let before = frang.blocks();
    assert!(frang.fleet_block(ip(2), Some(Duration::from_secs(5)), t0));
    assert_eq!(frang.on_connect(ip(2), t0).unwrap_err().limit, "ip_block");
    assert_eq!(frang.blocked_since(before).1, Some(vec![ip(2)]));
    assert_eq!(frang.fleet_take_blocks(), []);
    // The same block again changes nothing; it ends when it said.
    assert!(!frang.fleet_block(ip(2), Some(Duration::from_secs(5)), t0));
    assert!(!frang.is_blocked(ip(2), t0 + Duration::from_secs(6)));
}
