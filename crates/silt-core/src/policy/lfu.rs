//! Frequency per byte, with dynamic aging (GreedyDual-Size-Frequency).
//!
//! Plain LFU has two faults in a byte-budgeted cache: a large entry read twice
//! outranks ten small entries read once each although it costs more space than
//! all of them, and an entry that was hot an hour ago keeps its count forever
//! and never leaves. This policy fixes both the standard way (Cherkasova's
//! GDSF; LFU-DA when sizes are equal):
//!
//! - an entry's priority is `L + frequency x weight / size`, so what counts is
//!   how often a *byte* of it is read (weighted, see [`Weighting`]);
//! - `L` (the inflation value) is raised to the priority of each victim as it
//!   leaves. A newly admitted or just-read entry starts from the current `L`,
//!   so entries that stop being read are overtaken by the ones that are,
//!   however high their old counts were: old hot entries can leave, and new
//!   entries are not starved by them.
//!
//! Priorities live in a `BTreeMap` keyed by (priority, sequence number): the
//! victim is the first key, a hit is one removal and one insertion, so every
//! operation is O(log n). Equal priorities evict the least recently touched.
//!
//! The same machinery with a cost-derived weight is
//! [`WeightedLfu`](super::WeightedLfu).

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;

use super::ranked::Priority;
use super::{CacheKey, EvictionPolicy, PolicyKind};

/// How an entry's refetch cost turns into the weight its frequency is
/// multiplied by. A type parameter rather than a field so that the two
/// policies built on [`Lfu`] are distinct types with their own names.
pub trait Weighting: Send + 'static {
    /// Which policy this weighting makes.
    const KIND: PolicyKind;

    /// The weight of an entry with estimated refetch `cost` (nanoseconds).
    /// Must be finite and non-negative.
    fn weight(cost: f64) -> f64;
}

/// Every entry weighs the same: size-normalized LFU.
pub struct Uniform;

impl Weighting for Uniform {
    const KIND: PolicyKind = PolicyKind::Lfu;

    fn weight(_cost: f64) -> f64 {
        1.0
    }
}

/// Position in the eviction order: lowest priority first, then oldest touch.
type Rank = (Priority, u64);

struct Slot {
    frequency: u64,
    /// `weight / size`: what one read of this entry is worth per byte.
    value_per_byte: f64,
    rank: Rank,
}

/// Size-normalized LFU with dynamic aging over keys `K` (the `lfu` policy);
/// with `W = ByCost` it is [`WeightedLfu`](super::WeightedLfu).
pub struct Lfu<K, W = Uniform> {
    slots: HashMap<K, Slot>,
    order: BTreeMap<Rank, K>,
    /// `L`: the priority of the last victim.
    inflation: f64,
    /// Tie-breaker, increasing on every touch.
    clock: u64,
    weighting: PhantomData<W>,
}

impl<K: CacheKey, W: Weighting> Lfu<K, W> {
    /// An empty policy.
    pub fn new() -> Self {
        Lfu {
            slots: HashMap::new(),
            order: BTreeMap::new(),
            inflation: 0.0,
            clock: 0,
            weighting: PhantomData,
        }
    }

    /// The current inflation value `L` (exposed for tests and diagnostics).
    pub fn inflation(&self) -> f64 {
        self.inflation
    }

    /// The rank an entry gets when touched now.
    fn next_rank(&mut self, frequency: u64, value_per_byte: f64) -> Rank {
        self.clock += 1;
        let priority = self.inflation + frequency as f64 * value_per_byte;
        (Priority(priority), self.clock)
    }
}

impl<K: CacheKey, W: Weighting> Default for Lfu<K, W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: CacheKey, W: Weighting> EvictionPolicy<K> for Lfu<K, W> {
    fn on_insert(&mut self, key: K, size: u64, cost: f64) {
        self.remove(&key);
        // A zero-byte entry is charged as one byte so its value stays finite.
        let value_per_byte = W::weight(cost) / size.max(1) as f64;
        let rank = self.next_rank(1, value_per_byte);
        self.order.insert(rank, key.clone());
        self.slots.insert(
            key,
            Slot {
                frequency: 1,
                value_per_byte,
                rank,
            },
        );
    }

    fn on_access(&mut self, key: &K) {
        let Some(slot) = self.slots.get(key) else {
            return;
        };
        let (old, frequency, value_per_byte) = (slot.rank, slot.frequency.saturating_add(1), slot.value_per_byte);
        let rank = self.next_rank(frequency, value_per_byte);
        if let Some(k) = self.order.remove(&old) {
            self.order.insert(rank, k);
        }
        if let Some(slot) = self.slots.get_mut(key) {
            slot.frequency = frequency;
            slot.rank = rank;
        }
    }

    fn remove(&mut self, key: &K) -> bool {
        match self.slots.remove(key) {
            Some(slot) => {
                self.order.remove(&slot.rank);
                true
            }
            None => false,
        }
    }

    fn pop_victim(&mut self) -> Option<K> {
        let ((Priority(priority), _), key) = self.order.pop_first()?;
        self.slots.remove(&key);
        self.inflation = self.inflation.max(priority);
        Some(key)
    }

    fn len(&self) -> usize {
        self.slots.len()
    }

    fn name(&self) -> &'static str {
        W::KIND.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::drain;

    #[test]
    fn keeps_the_frequent_entry() {
        let mut lfu: Lfu<u32> = Lfu::new();
        for k in [1, 2, 3] {
            lfu.on_insert(k, 100, 0.0);
        }
        for _ in 0..3 {
            lfu.on_access(&1);
        }
        lfu.on_access(&3);
        assert_eq!(drain(&mut lfu), [2, 3, 1]);
    }

    #[test]
    fn frequency_is_per_byte() {
        let mut lfu: Lfu<u32> = Lfu::new();
        // Read twice but ten times larger: worth less per byte than one read
        // of the small entry.
        lfu.on_insert(1, 1000, 0.0);
        lfu.on_access(&1);
        lfu.on_insert(2, 100, 0.0);
        assert_eq!(lfu.pop_victim(), Some(1));
    }

    #[test]
    fn aging_lets_a_once_hot_entry_leave() {
        let mut lfu: Lfu<u32> = Lfu::new();
        lfu.on_insert(0, 1, 0.0);
        for _ in 0..10 {
            lfu.on_access(&0);
        }
        // Key 0 (11 reads) is never read again; a stream of new entries each
        // read twice raises L on every eviction until it overtakes key 0.
        let mut evicted_hot_at = None;
        for k in 1..100 {
            lfu.on_insert(k, 1, 0.0);
            lfu.on_access(&k);
            if lfu.len() > 2 && lfu.pop_victim() == Some(0) {
                evicted_hot_at = Some(k);
                break;
            }
        }
        assert!(evicted_hot_at.is_some(), "a stale hot entry must age out");
        assert!(lfu.inflation() > 0.0);
    }

    #[test]
    fn reinsert_resets_the_count_and_remove_forgets() {
        let mut lfu: Lfu<u32> = Lfu::new();
        lfu.on_insert(1, 10, 0.0);
        lfu.on_access(&1);
        lfu.on_access(&1);
        lfu.on_insert(1, 10, 0.0);
        lfu.on_insert(2, 10, 0.0);
        // Both read once now; 1 was touched first.
        assert_eq!(lfu.pop_victim(), Some(1));
        assert!(lfu.remove(&2));
        assert!(!lfu.remove(&2));
        lfu.on_access(&2);
        assert!(lfu.is_empty());
    }
}
