//! [`Ranked`]: keys ordered by a score their owner computes, lowest first.
//!
//! The other policies score entries themselves from what the tier tells
//! them (insertions, hits). A cache whose scores come from outside the
//! policy (a client's compute-side cache scores a column chunk by its uses
//! times what a miss of it costs per byte, and counts uses of chunks it
//! does not hold) keeps them here: re-scoring and finding the lowest are
//! O(log n), and [`Ranked::lowest`] walks candidates in order without
//! evicting them, for an admission that must first know whether enough
//! lower-scored bytes could go.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use super::{CacheKey, EvictionPolicy};

/// A score or priority, ordered with `total_cmp` so it can key an ordered
/// map (here and in [`Lfu`](super::Lfu)).
#[derive(Debug, Clone, Copy)]
pub(super) struct Priority(pub(super) f64);

impl PartialEq for Priority {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Priority {}

impl PartialOrd for Priority {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Priority {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Keys by ascending score (ties: the earliest scored first).
#[derive(Debug)]
pub struct Ranked<K> {
    /// Each key's place in `order`.
    places: HashMap<K, (Priority, u64)>,
    order: BTreeMap<(Priority, u64), K>,
    /// Scorings so far: the tie-breaker.
    seq: u64,
}

impl<K> Default for Ranked<K> {
    fn default() -> Self {
        Ranked {
            places: HashMap::new(),
            order: BTreeMap::new(),
            seq: 0,
        }
    }
}

impl<K: CacheKey> Ranked<K> {
    /// An empty ranking.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ranks `key` at `score` (tracked or not).
    pub fn set(&mut self, key: K, score: f64) {
        self.remove(&key);
        self.seq += 1;
        let place = (Priority(score), self.seq);
        self.order.insert(place, key.clone());
        self.places.insert(key, place);
    }

    /// Stops ranking `key`; whether it was ranked.
    pub fn remove(&mut self, key: &K) -> bool {
        match self.places.remove(key) {
            Some(place) => {
                self.order.remove(&place);
                true
            }
            None => false,
        }
    }

    /// Every ranked key with its score, lowest score first.
    pub fn lowest(&self) -> impl Iterator<Item = (&K, f64)> {
        self.order.iter().map(|((score, _), key)| (key, score.0))
    }
}

/// As a policy: [`on_insert`](EvictionPolicy::on_insert) ranks a key at its
/// `cost`; hits change nothing (the owner re-scores with [`Ranked::set`]).
impl<K: CacheKey> EvictionPolicy<K> for Ranked<K> {
    fn on_insert(&mut self, key: K, _size: u64, cost: f64) {
        self.set(key, cost);
    }

    fn on_access(&mut self, _key: &K) {}

    fn remove(&mut self, key: &K) -> bool {
        Ranked::remove(self, key)
    }

    fn pop_victim(&mut self) -> Option<K> {
        let (_, key) = self.order.pop_first()?;
        self.places.remove(&key);
        Some(key)
    }

    fn len(&self) -> usize {
        self.places.len()
    }

    fn name(&self) -> &'static str {
        "ranked"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::check_invariants;

    #[test]
    fn keys_come_lowest_score_first_and_rescoring_moves_them() {
        let mut r = Ranked::new();
        r.set("a", 3.0);
        r.set("b", 1.0);
        r.set("c", 2.0);
        let order: Vec<_> = r.lowest().map(|(k, _)| *k).collect();
        assert_eq!(order, ["b", "c", "a"]);
        r.set("b", 5.0);
        assert_eq!(r.lowest().next(), Some((&"c", 2.0)));
        assert!(Ranked::remove(&mut r, &"c"));
        assert_eq!(r.pop_victim(), Some("a"));
        assert_eq!((r.pop_victim(), r.pop_victim()), (Some("b"), None));
    }

    #[test]
    fn tracks_exactly_what_it_was_given() {
        check_invariants(&mut Ranked::<u32>::new(), 20_000);
    }
}
