//! The sticky part of a sync turn (docs/FLEET.md): the fleet's cookie key, agreed with
//! `SET NX` and read back, and written again every turn so a restarted Redis gets the same
//! one; the session pins and JS-challenge passes made here appended to one stream, and
//! those of every node read back from where this node stopped, in the stream's order (this
//! node's own included: the last pin of a session in the stream wins on every node).
//!
//! Keys: `ktls:sticky:key` (the key, no expiry), `ktls:sticky` (the stream, capped at
//! [`STREAM_KEPT`] entries: `k` `pin` or `pass`, `d` the cookie's SHA-256, `t` Unix ms,
//! `node`; a pin also `v` vhost, `g` group, `s` server address).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::keys::{stream_info, StreamInfo};
use super::position::StreamPosition;
use super::resp::{Budget, Reply};
use crate::runtime::Runtime;
use crate::sticky::fleet::{self as sf, PinWire, OUTBOX_MAX};
use crate::sticky::runtime::StickyRt;

pub const KEY: &str = "ktls:sticky:key";
pub const STREAM: &str = "ktls:sticky";
/// Entries the stream keeps (about: `MAXLEN ~`): what a node starting up learns.
pub const STREAM_KEPT: usize = 65_536;
/// Entries read per `XREAD`; a turn reads again until caught up or its interval is spent.
const PER_READ: usize = 250;
/// Entries published per pipeline.
const PER_PUBLISH: usize = 125;
/// Bytes an entry may take in XREAD's reply (names of a vhost and a group included).
const ENTRY_BYTES: usize = 1024;
/// Runtimes replaced by reloads and still held by connections, whose outboxes are taken
/// every turn; beyond, the oldest is taken a last time and let go.
const RETIRED_MAX: usize = 8;

/// One stream entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Pin(PinWire),
    Pass { digest: [u8; 32], at_ms: u64 },
}

/// Runs one pipeline (the link's connection, deadline and failure handling).
pub type Exchange<'a> = dyn FnMut(&[Vec<String>], Budget) -> Result<Vec<Reply>, ()> + 'a;

/// The sticky state of the side thread across turns.
pub struct StickySync {
    node: String,
    /// Position read up to in the stream ("0": from the oldest entry kept).
    last_id: String,
    /// Entries made here not yet published (Redis away, or more than a turn publishes).
    unpublished: VecDeque<Entry>,
    /// A key other than ours was found in Redis (logged once).
    conflict_logged: bool,
    /// Entries the outboxes had dropped at the last turn (crate::sticky::fleet::dropped).
    dropped: u64,
    /// Entries of the stream up to `last_id`, counted from its first ever.
    position: StreamPosition,
}

impl StickySync {
    pub fn new(node: &str) -> StickySync {
        StickySync {
            node: node.to_owned(),
            last_id: "0".to_owned(),
            unpublished: VecDeque::new(),
            conflict_logged: false,
            dropped: 0,
            position: StreamPosition::default(),
        }
    }

    /// A reload made new session tables: the stream is read again from its start.
    pub fn reloaded(&mut self) {
        self.last_id = "0".to_owned();
    }

    /// Takes the pins and passes of runtimes a reload replaced: workers may still make some
    /// on them (a request begun before the reload), so each is taken every turn until this
    /// thread holds the last reference (no one can add to it then), once more, and let go.
    /// They go out before the new runtime's.
    pub fn collect_retired(&mut self, retired: &mut Vec<Arc<Runtime>>) {
        let excess = retired.len().saturating_sub(RETIRED_MAX);
        for old in retired.drain(..excess) {
            self.collect(&old.sticky);
        }
        retired.retain(|old| {
            let last = Arc::strong_count(old) == 1;
            self.collect(&old.sticky);
            !last
        });
    }

    /// Takes what the workers made; kept (bounded) whether or not Redis answers.
    pub fn collect(&mut self, rt: &StickyRt) {
        let out = rt.fleet_take();
        let now_ms = sf::unix_ms(SystemTime::now());
        self.unpublished
            .extend(out.pins.into_iter().map(Entry::Pin));
        self.unpublished
            .extend(out.passes.into_iter().map(|digest| Entry::Pass {
                digest,
                at_ms: now_ms,
            }));
        let excess = self.unpublished.len().saturating_sub(OUTBOX_MAX);
        self.unpublished.drain(..excess);
        sf::note_dropped(excess as u64);
        let dropped = sf::dropped();
        if dropped > self.dropped {
            crate::warn!(
                "cluster: {} sticky pin(s)/pass(es) kept local: more made between two turns than the outbox holds ({OUTBOX_MAX})",
                dropped - self.dropped
            );
        }
        self.dropped = dropped;
    }

    /// The turn: the key, then what was made here, then what the fleet made, until caught
    /// up or `interval` after `started`.
    pub fn turn(
        &mut self,
        rt: &StickyRt,
        (started, interval): (Instant, Duration),
        exchange: &mut Exchange<'_>,
    ) -> Result<(), ()> {
        if !rt.fleet_in_use() {
            return Ok(());
        }
        if rt.fleet_wants_key() {
            self.agree_key(exchange)?;
        }
        while !self.unpublished.is_empty() && started.elapsed() < interval {
            let n = self.unpublished.len().min(PER_PUBLISH);
            let commands: Vec<Vec<String>> = self
                .unpublished
                .iter()
                .take(n)
                .map(|e| xadd(e, &self.node))
                .collect();
            let budget = Budget {
                items: n,
                bytes: n * 64,
            };
            exchange(&commands[..], budget)?;
            self.unpublished.drain(..n);
        }
        loop {
            let count = PER_READ.to_string();
            let info = ["XINFO", "STREAM", STREAM].map(str::to_owned).to_vec();
            let read: [&str; 6] = ["XREAD", "COUNT", &count, "STREAMS", STREAM, &self.last_id];
            let commands = [info, read.map(str::to_owned).to_vec()];
            let budget = Budget {
                // XINFO: ten fields and the first and last entries.
                items: 128 + 4 + PER_READ * 24,
                bytes: 1024 + 2 * ENTRY_BYTES + 64 + PER_READ * ENTRY_BYTES,
            };
            let replies = exchange(&commands[..], budget)?;
            let (Some(info), Some(read)) = (replies.first(), replies.get(1)) else {
                return Err(());
            };
            // An error here is `no such key` (`replies`): no stream, none of its entries
            // was ever read, so whatever a later XINFO finds trimmed was never read here.
            let info = match info {
                Reply::Error(_) => Some(StreamInfo {
                    added: 0,
                    length: 0,
                }),
                info => stream_info(info).map_err(drop)?,
            };
            let (entries, last, read) = parse_read(read)?;
            if self.last_id == "0" {
                self.position.restart();
            }
            if let Some(last) = last {
                self.last_id = last;
            }
            let lost = self.position.follow(info, read);
            if lost > 0 {
                super::note_sticky_lost(lost);
            }
            let now_ms = sf::unix_ms(SystemTime::now());
            for e in &entries {
                match e {
                    Entry::Pin(p) => rt.fleet_learn_pin(p, now_ms),
                    Entry::Pass { digest, .. } => rt.fleet_learn_pass(*digest),
                }
            }
            if read < PER_READ || started.elapsed() >= interval {
                return Ok(());
            }
        }
    }

    /// Proposes a key (ours once agreed, else a fresh one) with `SET NX` and adopts what
    /// Redis holds then.
    fn agree_key(&mut self, exchange: &mut Exchange<'_>) -> Result<(), ()> {
        let proposed = match sf::fleet_secret() {
            Some(k) => k.to_owned(),
            None => random_key().ok_or(())?,
        };
        let commands = [
            vec!["SET".to_owned(), KEY.to_owned(), proposed, "NX".to_owned()],
            vec!["GET".to_owned(), KEY.to_owned()],
        ];
        let replies = exchange(
            &commands[..],
            Budget {
                items: 2,
                bytes: 512,
            },
        )?;
        let held = match replies.get(1) {
            Some(Reply::Bulk(Some(b))) => std::str::from_utf8(b).ok().filter(|k| valid_key(k)),
            _ => None,
        };
        let Some(held) = held else {
            return Ok(());
        };
        if sf::set_fleet_key(held) {
            crate::info!("cluster: sticky cookies use the fleet's key from Redis ({KEY})");
        } else if sf::fleet_secret() != Some(held) && !self.conflict_logged {
            self.conflict_logged = true;
            crate::warn!(
                "cluster: Redis holds another sticky cookie key than this node's (Redis lost its key and another node set a new one): cookies of one key are not valid on nodes of the other; restart the nodes of one side"
            );
        }
        Ok(())
    }
}

fn random_key() -> Option<String> {
    let mut bytes = [0u8; 32];
    openssl::rand::rand_bytes(&mut bytes).ok()?;
    Some(hex(&bytes))
}

fn valid_key(k: &str) -> bool {
    (16..=256).contains(&k.len())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex32(text: &str) -> Option<[u8; 32]> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        let pair = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

/// The `XADD` of one entry.
pub fn xadd(entry: &Entry, node: &str) -> Vec<String> {
    let kept = STREAM_KEPT.to_string();
    let head: [&str; 6] = ["XADD", STREAM, "MAXLEN", "~", &kept, "*"];
    let mut c: Vec<String> = head.map(str::to_owned).to_vec();
    let mut field = |name: &str, value: String| {
        c.push(name.to_owned());
        c.push(value);
    };
    match entry {
        Entry::Pin(p) => {
            field("k", "pin".into());
            field("d", hex(&p.digest));
            field("t", p.at_ms.to_string());
            field("v", p.vhost.clone());
            field("g", p.group.clone());
            field("s", p.server.to_string());
        }
        Entry::Pass { digest, at_ms } => {
            field("k", "pass".into());
            field("d", hex(digest));
            field("t", at_ms.to_string());
        }
    }
    field("node", node.to_owned());
    c
}

/// A sticky pipeline's replies: an error fails it, but for `no such key` (XINFO STREAM
/// before the stream's first entry), left to the turn.
pub fn replies(replies: &[Reply]) -> Result<Vec<Reply>, String> {
    match replies
        .iter()
        .find_map(Reply::error)
        .filter(|e| !e.contains("no such key"))
    {
        Some(e) => Err(format!("Redis answered {e}")),
        None => Ok(replies.to_vec()),
    }
}

/// XREAD's reply: the entries understood (others skipped), the last id read and how many
/// entries were read (understood or not).
pub fn parse_read(reply: &Reply) -> Result<(Vec<Entry>, Option<String>, usize), ()> {
    let streams = match reply {
        Reply::Array(None) => return Ok((Vec::new(), None, 0)),
        Reply::Array(Some(s)) if s.len() == 1 => s,
        _ => return Err(()),
    };
    let entries = match streams[0].items() {
        [_, e @ Reply::Array(Some(items))] if items.len() <= PER_READ => e,
        _ => return Err(()),
    };
    let (mut out, mut last, mut read) = (Vec::new(), None, 0);
    for entry in entries.items() {
        let [id, fields] = entry.items() else {
            continue;
        };
        read += 1;
        if let Some(id) = id.as_text() {
            last = Some(id.to_owned());
        }
        if let Some(e) = parse_entry(fields.items()) {
            out.push(e);
        }
    }
    Ok((out, last, read))
}

fn parse_entry(f: &[Reply]) -> Option<Entry> {
    let field = |name: &str| {
        let at = f
            .iter()
            .step_by(2)
            .position(|k| k.as_text() == Some(name))?;
        f.get(at * 2 + 1)?.as_text()
    };
    let digest = unhex32(field("d")?)?;
    let at_ms = field("t")?.parse().ok()?;
    match field("k")? {
        "pass" => Some(Entry::Pass { digest, at_ms }),
        "pin" => Some(Entry::Pin(PinWire {
            vhost: field("v")?.to_owned(),
            group: field("g")?.to_owned(),
            server: field("s")?.parse().ok()?,
            digest,
            at_ms,
        })),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Reply {
        Reply::Bulk(Some(s.as_bytes().to_vec()))
    }

    #[test]
    fn an_entry_published_reads_back_the_same() {
        let pin = Entry::Pin(PinWire {
            vhost: "site".into(),
            group: "default".into(),
            server: "127.0.0.1:8080".parse().unwrap(),
            digest: [7; 32],
            at_ms: 1_800_000_000_000,
        });
        let pass = Entry::Pass {
            digest: [9; 32],
            at_ms: 5,
        };
        let as_reply = |id: &str, e: &Entry| {
            let fields: Vec<Reply> = xadd(e, "n1")[6..].iter().map(|a| bulk(a)).collect();
            Reply::Array(Some(vec![bulk(id), Reply::Array(Some(fields))]))
        };
        let junk = Reply::Array(Some(vec![
            bulk("3-0"),
            Reply::Array(Some(vec![bulk("k"), bulk("pin"), bulk("d"), bulk("zz")])),
        ]));
        let reply = Reply::Array(Some(vec![Reply::Array(Some(vec![
            bulk(STREAM),
            Reply::Array(Some(vec![
                as_reply("1-0", &pin),
                as_reply("2-0", &pass),
                junk,
            ])),
        ]))]));
        let (entries, last, read) = parse_read(&reply).unwrap();
        assert_eq!(entries, vec![pin, pass]);
        assert_eq!(last.as_deref(), Some("3-0"));
        assert_eq!(read, 3, "the junk entry moves the position too");
        assert_eq!(parse_read(&Reply::Array(None)).unwrap().0, vec![]);
        assert!(parse_read(&Reply::Int(1)).is_err());
    }
}
