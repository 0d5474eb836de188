//! The LRU's behaviour: recency, eviction, pinned entries, removal, the bound.

use std::net::{IpAddr, Ipv4Addr};

use super::*;

fn ip(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(n))
}

#[test]
fn pinned_entries_are_never_evicted() {
    let mut map: Lru<IpAddr, bool> = Lru::new(3);
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
    let mut map = Lru::new(2);
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
    let mut map = Lru::new(0);
    for n in 0..100 {
        map.get_or_insert_with(ip(n), || n);
    }
    assert_eq!(map.len(), 1);
    assert_eq!(map.get_mut(&ip(99)).copied(), Some(99));

    let mut map = Lru::new(64);
    for n in 0..10_000 {
        map.get_or_insert_with(ip(n % 1000), || n);
        assert!(map.len() <= 64);
    }
    // The most recent 64 keys are the ones kept.
    for n in 936..1000 {
        assert!(map.get_mut(&ip(n)).is_some(), "{n}");
    }
}

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
