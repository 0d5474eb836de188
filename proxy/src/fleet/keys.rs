//! One sync turn as Redis commands, and its replies turned back into fleet totals and
//! blocks: no I/O here (link.rs sends the commands).

use std::net::IpAddr;
use std::time::Duration;

use super::resp::{Budget, Reply};
use crate::fingerprint::{Counter, FingerprintDelta, Kind};
use crate::frang::{FleetDelta, FleetSlots, FleetTotal, OutgoingBlock, FRANG_FREQ};

/// The stream of blocks.
pub const BLOCKS: &str = "ktls:blocks";
/// Entries the stream keeps (about: `MAXLEN ~`): the blocks a node starting up learns.
pub const BLOCKS_KEPT: usize = 10_000;
/// Entries read from the stream per `XREAD` (a turn reads again until caught up): about
/// 30 KB of reply, as small as a pipeline of counts, so that the pipeline deadline judges
/// Redis's progress and not the length of the stream.
pub const BLOCKS_PER_READ: usize = 250;
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
    /// The slots of fingerprint delta `index`, the frame ending with slot `last`.
    FingerprintTotals { index: usize, last: u64 },
    /// New entries of the block stream.
    Blocks,
    /// `XINFO STREAM`: how many entries the stream ever had, and has.
    StreamInfo,
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
    /// Per fingerprint delta, in order: the fleet's counts.
    pub fingerprint_totals: Vec<Option<FleetTotal>>,
    /// Blocks other nodes published since `last_id`.
    pub blocks: Vec<RemoteBlock>,
    /// The stream position read up to.
    pub last_id: Option<String>,
    /// Entries read, this node's own included.
    pub entries_read: usize,
    /// The stream's counts before the read; `None` while it does not exist, or from a
    /// Redis older than 7.0 (no `entries-added`).
    pub stream: Option<StreamInfo>,
}

/// Entries a stream (blocks, sticky) ever had and has: their difference is what trimming
/// removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamInfo {
    pub added: u64,
    pub length: u64,
}

fn counter(requests: bool, ip: IpAddr, q: u64) -> String {
    let kind = if requests { 'r' } else { 'c' };
    format!("ktls:{kind}:{{{ip}}}:{q}")
}

fn fingerprint_counter(kind: Kind, counter: Counter, hash: u64, q: u64) -> String {
    format!(
        "ktls:{}:{}:{{{hash:016x}}}:{q}",
        kind.name(),
        counter.letter()
    )
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

    /// Adds each fingerprint delta's events to the key of their own slot (of `slot`) and
    /// reads the frame back, as [`Turn::counts`] does for clients.
    pub fn fingerprint_counts(
        &mut self,
        deltas: &[FingerprintDelta],
        slot: Duration,
        unix: Duration,
    ) {
        let ttl = millis(slot * 2 * FRANG_FREQ as u32).to_string();
        let last = u64::try_from(unix.as_nanos() / slot.as_nanos().max(1)).unwrap_or(0);
        for (index, d) in deltas.iter().enumerate() {
            for (q, n) in &d.slots {
                let key = fingerprint_counter(d.kind, d.counter, d.hash, *q);
                self.push(Expect::Done, &["SET", &key, "0", "NX", "PX", &ttl]);
                self.push(Expect::Done, &["INCRBY", &key, &n.to_string()]);
            }
            let mut mget = vec!["MGET".to_owned()];
            let first = last.saturating_sub(FRANG_FREQ - 1);
            mget.extend((first..=last).map(|q| fingerprint_counter(d.kind, d.counter, d.hash, q)));
            self.commands.push(mget);
            self.expect.push(Expect::FingerprintTotals { index, last });
        }
    }

    /// The commands [`Turn::fingerprint_counts`] makes of `delta`.
    pub fn fingerprint_commands_of(delta: &FingerprintDelta) -> usize {
        2 * delta.slots.len() + 1
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
                Expect::Totals { .. } | Expect::FingerprintTotals { .. } => {
                    (1 + freq, 16 + freq * 32)
                }
                Expect::Blocks => (4 + BLOCKS_PER_READ * 9, 64 + BLOCKS_PER_READ * ENTRY_BYTES),
                // Twelve fields and the first and last entries.
                Expect::StreamInfo => (64, 2 * ENTRY_BYTES + 1024),
            };
            items = items.saturating_add(i);
            bytes = bytes.saturating_add(b);
        }
        Budget { items, bytes }
    }

    /// Reads the blocks published after stream position `last_id`, and the stream's counts
    /// just before (to tell entries trimmed before this node read them).
    pub fn read_blocks(&mut self, last_id: &str) {
        self.push(Expect::StreamInfo, &["XINFO", "STREAM", BLOCKS]);
        let count = BLOCKS_PER_READ.to_string();
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
            match (reply, expect) {
                // No stream yet: no block was ever published.
                (Reply::Error(e), Expect::StreamInfo) if e.contains("no such key") => continue,
                (Reply::Error(e), _) => return Err(format!("Redis answered {e}")),
                _ => {}
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
                Expect::FingerprintTotals { index, last } => {
                    let total = totals(reply, last)?;
                    if out.fingerprint_totals.len() <= index {
                        out.fingerprint_totals.resize(index + 1, None);
                    }
                    out.fingerprint_totals[index] = Some(total);
                }
                Expect::Blocks => stream_entries(reply, skip, &mut out)?,
                Expect::StreamInfo => out.stream = stream_info(reply)?,
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

/// XINFO STREAM's reply (RESP2: names and values in turn): `entries-added` and `length`.
pub(super) fn stream_info(reply: &Reply) -> Result<Option<StreamInfo>, String> {
    let Reply::Array(Some(items)) = reply else {
        return Err(format!("unexpected reply to XINFO: {}", reply.kind()));
    };
    let field = |name: &str| {
        let at = items
            .iter()
            .step_by(2)
            .position(|k| k.as_text() == Some(name))?;
        items.get(at * 2 + 1)?.as_int()
    };
    let count = |n: i64| u64::try_from(n).ok();
    Ok(match (field("entries-added"), field("length")) {
        (Some(added), Some(length)) => count(added)
            .zip(count(length))
            .map(|(added, length)| StreamInfo { added, length }),
        _ => None,
    })
}

/// XREAD's reply: `[[stream, [[id, [field, value, ...]], ...]]]` with at most
/// `BLOCKS_PER_READ` entries, or null when nothing new.
fn stream_entries(reply: &Reply, skip: Option<&str>, out: &mut Outcome) -> Result<(), String> {
    let streams = match reply {
        Reply::Array(None) => return Ok(()),
        Reply::Array(Some(streams)) if streams.len() == 1 => streams,
        other => return Err(format!("unexpected reply to XREAD: {}", other.kind())),
    };
    for stream in streams {
        let entries = match stream.items() {
            [_, entries @ Reply::Array(Some(e))] if e.len() <= BLOCKS_PER_READ => entries,
            _ => return Err("unexpected stream in XREAD's reply".to_owned()),
        };
        for entry in entries.items() {
            let [id, fields] = entry.items() else {
                continue;
            };
            out.entries_read += 1;
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
#[path = "keys_tests.rs"]
mod tests;
