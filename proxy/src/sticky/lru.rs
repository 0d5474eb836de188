//! A map of fixed capacity that forgets its least recently used entry when
//! full. Entries sit in one `Vec` (never longer than the capacity) linked
//! by index in recency order, so every operation is O(1) and no peer can
//! make it grow.

use std::collections::HashMap;
use std::hash::Hash;

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

    /// The value for `key`, marked most recently used.
    pub fn get(&mut self, key: &K) -> Option<&V> {
        let at = *self.index.get(key)?;
        self.touch(at);
        self.nodes.get(at).map(|n| &n.value)
    }

    /// Sets `key` to `value`, marked most recently used; when full, the
    /// least recently used entry makes room.
    pub fn insert(&mut self, key: K, value: V) {
        if let Some(&at) = self.index.get(&key) {
            if let Some(n) = self.nodes.get_mut(at) {
                n.value = value;
            }
            self.touch(at);
            return;
        }
        let node = Node {
            key: key.clone(),
            value,
            newer: None,
            older: None,
        };
        let at = match self.oldest {
            Some(old) if self.nodes.len() >= self.capacity => {
                self.unlink(old);
                let gone = std::mem::replace(&mut self.nodes[old], node);
                self.index.remove(&gone.key);
                old
            }
            _ => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        self.index.insert(key, at);
        self.link_newest(at);
    }

    /// Removes `key`, returning its value. The freed slot is filled by the
    /// last node so the `Vec` stays dense.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        let at = self.index.remove(key)?;
        self.unlink(at);
        let last = self.nodes.len() - 1;
        if at != last {
            self.unlink(last);
            self.nodes.swap(at, last);
            let moved_key = self.nodes[at].key.clone();
            self.index.insert(moved_key, at);
            // The moved entry becomes the newest: its recency is lost,
            // which only delays its eviction.
            self.link_newest(at);
        }
        self.nodes.pop().map(|n| n.value)
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
        let (newer, older) = (self.nodes[at].newer, self.nodes[at].older);
        match newer {
            Some(n) => self.nodes[n].older = older,
            None => self.newest = older,
        }
        match older {
            Some(o) => self.nodes[o].newer = newer,
            None => self.oldest = newer,
        }
        self.nodes[at].newer = None;
        self.nodes[at].older = None;
    }

    fn link_newest(&mut self, at: usize) {
        self.nodes[at].older = self.newest;
        self.nodes[at].newer = None;
        if let Some(n) = self.newest {
            self.nodes[n].newer = Some(at);
        }
        self.newest = Some(at);
        if self.oldest.is_none() {
            self.oldest = Some(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_used() {
        let mut l = Lru::new(2);
        l.insert("a", 1);
        l.insert("b", 2);
        assert_eq!(l.get(&"a"), Some(&1));
        l.insert("c", 3);
        assert_eq!(l.get(&"b"), None);
        assert_eq!(l.get(&"a"), Some(&1));
        assert_eq!(l.get(&"c"), Some(&3));
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn remove_keeps_the_rest_reachable() {
        let mut l = Lru::new(4);
        for (k, v) in [("a", 1), ("b", 2), ("c", 3), ("d", 4)] {
            l.insert(k, v);
        }
        assert_eq!(l.remove(&"a"), Some(1));
        assert_eq!(l.remove(&"zz"), None);
        assert_eq!(l.len(), 3);
        for (k, v) in [("b", 2), ("c", 3), ("d", 4)] {
            assert_eq!(l.get(&k), Some(&v));
        }
        l.insert("e", 5);
        l.insert("f", 6);
        assert_eq!(l.len(), 4);
        assert_eq!(l.oldest().map(|(k, _)| *k), Some("c"));
    }
}
