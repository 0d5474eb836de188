//! A fixed-capacity map from client address to state that forgets the
//! least recently seen client when full (Tempesta's `client_lru_size`).
//!
//! Nodes live in one `Vec` allocated up to the capacity and are linked in
//! recency order by index, so lookups, touches and evictions are O(1) and
//! memory never grows past the bound, whatever the number of addresses.

use std::collections::HashMap;
use std::net::IpAddr;

/// How many of the least recently seen entries a full map looks at for one
/// it may evict: bounded work per insert.
pub(crate) const EVICTION_SCAN: usize = 32;

#[derive(Debug)]
struct Node<V> {
    key: IpAddr,
    value: V,
    /// Towards the most recently seen end.
    newer: Option<usize>,
    /// Towards the least recently seen end.
    older: Option<usize>,
}

#[derive(Debug)]
pub(crate) struct LruMap<V> {
    index: HashMap<IpAddr, usize>,
    nodes: Vec<Node<V>>,
    newest: Option<usize>,
    oldest: Option<usize>,
    capacity: usize,
}

impl<V> LruMap<V> {
    /// A map holding at most `capacity` entries (at least one).
    pub fn new(capacity: usize) -> Self {
        LruMap {
            index: HashMap::new(),
            nodes: Vec::new(),
            newest: None,
            oldest: None,
            capacity: capacity.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The entry for `key`, marked as most recently seen.
    pub fn get_mut(&mut self, key: &IpAddr) -> Option<&mut V> {
        let at = *self.index.get(key)?;
        self.touch(at);
        self.nodes.get_mut(at).map(|node| &mut node.value)
    }

    /// The entry for `key`, created with `make` if absent (evicting the least
    /// recently seen entry when full), marked as most recently seen.
    #[cfg(test)]
    pub fn get_or_insert_with(&mut self, key: IpAddr, make: impl FnOnce() -> V) -> Option<&mut V> {
        self.get_or_insert_unpinned(key, make, |_| false)
    }

    /// As [`LruMap::get_or_insert_with`], but an entry for which `pinned` says
    /// true is never evicted: when full, the oldest unpinned entry goes, and
    /// pinned entries met at the old end are moved to the recent end (so they
    /// do not clog it). At most [`EVICTION_SCAN`] entries are looked at; `None`
    /// when all of them are pinned (the caller refuses the new key rather than
    /// forget state that must not be forgotten).
    pub fn get_or_insert_unpinned(
        &mut self,
        key: IpAddr,
        make: impl FnOnce() -> V,
        mut pinned: impl FnMut(&mut V) -> bool,
    ) -> Option<&mut V> {
        if let Some(&at) = self.index.get(&key) {
            self.touch(at);
            return self.nodes.get_mut(at).map(|node| &mut node.value);
        }
        let at = if self.nodes.len() < self.capacity {
            self.nodes.push(Node {
                key,
                value: make(),
                newer: None,
                older: None,
            });
            self.nodes.len().checked_sub(1)?
        } else {
            // Reuse an evictable node in place: no allocation once full.
            let mut found = None;
            for _ in 0..EVICTION_SCAN.min(self.nodes.len()) {
                let at = self.oldest?;
                if !pinned(&mut self.nodes.get_mut(at)?.value) {
                    found = Some(at);
                    break;
                }
                self.touch(at);
            }
            let at = found?;
            self.unlink(at);
            let node = self.nodes.get_mut(at)?;
            self.index.remove(&node.key);
            node.key = key;
            node.value = make();
            at
        };
        self.index.insert(key, at);
        self.push_newest(at);
        self.nodes.get_mut(at).map(|node| &mut node.value)
    }

    fn touch(&mut self, at: usize) {
        if self.newest != Some(at) {
            self.unlink(at);
            self.push_newest(at);
        }
    }

    fn unlink(&mut self, at: usize) {
        let Some(node) = self.nodes.get_mut(at) else {
            return;
        };
        let (newer, older) = (node.newer.take(), node.older.take());
        match newer.and_then(|i| self.nodes.get_mut(i)) {
            Some(n) => n.older = older,
            None => self.newest = older,
        }
        match older.and_then(|i| self.nodes.get_mut(i)) {
            Some(n) => n.newer = newer,
            None => self.oldest = newer,
        }
    }

    fn push_newest(&mut self, at: usize) {
        let previous = self.newest;
        if let Some(node) = self.nodes.get_mut(at) {
            node.older = previous;
            node.newer = None;
        }
        match previous.and_then(|i| self.nodes.get_mut(i)) {
            Some(n) => n.newer = Some(at),
            None => self.oldest = Some(at),
        }
        self.newest = Some(at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(n))
    }

    #[test]
    fn pinned_entries_are_never_evicted() {
        let mut map: LruMap<bool> = LruMap::new(3);
        map.get_or_insert_with(ip(1), || true);
        map.get_or_insert_with(ip(2), || true);
        map.get_or_insert_with(ip(3), || false);
        // ip(1) and ip(2) are the oldest but pinned: ip(3) goes.
        assert!(map
            .get_or_insert_unpinned(ip(4), || false, |v| *v)
            .is_some());
        assert!(map.get_mut(&ip(3)).is_none());
        assert!(map.get_mut(&ip(1)).is_some() && map.get_mut(&ip(2)).is_some());
        // Everything pinned: the new key is refused, nothing is forgotten.
        if let Some(v) = map.get_mut(&ip(4)) {
            *v = true;
        }
        assert!(map
            .get_or_insert_unpinned(ip(5), || false, |v| *v)
            .is_none());
        assert_eq!(map.len(), 3);
        // Once one is unpinned it can make room.
        if let Some(v) = map.get_mut(&ip(2)) {
            *v = false;
        }
        assert!(map
            .get_or_insert_unpinned(ip(5), || false, |v| *v)
            .is_some());
        assert!(map.get_mut(&ip(2)).is_none());
    }

    #[test]
    fn evicts_least_recently_seen() {
        let mut map = LruMap::new(2);
        *map.get_or_insert_with(ip(1), || 0).unwrap() = 10;
        *map.get_or_insert_with(ip(2), || 0).unwrap() = 20;
        // Seeing 1 again makes 2 the oldest.
        assert_eq!(map.get_mut(&ip(1)).copied(), Some(10));
        *map.get_or_insert_with(ip(3), || 0).unwrap() = 30;
        assert_eq!(map.len(), 2);
        assert!(map.get_mut(&ip(2)).is_none());
        assert_eq!(map.get_mut(&ip(1)).copied(), Some(10));
        assert_eq!(map.get_mut(&ip(3)).copied(), Some(30));
        // A re-inserted key starts fresh.
        assert_eq!(map.get_or_insert_with(ip(2), || 0).copied(), Some(0));
        assert!(map.get_mut(&ip(1)).is_none());
    }

    #[test]
    fn capacity_one_and_many_keys_stay_bounded() {
        let mut map = LruMap::new(0);
        for n in 0..100 {
            map.get_or_insert_with(ip(n), || n);
        }
        assert_eq!(map.len(), 1);
        assert_eq!(map.get_mut(&ip(99)).copied(), Some(99));

        let mut map = LruMap::new(64);
        for n in 0..10_000 {
            map.get_or_insert_with(ip(n % 1000), || n);
            assert!(map.len() <= 64);
        }
        // The most recent 64 keys are the ones kept.
        for n in 936..1000 {
            assert!(map.get_mut(&ip(n)).is_some(), "{n}");
        }
    }
}
