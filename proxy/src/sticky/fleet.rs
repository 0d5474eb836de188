//! What a fleet (`cluster { redis ...; }`, docs/FLEET.md) shares of the sticky state, as the
//! request path sees it: the cookie key the fleet agreed through Redis (for vhosts without a
//! `secret`), and the bounded outboxes of the session pins and challenge passes made here,
//! which the side thread (crate::fleet::link) publishes every `sync_interval`. The request
//! path never waits for Redis: it reads the key with one atomic load and appends to an
//! outbox under a short lock, only when a session is pinned or a challenge passed.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::cookie::HmacKey;
use super::runtime::{lock, StickyRt};
use super::sessions::SessionKey;

/// Entries an outbox keeps between two turns at most; beyond, new ones are dropped and
/// counted (those sessions and passes stay local to this node).
pub const OUTBOX_MAX: usize = 16_384;

struct FleetKey {
    secret: String,
    hmac: HmacKey,
}

static FLEET_KEY: OnceLock<FleetKey> = OnceLock::new();

/// The cookie key the fleet agreed, once this process learned it (never changes after).
pub fn fleet_key() -> Option<&'static HmacKey> {
    FLEET_KEY.get().map(|k| &k.hmac)
}

/// The agreed key's text, which the side thread writes back to a Redis that lost it.
pub fn fleet_secret() -> Option<&'static str> {
    FLEET_KEY.get().map(|k| k.secret.as_str())
}

/// Adopts `secret` as the fleet's cookie key; false when another was adopted before.
pub fn set_fleet_key(secret: &str) -> bool {
    let mut set = false;
    FLEET_KEY.get_or_init(|| {
        set = true;
        FleetKey {
            secret: secret.to_owned(),
            hmac: HmacKey::new(secret.as_bytes()),
        }
    });
    set
}

/// Entries dropped at an outbox's bound, or at the side thread's, since the start
/// (`ktls_proxy_fleet_sticky_dropped_total`).
static DROPPED: AtomicU64 = AtomicU64::new(0);

pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// The side thread dropped `count` entries it could not keep between two turns.
pub fn note_dropped(count: u64) {
    DROPPED.fetch_add(count, Ordering::Relaxed);
}

/// Events made here for the other nodes, taken by the side thread every turn.
#[derive(Debug, Default)]
pub struct Outbox<T> {
    items: Mutex<Vec<T>>,
}

impl<T> Outbox<T> {
    pub fn new() -> Outbox<T> {
        Outbox {
            items: Mutex::new(Vec::new()),
        }
    }

    pub fn push(&self, item: T) {
        let mut items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        if items.len() < OUTBOX_MAX {
            items.push(item);
        } else {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn take(&self) -> Vec<T> {
        std::mem::take(&mut *self.items.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Unix milliseconds of `t` (0 before 1970).
pub fn unix_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A session pin as the fleet names it: by vhost and group names and the server's address
/// (the same configuration on every node gives the same indices, but a node need not trust
/// that), the SHA-256 of the session's cookie, and when it was pinned (Unix ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinWire {
    pub vhost: String,
    pub group: String,
    pub server: SocketAddr,
    pub digest: [u8; 32],
    pub at_ms: u64,
}

/// What this node made since the last turn, for the other nodes.
#[derive(Debug, Default)]
pub struct StickyOut {
    pub pins: Vec<PinWire>,
    /// SHA-256 of cookies that passed the JS challenge here.
    pub passes: Vec<[u8; 32]>,
}

impl StickyRt {
    /// Whether a vhost issues cookies with the fleet's key (no `secret`), so the side thread
    /// must agree one.
    pub fn fleet_wants_key(&self) -> bool {
        self.wants_fleet_key
    }

    /// Whether there is anything to share: a sticky cookie or pinned sessions somewhere.
    pub fn fleet_in_use(&self) -> bool {
        self.in_use
    }

    /// The pins and passes made here since the last call.
    pub fn fleet_take(&self) -> StickyOut {
        let mut out = StickyOut {
            passes: self
                .passes_out
                .as_ref()
                .map(Outbox::take)
                .unwrap_or_default(),
            ..StickyOut::default()
        };
        for v in &self.vhosts {
            for p in v.table.take_published() {
                let group = usize::try_from(p.key.group()).ok();
                let Some((name, servers)) = group.and_then(|g| self.servers.get(g)) else {
                    continue;
                };
                if let Some(&server) = servers.get(p.server) {
                    out.pins.push(PinWire {
                        vhost: v.name.clone(),
                        group: name.clone(),
                        server,
                        digest: *p.key.digest(),
                        at_ms: p.at_ms,
                    });
                }
            }
        }
        out
    }

    /// A pin another node published (or this one, read back in the stream's order), at
    /// `now_ms` (Unix ms); one naming a vhost, group or server this node does not have is
    /// ignored.
    pub fn fleet_learn_pin(&self, pin: &PinWire, now_ms: u64) {
        let Some(v) = self.vhosts.iter().find(|v| v.name == pin.vhost) else {
            return;
        };
        let Some((group, servers)) = self
            .servers
            .iter()
            .enumerate()
            .find(|(_, (name, _))| *name == pin.group)
            .map(|(g, (_, servers))| (g, servers))
        else {
            return;
        };
        let (Some(server), Ok(group)) = (
            servers.iter().position(|&a| a == pin.server),
            u32::try_from(group),
        ) else {
            return;
        };
        let now = Instant::now();
        let age = Duration::from_millis(now_ms.saturating_sub(pin.at_ms));
        let last_used = now.checked_sub(age).unwrap_or(now);
        let key = SessionKey::from_digest(pin.digest, group);
        v.table.learn(key, server, last_used, now);
    }

    /// A cookie (its SHA-256) that passed the JS challenge on another node.
    pub fn fleet_learn_pass(&self, digest: [u8; 32]) {
        lock(&self.passed).insert(digest, ());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sticky::cookie::{ClientIdentity, CookieCodec, Verdict};
    use std::time::UNIX_EPOCH;

    /// The only test of this binary that sets the process's fleet key.
    #[test]
    fn in_a_fleet_cookies_use_the_agreed_key_and_earlier_ones_stay_valid_here() {
        let me = ClientIdentity {
            addr: "10.0.0.1".parse().unwrap(),
            user_agent: b"ua",
        };
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let valid = |c: &CookieCodec, v: &str| {
            matches!(
                c.verify(v.as_bytes(), &me, now).unwrap(),
                Verdict::Valid { .. }
            )
        };
        // Two nodes, each with its own random key until they agree one.
        let a = CookieCodec::new(None, None).unwrap().in_fleet();
        let b = CookieCodec::new(None, None).unwrap().in_fleet();
        let before = a.issue(&me, now).unwrap();
        assert!(valid(&a, &before) && !valid(&b, &before));
        assert!(set_fleet_key("agreed-through-redis"));
        assert!(!set_fleet_key("another"), "adopted once");
        assert_eq!(fleet_secret(), Some("agreed-through-redis"));
        let after = a.issue(&me, now).unwrap();
        assert!(valid(&b, &after) && valid(&a, &after));
        // Issued alone: still valid where it was issued, not elsewhere.
        assert!(valid(&a, &before) && !valid(&b, &before));
        // A codec with its own `secret` is not in the fleet.
        let own = CookieCodec::new(Some("s"), None).unwrap();
        assert!(!valid(&own, &after));
    }

    #[test]
    fn an_outbox_keeps_at_most_its_bound() {
        let o = Outbox::new();
        let before = dropped();
        for i in 0..OUTBOX_MAX + 10 {
            o.push(i);
        }
        assert_eq!(o.take().len(), OUTBOX_MAX);
        assert!(dropped() >= before + 10);
        assert!(o.take().is_empty());
    }
}
