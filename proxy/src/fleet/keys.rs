//! One sync turn as Redis commands, and its replies turned back into fleet totals and
//! blocks: no I/O here (link.rs sends the commands).

use std::net::IpAddr;
use std::time::Duration;

use super::resp::{Budget, Reply};
use crate::frang::{FleetDelta, FleetSlots, FleetTotal, OutgoingBlock, FRANG_FREQ};

/// The stream of blocks.
pub const BLOCKS: &str = "ktls:blocks";
/// Entries the stream keeps (about: `MAXLEN ~`): the blocks a node starting up learns.
pub const BLOCKS_KEPT: usize = 10_000;
/// Entries read from the stream per turn.
const BLOCKS_PER_TURN: usize = 1000;
/// Expiry of the operators' key of a block for ever (`ip_block on`): the stream entry is
/// what nodes read; the key only shows the block, and must not stay for ever.
const FOREVER_KEY_TTL: Duration = Duration::from_secs(24 * 3600);
/// Bytes a stream entry may take in XREAD's reply (id, three fields: about 120 bytes).
const ENTRY_BYTES: usize = 512;

/// A block as the stream carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteBlock {
    pub ip: IpAddr,
    /// Unix milliseconds; `None`: forever.
    pub until_ms: Option<u64>,
}

/// What one reply of a turn answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// A write: only an error matters.
    Done,
    /// XADD: the new entry's id, a bulk string.
    EntryId,
    /// The counter slots of delta `index`, requests or connections, the frame ending with
    /// slot `last`.
    Totals {
        index: usize,
        requests: bool,
        last: u64,
    },
    /// New entries of the block stream.
    Blocks,
}

/// The commands of one turn and what their replies mean.
#[derive(Debug, Default)]
pub struct Turn {
    pub commands: Vec<Vec<String>>,
    expect: Vec<Expect>,
}

/// What a turn's replies said.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Per delta, in order: (requests, connections) counts, `None` where not read.
    pub totals: Vec<(Option<FleetTotal>, Option<FleetTotal>)>,
    /// Blocks other nodes published since `last_id`.
    pub blocks: Vec<RemoteBlock>,
    /// The stream position read up to.
    pub last_id: Option<String>,
}

fn counter(requests: bool, ip: IpAddr, q: u64) -> String {
    let kind = if requests { 'r' } else { 'c' };
    format!("ktls:{kind}:{{{ip}}}:{q}")
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Turn {
    fn push(&mut self, expect: Expect, args: &[&str]) {
        self.commands
            .push(args.iter().map(|a| (*a).to_owned()).collect());
        self.expect.push(expect);
    }

    /// Adds each delta's events to the key of their own slot and reads the frame back, for
    /// every counter with a limit and something new. `unix` is the time since the Unix
    /// epoch: all nodes number the slots alike.
    pub fn counts(&mut self, deltas: &[FleetDelta], slots: FleetSlots, unix: Duration) {
        for (index, d) in deltas.iter().enumerate() {
            let kinds = [
                (true, slots.requests, &d.requests),
                (false, slots.connections, &d.connections),
            ];
            for (requests, slot, added) in kinds {
                let Some(slot) = slot.filter(|_| !added.is_empty()) else {
                    continue;
                };
                let ttl = millis(slot * 2 * FRANG_FREQ as u32).to_string();
                for (q, n) in added {
                    let key = counter(requests, d.ip, *q);
                    // Made with its expiry before it is added to: whatever part of the
                    // pipeline Redis runs, no counter key is left without one.
                    self.push(Expect::Done, &["SET", &key, "0", "NX", "PX", &ttl]);
                    self.push(Expect::Done, &["INCRBY", &key, &n.to_string()]);
                }
                let last = u64::try_from(unix.as_nanos() / slot.as_nanos().max(1)).unwrap_or(0);
                let mut mget = vec!["MGET".to_owned()];
                let first = last.saturating_sub(FRANG_FREQ - 1);
                mget.extend((first..=last).map(|q| counter(requests, d.ip, q)));
                self.commands.push(mget);
                self.expect.push(Expect::Totals {
                    index,
                    requests,
                    last,
                });
            }
        }
    }

    /// The commands [`Turn::counts`] makes of `delta`: per counter with a limit and new
    /// events, two per slot and the frame's `MGET`.
    pub fn commands_of(delta: &FleetDelta, slots: FleetSlots) -> usize {
        [
            (slots.requests, &delta.requests),
            (slots.connections, &delta.connections),
        ]
        .iter()
        .filter(|(slot, added)| slot.is_some() && !added.is_empty())
        .map(|(_, added)| 2 * added.len() + 1)
        .sum()
    }

    /// Publishes the blocks imposed here; each ends a length after it was imposed, however
    /// late it is published.
    pub fn publish(&mut self, blocks: &[OutgoingBlock], unix: Duration, node: &str) {
        for block in blocks {
            let (ip, length) = (block.ip.to_string(), &block.length);
            let until_ms = length.map(|l| millis(block.imposed.saturating_add(l)));
            let until = until_ms.unwrap_or(0).to_string();
            let kept = BLOCKS_KEPT.to_string();
            self.push(
                Expect::EntryId,
                &[
                    "XADD", BLOCKS, "MAXLEN", "~", &kept, "*", "ip", &ip, "until", &until, "node",
                    node,
                ],
            );
            let key = format!("ktls:block:{{{ip}}}");
            let ms = match until_ms {
                Some(until) => until.saturating_sub(millis(unix)).max(1),
                None => millis(FOREVER_KEY_TTL),
            };
            self.push(Expect::Done, &["SET", &key, node, "PX", &ms.to_string()]);
        }
    }

    /// What the replies of this turn may take at most: a server answering more is not the
    /// Redis expected, and the turn fails rather than hold more.
    pub fn budget(&self) -> Budget {
        let freq = usize::try_from(FRANG_FREQ).unwrap_or(8);
        let (mut items, mut bytes) = (0usize, 0usize);
        for expect in &self.expect {
            let (i, b) = match expect {
                Expect::Done | Expect::EntryId => (1, 64),
                Expect::Totals { .. } => (1 + freq, 16 + freq * 32),
                Expect::Blocks => (4 + BLOCKS_PER_TURN * 9, 64 + BLOCKS_PER_TURN * ENTRY_BYTES),
            };
            items = items.saturating_add(i);
            bytes = bytes.saturating_add(b);
        }
        Budget { items, bytes }
    }

    /// Reads the blocks published after stream position `last_id`.
    pub fn read_blocks(&mut self, last_id: &str) {
        let count = BLOCKS_PER_TURN.to_string();
        self.push(
            Expect::Blocks,
            &["XREAD", "COUNT", &count, "STREAMS", BLOCKS, last_id],
        );
    }

    /// The replies, in the order of the commands. An error reply fails the turn (Redis is
    /// then treated as away); the blocks of node `skip` (ours, already in our table) are not
    /// applied twice. `None` after a reload, whose new table has none of ours either.
    pub fn outcome(
        &self,
        replies: &[Reply],
        deltas: usize,
        skip: Option<&str>,
    ) -> Result<Outcome, String> {
        if replies.len() != self.expect.len() {
            return Err(format!(
                "{} replies to {} commands",
                replies.len(),
                self.expect.len()
            ));
        }
        let mut out = Outcome {
            totals: vec![Default::default(); deltas],
            ..Outcome::default()
        };
        for (reply, expect) in replies.iter().zip(&self.expect) {
            if let Reply::Error(e) = reply {
                return Err(format!("Redis answered {e}"));
            }
            match *expect {
                Expect::Done => match reply {
                    Reply::Status(_) | Reply::Int(_) | Reply::Bulk(None) => {}
                    other => return Err(format!("unexpected reply to a write: {}", other.kind())),
                },
                Expect::EntryId => match reply {
                    Reply::Bulk(Some(_)) => {}
                    other => return Err(format!("unexpected reply to a write: {}", other.kind())),
                },
                Expect::Totals {
                    index,
                    requests,
                    last,
                } => {
                    let total = totals(reply, last)?;
                    if let Some((r, c)) = out.totals.get_mut(index) {
                        *(if requests { r } else { c }) = Some(total);
                    }
                }
                Expect::Blocks => stream_entries(reply, skip, &mut out)?,
            }
        }
        Ok(out)
    }
}

/// An MGET of the frame's `FRANG_FREQ` slots ending with slot `last`, oldest first: each
/// a count or null.
fn totals(reply: &Reply, last: u64) -> Result<FleetTotal, String> {
    let items = match reply {
        Reply::Array(Some(items)) if items.len() as u64 == FRANG_FREQ => items,
        other => return Err(format!("unexpected reply to MGET: {}", other.kind())),
    };
    let first = last.saturating_sub(FRANG_FREQ - 1);
    let mut slots = Vec::new();
    for (q, item) in (first..).zip(items) {
        let count = match item {
            Reply::Bulk(None) => 0,
            r => r
                .as_int()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| format!("not a count in MGET's reply: {}", r.kind()))?,
        };
        if count > 0 {
            slots.push((q, count));
        }
    }
    Ok(FleetTotal { slots })
}

/// XREAD's reply: `[[stream, [[id, [field, value, ...]], ...]]]` with at most
/// `BLOCKS_PER_TURN` entries, or null when nothing new.
fn stream_entries(reply: &Reply, skip: Option<&str>, out: &mut Outcome) -> Result<(), String> {
    let streams = match reply {
        Reply::Array(None) => return Ok(()),
        Reply::Array(Some(streams)) if streams.len() == 1 => streams,
        other => return Err(format!("unexpected reply to XREAD: {}", other.kind())),
    };
    for stream in streams {
        let entries = match stream.items() {
            [_, entries @ Reply::Array(Some(e))] if e.len() <= BLOCKS_PER_TURN => entries,
            _ => return Err("unexpected stream in XREAD's reply".to_owned()),
        };
        for entry in entries.items() {
            let [id, fields] = entry.items() else {
                continue;
            };
            if let Some(id) = id.as_text() {
                out.last_id = Some(id.to_owned());
            }
            let field = |name: &str| {
                let f = fields.items();
                let at = f
                    .iter()
                    .step_by(2)
                    .position(|k| k.as_text() == Some(name))?;
                f.get(at * 2 + 1)?.as_text()
            };
            if skip.is_some() && field("node") == skip {
                continue;
            }
            let ip = field("ip").and_then(|t| t.parse().ok());
            let until = field("until").and_then(|t| t.parse::<u64>().ok());
            if let (Some(ip), Some(until)) = (ip, until) {
                let until_ms = (until != 0).then_some(until);
                out.blocks.push(RemoteBlock { ip, until_ms });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn replies_of_the_wrong_shape_fail_the_turn() {
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
        let ok = Reply::Status("OK".into());
        let eight = Reply::Array(Some(vec![Reply::Bulk(None); 8]));
        let good = [ok.clone(), Reply::Int(1), eight.clone(), Reply::Array(None)];
        assert!(turn.outcome(&good, 1, Some("me")).is_ok());
        let seven = Reply::Array(Some(vec![Reply::Bulk(None); 7]));
        let stream = |entries: usize| {
            let entry = Reply::Array(Some(vec![bulk("1-0"), Reply::Array(Some(vec![]))]));
            Reply::Array(Some(vec![Reply::Array(Some(vec![
                bulk(BLOCKS),
                Reply::Array(Some(vec![entry; entries])),
            ]))]))
        };
        for bad in [
            [ok.clone(), Reply::Int(1), seven, Reply::Array(None)],
            [ok.clone(), Reply::Int(1), Reply::Int(3), Reply::Array(None)],
            [ok.clone(), Reply::Int(1), eight.clone(), Reply::Int(1)],
            [ok.clone(), bulk("x"), eight.clone(), Reply::Array(None)],
            [
                ok.clone(),
                Reply::Int(1),
                eight.clone(),
                stream(BLOCKS_PER_TURN + 1),
            ],
        ] {
            assert!(turn.outcome(&bad, 1, Some("me")).is_err(), "{bad:?}");
        }
        let fine = [ok, Reply::Int(1), eight, stream(BLOCKS_PER_TURN)];
        assert!(turn.outcome(&fine, 1, Some("me")).is_ok());
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
        let out = turn
            .outcome(std::slice::from_ref(&reply), 0, Some("me"))
            .unwrap();
        assert_eq!(
            out.blocks,
            [RemoteBlock {
                ip: "10.0.0.2".parse().unwrap(),
                until_ms: None
            }]
        );
        assert_eq!(out.last_id.as_deref(), Some("2-0"));
        let none = turn.outcome(&[Reply::Array(None)], 0, Some("me")).unwrap();
        assert!(none.blocks.is_empty() && none.last_id.is_none());
        // Replayed after a reload: our own blocks too (the new table has none).
        let replayed = turn.outcome(std::slice::from_ref(&reply), 0, None).unwrap();
        assert_eq!(replayed.blocks.len(), 2);
    }
}
