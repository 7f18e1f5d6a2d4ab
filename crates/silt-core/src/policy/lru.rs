//! Least recently used: evict the entry whose last use is oldest.
//!
//! The baseline every other policy is measured against, and the right choice
//! when recency is all that predicts reuse. O(1) per operation: a hash map
//! from key to node in a recency list; a hit moves the node to the front, the
//! victim is the back.

use std::collections::HashMap;

use super::list::{NodeId, SlabList};
use super::{CacheKey, EvictionPolicy, PolicyKind};

/// LRU over keys `K`. Sizes and costs are ignored: every entry is equally
/// worth keeping, only its recency counts.
pub struct Lru<K> {
    index: HashMap<K, NodeId>,
    order: SlabList<K>,
}

impl<K: CacheKey> Lru<K> {
    /// An empty policy.
    pub fn new() -> Self {
        Lru {
            index: HashMap::new(),
            order: SlabList::new(),
        }
    }
}

impl<K: CacheKey> Default for Lru<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: CacheKey> EvictionPolicy<K> for Lru<K> {
    fn on_insert(&mut self, key: K, _size: u64, _cost: f64) {
        match self.index.get(&key) {
            Some(&id) => self.order.move_to_front(id),
            None => {
                let id = self.order.push_front(key.clone());
                self.index.insert(key, id);
            }
        }
    }

    fn on_access(&mut self, key: &K) {
        if let Some(&id) = self.index.get(key) {
            self.order.move_to_front(id);
        }
    }

    fn remove(&mut self, key: &K) -> bool {
        match self.index.remove(key) {
            Some(id) => {
                self.order.remove(id);
                true
            }
            None => false,
        }
    }

    fn pop_victim(&mut self) -> Option<K> {
        let key = self.order.remove(self.order.back()?);
        self.index.remove(&key);
        Some(key)
    }

    fn len(&self) -> usize {
        self.index.len()
    }

    fn name(&self) -> &'static str {
        PolicyKind::Lru.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::{drain, insert_all};

    #[test]
    fn evicts_least_recently_used_first() {
        let mut lru = Lru::new();
        insert_all(&mut lru, &[1, 2, 3]);
        lru.on_access(&1);
        assert_eq!(drain(&mut lru), [2, 3, 1]);
    }

    #[test]
    fn reinsert_refreshes_and_remove_forgets() {
        let mut lru = Lru::new();
        insert_all(&mut lru, &[1, 2, 3]);
        lru.on_insert(1, 10, 0.0);
        assert!(lru.remove(&2));
        assert!(!lru.remove(&2));
        lru.on_access(&2);
        assert_eq!(lru.len(), 2);
        assert_eq!(drain(&mut lru), [3, 1]);
    }
}
