//! The byte budget every policy is held to.
//!
//! Policies only order keys; this wrapper owns the accounting (how many bytes
//! are held, the size of each entry) and the one rule shared by every tier:
//! before an entry is admitted, victims are evicted until it fits, and an
//! entry larger than the whole budget is not admitted at all (it would flush
//! the cache and then not fit anyway). Keeping the rule here means it is
//! written and tested once, and `used_bytes() <= capacity()` holds whatever
//! the policy does.

use std::collections::HashMap;

use super::{CacheKey, EvictionPolicy};

/// A set of cached keys with their sizes, within a byte budget, evicting by a
/// pluggable [`EvictionPolicy`]. It holds no values: the tier keeps those and
/// drops the ones reported in [`Insertion::evicted`].
pub struct BudgetedCache<K> {
    capacity: u64,
    used: u64,
    sizes: HashMap<K, u64>,
    policy: Box<dyn EvictionPolicy<K>>,
}

/// What [`BudgetedCache::insert`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insertion<K> {
    /// Whether the entry is now cached.
    pub admitted: bool,
    /// Entries evicted to make room, in eviction order.
    pub evicted: Vec<K>,
}

impl<K: CacheKey> BudgetedCache<K> {
    /// An empty cache of `capacity` bytes ordered by `policy` (which should be
    /// empty). A capacity of 0 caches nothing, not even empty entries, so a
    /// tier can be switched off by its budget.
    pub fn new(capacity: u64, policy: Box<dyn EvictionPolicy<K>>) -> Self {
        BudgetedCache {
            capacity,
            used: 0,
            sizes: HashMap::new(),
            policy,
        }
    }

    /// The budget in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes held now; never more than [`capacity`](Self::capacity).
    pub fn used_bytes(&self) -> u64 {
        self.used
    }

    /// Number of cached entries.
    pub fn len(&self) -> usize {
        self.sizes.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }

    /// Whether `key` is cached, without counting as a use.
    pub fn contains(&self, key: &K) -> bool {
        self.sizes.contains_key(key)
    }

    /// The name of the policy in use, for reports.
    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    /// A read of `key`: if cached, records the hit with the policy and returns
    /// the entry's size; `None` is a miss.
    pub fn access(&mut self, key: &K) -> Option<u64> {
        let size = *self.sizes.get(key)?;
        self.policy.on_access(key);
        Some(size)
    }

    /// Admits `key` of `size` bytes with estimated refetch `cost` (see
    /// [`CostModel`](super::CostModel)), evicting until it fits. An entry
    /// already cached under `key` is replaced (and not listed as evicted). An
    /// entry larger than the budget is not admitted and evicts nothing.
    pub fn insert(&mut self, key: K, size: u64, cost: f64) -> Insertion<K> {
        self.remove(&key);
        let mut evicted = Vec::new();
        if self.capacity == 0 || size > self.capacity {
            return Insertion {
                admitted: false,
                evicted,
            };
        }
        while self.used + size > self.capacity {
            let Some(victim) = self.policy.pop_victim() else {
                break;
            };
            if let Some(freed) = self.sizes.remove(&victim) {
                self.used -= freed;
            }
            evicted.push(victim);
        }
        // Only a policy that lost track of entries can leave too little room;
        // the budget still holds.
        let admitted = self.used + size <= self.capacity;
        debug_assert!(admitted, "policy {} ran out of victims", self.policy.name());
        if admitted {
            self.used += size;
            self.sizes.insert(key.clone(), size);
            self.policy.on_insert(key, size, cost);
        }
        Insertion { admitted, evicted }
    }

    /// Drops `key` (e.g. its object changed version); returns its size if it
    /// was cached.
    pub fn remove(&mut self, key: &K) -> Option<u64> {
        let size = self.sizes.remove(key)?;
        self.used -= size;
        self.policy.remove(key);
        Some(size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicyKind;
    use crate::policy::testing::XorShift;

    fn cache(capacity: u64) -> BudgetedCache<u64> {
        BudgetedCache::new(capacity, PolicyKind::Lru.build())
    }

    #[test]
    fn budget_is_never_exceeded() {
        for kind in PolicyKind::ALL {
            let mut rng = XorShift::new(7);
            let mut c = BudgetedCache::new(10_000, kind.build());
            for _ in 0..20_000 {
                let key = rng.below(500);
                let size = 1 + key * 37 % 3_000;
                match rng.below(10) {
                    0 => {
                        c.remove(&key);
                    }
                    1..=4 => {
                        c.insert(key, size, size as f64);
                    }
                    _ => {
                        if c.access(&key).is_none() {
                            let ins = c.insert(key, size, size as f64);
                            assert!(ins.admitted && c.contains(&key));
                            assert!(ins.evicted.iter().all(|k| !c.contains(k)), "{kind}");
                        }
                    }
                }
                assert!(c.used_bytes() <= c.capacity(), "{kind} over budget");
                let held: u64 = c.sizes.values().sum();
                assert_eq!(held, c.used_bytes(), "{kind} lost count");
                assert_eq!(c.len(), c.policy.len(), "{kind} out of step with its policy");
            }
        }
    }

    #[test]
    fn evicts_until_the_new_entry_fits() {
        let mut c = cache(100);
        for k in 0..4 {
            assert!(c.insert(k, 25, 0.0).evicted.is_empty());
        }
        let ins = c.insert(9, 60, 0.0);
        assert_eq!(ins.evicted, [0, 1, 2]);
        assert!(ins.admitted);
        assert_eq!(c.used_bytes(), 85);
    }

    #[test]
    fn too_large_entries_are_refused_without_flushing() {
        let mut c = cache(100);
        c.insert(1, 50, 0.0);
        let ins = c.insert(2, 101, 0.0);
        assert!(!ins.admitted && ins.evicted.is_empty());
        assert!(c.contains(&1) && !c.contains(&2));
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let mut c = cache(0);
        assert!(!c.insert(1, 0, 0.0).admitted);
        assert!(c.is_empty());
    }

    #[test]
    fn replacing_an_entry_recharges_its_size() {
        let mut c = cache(100);
        c.insert(1, 30, 0.0);
        c.insert(1, 50, 0.0);
        assert_eq!((c.len(), c.used_bytes()), (1, 50));
        assert_eq!(c.remove(&1), Some(50));
        assert_eq!((c.len(), c.used_bytes(), c.policy_name()), (0, 0, "lru"));
    }
}
