//! Tests of a turn's commands and of reading Redis's replies to them (keys.rs).

use super::*;

/// XINFO STREAM's reply as Redis 7 sends it (RESP2), first and last entries left out.
fn stream_info_reply(added: i64, length: i64) -> Reply {
    Reply::Array(Some(vec![
        bulk("length"),
        Reply::Int(length),
        bulk("radix-tree-keys"),
        Reply::Int(1),
        bulk("last-generated-id"),
        bulk("1-0"),
        bulk("entries-added"),
        Reply::Int(added),
        bulk("first-entry"),
        Reply::Array(None),
    ]))
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(Some(s.as_bytes().to_vec()))
}

#[test]
fn a_turn_adds_each_slot_s_events_to_its_key_and_reads_the_frame_back() {
    let ip: IpAddr = "10.0.0.1".parse().unwrap();
    let deltas = [FleetDelta {
        ip,
        requests: vec![(7, 1), (8, 2)],
        connections: vec![],
    }];
    let slots = FleetSlots {
        requests: Some(Duration::from_millis(125)),
        connections: Some(Duration::from_millis(125)),
    };
    let mut turn = Turn::default();
    turn.counts(&deltas, slots, Duration::from_millis(1000));
    let set = |q: u64| {
        let key = format!("ktls:r:{{10.0.0.1}}:{q}");
        ["SET", &key, "0", "NX", "PX", "2000"].map(str::to_owned)
    };
    assert_eq!(turn.commands[0], set(7));
    assert_eq!(turn.commands[1], ["INCRBY", "ktls:r:{10.0.0.1}:7", "1"]);
    assert_eq!(turn.commands[2], set(8));
    assert_eq!(turn.commands[3], ["INCRBY", "ktls:r:{10.0.0.1}:8", "2"]);
    // Nothing new of connections: no MGET of them.
    assert_eq!(turn.commands.len(), 5);
    assert_eq!(turn.commands[4].len(), 1 + FRANG_FREQ as usize);
    assert_eq!(turn.commands[4][1], "ktls:r:{10.0.0.1}:1");
    let mut counts = vec![Reply::Bulk(None); 6];
    counts.extend([bulk("4"), bulk("5")]);
    let mget = Reply::Array(Some(counts));
    let ok = Reply::Status("OK".into());
    let replies = [
        ok.clone(),
        Reply::Int(1),
        Reply::Bulk(None),
        Reply::Int(5),
        mget,
    ];
    let out = turn.outcome(&replies, 1, Some("me")).unwrap();
    let read = FleetTotal {
        slots: vec![(7, 4), (8, 5)],
    };
    assert_eq!(out.totals[0], (Some(read), None));
    assert!(turn.outcome(&replies[..2], 1, Some("me")).is_err());
}

/// The link fills a pipeline by this count: it must be what `counts` makes.
#[test]
fn commands_of_a_delta_are_those_counts_makes() {
    let slots = FleetSlots {
        requests: Some(Duration::from_millis(125)),
        connections: None,
    };
    let cases = [
        (vec![(5, 1)], vec![(5, 1)]),
        (vec![(5, 1), (6, 2)], vec![]),
        (vec![], vec![(5, 1)]),
    ];
    for (requests, connections) in cases {
        let delta = FleetDelta {
            ip: "127.0.0.1".parse().expect("ip"),
            requests,
            connections,
        };
        let mut turn = Turn::default();
        turn.counts(std::slice::from_ref(&delta), slots, Duration::from_secs(1));
        assert_eq!(Turn::commands_of(&delta, slots), turn.commands.len());
        let both = FleetSlots {
            connections: slots.requests,
            ..slots
        };
        let mut turn = Turn::default();
        turn.counts(std::slice::from_ref(&delta), both, Duration::from_secs(1));
        assert_eq!(Turn::commands_of(&delta, both), turn.commands.len());
    }
}

/// A turn of one client's requests (SET, INCRBY, MGET), then XINFO and XREAD.
fn one_client_turn() -> Turn {
    let deltas = [FleetDelta {
        ip: "10.0.0.1".parse().unwrap(),
        requests: vec![(8, 1)],
        connections: vec![],
    }];
    let slots = FleetSlots {
        requests: Some(Duration::from_millis(125)),
        connections: None,
    };
    let mut turn = Turn::default();
    turn.counts(&deltas, slots, Duration::from_millis(1000));
    turn.read_blocks("0");
    turn
}

/// XREAD's reply with `entries` empty entries.
fn stream(entries: usize) -> Reply {
    let entry = Reply::Array(Some(vec![bulk("1-0"), Reply::Array(Some(vec![]))]));
    Reply::Array(Some(vec![Reply::Array(Some(vec![
        bulk(BLOCKS),
        Reply::Array(Some(vec![entry; entries])),
    ]))]))
}

#[test]
fn replies_of_the_wrong_shape_fail_the_turn() {
    let turn = one_client_turn();
    let ok = Reply::Status("OK".into());
    let eight = Reply::Array(Some(vec![Reply::Bulk(None); 8]));
    let seven = Reply::Array(Some(vec![Reply::Bulk(None); 7]));
    let info = stream_info_reply(5, 5);
    let nothing = Reply::Array(None);
    for bad in [
        [
            ok.clone(),
            Reply::Int(1),
            seven,
            info.clone(),
            nothing.clone(),
        ],
        [
            ok.clone(),
            Reply::Int(1),
            Reply::Int(3),
            info.clone(),
            nothing.clone(),
        ],
        [
            ok.clone(),
            Reply::Int(1),
            eight.clone(),
            info.clone(),
            Reply::Int(1),
        ],
        [
            ok.clone(),
            bulk("x"),
            eight.clone(),
            info.clone(),
            nothing.clone(),
        ],
        [
            ok.clone(),
            Reply::Int(1),
            eight.clone(),
            Reply::Int(1),
            nothing.clone(),
        ],
        [
            ok.clone(),
            Reply::Int(1),
            eight.clone(),
            Reply::Error("ERR something else".into()),
            nothing.clone(),
        ],
        [ok, Reply::Int(1), eight, info, stream(BLOCKS_PER_READ + 1)],
    ] {
        assert!(turn.outcome(&bad, 1, Some("me")).is_err(), "{bad:?}");
    }
}

/// No stream yet is no error (no block was ever published); a full read is counted, with
/// the stream's counts.
#[test]
fn a_missing_stream_is_no_error_and_a_full_read_is_counted() {
    let turn = one_client_turn();
    let ok = Reply::Status("OK".into());
    let eight = Reply::Array(Some(vec![Reply::Bulk(None); 8]));
    let no_stream = Reply::Error("ERR no such key".into());
    let good = [
        ok.clone(),
        Reply::Int(1),
        eight.clone(),
        no_stream,
        Reply::Array(None),
    ];
    let out = turn.outcome(&good, 1, Some("me")).expect("no stream");
    assert_eq!((out.stream, out.entries_read), (None, 0));
    let info = stream_info_reply(5, 5);
    let fine = [ok, Reply::Int(1), eight, info, stream(BLOCKS_PER_READ)];
    let out = turn.outcome(&fine, 1, Some("me")).expect("fine");
    assert_eq!(out.entries_read, BLOCKS_PER_READ);
    assert_eq!(
        out.stream,
        Some(StreamInfo {
            added: 5,
            length: 5
        })
    );
}

#[test]
fn a_block_ends_a_length_after_it_was_imposed_and_every_block_key_expires() {
    let ip: IpAddr = "10.0.0.2".parse().unwrap();
    let blocks = [
        OutgoingBlock {
            ip,
            length: Some(Duration::from_secs(60)),
            imposed: Duration::from_secs(1000),
        },
        OutgoingBlock {
            ip,
            length: None,
            imposed: Duration::from_secs(1000),
        },
    ];
    let mut turn = Turn::default();
    // Published 20 s late (Redis was away): it still ends at 1060 s, 40 s from now.
    turn.publish(&blocks, Duration::from_secs(1020), "me");
    assert_eq!(turn.commands[0][9], "1060000");
    assert_eq!(
        turn.commands[1],
        ["SET", "ktls:block:{10.0.0.2}", "me", "PX", "40000"]
    );
    assert_eq!(turn.commands[2][9], "0");
    assert_eq!(turn.commands[3][3..], ["PX", "86400000"]);
}

/// Redis's own replies to a publishing turn (XADD answers with the entry's id, a bulk
/// string; SET with +OK) are a success. Before, the id failed the turn, so a node that
/// imposed a block marked Redis down for good and published the block again each retry
/// (found by review: with `on_redis_failure closed` every new client was then refused).
#[test]
fn the_replies_to_a_published_block_are_a_success() {
    let block = OutgoingBlock {
        ip: "10.0.0.3".parse().unwrap(),
        length: Some(Duration::from_secs(60)),
        imposed: Duration::from_secs(1000),
    };
    let mut turn = Turn::default();
    turn.publish(&[block], Duration::from_secs(1000), "me");
    assert_eq!(turn.commands[0][0], "XADD");
    let replies = [bulk("1764900000000-0"), Reply::Status("OK".into())];
    assert!(turn.outcome(&replies, 0, Some("me")).is_ok());
}

#[test]
fn blocks_of_other_nodes_are_read_from_the_stream() {
    let entry = |id: &str, ip: &str, until: &str, node: &str| {
        let fields = ["ip", ip, "until", until, "node", node].map(bulk).to_vec();
        Reply::Array(Some(vec![bulk(id), Reply::Array(Some(fields))]))
    };
    let entries = vec![
        entry("1-0", "10.0.0.2", "0", "other"),
        entry("2-0", "10.0.0.3", "99", "me"),
    ];
    let reply = Reply::Array(Some(vec![Reply::Array(Some(vec![
        bulk(BLOCKS),
        Reply::Array(Some(entries)),
    ]))]));
    let mut turn = Turn::default();
    turn.read_blocks("0");
    let info = stream_info_reply(12, 2);
    let out = turn
        .outcome(&[info.clone(), reply.clone()], 0, Some("me"))
        .unwrap();
    // Both entries read, this node's own too: the position counts every entry.
    assert_eq!(out.entries_read, 2);
    assert_eq!(
        out.stream,
        Some(StreamInfo {
            added: 12,
            length: 2
        })
    );
    assert_eq!(
        out.blocks,
        [RemoteBlock {
            ip: "10.0.0.2".parse().unwrap(),
            until_ms: None
        }]
    );
    assert_eq!(out.last_id.as_deref(), Some("2-0"));
    let none = turn
        .outcome(&[info.clone(), Reply::Array(None)], 0, Some("me"))
        .unwrap();
    assert!(none.blocks.is_empty() && none.last_id.is_none());
    // A Redis before 7.0 has no entries-added: no counts, the blocks still read.
    let old_redis = Reply::Array(Some(vec![bulk("length"), Reply::Int(2)]));
    let out = turn.outcome(&[old_redis, reply.clone()], 0, None).unwrap();
    assert_eq!(out.stream, None);
    // Replayed after a reload: our own blocks too (the new table has none).
    let replayed = turn.outcome(&[info, reply], 0, None).unwrap();
    assert_eq!(replayed.blocks.len(), 2);
}

#[test]
fn fingerprint_counts_go_to_their_own_keys_and_the_frame_is_read_back() {
    let deltas = [FingerprintDelta {
        kind: Kind::Http,
        hash: 0xabc,
        counter: Counter::Records,
        slots: vec![(8, 3)],
    }];
    let mut turn = Turn::default();
    turn.fingerprint_counts(
        &deltas,
        Duration::from_millis(125),
        Duration::from_millis(1000),
    );
    let key = "ktls:tfh:r:{0000000000000abc}:8";
    assert_eq!(
        turn.commands[0],
        ["SET", key, "0", "NX", "PX", "2000"].map(str::to_owned)
    );
    assert_eq!(turn.commands[1], ["INCRBY", key, "3"]);
    assert_eq!(
        turn.commands.len(),
        Turn::fingerprint_commands_of(&deltas[0])
    );
    assert_eq!(turn.commands[2].len(), 1 + FRANG_FREQ as usize);
    assert_eq!(turn.commands[2][FRANG_FREQ as usize], key);
    let mut counts = vec![Reply::Bulk(None); 7];
    counts.push(bulk("9"));
    let replies = [
        Reply::Status("OK".into()),
        Reply::Int(9),
        Reply::Array(Some(counts)),
    ];
    let out = turn
        .outcome(&replies, 0, None)
        .expect("replies of the right shape");
    let total = out.fingerprint_totals[0].clone().expect("the frame read");
    assert_eq!(total.slots.iter().map(|&(_, n)| n).sum::<u32>(), 9);
    // A reply of the wrong shape fails the turn.
    let bad = [Reply::Status("OK".into()), Reply::Int(9), Reply::Int(9)];
    assert!(turn.outcome(&bad, 0, None).is_err());
}
