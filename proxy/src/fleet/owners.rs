//! Which node of a fleet owns a cache key, for the cache tier of issue 37 (docs/FLEET.md,
//! "Cache tier"; `tier.rs` asks it on a miss).
//!
//! Rendezvous (highest random weight) hashing: every node scores every (peer, key) pair with
//! the same function and the key belongs to the peer with the highest score. Every node
//! computes the same owner from the same peer set, in whatever order the peers are listed,
//! without talking to the others; a peer that leaves takes only its own keys with it (each
//! goes to the peer that scored second for it), and a peer that joins takes about 1/N of the
//! keys, from every other peer alike. Ketama (a ring of virtual points) gives the same
//! property with a table to build and a balance that depends on the number of points; with
//! the tens of peers a tier has, scoring each one per miss costs less than the fetch it saves.
//!
//! The score must be the same on every node and in every version of the proxy that may run
//! in one fleet during an upgrade: a change to [`score`] moves every key, and the golden test
//! below fails on it. It is FNV-1a over the bytes with a 64-bit finaliser (MurmurHash3's
//! `fmix64`), not std's `DefaultHasher` (whose algorithm is not promised across releases).

/// The peers of a tier, in a canonical order (the order of the configuration does not
/// matter).
#[derive(Debug, Clone, Default)]
pub struct Owners {
    peers: Vec<Peer>,
}

#[derive(Debug, Clone)]
struct Peer {
    name: String,
    /// The hash of `name`, computed once.
    seed: u64,
}

impl Owners {
    /// The tier of `peers` (names as the configuration gives them, e.g. `10.0.0.2:8080`);
    /// a name given twice counts once.
    pub fn new<S: Into<String>>(peers: impl IntoIterator<Item = S>) -> Owners {
        let mut peers: Vec<Peer> = peers
            .into_iter()
            .map(|name| {
                let name = name.into();
                let seed = fmix64(fnv1a(name.as_bytes()));
                Peer { name, seed }
            })
            .collect();
        peers.sort_by(|a, b| a.name.cmp(&b.name));
        peers.dedup_by(|a, b| a.name == b.name);
        Owners { peers }
    }

    pub fn len(&self) -> usize {
        self.peers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// The peer that owns `key` (a cache key), `None` for an empty tier.
    pub fn owner(&self, key: &[u8]) -> Option<&str> {
        self.owner_index(&[key])
            .and_then(|i| self.peers.get(i))
            .map(|p| p.name.as_str())
    }

    /// The position in [`Owners::names`] of the peer that owns the key made of `parts`
    /// (hashed as if joined by spaces, without building the joined key), `None` for an empty
    /// tier.
    pub fn owner_index(&self, parts: &[&[u8]]) -> Option<usize> {
        let key_hash = fnv1a_parts(parts);
        self.peers
            .iter()
            .enumerate()
            .max_by_key(|(_, p)| (score(p.seed, key_hash), std::cmp::Reverse(&p.name)))
            .map(|(i, _)| i)
    }

    /// The peers' names in the canonical order [`Owners::owner_index`] counts in.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.peers.iter().map(|p| p.name.as_str())
    }

    /// Every peer, the owner of `key` first, then by falling score: where the key would go
    /// were the peers before it gone.
    pub fn ranked(&self, key: &[u8]) -> Vec<&str> {
        let key_hash = fnv1a(key);
        let mut scored: Vec<(u64, &str)> = self
            .peers
            .iter()
            .map(|p| (score(p.seed, key_hash), p.name.as_str()))
            .collect();
        scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        scored.into_iter().map(|(_, name)| name).collect()
    }
}

/// The score of a (peer, key) pair: the peer's seed and the key's hash mixed, so that each
/// peer ranks the keys in an order of its own.
fn score(peer_seed: u64, key_hash: u64) -> u64 {
    fmix64(peer_seed ^ key_hash)
}

/// FNV-1a, 64 bits.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// FNV-1a over `parts` joined by single spaces (the same as [`fnv1a`] of the joined bytes).
fn fnv1a_parts(parts: &[&[u8]]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325;
    for (i, part) in parts.iter().enumerate() {
        let sep: &[u8] = if i == 0 { b"" } else { b" " };
        for b in sep.iter().chain(part.iter()) {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// MurmurHash3's 64-bit finaliser: every input bit flips about half the output bits, which
/// FNV-1a alone does not do for inputs that differ in their last bytes.
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("GET site.test /object/{i}"))
            .collect()
    }

    fn peers(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("10.0.0.{i}:8080")).collect()
    }

    #[test]
    fn every_node_finds_the_same_owner_whatever_the_order_of_its_peers() {
        let mut listed = peers(5);
        let a = Owners::new(listed.clone());
        listed.reverse();
        listed.push("10.0.0.3:8080".into()); // given twice
        let b = Owners::new(listed);
        assert_eq!(b.len(), 5);
        for key in keys(1000) {
            assert_eq!(a.owner(key.as_bytes()), b.owner(key.as_bytes()), "{key}");
            assert_eq!(a.ranked(key.as_bytes()), b.ranked(key.as_bytes()));
            assert_eq!(
                a.ranked(key.as_bytes())[0],
                a.owner(key.as_bytes()).unwrap()
            );
        }
        assert_eq!(Owners::new(Vec::<String>::new()).owner(b"k"), None);
    }

    #[test]
    fn keys_spread_evenly_over_the_peers() {
        let tier = Owners::new(peers(4));
        let mut per_peer = std::collections::HashMap::new();
        let all = keys(40_000);
        for key in &all {
            *per_peer
                .entry(tier.owner(key.as_bytes()).unwrap())
                .or_insert(0) += 1;
        }
        assert_eq!(per_peer.len(), 4);
        for (peer, count) in per_peer {
            // 10 000 expected each; the binomial's standard deviation is about 87.
            assert!((9_500..=10_500).contains(&count), "{peer}: {count}");
        }
    }

    #[test]
    fn a_peer_that_leaves_takes_only_its_own_keys_to_the_one_ranked_second() {
        let before = Owners::new(peers(5));
        let gone = "10.0.0.2:8080";
        let after = Owners::new(peers(5).into_iter().filter(|p| p != gone));
        let mut moved = 0;
        for key in keys(20_000) {
            let (was, is) = (before.owner(key.as_bytes()), after.owner(key.as_bytes()));
            if was == Some(gone) {
                moved += 1;
                assert_eq!(is, Some(before.ranked(key.as_bytes())[1]), "{key}");
            } else {
                assert_eq!(was, is, "{key} moved though its owner stayed");
            }
        }
        // About a fifth of the keys were the leaving peer's.
        assert!((3_600..=4_400).contains(&moved), "{moved}");
    }

    #[test]
    fn a_peer_that_joins_takes_about_one_key_in_n_and_only_to_itself() {
        let before = Owners::new(peers(4));
        let after = Owners::new(peers(5));
        let joined = "10.0.0.5:8080";
        let mut moved = 0;
        for key in keys(20_000) {
            let (was, is) = (before.owner(key.as_bytes()), after.owner(key.as_bytes()));
            if was != is {
                assert_eq!(is, Some(joined), "{key} moved to an old peer");
                moved += 1;
            }
        }
        assert!(
            (3_600..=4_400).contains(&moved),
            "{moved} of 20000 moved (1/5: 4000)"
        );
    }

    /// The owners every version of the proxy in one fleet must agree on: a change to the
    /// score moves every key (and, mid-upgrade, splits the tier). Values computed once by
    /// this implementation.
    #[test]
    fn the_score_does_not_change_between_versions() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        let tier = Owners::new(peers(3));
        let owners: Vec<&str> = ["/a", "/b", "/c", "/d", "/e", "/f"]
            .iter()
            .map(|k| tier.owner(k.as_bytes()).unwrap())
            .collect();
        assert_eq!(owners, GOLDEN);
    }

    #[test]
    fn a_key_in_parts_has_the_owner_of_the_joined_key() {
        let tier = Owners::new(peers(7));
        for i in 0..2000 {
            let (host, path) = (format!("site{}.test", i % 13), format!("/object/{i}"));
            let joined = format!("{host} {path}");
            let index = tier.owner_index(&[host.as_bytes(), path.as_bytes()]);
            let name = index.and_then(|i| tier.names().nth(i));
            assert_eq!(name, tier.owner(joined.as_bytes()), "{joined}");
        }
        assert_eq!(Owners::new(Vec::<String>::new()).owner_index(&[b"k"]), None);
    }

    const GOLDEN: [&str; 6] = [
        "10.0.0.1:8080",
        "10.0.0.2:8080",
        "10.0.0.2:8080",
        "10.0.0.3:8080",
        "10.0.0.3:8080",
        "10.0.0.2:8080",
    ];
}
