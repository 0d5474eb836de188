//! The sticky session table: which server of a group a session is pinned
//! to. Shared by every worker thread (sharded mutexes), bounded (the least
//! recently used sessions are forgotten beyond the capacity), and a session
//! expires `sess_lifetime` after its last request.
//!
//! The first request of a session is scheduled normally and pinned; later
//! ones go to the same server. When that server is down, the session moves
//! to a newly scheduled one with `allow_failover` (the caller logs it), and
//! the request gets 502 otherwise, as in Tempesta.
//!
//! In a fleet (docs/FLEET.md) the pins made here go to an outbox the side thread publishes,
//! and the pins other nodes made come back through [`SessionTable::learn`]; a pin in use is
//! published again after half its lifetime, so the other nodes' copies do not expire while
//! the client stays here.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use super::fleet::{unix_ms, Outbox};
use crate::lru::Lru;

/// Mutexes the table is split over, so workers rarely wait on each other.
const SHARDS: usize = 16;

/// A session within one server group: the SHA-256 of the session cookie's
/// value (so an entry has a fixed size whatever the peer sends) and the
/// group's index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionKey {
    digest: [u8; 32],
    group: u32,
}

impl SessionKey {
    pub fn new(cookie_value: &[u8], group: u32) -> SessionKey {
        SessionKey {
            digest: openssl::sha::sha256(cookie_value),
            group,
        }
    }

    /// A session another node published: the digest it sent and this node's group index.
    pub fn from_digest(digest: [u8; 32], group: u32) -> SessionKey {
        SessionKey { digest, group }
    }

    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }

    pub fn group(&self) -> u32 {
        self.group
    }

    fn shard(&self) -> usize {
        usize::from(self.digest[0]) % SHARDS
    }
}

/// A pin made here, for the other nodes of a fleet: the session, its server's index in the
/// group and when (Unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinOut {
    pub key: SessionKey,
    pub server: usize,
    pub at_ms: u64,
}

#[derive(Debug, Clone, Copy)]
struct Pin {
    server: usize,
    last_used: Instant,
    /// When this node last published the pin (fleet only).
    published: Instant,
}

/// Where a request of a session goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pinned {
    /// The session's server, alive.
    Same(usize),
    /// A new (or expired) session, scheduled and now pinned here.
    New(usize),
    /// `allow_failover`: the pinned server is down; the session moved.
    Moved { from: usize, to: usize },
    /// The pinned server is down and failover is off: answer 502.
    ServerDown(usize),
    /// The scheduler had no server to offer: answer 502.
    NoServer,
}

/// The pinning policy of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub allow_failover: bool,
}

#[derive(Debug)]
pub struct SessionTable {
    shards: Vec<Mutex<Lru<SessionKey, Pin>>>,
    lifetime: Option<Duration>,
    /// In a fleet: the pins made here, for the side thread.
    outbox: Option<Outbox<PinOut>>,
}

impl SessionTable {
    /// A table of at most about `capacity` sessions (at least one per
    /// shard) that expire `lifetime` after their last use (`None`: only
    /// the capacity bounds them).
    pub fn new(capacity: usize, lifetime: Option<Duration>) -> SessionTable {
        let per_shard = capacity.div_ceil(SHARDS).max(1);
        SessionTable {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(Lru::new(per_shard)))
                .collect(),
            lifetime,
            outbox: None,
        }
    }

    /// This table, publishing its pins to a fleet.
    pub fn in_fleet(mut self) -> SessionTable {
        self.outbox = Some(Outbox::new());
        self
    }

    /// The pins made here since the last call (fleet only).
    pub fn take_published(&self) -> Vec<PinOut> {
        self.outbox.as_ref().map(Outbox::take).unwrap_or_default()
    }

    fn publish(&self, key: SessionKey, server: usize) {
        if let Some(o) = &self.outbox {
            o.push(PinOut {
                key,
                server,
                at_ms: unix_ms(SystemTime::now()),
            });
        }
    }

    /// Whether a pin in use, published at `published`, is due to be published again: after
    /// half the lifetime, so the other nodes' copies never expire while it is used here.
    fn republish_due(&self, published: Instant, now: Instant) -> bool {
        self.outbox.is_some()
            && self
                .lifetime
                .is_some_and(|l| now.saturating_duration_since(published) > l / 2)
    }

    /// A pin another node published: session `key` on `server` since `last_used`. The
    /// latest pin read wins (the stream's order, the same on every node); the table's bound
    /// holds whatever the other nodes send.
    pub fn learn(&self, key: SessionKey, server: usize, last_used: Instant, now: Instant) {
        if self
            .lifetime
            .is_some_and(|l| now.saturating_duration_since(last_used) > l)
        {
            return;
        }
        let mut shard = self.shard(&key);
        self.drop_expired(&mut shard, now);
        let last_used = match shard.get(&key) {
            Some(p) if p.server == server && p.last_used > last_used => p.last_used,
            _ => last_used,
        };
        shard.insert(
            key,
            Pin {
                server,
                last_used,
                published: now,
            },
        );
    }

    fn shard(&self, key: &SessionKey) -> MutexGuard<'_, Lru<SessionKey, Pin>> {
        let m = &self.shards[key.shard()];
        // A panic elsewhere while holding the lock leaves a consistent map
        // (every mutation is a single call), so keep using it.
        m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn expired(&self, pin: &Pin, now: Instant) -> bool {
        self.lifetime
            .is_some_and(|l| now.saturating_duration_since(pin.last_used) > l)
    }

    /// Routes one request of session `key` at `now`. `alive` says whether a
    /// server of the group is up; `schedule` picks one the usual way.
    pub fn route(
        &self,
        key: SessionKey,
        now: Instant,
        policy: Policy,
        alive: impl Fn(usize) -> bool,
        schedule: impl FnOnce() -> Option<usize>,
    ) -> Pinned {
        let mut shard = self.shard(&key);
        self.drop_expired(&mut shard, now);
        let pinned = shard.get(&key).copied().filter(|p| !self.expired(p, now));
        let result = match pinned {
            Some(p) if alive(p.server) => Pinned::Same(p.server),
            Some(p) if !policy.allow_failover => return Pinned::ServerDown(p.server),
            Some(p) => match schedule() {
                Some(to) => Pinned::Moved { from: p.server, to },
                None => Pinned::NoServer,
            },
            None => match schedule() {
                Some(s) => Pinned::New(s),
                None => Pinned::NoServer,
            },
        };
        let server = match result {
            Pinned::Same(s) | Pinned::New(s) | Pinned::Moved { to: s, .. } => s,
            Pinned::ServerDown(_) | Pinned::NoServer => return result,
        };
        let published = match (result, pinned) {
            (Pinned::Same(_), Some(p)) if !self.republish_due(p.published, now) => p.published,
            _ => {
                self.publish(key, server);
                now
            }
        };
        shard.insert(
            key,
            Pin {
                server,
                last_used: now,
                published,
            },
        );
        result
    }

    /// Pins session `key` to `server` at `now`, whatever it was pinned to: the server
    /// itself named the session (`learn`: its `Set-Cookie`).
    /// A backend that sends the same session cookie on every response (rolling sessions)
    /// publishes it no more often than `route` republishes a pin in use.
    pub fn pin(&self, key: SessionKey, server: usize, now: Instant) {
        let mut shard = self.shard(&key);
        self.drop_expired(&mut shard, now);
        let unchanged = shard
            .get(&key)
            .filter(|p| p.server == server && !self.expired(p, now))
            .map(|p| p.published)
            .filter(|&at| !self.republish_due(at, now));
        let published = match unchanged {
            Some(at) => at,
            None => {
                self.publish(key, server);
                now
            }
        };
        shard.insert(
            key,
            Pin {
                server,
                last_used: now,
                published,
            },
        );
    }

    /// Forgets the expired sessions at the old end of a shard; each call
    /// does work only for entries it removes.
    fn drop_expired(&self, shard: &mut Lru<SessionKey, Pin>, now: Instant) {
        while let Some((k, p)) = shard.oldest() {
            if !self.expired(p, now) {
                break;
            }
            let k = *k;
            shard.remove(&k);
        }
    }

    /// Sessions currently held (expired ones not yet dropped included).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const STICK: Policy = Policy {
        allow_failover: false,
    };
    const FAILOVER: Policy = Policy {
        allow_failover: true,
    };

    fn key(s: &str) -> SessionKey {
        SessionKey::new(s.as_bytes(), 0)
    }

    #[test]
    fn first_request_is_scheduled_then_pinned() {
        let t = SessionTable::new(100, None);
        let now = Instant::now();
        assert_eq!(
            t.route(key("a"), now, STICK, |_| true, || Some(2)),
            Pinned::New(2)
        );
        // The scheduler would say 0 now; the session stays on 2.
        assert_eq!(
            t.route(key("a"), now, STICK, |_| true, || Some(0)),
            Pinned::Same(2)
        );
        assert_eq!(
            t.route(key("b"), now, STICK, |_| true, || Some(0)),
            Pinned::New(0)
        );
        // The same cookie in another group is another session.
        let other_group = SessionKey::new(b"a", 1);
        assert_eq!(
            t.route(other_group, now, STICK, |_| true, || Some(1)),
            Pinned::New(1)
        );
    }

    #[test]
    fn a_learned_session_goes_where_the_server_named_it() {
        let t = SessionTable::new(100, None);
        let now = Instant::now();
        t.pin(key("sid-1"), 3, now);
        assert_eq!(
            t.route(key("sid-1"), now, STICK, |_| true, || Some(0)),
            Pinned::Same(3)
        );
        // A server naming the session again moves it there.
        t.pin(key("sid-1"), 1, now);
        assert_eq!(
            t.route(key("sid-1"), now, STICK, |_| true, || Some(0)),
            Pinned::Same(1)
        );
    }

    #[test]
    fn a_dead_server_gives_502_without_failover() {
        let t = SessionTable::new(100, None);
        let now = Instant::now();
        t.route(key("a"), now, STICK, |_| true, || Some(1));
        assert_eq!(
            t.route(key("a"), now, STICK, |s| s != 1, || Some(0)),
            Pinned::ServerDown(1)
        );
        // Back up: the session is still there.
        assert_eq!(
            t.route(key("a"), now, STICK, |_| true, || Some(0)),
            Pinned::Same(1)
        );
    }

    #[test]
    fn allow_failover_moves_the_session() {
        let t = SessionTable::new(100, None);
        let now = Instant::now();
        t.route(key("a"), now, FAILOVER, |_| true, || Some(1));
        assert_eq!(
            t.route(key("a"), now, FAILOVER, |s| s != 1, || Some(3)),
            Pinned::Moved { from: 1, to: 3 }
        );
        assert_eq!(
            t.route(key("a"), now, FAILOVER, |_| true, || Some(0)),
            Pinned::Same(3)
        );
        assert_eq!(
            t.route(key("z"), now, FAILOVER, |_| false, || None),
            Pinned::NoServer
        );
    }

    #[test]
    fn sessions_expire_after_their_lifetime_since_last_use() {
        let t = SessionTable::new(100, Some(Duration::from_secs(10)));
        let t0 = Instant::now();
        t.route(key("a"), t0, STICK, |_| true, || Some(1));
        let t8 = t0 + Duration::from_secs(8);
        assert_eq!(
            t.route(key("a"), t8, STICK, |_| true, || Some(0)),
            Pinned::Same(1)
        );
        // 8 s after the last use: still alive although 16 s after creation.
        let t16 = t0 + Duration::from_secs(16);
        assert_eq!(
            t.route(key("a"), t16, STICK, |_| true, || Some(0)),
            Pinned::Same(1)
        );
        let t27 = t0 + Duration::from_secs(27);
        assert_eq!(
            t.route(key("a"), t27, STICK, |_| true, || Some(0)),
            Pinned::New(0)
        );
    }

    #[test]
    fn attack_many_sessions_stay_within_the_bound() {
        let t = SessionTable::new(256, None);
        let now = Instant::now();
        for i in 0..20_000u32 {
            t.route(
                SessionKey::new(&i.to_be_bytes(), 0),
                now,
                STICK,
                |_| true,
                || Some(0),
            );
        }
        assert!(t.len() <= 256 + SHARDS, "{}", t.len());
        // A huge cookie costs no more than a small one.
        t.route(
            SessionKey::new(&vec![b'x'; 1 << 20], 0),
            now,
            STICK,
            |_| true,
            || Some(0),
        );
        assert!(t.len() <= 256 + SHARDS);
    }

    #[test]
    fn expired_sessions_are_dropped_as_new_ones_come() {
        let t = SessionTable::new(1000, Some(Duration::from_secs(1)));
        let t0 = Instant::now();
        for i in 0..500u32 {
            t.route(
                SessionKey::new(&i.to_be_bytes(), 0),
                t0,
                STICK,
                |_| true,
                || Some(0),
            );
        }
        let later = t0 + Duration::from_secs(5);
        for i in 0..2000u32 {
            t.route(
                SessionKey::new(&(i + 10_000).to_be_bytes(), 0),
                later,
                STICK,
                |_| true,
                || Some(0),
            );
        }
        // Only the fresh ones remain (each shard dropped its expired ones).
        assert!(t.len() <= 1000 + SHARDS);
        assert_eq!(
            t.route(
                SessionKey::new(&0u32.to_be_bytes(), 0),
                later,
                STICK,
                |_| true,
                || Some(4)
            ),
            Pinned::New(4)
        );
    }

    #[test]
    fn in_a_fleet_pins_are_published_when_made_and_after_half_their_lifetime() {
        let t = SessionTable::new(100, Some(Duration::from_secs(10))).in_fleet();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        t.route(key("a"), t0, STICK, |_| true, || Some(1));
        t.route(key("a"), at(1), STICK, |_| true, || Some(0));
        let out = t.take_published();
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!((out[0].key, out[0].server), (key("a"), 1));
        // Used past half its lifetime since published: published again.
        t.route(key("a"), at(6), STICK, |_| true, || Some(0));
        assert_eq!(t.take_published().len(), 1);
        t.pin(key("b"), 2, at(6));
        // A pin learned from the fleet is not published again.
        t.learn(key("c"), 0, at(6), at(6));
        let out = t.take_published();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].key, key("b"));
        assert_eq!(
            t.route(key("c"), at(7), STICK, |_| true, || Some(3)),
            Pinned::Same(0)
        );
        // The latest pin read wins; one older than the lifetime is ignored.
        t.learn(key("c"), 2, at(7), at(7));
        assert_eq!(
            t.route(key("c"), at(7), STICK, |_| true, || Some(3)),
            Pinned::Same(2)
        );
        t.learn(key("d"), 1, t0, at(11));
        assert_eq!(
            t.route(key("d"), at(11), STICK, |_| true, || Some(3)),
            Pinned::New(3)
        );
        // Outside a fleet nothing is kept for publishing.
        let lone = SessionTable::new(100, None);
        lone.route(key("a"), t0, STICK, |_| true, || Some(1));
        assert!(lone.take_published().is_empty());
    }

    #[test]
    fn attack_a_backend_renaming_the_same_session_on_every_response_publishes_it_once() {
        // Rolling sessions (`learn`): the same Set-Cookie on each response. Each one used to
        // be a stream entry every node read (the review's probe: 1 000 calls, 1 000 entries).
        let t = SessionTable::new(100, Some(Duration::from_secs(10))).in_fleet();
        let t0 = Instant::now();
        for ms in 0..1_000 {
            t.pin(key("s"), 2, t0 + Duration::from_millis(ms));
        }
        assert_eq!(t.take_published().len(), 1);
        // Another server, or half the lifetime later: published again.
        t.pin(key("s"), 3, t0 + Duration::from_secs(1));
        assert_eq!(t.take_published().len(), 1);
        t.pin(key("s"), 3, t0 + Duration::from_secs(7));
        assert_eq!(t.take_published().len(), 1);
    }

    #[test]
    fn workers_share_one_table() {
        let t = Arc::new(SessionTable::new(10_000, None));
        let now = Instant::now();
        let handles: Vec<_> = (0..4)
            .map(|w| {
                let t = Arc::clone(&t);
                std::thread::spawn(move || {
                    for i in 0..1000u32 {
                        let k = SessionKey::new(&i.to_be_bytes(), 0);
                        // Whoever pins first decides; all later agree.
                        t.route(k, now, STICK, |_| true, || Some(w));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        for i in 0..1000u32 {
            let k = SessionKey::new(&i.to_be_bytes(), 0);
            let first = t.route(k, now, STICK, |_| true, || Some(99));
            assert!(matches!(first, Pinned::Same(s) if s < 4), "{first:?}");
        }
    }
}
