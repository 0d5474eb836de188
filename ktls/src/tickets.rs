//! Session ticket keys: derived from a configured secret (`tls_tickets secret=... lifetime=N`)
//! or listed by a key ring file (`tls_tickets keys=FILE`).
//!
//! A listed ring's first key seals new tickets and every key opens them; the proxy replaces
//! the list when the file changes ([`replace_listed`]), so a platform that rotates the file on
//! every node rotates the fleet's keys together.
//!
//! Derived keys rotate every `lifetime`: the key of period `p = unix_time / lifetime` is derived from
//! the secret, the ring's scope (the vhost's name) and `p`, so every process configured with
//! the same secret (and a clock within one period) issues and accepts the same tickets for a
//! vhost — several instances resume each other's sessions. Tickets of the previous period are
//! still accepted, and renewed.
//!
//! A ticket is accepted only by the ring it was issued from: one ring per vhost context and
//! configuration, so a ticket issued under one vhost does not resume under another, and after
//! a reload with another secret the old tickets are refused (the new contexts have new rings).

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openssl::error::ErrorStack;
use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::sign::Signer;

pub const KEY_NAME_LEN: usize = 16;

/// One ticket key: the name sent in the ticket, the AES-CBC key, the HMAC-SHA256 key.
#[derive(Clone, PartialEq, Eq)]
pub struct TicketKey {
    pub name: [u8; KEY_NAME_LEN],
    /// The first [`TicketCipher::key_len`] bytes are the AES key.
    pub aes: [u8; 32],
    /// The first [`TicketCipher::key_len`] bytes are the HMAC key.
    pub hmac: [u8; 32],
    pub cipher: TicketCipher,
}

/// How a ticket is sealed: nginx's two key sizes (80-byte keys: AES-256-CBC and a 32-byte
/// HMAC key; 48-byte keys: AES-128-CBC and a 16-byte HMAC key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TicketCipher {
    Aes256Cbc,
    Aes128Cbc,
}

impl TicketCipher {
    /// Bytes of both the AES and the HMAC key.
    pub fn key_len(self) -> usize {
        match self {
            TicketCipher::Aes256Cbc => 32,
            TicketCipher::Aes128Cbc => 16,
        }
    }
}

impl TicketKey {
    /// A key of a key ring file: `aes` and `hmac` both 16 or both 32 bytes.
    pub fn listed(name: [u8; KEY_NAME_LEN], aes: &[u8], hmac: &[u8]) -> Option<TicketKey> {
        let cipher = match (aes.len(), hmac.len()) {
            (32, 32) => TicketCipher::Aes256Cbc,
            (16, 16) => TicketCipher::Aes128Cbc,
            _ => return None,
        };
        let mut key = TicketKey {
            name,
            aes: [0; 32],
            hmac: [0; 32],
            cipher,
        };
        key.aes[..aes.len()].copy_from_slice(aes);
        key.hmac[..hmac.len()].copy_from_slice(hmac);
        Some(key)
    }

    pub fn aes_key(&self) -> &[u8] {
        &self.aes[..self.cipher.key_len()]
    }

    pub fn hmac_key(&self) -> &[u8] {
        &self.hmac[..self.cipher.key_len()]
    }
}

impl std::fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        write!(f, "TicketKey({:02x?})", &self.name[..4])
    }
}

enum Ring {
    Derived(Box<Derived>),
    /// A key ring file's keys, the sealing one first; never empty.
    Listed(RwLock<Arc<[TicketKey]>>),
    /// Its context is gone ([`RingHold`]): the keys are freed. The slot is not given to
    /// another ring, so an id kept anywhere can never reach someone else's keys.
    Freed,
}

/// Names a ring, to look its keys up ([`current_key`], [`find_key`]) or to replace a listed
/// ring's keys ([`replace_listed`]): copied freely, it owns nothing. The id of a freed ring
/// finds no key, and is never given to another ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RingId(usize);

/// A ring's one owner: what [`register`] and [`register_listed`] give, moved into one
/// context by [`crate::ossl::set_ticket_keys`] (into its ex_data). Neither `Clone` nor
/// `Copy`, so one ring cannot be set on two contexts: the first freed would free the keys
/// the other still seals and opens its tickets with. Dropped with the context, which
/// OpenSSL frees only once no connection refers to it, it frees the ring's keys; a reload
/// that builds new contexts thus frees the old rings when their last connection closes.
/// Dropped without being set on a context, it frees them at once.
///
/// ```compile_fail
/// use openssl::ssl::{SslContextBuilder, SslMethod};
/// let ring = ktls::tickets::register(None, b"site", std::time::Duration::from_secs(60)).unwrap();
/// let mut a = SslContextBuilder::new(SslMethod::tls_server()).unwrap();
/// let mut b = SslContextBuilder::new(SslMethod::tls_server()).unwrap();
/// ktls::ossl::set_ticket_keys(&mut a, ring).unwrap();
/// ktls::ossl::set_ticket_keys(&mut b, ring).unwrap(); // `ring` was moved into `a`
/// ```
///
/// ```compile_fail
/// fn copies<T: Clone>(_: &T) {}
/// let ring = ktls::tickets::register(None, b"site", std::time::Duration::from_secs(60)).unwrap();
/// copies(&ring); // not `Clone`: no second owner to set on another context
/// ```
#[derive(Debug)]
#[must_use = "a ring is freed with its hold: set it on a context"]
pub struct RingHold(RingId);

impl RingHold {
    /// The ring's name, for lookups and replacements.
    pub fn id(&self) -> RingId {
        self.0
    }
}

impl Drop for RingHold {
    fn drop(&mut self) {
        let mut rings = RINGS.write().unwrap_or_else(|e| e.into_inner());
        if let Some(ring) = rings.get_mut(self.0 .0) {
            *ring = Ring::Freed;
        }
    }
}

/// How many rings hold keys (registered and not freed).
pub fn live_rings() -> usize {
    let rings = RINGS.read().unwrap_or_else(|e| e.into_inner());
    rings.iter().filter(|r| !matches!(r, Ring::Freed)).count()
}

struct Derived {
    secret: Vec<u8>,
    /// What the keys are for (a vhost's name): two scopes never share a key.
    scope: Vec<u8>,
    period_secs: u64,
    /// The keys of the last period asked for, and of the one before it.
    cached: Mutex<Option<(u64, TicketKey, TicketKey)>>,
}

static RINGS: RwLock<Vec<Ring>> = RwLock::new(Vec::new());

/// Registers a key ring for `scope` (a vhost's name) and returns its owner (for
/// [`crate::ossl::set_ticket_keys`]). Without a secret the ring gets a random one, so only
/// this process accepts its tickets.
pub fn register(
    secret: Option<&[u8]>,
    scope: &[u8],
    lifetime: Duration,
) -> Result<RingHold, ErrorStack> {
    let secret = match secret {
        Some(s) => s.to_vec(),
        None => {
            let mut random = vec![0u8; 32];
            openssl::rand::rand_bytes(&mut random)?;
            random
        }
    };
    let ring = Derived {
        secret,
        scope: scope.to_vec(),
        period_secs: lifetime.as_secs().max(1),
        cached: Mutex::new(None),
    };
    Ok(push(Ring::Derived(Box::new(ring))))
}

fn push(ring: Ring) -> RingHold {
    let mut rings = RINGS.write().unwrap_or_else(|e| e.into_inner());
    rings.push(ring);
    RingHold(RingId(rings.len() - 1))
}

/// Registers a ring of listed keys (a key ring file's: `keys[0]` seals, all open) and returns
/// its owner; `None` for an empty list.
pub fn register_listed(keys: Vec<TicketKey>) -> Option<RingHold> {
    if keys.is_empty() {
        return None;
    }
    Some(push(Ring::Listed(RwLock::new(keys.into()))))
}

/// Replaces the keys of listed ring `ring` (its file changed). Returns false, changing
/// nothing, for an empty list or a ring that is not a listed one.
pub fn replace_listed(ring: RingId, keys: Vec<TicketKey>) -> bool {
    if keys.is_empty() {
        return false;
    }
    let rings = RINGS.read().unwrap_or_else(|e| e.into_inner());
    let Some(Ring::Listed(listed)) = rings.get(ring.0) else {
        return false;
    };
    *listed.write().unwrap_or_else(|e| e.into_inner()) = keys.into();
    true
}

fn listed_keys(listed: &RwLock<Arc<[TicketKey]>>) -> Arc<[TicketKey]> {
    listed.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Derives the key of `period` for `scope` from `secret`.
pub fn derive_key(secret: &[u8], scope: &[u8], period: u64) -> Result<TicketKey, ErrorStack> {
    let pkey = PKey::hmac(secret)?;
    // The scope is length-prefixed so that no (scope, label) pair reads as another.
    let scope_len = u32::try_from(scope.len()).unwrap_or(u32::MAX).to_be_bytes();
    let part = |label: &[u8]| -> Result<[u8; 32], ErrorStack> {
        let mut signer = Signer::new(MessageDigest::sha256(), &pkey)?;
        signer.update(b"ktls-proxy session ticket ")?;
        signer.update(&scope_len)?;
        signer.update(scope)?;
        signer.update(label)?;
        signer.update(&period.to_be_bytes())?;
        let mut out = [0u8; 32];
        signer.sign(&mut out)?;
        Ok(out)
    };
    let name_full = part(b"name")?;
    let mut name = [0u8; KEY_NAME_LEN];
    name.copy_from_slice(&name_full[..KEY_NAME_LEN]);
    Ok(TicketKey {
        name,
        aes: part(b"aes")?,
        hmac: part(b"hmac")?,
        cipher: TicketCipher::Aes256Cbc,
    })
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// (current, previous) keys of `ring` at `now`.
fn keys_at(ring: &Derived, now: u64) -> Option<(TicketKey, TicketKey)> {
    let period = now / ring.period_secs;
    let mut cached = ring.cached.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((p, current, previous)) = cached.as_ref() {
        if *p == period {
            return Some((current.clone(), previous.clone()));
        }
    }
    let current = derive_key(&ring.secret, &ring.scope, period).ok()?;
    let previous = derive_key(&ring.secret, &ring.scope, period.saturating_sub(1)).ok()?;
    *cached = Some((period, current.clone(), previous.clone()));
    Some((current, previous))
}

/// The key new tickets of ring `ring` are issued with.
pub fn current_key(ring: RingId) -> Option<TicketKey> {
    let rings = RINGS.read().unwrap_or_else(|e| e.into_inner());
    match rings.get(ring.0)? {
        Ring::Derived(derived) => keys_at(derived, now_secs()).map(|(current, _)| current),
        Ring::Listed(listed) => listed_keys(listed).first().cloned(),
        Ring::Freed => None,
    }
}

/// Finds the key named `name` in ring `ring` only (the ring of the vhost context the
/// handshake runs in). Returns the key and whether it is current.
pub fn find_key(ring: RingId, name: &[u8; KEY_NAME_LEN]) -> Option<(TicketKey, bool)> {
    let rings = RINGS.read().unwrap_or_else(|e| e.into_inner());
    let derived = match rings.get(ring.0)? {
        Ring::Derived(derived) => derived,
        Ring::Listed(listed) => {
            let keys = listed_keys(listed);
            let at = keys.iter().position(|k| &k.name == name)?;
            return Some((keys[at].clone(), at == 0));
        }
        Ring::Freed => return None,
    };
    let (current, previous) = keys_at(derived, now_secs())?;
    if &current.name == name {
        Some((current, true))
    } else if &previous.name == name {
        Some((previous, false))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"f00)9eR59*_/22";

    #[test]
    fn a_ring_is_freed_with_the_last_context_and_connection_using_it() {
        use openssl::ssl::{Ssl, SslContextBuilder, SslMethod};
        let hold = register(Some(SECRET), b"freed", Duration::from_secs(60)).expect("ring");
        let ring = hold.id();
        let mut b = SslContextBuilder::new(SslMethod::tls_server()).expect("builder");
        crate::ossl::set_ticket_keys(&mut b, hold).expect("keys");
        let ctx = b.build();
        let ssl = Ssl::new(&ctx).expect("ssl");
        drop(ctx);
        assert!(
            current_key(ring).is_some(),
            "a connection still uses the context"
        );
        drop(ssl);
        assert!(current_key(ring).is_none(), "the ring outlived its context");
        let next = register(Some(SECRET), b"freed", Duration::from_secs(60)).expect("ring");
        assert_ne!(next.id(), ring, "a freed id was given to another ring");
    }

    /// Issue 37's review: a ring is owned once. Its hold moved into a context, the ring lives
    /// as long as that context; a second context gets a ring of its own (the first hold is
    /// gone: `set_ticket_keys` cannot be given it twice, see `RingHold`'s compile_fail
    /// examples), and freeing the first context leaves the second's keys. A hold never set
    /// frees its ring.
    #[test]
    fn a_ring_is_owned_by_the_one_context_it_was_moved_into() {
        use openssl::ssl::{SslContextBuilder, SslMethod};
        let context = |hold: RingHold| {
            let mut b = SslContextBuilder::new(SslMethod::tls_server()).expect("builder");
            crate::ossl::set_ticket_keys(&mut b, hold).expect("keys");
            b.build()
        };
        let lifetime = Duration::from_secs(60);
        let first = register(Some(SECRET), b"owned", lifetime).expect("ring");
        let second = register(Some(SECRET), b"owned", lifetime).expect("ring");
        let (one, two) = (first.id(), second.id());
        assert_ne!(one, two);
        let (a, b) = (context(first), context(second));
        drop(a);
        assert!(current_key(one).is_none(), "freed with its context");
        assert!(current_key(two).is_some(), "the other context's keys stay");
        drop(b);
        assert!(current_key(two).is_none());
        let unset = register(Some(SECRET), b"owned", lifetime).expect("ring");
        let id = unset.id();
        assert!(current_key(id).is_some());
        drop(unset);
        assert!(current_key(id).is_none(), "a hold never set frees its ring");
    }

    #[test]
    fn same_secret_same_keys_and_periods_differ() {
        let a = derive_key(SECRET, b"site", 7).expect("derive");
        let b = derive_key(SECRET, b"site", 7).expect("derive");
        let c = derive_key(SECRET, b"site", 8).expect("derive");
        let d = derive_key(b"another secret", b"site", 7).expect("derive");
        assert_eq!(a, b);
        assert_ne!(a.name, c.name);
        assert_ne!(a.aes, c.aes);
        assert_ne!(a.name, d.name);
        assert_ne!(a.aes, a.hmac);
    }

    #[test]
    fn scopes_never_share_keys() {
        let a = derive_key(SECRET, b"site", 7).expect("derive");
        let b = derive_key(SECRET, b"other", 7).expect("derive");
        // Length-prefixed: moving bytes between scope and label changes the key.
        let c = derive_key(SECRET, b"sitename", 7).expect("derive");
        assert_ne!(a.name, b.name);
        assert_ne!(a.aes, b.aes);
        assert_ne!(a.name, c.name);
    }

    #[test]
    fn registered_rings_find_current_and_previous() {
        let hold = register(
            Some(b"ring test secret"),
            b"site",
            Duration::from_secs(3600),
        )
        .expect("register");
        let ring = hold.id();
        let current = current_key(ring).expect("current key");
        assert_eq!(
            find_key(ring, &current.name).map(|(_, fresh)| fresh),
            Some(true)
        );
        let period = now_secs() / 3600;
        let previous = derive_key(b"ring test secret", b"site", period - 1).expect("derive");
        assert_eq!(
            find_key(ring, &previous.name).map(|(_, fresh)| fresh),
            Some(false)
        );
        let stale = derive_key(b"ring test secret", b"site", period - 2).expect("derive");
        assert!(find_key(ring, &stale.name).is_none());
    }

    /// A ticket of one vhost's ring is not found in another's, even with the same secret, and
    /// a ring registered with a new secret (a reload) does not know the old keys.
    #[test]
    fn rings_do_not_accept_each_others_tickets() {
        let lifetime = Duration::from_secs(3600);
        let site = register(Some(b"shared"), b"site", lifetime).expect("register");
        let other = register(Some(b"shared"), b"other", lifetime).expect("register");
        let reloaded = register(Some(b"rotated"), b"site", lifetime).expect("register");
        let key = current_key(site.id()).expect("current key");
        assert!(find_key(site.id(), &key.name).is_some());
        assert!(find_key(other.id(), &key.name).is_none());
        assert!(find_key(reloaded.id(), &key.name).is_none());
        assert!(find_key(RingId(usize::MAX), &key.name).is_none());
    }

    fn listed(seed: u8, key_len: usize) -> TicketKey {
        let bytes: Vec<u8> = (0..32).map(|i| seed ^ i).collect();
        TicketKey::listed([seed; KEY_NAME_LEN], &bytes[..key_len], &bytes[..key_len])
            .expect("a listed key")
    }

    /// A rotation as the platform does it: a new first key, the old one second (still opens,
    /// no longer seals), then the old one gone (its tickets unknown).
    #[test]
    fn listed_rings_seal_with_the_first_key_and_follow_replacements() {
        let (old, new) = (listed(1, 32), listed(2, 16));
        assert_eq!(new.cipher, TicketCipher::Aes128Cbc);
        assert_eq!(new.aes_key().len(), 16);
        let hold = register_listed(vec![old.clone()]).expect("register");
        let ring = hold.id();
        assert_eq!(current_key(ring), Some(old.clone()));
        assert!(replace_listed(ring, vec![new.clone(), old.clone()]));
        assert_eq!(current_key(ring), Some(new.clone()));
        assert_eq!(
            find_key(ring, &old.name).map(|(_, fresh)| fresh),
            Some(false)
        );
        assert_eq!(
            find_key(ring, &new.name).map(|(_, fresh)| fresh),
            Some(true)
        );
        assert!(replace_listed(ring, vec![new.clone()]));
        assert!(find_key(ring, &old.name).is_none());
        // An empty list never replaces a ring: the old keys stay.
        assert!(!replace_listed(ring, Vec::new()));
        assert_eq!(current_key(ring), Some(new));
        assert!(register_listed(Vec::new()).is_none());
    }

    #[test]
    fn derived_rings_are_not_replaced_and_keys_of_odd_sizes_are_refused() {
        let hold = register(Some(b"fixed"), b"site", Duration::from_secs(60)).expect("reg");
        let derived = hold.id();
        let before = current_key(derived);
        assert!(!replace_listed(derived, vec![listed(3, 32)]));
        assert_eq!(current_key(derived), before);
        assert!(TicketKey::listed([0; KEY_NAME_LEN], &[0; 32], &[0; 16]).is_none());
        assert!(TicketKey::listed([0; KEY_NAME_LEN], &[0; 24], &[0; 24]).is_none());
    }

    #[test]
    fn random_rings_differ() {
        let a = register(None, b"site", Duration::from_secs(60)).expect("register");
        let b = register(None, b"site", Duration::from_secs(60)).expect("register");
        assert_ne!(
            current_key(a.id()).map(|k| k.name),
            current_key(b.id()).map(|k| k.name)
        );
    }
}
