//! Primary cache keys: vhost + method class + URI. GET and HEAD share the
//! GET class so HEAD is answered from the GET entry. Shards and the LRU are
//! indexed by a keyed 64-bit hash (no allocation per lookup); the full key
//! is kept beside the stored data and compared, so a hash collision is a
//! miss, never a wrong response.

use std::hash::{BuildHasher, Hash, Hasher};

/// A key borrowed from the request being served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key<'a> {
    pub vhost: &'a str,
    pub class: &'a str,
    pub uri: &'a [u8],
}

impl<'a> Key<'a> {
    pub fn new(vhost: &'a str, method: &'a str, uri: &'a [u8]) -> Self {
        let class = if method.eq_ignore_ascii_case("HEAD") || method.eq_ignore_ascii_case("GET") {
            "GET"
        } else {
            method
        };
        Key { vhost, class, uri }
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.vhost.len() + self.class.len() + self.uri.len()
    }

    pub(crate) fn hash_with(&self, hasher: &impl BuildHasher) -> u64 {
        let mut h = hasher.build_hasher();
        // Length prefixes keep ("ab", "c") and ("a", "bc") apart.
        self.vhost.len().hash(&mut h);
        self.vhost.hash(&mut h);
        self.class.hash(&mut h);
        self.uri.hash(&mut h);
        h.finish()
    }
}

/// A key owned by stored data or a pending fetch: one allocation holding
/// vhost, class and URI back to back (one cache line to compare on a hit).
#[derive(Debug)]
pub(crate) struct OwnedKey {
    bytes: Box<[u8]>,
    vhost_len: usize,
    class_len: usize,
}

impl OwnedKey {
    pub fn from_key(key: &Key<'_>) -> Self {
        let mut bytes = Vec::with_capacity(key.heap_bytes());
        bytes.extend_from_slice(key.vhost.as_bytes());
        bytes.extend_from_slice(key.class.as_bytes());
        bytes.extend_from_slice(key.uri);
        OwnedKey {
            bytes: bytes.into(),
            vhost_len: key.vhost.len(),
            class_len: key.class.len(),
        }
    }

    pub fn matches(&self, key: &Key<'_>) -> bool {
        self.vhost_len == key.vhost.len()
            && self.class_len == key.class.len()
            && self.bytes.len() == key.heap_bytes()
            && self.bytes.get(..self.vhost_len) == Some(key.vhost.as_bytes())
            && self
                .bytes
                .get(self.vhost_len..self.vhost_len + self.class_len)
                == Some(key.class.as_bytes())
            && self.bytes.get(self.vhost_len + self.class_len..) == Some(key.uri)
    }

    pub fn heap_bytes(&self) -> usize {
        self.bytes.len()
    }
}
