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

/// The fleet's slot of `at` for a one-second frame (125 ms slots), as frang numbers them.
fn slot_of(frang: &Frang, at: Instant) -> u64 {
    let nanos = frang.fleet_unix(at).as_nanos() / Duration::from_millis(125).as_nanos();
    u64::try_from(nanos).unwrap()
}

fn total(slots: &[(u64, u32)]) -> Option<FleetTotal> {
    Some(FleetTotal {
        slots: slots.to_vec(),
    })
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
    let q = slot_of(&frang, t0);
    assert!(frang.on_request(ip(1), t0).is_ok());
    // The other nodes counted 8 for this address: two more requests make 11 > 10.
    let drained = frang.fleet_drain();
    assert_eq!(
        drained,
        [FleetDelta {
            ip: ip(1),
            requests: vec![(q, 1)],
            connections: vec![]
        }]
    );
    frang.fleet_update(ip(1), total(&[(q, 9)]), None);
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
    frang.fleet_update(ip(2), total(&[(slot_of(&frang, t0), 50)]), None);
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
    let q = slot_of(&frang, t0);
    frang.on_connect(ip(1), t0).unwrap();
    frang.on_request(ip(1), t0).unwrap();
    frang.on_request(ip(1), t0).unwrap();
    let expected = FleetDelta {
        ip: ip(1),
        requests: vec![(q, 2)],
        connections: vec![(q, 1)],
    };
    assert_eq!(frang.fleet_drain(), [expected]);
    // Nothing new: nothing to sync, whatever the totals.
    frang.fleet_update(ip(1), total(&[(q, 10)]), None);
    assert_eq!(frang.fleet_drain(), []);
    // Counts of slots a time frame (8 slots) old no longer count; younger ones do.
    let early = t0 + Duration::from_millis(900);
    let late = t0 + Duration::from_secs(2);
    assert_eq!(frang.on_request(ip(2), early).map(drop), Ok(()));
    frang.fleet_update(ip(2), total(&[(slot_of(&frang, early) - 7, 10)]), None);
    assert!(frang.on_request(ip(2), early).is_err());
    assert!(frang.on_request(ip(1), late).is_ok());
}

#[test]
fn each_event_is_counted_in_its_own_slot_and_judged_only_there() {
    // The reviewer's case: request_burst 3 at one request per 60 ms, through a cluster of
    // one. The fleet's count of a slot must never be judged as the next slot's.
    let _redis = redis_state(true);
    let (frang, t0) = fleet_frang(
        FrangGlobal {
            request_burst: Some(3),
            ..FrangGlobal::default()
        },
        false,
    );
    // A time at the start of a slot, so the steps below fall where they are meant to.
    let start = t0 + Duration::from_millis(125);
    let q0 = slot_of(&frang, start);
    let into = Duration::from_nanos(
        u64::try_from(frang.fleet_unix(start).as_nanos() % 125_000_000).unwrap(),
    );
    let base = start + Duration::from_millis(125) - into;
    let q = slot_of(&frang, base);
    assert_eq!(q, q0 + 1);
    // Two requests in slot q, synced: the fleet says 2 in slot q.
    let at = |ms: u64| base + Duration::from_millis(ms);
    frang.on_request(ip(1), at(0)).unwrap();
    frang.on_request(ip(1), at(60)).unwrap();
    let drained = frang.fleet_drain();
    assert_eq!(drained[0].requests, [(q, 2)]);
    frang.fleet_update(ip(1), total(&[(q, 2)]), None);
    // The next slot starts at 125 ms: its requests are not added to slot q's 2.
    frang.on_request(ip(1), at(126)).unwrap();
    frang.on_request(ip(1), at(186)).unwrap();
    frang.on_request(ip(1), at(246)).unwrap();
    // One drain spanning two slots gives each slot its own events.
    frang.on_request(ip(1), at(251)).unwrap();
    let drained = frang.fleet_drain();
    assert_eq!(drained[0].requests, [(q + 1, 3), (q + 2, 1)]);
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
    let taken = frang.fleet_take_blocks();
    assert_eq!(taken.len(), 1);
    assert_eq!(
        (taken[0].ip, taken[0].length),
        (ip(1), Some(Duration::from_secs(60)))
    );
    assert_eq!(taken[0].imposed, frang.fleet_unix(t0));
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

#[test]
fn blocks_from_other_nodes_do_not_take_the_client_table() {
    let epoch = Instant::now();
    let global = FrangGlobal {
        ip_block: IpBlock::Forever,
        concurrent_tcp_connections: None,
        ..FrangGlobal::default()
    };
    let frang = Frang::with_epoch(&global, 16, epoch).with_fleet(false);
    for n in 0..40 {
        assert!(frang.fleet_block(ip(n), None, epoch));
    }
    assert_eq!(
        frang.on_connect(ip(3), epoch).unwrap_err().limit,
        "ip_block"
    );
    assert!(frang.is_blocked(ip(39), epoch));
    // A new client still finds room.
    let new = IpAddr::V4(Ipv4Addr::new(10, 1, 0, 1));
    assert!(frang.on_connect(new, epoch).is_ok());
    assert!(!frang.is_blocked(new, epoch));
    // A timed block ends; the same block again changes nothing.
    let soon = Some(Duration::from_secs(1));
    assert!(frang.fleet_block(ip(200), soon, epoch));
    assert!(!frang.fleet_block(ip(200), soon, epoch));
    assert!(!frang.is_blocked(ip(200), epoch + Duration::from_secs(2)));
}

#[test]
fn a_sync_visits_the_clients_listed_and_walks_the_table_past_the_list_s_bound() {
    let _redis = redis_state(true);
    let epoch = Instant::now();
    let global = FrangGlobal {
        request_rate: Some(10),
        concurrent_tcp_connections: None,
        ..FrangGlobal::default()
    };
    let frang = Frang::with_epoch(&global, 80_000, epoch).with_fleet(false);
    let many = |n: u32| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n));
    // More clients with new events in one interval than the list holds (65 536): none lost.
    for n in 0..70_000 {
        frang.on_request(many(n), epoch).unwrap();
    }
    assert_eq!(frang.fleet_drain().len(), 70_000);
    assert_eq!(frang.fleet_drain(), []);
    // Back to the list: a client listed twice (two events) is taken once.
    frang.on_request(many(5), epoch).unwrap();
    frang.on_request(many(5), epoch).unwrap();
    let drained = frang.fleet_drain();
    assert_eq!(drained.len(), 1);
    assert_eq!(drained[0].requests.iter().map(|(_, n)| n).sum::<u32>(), 2);
}

/// A wall clock the test steps (Unix time in ms), and the fleet clock on it.
pub(crate) fn stepped_clock(
    start_ms: u64,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicU64>,
    std::sync::Arc<super::FleetClock>,
) {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let wall = std::sync::Arc::new(AtomicU64::new(start_ms));
    let read = std::sync::Arc::clone(&wall);
    let clock = super::FleetClock::with_wall(move || Duration::from_millis(read.load(Relaxed)));
    (wall, std::sync::Arc::new(clock))
}

/// Held by the fingerprint limits' tests that need Redis up (one process-wide state).
pub(crate) fn redis_answers() -> std::sync::MutexGuard<'static, ()> {
    redis_state(true)
}

/// The review's case (issue 37): the wall clock steps (NTP) while the monotonic one does
/// not. The side thread numbers the frame it reads by the wall clock of its turn, and so do
/// the other nodes; the pending counts must go to the slots so numbered from the next turn
/// on, and the fleet's counts read before a step back must not stay in the frame.
#[test]
fn after_a_wall_clock_step_the_counts_go_to_the_slots_every_node_numbers() {
    use std::sync::atomic::Ordering::Relaxed;
    let _redis = redis_state(true);
    // 60 ms into a slot: the microseconds the test takes stay in it.
    let (wall, clock) = stepped_clock(1_700_000_000_060);
    let global = FrangGlobal {
        request_rate: Some(20),
        concurrent_tcp_connections: None,
        ..FrangGlobal::default()
    };
    let frang = Frang::with_epoch(&global, 1000, Instant::now()).with_fleet_clock(false, clock);
    // The slot every node on time numbers "now" (the wall clock does not run in this test).
    let wall_slot = || wall.load(Relaxed) / 125;
    // The slot the side thread reads up to (`fleet/link.rs`: `fleet_unix(Instant::now())`).
    let read_slot = |frang: &Frang| slot_of(frang, Instant::now());
    frang.on_request(ip(1), Instant::now()).unwrap();
    let s0 = wall_slot();
    assert_eq!(frang.fleet_drain()[0].requests, [(s0, 1)]);
    assert_eq!(read_slot(&frang), s0);

    // An hour ahead. The next turn ties the clock again; the next events are counted in
    // the slots the fleet numbers them by.
    wall.store(1_700_003_600_060, Relaxed);
    assert_eq!(frang.fleet_drain(), []);
    let s1 = wall_slot();
    assert_eq!(s1, s0 + 3600 * 8);
    frang.on_request(ip(1), Instant::now()).unwrap();
    assert_eq!(frang.fleet_drain()[0].requests, [(s1, 1)]);
    assert_eq!(read_slot(&frang), s1);
    // The fleet's count of that slot is judged: 19 (this node's one included), then one more
    // makes 20, and the next is over `request_rate 20`.
    frang.fleet_update(ip(1), total(&[(s1, 19)]), None);
    frang.on_request(ip(1), Instant::now()).unwrap();
    let over = frang.on_request(ip(1), Instant::now()).unwrap_err();
    assert!(over.detail.contains("21 > 20 across the cluster"), "{over}");
    frang.fleet_drain();

    // Two hours back: the fleet's 19 of slot s1, now an hour ahead, are no count of the
    // frame; the client's requests are judged on the new slots' counts alone.
    wall.store(1_699_996_400_060, Relaxed);
    assert_eq!(frang.fleet_drain(), []);
    let s2 = wall_slot();
    for _ in 0..5 {
        frang.on_request(ip(1), Instant::now()).unwrap();
    }
    assert_eq!(frang.fleet_drain()[0].requests, [(s2, 5)]);
    assert_eq!(read_slot(&frang), s2);
    // A block imposed now ends when the fleet's clocks say.
    assert_eq!(
        frang.fleet_unix(Instant::now()).as_millis() / 1000,
        1_699_996_400
    );
}
