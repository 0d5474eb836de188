//! Tests of the per-client accounting with controlled time.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use config::{FrangGlobal, IpBlock, RespCodeBlock};

use super::Frang;

fn ip(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(n))
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Limits with nothing set but what the test sets (the default caps
/// concurrent connections at 1000).
fn unlimited() -> FrangGlobal {
    FrangGlobal {
        concurrent_tcp_connections: None,
        ..FrangGlobal::default()
    }
}

fn frang(global: FrangGlobal) -> (Frang, Instant) {
    let epoch = Instant::now();
    (Frang::with_epoch(&global, 1000, epoch), epoch)
}

#[test]
fn request_rate_just_under_and_over() {
    let (frang, t0) = frang(FrangGlobal {
        request_rate: Some(20),
        ..unlimited()
    });
    // Spread over the second so no burst logic is involved.
    for i in 0..20 {
        assert!(
            frang.on_request(ip(1), t0 + ms(i * 40)).is_ok(),
            "request {i}"
        );
    }
    let v = frang.on_request(ip(1), t0 + ms(900)).unwrap_err();
    assert_eq!((v.limit, v.status), ("request_rate", 403));
    // Other clients are not affected.
    assert!(frang.on_request(ip(2), t0 + ms(900)).is_ok());
}

#[test]
fn rate_window_slides() {
    let (frang, t0) = frang(FrangGlobal {
        request_rate: Some(10),
        ..unlimited()
    });
    for _ in 0..10 {
        assert!(frang.on_request(ip(1), t0).is_ok());
    }
    assert!(frang.on_request(ip(1), t0 + ms(999)).is_err());
    // At 1.01 s the slot of t=0 has left the window.
    for _ in 0..9 {
        assert!(frang.on_request(ip(1), t0 + ms(1010)).is_ok());
    }
    // ...but the refused request at 0.999 s is still in it (it counted).
    assert_eq!(
        frang.on_request(ip(1), t0 + ms(1010)).unwrap_err().limit,
        "request_rate"
    );
}

#[test]
fn burst_applies_per_slot() {
    let (frang, t0) = frang(FrangGlobal {
        request_rate: Some(100),
        request_burst: Some(5),
        ..unlimited()
    });
    for _ in 0..5 {
        assert!(frang.on_request(ip(1), t0 + ms(10)).is_ok());
    }
    assert_eq!(
        frang.on_request(ip(1), t0 + ms(124)).unwrap_err().limit,
        "request_burst"
    );
    // The next 125 ms slot has its own burst allowance.
    for _ in 0..5 {
        assert!(frang.on_request(ip(1), t0 + ms(125)).is_ok());
    }
    assert_eq!(
        frang.on_request(ip(1), t0 + ms(200)).unwrap_err().limit,
        "request_burst"
    );
}

#[test]
fn time_frame_stretches_the_window() {
    let (frang, t0) = frang(FrangGlobal {
        request_rate: Some(4),
        request_burst: Some(2),
        ..unlimited()
    });
    let frang = frang.with_rate_time_frames(Duration::from_secs(4), Duration::from_secs(1));
    // Slots are now 500 ms: two requests fit in one, the third does not.
    assert!(frang.on_request(ip(1), t0).is_ok());
    assert!(frang.on_request(ip(1), t0 + ms(499)).is_ok());
    assert_eq!(
        frang.on_request(ip(1), t0 + ms(499)).unwrap_err().limit,
        "request_burst"
    );
    // The refused one counted: one more fits the 4 s window, then none.
    assert!(frang.on_request(ip(1), t0 + ms(2000)).is_ok());
    assert_eq!(
        frang.on_request(ip(1), t0 + ms(3999)).unwrap_err().limit,
        "request_rate"
    );
    // At 4.0 s the first slot has left the window.
    assert!(frang.on_request(ip(1), t0 + ms(4000)).is_ok());
}

#[test]
fn tcp_connection_rate_and_burst() {
    let (frang, t0) = frang(FrangGlobal {
        tcp_connection_rate: Some(8),
        tcp_connection_burst: Some(3),
        ..unlimited()
    });
    for i in 0..3 {
        assert!(frang.on_connect(ip(1), t0 + ms(i)).is_ok());
    }
    assert_eq!(
        frang.on_connect(ip(1), t0 + ms(5)).unwrap_err().limit,
        "tcp_connection_burst"
    );
    // 4 counted so far (refused attempts count); 4 more fit in the second.
    for i in 0..4 {
        assert!(frang.on_connect(ip(1), t0 + ms(200 + 200 * i)).is_ok());
    }
    let v = frang.on_connect(ip(1), t0 + ms(990)).unwrap_err();
    assert_eq!(v.limit, "tcp_connection_rate");
}

#[test]
fn concurrent_connections_count_down_on_close() {
    let (frang, t0) = frang(FrangGlobal {
        concurrent_tcp_connections: Some(2),
        ..unlimited()
    });
    assert!(frang.on_connect(ip(1), t0).is_ok());
    assert!(frang.on_connect(ip(1), t0).is_ok());
    let v = frang.on_connect(ip(1), t0).unwrap_err();
    assert_eq!(v.limit, "concurrent_tcp_connections");
    // The refused connection was not counted: one close makes room.
    frang.on_close(ip(1));
    assert!(frang.on_connect(ip(1), t0).is_ok());
    assert!(frang.on_connect(ip(1), t0).is_err());
    frang.on_close(ip(1));
    frang.on_close(ip(1));
    frang.on_close(ip(1)); // one too many: saturates, no panic
    assert!(frang.on_connect(ip(1), t0).is_ok());
    assert!(frang.on_connect(ip(1), t0).is_ok());
    assert!(frang.on_connect(ip(1), t0).is_err());
}

#[test]
fn tls_rate_counts_full_handshakes_only() {
    let (frang, t0) = frang(FrangGlobal {
        tls_connection_rate: Some(4),
        tls_connection_burst: Some(2),
        ..unlimited()
    });
    assert!(frang.on_tls_handshake(ip(1), false, t0).is_ok());
    assert!(frang.on_tls_handshake(ip(1), false, t0).is_ok());
    for _ in 0..100 {
        assert!(frang.on_tls_handshake(ip(1), true, t0).is_ok());
    }
    assert_eq!(
        frang.on_tls_handshake(ip(1), false, t0).unwrap_err().limit,
        "tls_connection_burst"
    );
    assert!(frang.on_tls_handshake(ip(1), false, t0 + ms(300)).is_ok());
    assert_eq!(
        frang
            .on_tls_handshake(ip(1), false, t0 + ms(600))
            .unwrap_err()
            .limit,
        "tls_connection_rate"
    );
}

#[test]
fn tls_incomplete_rate() {
    let (frang, t0) = frang(FrangGlobal {
        tls_incomplete_connection_rate: Some(3),
        ..unlimited()
    });
    for i in 0..3 {
        assert!(frang.on_tls_incomplete(ip(1), t0 + ms(i * 100)).is_ok());
    }
    // Completed handshakes do not count as incomplete.
    assert!(frang.on_tls_handshake(ip(1), false, t0 + ms(400)).is_ok());
    let v = frang.on_tls_incomplete(ip(1), t0 + ms(500)).unwrap_err();
    assert_eq!(v.limit, "tls_incomplete_connection_rate");
    assert!(frang.on_tls_incomplete(ip(1), t0 + ms(1500)).is_ok());
}

#[test]
fn resp_code_block_uses_its_time_frame() {
    let (frang, t0) = frang(unlimited());
    let rule = RespCodeBlock {
        codes: vec![403, 404],
        limit: 3,
        timeframe: Duration::from_secs(8),
    };
    for i in 0..3 {
        assert!(frang
            .on_response(ip(1), 404, Some(&rule), t0 + Duration::from_secs(i))
            .is_ok());
    }
    // Other codes, or no rule, are not counted.
    assert!(frang.on_response(ip(1), 200, Some(&rule), t0).is_ok());
    assert!(frang.on_response(ip(1), 404, None, t0).is_ok());
    let v = frang
        .on_response(ip(1), 403, Some(&rule), t0 + Duration::from_secs(7))
        .unwrap_err();
    assert_eq!(v.limit, "http_resp_code_block");
    // The 8 s window (1 s slots) has let the first ones go by t=10 s.
    assert!(frang.on_response(ip(2), 404, Some(&rule), t0).is_ok());
    assert!(frang
        .on_response(ip(1), 404, Some(&rule), t0 + Duration::from_secs(10))
        .is_ok());
}

#[test]
fn ip_block_for_seconds_then_unblocked() {
    let (frang, t0) = frang(FrangGlobal {
        request_rate: Some(1),
        ip_block: IpBlock::For(Duration::from_secs(10)),
        ..unlimited()
    });
    assert!(frang.on_request(ip(1), t0).is_ok());
    assert_eq!(
        frang.on_request(ip(1), t0).unwrap_err().limit,
        "request_rate"
    );
    assert!(frang.is_blocked(ip(1), t0 + Duration::from_secs(9)));
    assert!(!frang.is_blocked(ip(2), t0));
    let v = frang
        .on_connect(ip(1), t0 + Duration::from_secs(9))
        .unwrap_err();
    assert_eq!((v.limit, v.status), ("ip_block", 403));
    assert!(!frang.is_blocked(ip(1), t0 + Duration::from_secs(10)));
    assert!(frang
        .on_connect(ip(1), t0 + Duration::from_secs(10))
        .is_ok());
}

#[test]
fn ip_block_forever_and_off() {
    let global = FrangGlobal {
        concurrent_tcp_connections: Some(1),
        ip_block: IpBlock::Forever,
        ..FrangGlobal::default()
    };
    let (forever, t0) = frang(global.clone());
    assert!(forever.on_connect(ip(1), t0).is_ok());
    assert!(forever.on_connect(ip(1), t0).is_err());
    forever.on_close(ip(1));
    assert!(forever.is_blocked(ip(1), t0 + Duration::from_secs(1_000_000)));

    let (off, t0) = frang(FrangGlobal {
        ip_block: IpBlock::Off,
        ..global
    });
    assert!(off.on_connect(ip(1), t0).is_ok());
    assert!(off.on_connect(ip(1), t0).is_err());
    assert!(!off.is_blocked(ip(1), t0));
    off.on_violation(ip(1), t0);
    assert!(!off.is_blocked(ip(1), t0));
}

#[test]
fn on_violation_blocks_for_request_level_checks() {
    let (frang, t0) = frang(FrangGlobal {
        ip_block: IpBlock::For(Duration::from_secs(5)),
        ..unlimited()
    });
    let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    frang.on_violation(v6, t0);
    assert!(frang.is_blocked(v6, t0 + Duration::from_secs(4)));
    assert_eq!(frang.on_request(v6, t0).unwrap_err().limit, "ip_block");
    assert!(!frang.is_blocked(v6, t0 + Duration::from_secs(5)));
}

#[test]
fn table_stays_bounded_and_recent_client_keeps_limits() {
    let epoch = Instant::now();
    let frang = Frang::with_epoch(
        &FrangGlobal {
            request_rate: Some(60),
            ..unlimited()
        },
        1000,
        epoch,
    );
    let recent = ip(u32::MAX);
    for n in 0..5000 {
        assert!(frang.on_request(ip(n), epoch).is_ok());
        // Recency is per shard (about 1000/64 entries each): a client seen
        // within the last ~hundred new addresses is still remembered.
        if n % 100 == 0 {
            assert!(frang.on_request(recent, epoch).is_ok(), "at {n}");
        }
        assert!(frang.tracked_clients() <= 1000);
    }
    assert_eq!(frang.tracked_clients(), 1000);
    // 50 requests counted for `recent`: ten more fit its rate, then no more.
    for _ in 0..10 {
        assert!(frang.on_request(recent, epoch).is_ok());
    }
    assert_eq!(
        frang.on_request(recent, epoch).unwrap_err().limit,
        "request_rate"
    );
    // The first addresses were forgotten: they start from zero again.
    for _ in 0..60 {
        assert!(frang.on_request(ip(0), epoch).is_ok());
    }
}

#[test]
fn tiny_table_refuses_rather_than_forgets() {
    let epoch = Instant::now();
    let frang = Frang::with_epoch(&FrangGlobal::default(), 0, epoch);
    // One entry: while its client is connected, other addresses are refused.
    assert!(frang.on_connect(ip(0), epoch).is_ok());
    assert_eq!(
        frang.on_connect(ip(1), epoch).unwrap_err().limit,
        "client_lru_size"
    );
    frang.on_close(ip(0));
    for n in 1..10 {
        assert!(frang.on_connect(ip(n), epoch).is_ok());
        frang.on_close(ip(n));
    }
    assert_eq!(frang.tracked_clients(), 1);
}

#[test]
fn shared_between_threads() {
    let epoch = Instant::now();
    let frang = std::sync::Arc::new(Frang::with_epoch(
        &FrangGlobal {
            request_rate: Some(400),
            ..unlimited()
        },
        100,
        epoch,
    ));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let frang = frang.clone();
            std::thread::spawn(move || {
                (0..200)
                    .filter(|_| frang.on_request(ip(7), epoch).is_ok())
                    .count()
            })
        })
        .collect();
    let allowed: usize = handles.into_iter().map(|h| h.join().unwrap_or(0)).sum();
    // Exactly the rate passes, however the threads interleave.
    assert_eq!(allowed, 400);
}

/// Security issue, suspected item: many new addresses must not flush a blocked client from
/// the table (its block would be forgotten), even a table of one entry per shard.
#[test]
fn blocked_clients_survive_table_pressure() {
    let epoch = Instant::now();
    let frang = Frang::with_epoch(
        &FrangGlobal {
            request_rate: Some(1),
            concurrent_tcp_connections: Some(1),
            ip_block: IpBlock::For(Duration::from_secs(60)),
            ..unlimited()
        },
        64,
        epoch,
    );
    let attacker = ip(u32::MAX);
    assert!(frang.on_request(attacker, epoch).is_ok());
    assert!(frang.on_request(attacker, epoch).is_err());
    assert!(frang.is_blocked(attacker, epoch));
    for n in 0..10_000 {
        let _ = frang.on_request(ip(n), epoch);
    }
    assert!(frang.tracked_clients() <= 64);
    assert!(frang.is_blocked(attacker, epoch));
}

/// With a larger table, connected clients are kept too while unconnected ones can go.
#[test]
fn connected_clients_outlive_passers_by() {
    let epoch = Instant::now();
    let frang = Frang::with_epoch(
        &FrangGlobal {
            concurrent_tcp_connections: Some(1),
            ..unlimited()
        },
        640,
        epoch,
    );
    let connected = ip(u32::MAX - 1);
    assert!(frang.on_connect(connected, epoch).is_ok());
    for n in 0..20_000 {
        let _ = frang.on_request(ip(n), epoch);
    }
    assert_eq!(
        frang.on_connect(connected, epoch).unwrap_err().limit,
        "concurrent_tcp_connections"
    );
}

#[test]
fn client_mem_sums_an_address_across_its_connections() {
    let t0 = Instant::now();
    let frang = Frang::new(&unlimited(), 1000).with_client_mem(Some(1000));
    let plain = Frang::new(&unlimited(), 1000);
    assert!(frang.accounts_memory());
    // Two connections of one address: 600 + 300 is under 1000.
    assert!(frang.on_memory(ip(1), 0, 600, t0).is_ok());
    assert!(frang.on_memory(ip(1), 0, 300, t0).is_ok());
    // Another address has its own total.
    assert!(frang.on_memory(ip(2), 0, 900, t0).is_ok());
    // The first connection grows to 800: 1100 > 1000.
    let v = frang.on_memory(ip(1), 600, 800, t0).unwrap_err();
    assert_eq!(v.limit, "client_mem");
    // Every connection of the address is told on its next pass, even one that did not grow.
    assert!(frang.on_memory(ip(1), 300, 300, t0).is_err());
    // Closing the large one brings the address back under.
    assert!(frang.on_memory(ip(1), 800, 0, t0).is_ok());
    assert!(frang.on_memory(ip(1), 300, 300, t0).is_ok());
    // Without client_mem nothing is counted.
    assert!(!plain.accounts_memory());
    assert!(plain.on_memory(ip(1), 0, u64::MAX, t0).is_ok());
}

/// The workers learn the addresses of new blocks from the recent list, without a lookup per
/// connection; one further behind than the list is told to look up every address.
#[test]
fn recent_blocks_name_the_addresses_blocked_since_a_count() {
    let global = FrangGlobal {
        ip_block: IpBlock::Forever,
        ..FrangGlobal::default()
    };
    // Room for every address in every shard: with 1000 clients in 64 shards of 15 or 16, a
    // shard that the hash (random per process) gives more of the 393 blocked (pinned)
    // addresses refuses the rest, and the count came out 392 (1 run of 200 here; the estimate is a few in 100).
    let t0 = Instant::now();
    let frang = Frang::with_epoch(&global, 64 * 400, t0);
    assert_eq!(frang.blocked_since(0), (0, Some(Vec::new())));
    for n in 1..=3 {
        frang.on_violation(ip(n), t0);
    }
    assert_eq!(frang.blocked_since(0), (3, Some(vec![ip(1), ip(2), ip(3)])));
    assert_eq!(frang.blocked_since(2), (3, Some(vec![ip(3)])));
    for n in 10..400 {
        frang.on_violation(ip(n), t0);
    }
    let (count, _) = frang.blocked_since(3);
    assert_eq!(count, 393);
    assert_eq!(
        frang.blocked_since(3).1,
        None,
        "older than the list: look every address up"
    );
    assert_eq!(frang.blocked_since(392), (393, Some(vec![ip(399)])));
}

/// One worker wakes the others per block count, and a reload's new frang starts again: its
/// first block wakes them although the old one had counted further (before, the highest
/// count woken for was kept beside the workers and outlived the reload).
#[test]
fn each_block_count_wakes_the_workers_once_per_frang() {
    let (old, _) = frang(unlimited());
    assert!(old.first_to_see(1));
    assert!(
        !old.first_to_see(1),
        "a second worker seeing count 1 does not wake again"
    );
    assert!(old.first_to_see(3));
    assert!(!old.first_to_see(2));
    let (reloaded, _) = frang(unlimited());
    assert!(reloaded.first_to_see(1));
}
