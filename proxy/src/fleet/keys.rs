//! One sync turn as Redis commands, and its replies turned back into fleet totals and
//! blocks: no I/O here (link.rs sends the commands).

use std::net::IpAddr;
use std::time::Duration;

use super::resp::Reply;
use crate::frang::{FleetDelta, FleetSlots, FleetTotal, FRANG_FREQ};

/// The stream of blocks.
pub const BLOCKS: &str = "ktls:blocks";
/// Entries the stream keeps (about: `MAXLEN ~`): the blocks a node starting up learns.
pub const BLOCKS_KEPT: usize = 10_000;
/// Entries read from the stream per turn.
const BLOCKS_PER_TURN: usize = 1000;

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
    /// The counter slots of delta `index`, requests or connections.
    Totals { index: usize, requests: bool },
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
    /// Per delta, in order: (requests, connections) totals.
    pub totals: Vec<(FleetTotal, FleetTotal)>,
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

    /// Adds each delta to its slot and reads the frame back, for every counter with a limit.
    /// `unix` is the time since the Unix epoch: all nodes number the slots alike.
    pub fn counts(&mut self, deltas: &[FleetDelta], slots: FleetSlots, unix: Duration) {
        for (index, d) in deltas.iter().enumerate() {
            let kinds = [
                (true, slots.requests, d.requests),
                (false, slots.connections, d.connections),
            ];
            for (requests, slot, added) in kinds {
                let Some(slot) = slot else {
                    continue;
                };
                let q = u64::try_from(unix.as_nanos() / slot.as_nanos().max(1)).unwrap_or(0);
                let key = counter(requests, d.ip, q);
                if added > 0 {
                    let ttl = millis(slot * 2 * FRANG_FREQ as u32).to_string();
                    self.push(Expect::Done, &["INCRBY", &key, &added.to_string()]);
                    self.push(Expect::Done, &["PEXPIRE", &key, &ttl]);
                }
                let mut mget = vec!["MGET".to_owned()];
                let first = q.saturating_sub(FRANG_FREQ - 1);
                mget.extend((first..=q).map(|q| counter(requests, d.ip, q)));
                self.commands.push(mget);
                self.expect.push(Expect::Totals { index, requests });
            }
        }
    }

    /// Publishes the blocks imposed here: `(address, length)` with `None` forever.
    pub fn publish(&mut self, blocks: &[(IpAddr, Option<Duration>)], unix: Duration, node: &str) {
        for (ip, length) in blocks {
            let ip = ip.to_string();
            let until = length.map_or(0, |l| millis(unix + l)).to_string();
            let kept = BLOCKS_KEPT.to_string();
            self.push(
                Expect::Done,
                &[
                    "XADD", BLOCKS, "MAXLEN", "~", &kept, "*", "ip", &ip, "until", &until, "node",
                    node,
                ],
            );
            let key = format!("ktls:block:{{{ip}}}");
            match length {
                Some(l) => {
                    let ms = millis(*l).max(1).to_string();
                    self.push(Expect::Done, &["SET", &key, node, "PX", &ms]);
                }
                None => self.push(Expect::Done, &["SET", &key, node]),
            }
        }
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
    /// then treated as away); `node` is ours, whose blocks are not applied twice.
    pub fn outcome(&self, replies: &[Reply], deltas: usize, node: &str) -> Result<Outcome, String> {
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
                Expect::Done => {}
                Expect::Totals { index, requests } => {
                    let total = totals(reply);
                    if let Some((r, c)) = out.totals.get_mut(index) {
                        *(if requests { r } else { c }) = total;
                    }
                }
                Expect::Blocks => stream_entries(reply, node, &mut out),
            }
        }
        Ok(out)
    }
}

/// An MGET of the frame's slots, oldest first: the sum and the last (current) slot.
fn totals(reply: &Reply) -> FleetTotal {
    let counts: Vec<u32> = reply
        .items()
        .iter()
        .map(|r| r.as_int().and_then(|n| u32::try_from(n).ok()).unwrap_or(0))
        .collect();
    FleetTotal {
        frame: counts.iter().fold(0u32, |s, n| s.saturating_add(*n)),
        slot: counts.last().copied().unwrap_or(0),
    }
}

/// XREAD's reply: `[[stream, [[id, [field, value, ...]], ...]]]`, or null when nothing new.
fn stream_entries(reply: &Reply, node: &str, out: &mut Outcome) {
    for stream in reply.items() {
        let Some(entries) = stream.items().get(1) else {
            continue;
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
            if field("node") == Some(node) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Reply {
        Reply::Bulk(Some(s.as_bytes().to_vec()))
    }

    #[test]
    fn a_turn_adds_the_deltas_and_sums_the_frame_it_reads_back() {
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let deltas = [FleetDelta {
            ip,
            requests: 3,
            connections: 0,
        }];
        let slots = FleetSlots {
            requests: Some(Duration::from_millis(125)),
            connections: None,
        };
        let mut turn = Turn::default();
        turn.counts(&deltas, slots, Duration::from_millis(1000));
        assert_eq!(turn.commands[0], ["INCRBY", "ktls:r:{10.0.0.1}:8", "3"]);
        assert_eq!(turn.commands[1], ["PEXPIRE", "ktls:r:{10.0.0.1}:8", "2000"]);
        assert_eq!(turn.commands[2].len(), 1 + FRANG_FREQ as usize);
        assert_eq!(turn.commands[2][1], "ktls:r:{10.0.0.1}:1");
        let mget = Reply::Array(Some(vec![bulk("4"), Reply::Bulk(None), bulk("5")]));
        let replies = [Reply::Int(5), Reply::Int(1), mget];
        let out = turn.outcome(&replies, 1, "me").unwrap();
        assert_eq!(out.totals[0].0, FleetTotal { frame: 9, slot: 5 });
        assert!(turn.outcome(&replies[..2], 1, "me").is_err());
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
        let out = turn.outcome(&[reply], 0, "me").unwrap();
        assert_eq!(
            out.blocks,
            [RemoteBlock {
                ip: "10.0.0.2".parse().unwrap(),
                until_ms: None
            }]
        );
        assert_eq!(out.last_id.as_deref(), Some("2-0"));
        let none = turn.outcome(&[Reply::Array(None)], 0, "me").unwrap();
        assert!(none.blocks.is_empty() && none.last_id.is_none());
    }
}
