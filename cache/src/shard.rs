//! One shard of the cache: an LRU of primary keys, each holding the Vary
//! variants stored for it, byte accounting against the shard's budget,
//! and the fetches in flight for keys of this shard.

use std::collections::HashMap;
use std::mem::size_of;
use std::sync::Arc;
use std::time::SystemTime;

use lru::LruCache;

use crate::entry::Entry;
use crate::flight::Pending;
use crate::key::{Key, OwnedKey};

/// Fixed bytes an entry costs beyond its head, body and Vary tags: the
/// `Entry` struct, two `Arc` headers (entry, body), its pointer in the
/// variant list and the allocator's headers of its five allocations.
pub const ENTRY_OVERHEAD: usize =
    size_of::<Entry>() + 2 * 2 * size_of::<usize>() + size_of::<Arc<Entry>>() + 5 * ALLOC_HEADER;

/// Fixed bytes a primary key costs: the LRU node (key, slot, two links),
/// its hash-table bucket (two pointers and a control byte, counted twice
/// because the table may be half empty after growing), and allocator
/// headers for the node, the owned key and the variant list.
pub const SLOT_OVERHEAD: usize = size_of::<u64>()
    + size_of::<Slot>()
    + 2 * size_of::<usize>()
    + 2 * (2 * size_of::<usize>() + 1)
    + 3 * ALLOC_HEADER;

/// glibc malloc rounds and prefixes each allocation by about this much.
const ALLOC_HEADER: usize = 16;

/// Variants kept per primary key; more (a Vary on a high-cardinality
/// field) push out the oldest.
const MAX_VARIANTS: usize = 16;

pub(crate) struct Slot {
    key: OwnedKey,
    /// Most recently stored last.
    variants: Vec<Arc<Entry>>,
}

/// Hit-for-pass markers kept in the whole cache, shared evenly by the
/// shards: beyond it the least recently marked key is forgotten (its next
/// requests queue behind one fetch again, as before its unstorable answer).
pub const PASS_MARKERS: usize = 65_536;

pub(crate) struct Shard {
    lru: LruCache<u64, Slot>,
    /// Hit-for-pass: keys the origin recently answered unstorably, so until
    /// then their requests go straight to the origin instead of queueing
    /// behind each other's fetches; by the key's hash, to when. Apart from
    /// the stored keys and their byte budget: an unstorable answer evicts
    /// nothing stored, and a stream of unique URLs answered `no-store` holds
    /// at most this many markers (before, each held a slot until the budget
    /// pushed it out, expired or not). A 64-bit hash collision would let one
    /// request of another key pass the cache: a chance of about n/2^64.
    passes: LruCache<u64, SystemTime>,
    /// The most markers `passes` keeps; its own capacity is twice this (see `new`).
    pass_cap: usize,
    pub pending: HashMap<u64, Pending>,
    bytes: usize,
    entries: usize,
    budget: usize,
}

/// What an insertion did, for the metrics.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct InsertOutcome {
    pub stored: bool,
    pub evicted: u64,
}

pub(crate) fn entry_charge(entry: &Entry) -> usize {
    entry.payload_bytes().saturating_add(ENTRY_OVERHEAD)
}

fn slot_charge(key_bytes: usize) -> usize {
    key_bytes.saturating_add(SLOT_OVERHEAD)
}

impl Shard {
    /// A shard of `budget` bytes keeping up to `pass_markers` hit-for-pass markers.
    pub fn new(budget: usize, pass_markers: usize) -> Self {
        let pass_cap = pass_markers.max(1);
        // The markers' table is made for twice the markers kept, so that all of its memory
        // is taken here. Unique keys churn it: each marker pushed out leaves a deleted
        // entry, and when those use up the table's room hashbrown rehashes it in place if
        // it is at most half full, else allocates one twice the size. Made for just the
        // markers kept, that second table came minutes into a stream of unique misses (a
        // one-time step of 4.5 MB in RSS five minutes into the one-hour soak,
        // docs/RELIABILITY.md); made for twice as many, it is never more than half full.
        let table = std::num::NonZeroUsize::new(pass_cap.saturating_mul(2))
            .unwrap_or(std::num::NonZeroUsize::MIN);
        Shard {
            lru: LruCache::unbounded(),
            passes: LruCache::new(table),
            pass_cap,
            pending: HashMap::new(),
            bytes: 0,
            entries: 0,
            budget,
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn entries(&self) -> usize {
        self.entries
    }

    /// The stored variant matching `accept` for `key`, marked most recently used.
    #[inline]
    pub fn find(
        &mut self,
        hash: u64,
        key: &Key<'_>,
        accept: impl Fn(&Entry) -> bool,
    ) -> Option<Arc<Entry>> {
        let slot = self.lru.get(&hash)?;
        if !slot.key.matches(key) {
            return None;
        }
        slot.variants.iter().rev().find(|e| accept(e)).cloned()
    }

    /// Stores `entry`, replacing the variant with the same Vary tags, then
    /// evicts least recently used keys until the shard fits its budget.
    pub fn insert(&mut self, hash: u64, key: &Key<'_>, entry: Arc<Entry>) -> InsertOutcome {
        let charge = entry_charge(&entry);
        if charge.saturating_add(slot_charge(key.heap_bytes())) > self.budget {
            return InsertOutcome::default();
        }
        self.slot_for(hash, key);
        let mut released = 0;
        let mut removed_entries = 0;
        if let Some(slot) = self.lru.get_mut(&hash) {
            let before = slot.variants.len();
            slot.variants.retain(|old| {
                let keep = !old.same_variant(&entry);
                if !keep {
                    released += entry_charge(old);
                }
                keep
            });
            if slot.variants.len() >= MAX_VARIANTS {
                let oldest = slot.variants.remove(0);
                released += entry_charge(&oldest);
            }
            removed_entries = before.saturating_sub(slot.variants.len());
            slot.variants.push(entry);
        }
        self.passes.pop(&hash);
        self.bytes = self.bytes.saturating_sub(released).saturating_add(charge);
        self.entries = self
            .entries
            .saturating_sub(removed_entries)
            .saturating_add(1);
        let evicted = self.evict_to_budget(hash);
        InsertOutcome {
            stored: self.lru.contains(&hash),
            evicted,
        }
    }

    /// The slot for `key`, created (and charged) if absent, marked most
    /// recently used. A colliding key's slot is replaced.
    fn slot_for(&mut self, hash: u64, key: &Key<'_>) {
        if self
            .lru
            .peek(&hash)
            .is_some_and(|slot| !slot.key.matches(key))
        {
            self.remove(hash);
        }
        if self.lru.get(&hash).is_none() {
            let key = OwnedKey::from_key(key);
            self.bytes = self.bytes.saturating_add(slot_charge(key.heap_bytes()));
            let slot = Slot {
                key,
                variants: Vec::new(),
            };
            self.lru.put(hash, slot);
        }
    }

    /// Records hit-for-pass for the key of `hash` until `until`.
    pub fn mark_pass(&mut self, hash: u64, until: SystemTime) {
        // The least recently marked key is forgotten at `pass_cap`, before the table's own
        // (twice larger) capacity.
        if self.passes.len() >= self.pass_cap && !self.passes.contains(&hash) {
            self.passes.pop_lru();
        }
        self.passes.put(hash, until);
    }

    /// Whether a hit-for-pass marker for the key of `hash` is active at `now`.
    pub fn pass_active(&self, hash: u64, now: SystemTime) -> bool {
        self.passes.peek(&hash).is_some_and(|until| now < *until)
    }

    /// Hit-for-pass markers held (expired ones included, until pushed out).
    pub fn pass_markers(&self) -> usize {
        self.passes.len()
    }

    /// Drops least recently used keys, never `keep` unless alone, until
    /// the budget holds. Returns the number of entries evicted.
    fn evict_to_budget(&mut self, keep: u64) -> u64 {
        let mut evicted = 0u64;
        while self.bytes > self.budget {
            let Some((hash, _)) = self.lru.peek_lru() else {
                break;
            };
            let hash = *hash;
            if hash == keep && self.lru.len() > 1 {
                // Only reachable if `keep` were least recent; promote it.
                self.lru.promote(&hash);
                continue;
            }
            evicted = evicted.saturating_add(self.remove(hash) as u64);
        }
        evicted
    }

    /// Removes a key and all its variants; returns how many variants.
    pub fn remove(&mut self, hash: u64) -> usize {
        let Some(slot) = self.lru.pop(&hash) else {
            return 0;
        };
        let released: usize = slot.variants.iter().map(|e| entry_charge(e)).sum::<usize>()
            + slot_charge(slot.key.heap_bytes());
        self.bytes = self.bytes.saturating_sub(released);
        self.entries = self.entries.saturating_sub(slot.variants.len());
        slot.variants.len()
    }

    /// Purge support: removes the key (`immediate`) or marks every variant
    /// stale (`invalidate`). Returns whether the key was stored.
    pub fn purge(&mut self, hash: u64, key: &Key<'_>, remove: bool) -> bool {
        if remove {
            self.passes.pop(&hash);
        }
        let Some(slot) = self.lru.peek(&hash) else {
            return false;
        };
        if !slot.key.matches(key) {
            return false;
        }
        if remove {
            self.remove(hash);
        } else {
            slot.variants.iter().for_each(|e| e.invalidate());
        }
        true
    }
}
