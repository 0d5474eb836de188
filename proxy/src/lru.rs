//! The proxy's one bounded map that forgets its least recently used entry when full: frang's
//! client table (Tempesta's `client_lru_size`), sticky sessions, JS-challenge passes and
//! sticky misses. (The response cache, which evicts by bytes, uses the `lru` crate.)
//!
//! Nodes live in one `Vec` that never grows past the capacity and are linked in recency
//! order by index, so lookups, touches and evictions are O(1), a full map reuses a node in
//! place without allocating, and no peer can make it grow, whatever the number of keys.

use std::collections::HashMap;
use std::hash::Hash;

/// How many of the least recently used entries a full map looks at for one it may evict
/// ([`Lru::get_or_insert_unpinned`]): bounded work per insert.
pub const EVICTION_SCAN: usize = 32;

#[derive(Debug)]
struct Node<K, V> {
    key: K,
    value: V,
    /// Towards the most recently used end.
    newer: Option<usize>,
    /// Towards the least recently used end.
    older: Option<usize>,
}

#[derive(Debug)]
pub struct Lru<K, V> {
    index: HashMap<K, usize>,
    nodes: Vec<Node<K, V>>,
    newest: Option<usize>,
    oldest: Option<usize>,
    capacity: usize,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    /// At most `capacity` entries (at least one).
    pub fn new(capacity: usize) -> Self {
        Lru {
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

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The value for `key`, marked most recently used.
    pub fn get(&mut self, key: &K) -> Option<&V> {
        self.get_mut(key).map(|v| &*v)
    }

    /// The value for `key`, marked most recently used.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let at = *self.index.get(key)?;
        self.touch(at);
        self.nodes.get_mut(at).map(|n| &mut n.value)
    }

    /// Sets `key` to `value`, marked most recently used; when full, the least recently used
    /// entry makes room.
    pub fn insert(&mut self, key: K, value: V) {
        if let Some(&at) = self.index.get(&key) {
            self.touch(at);
            if let Some(n) = self.nodes.get_mut(at) {
                n.value = value;
            }
            return;
        }
        let _ = self.get_or_insert_unpinned(key, || value, |_| false);
    }

    /// The value for `key`, created with `make` if absent (evicting the least recently used
    /// entry when full), marked most recently used.
    #[cfg(test)]
    pub fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> Option<&mut V> {
        self.get_or_insert_unpinned(key, make, |_| false)
    }

    /// As [`Lru::get_or_insert_with`], but an entry for which `pinned` says true is never
    /// evicted: when full, the oldest unpinned entry goes, and pinned entries met at the old
    /// end are moved to the recent end (so they do not clog it). At most [`EVICTION_SCAN`]
    /// entries are looked at; `None` when all of them are pinned (the caller refuses the new
    /// key rather than forget state that must not be forgotten).
    pub fn get_or_insert_unpinned(
        &mut self,
        key: K,
        make: impl FnOnce() -> V,
        mut pinned: impl FnMut(&mut V) -> bool,
    ) -> Option<&mut V> {
        if let Some(&at) = self.index.get(&key) {
            self.touch(at);
            return self.nodes.get_mut(at).map(|node| &mut node.value);
        }
        let at = if self.nodes.len() < self.capacity {
            self.nodes.push(Node {
                key: key.clone(),
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
            node.key = key.clone();
            node.value = make();
            at
        };
        self.index.insert(key, at);
        self.link_newest(at);
        self.nodes.get_mut(at).map(|node| &mut node.value)
    }

    /// Removes `key`, returning its value. The freed slot is filled by the last node so the
    /// `Vec` stays dense.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        let at = self.index.remove(key)?;
        self.unlink(at);
        let last = self.nodes.len().checked_sub(1)?;
        if at != last {
            self.unlink(last);
            self.nodes.swap(at, last);
            let moved_key = self.nodes.get(at)?.key.clone();
            self.index.insert(moved_key, at);
            // The moved entry becomes the newest: its recency is lost, which only delays
            // its eviction.
            self.link_newest(at);
        }
        self.nodes.pop().map(|n| n.value)
    }

    /// The value for `key`, its recency untouched (a background reader must not make an
    /// entry look recently used).
    pub fn peek_mut(&mut self, key: &K) -> Option<&mut V> {
        let at = *self.index.get(key)?;
        self.nodes.get_mut(at).map(|n| &mut n.value)
    }

    /// Every entry, in no particular order, recency untouched.
    pub fn for_each_mut(&mut self, mut f: impl FnMut(&K, &mut V)) {
        for node in &mut self.nodes {
            f(&node.key, &mut node.value);
        }
    }

    /// The least recently used entry, without touching it.
    pub fn oldest(&self) -> Option<(&K, &V)> {
        self.oldest
            .and_then(|at| self.nodes.get(at))
            .map(|n| (&n.key, &n.value))
    }

    fn touch(&mut self, at: usize) {
        if self.newest != Some(at) {
            self.unlink(at);
            self.link_newest(at);
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

    fn link_newest(&mut self, at: usize) {
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
#[path = "lru_tests.rs"]
mod tests;
