//! SIEVE (Zhang et al., "SIEVE is Simpler than LRU", NSDI '24).
//!
//! A FIFO queue with one visited bit per entry and a hand. New entries go to
//! the head; a hit only sets the bit (no reordering, so hits are cheap and
//! need no list surgery). To evict, the hand walks from where it last stopped
//! toward the head (wrapping to the tail), clearing visited bits, and evicts
//! the first unvisited entry; the hand then stays just ahead of it. Entries
//! that survive a pass keep their position, so one-hit wonders (a scan) leave
//! quickly while entries hit at least once per pass stay. Eviction is
//! amortised O(1): every bit the hand clears was set by a hit.

use std::collections::HashMap;

use super::list::{NodeId, SlabList};
use super::{CacheKey, EvictionPolicy, PolicyKind};

struct Entry<K> {
    key: K,
    visited: bool,
}

/// SIEVE over keys `K`. Sizes and costs are ignored.
pub struct Sieve<K> {
    index: HashMap<K, NodeId>,
    queue: SlabList<Entry<K>>,
    /// Where the next eviction starts looking; `None` means the tail.
    hand: Option<NodeId>,
}

impl<K: CacheKey> Sieve<K> {
    /// An empty policy.
    pub fn new() -> Self {
        Sieve {
            index: HashMap::new(),
            queue: SlabList::new(),
            hand: None,
        }
    }

    /// Unlinks node `id`, first stepping the hand past it if it points there.
    fn unlink(&mut self, id: NodeId) -> K {
        if self.hand == Some(id) {
            self.hand = self.queue.newer(id);
        }
        self.queue.remove(id).key
    }
}

impl<K: CacheKey> Default for Sieve<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: CacheKey> EvictionPolicy<K> for Sieve<K> {
    fn on_insert(&mut self, key: K, _size: u64, _cost: f64) {
        self.remove(&key);
        let id = self.queue.push_front(Entry {
            key: key.clone(),
            visited: false,
        });
        self.index.insert(key, id);
    }

    fn on_access(&mut self, key: &K) {
        if let Some(&id) = self.index.get(key) {
            self.queue.get_mut(id).visited = true;
        }
    }

    fn remove(&mut self, key: &K) -> bool {
        match self.index.remove(key) {
            Some(id) => {
                self.unlink(id);
                true
            }
            None => false,
        }
    }

    fn pop_victim(&mut self) -> Option<K> {
        let tail = self.queue.back()?;
        let mut cur = self.hand.unwrap_or(tail);
        loop {
            let entry = self.queue.get_mut(cur);
            if !entry.visited {
                break;
            }
            entry.visited = false;
            cur = self.queue.newer(cur).unwrap_or(tail);
        }
        self.hand = Some(cur);
        let key = self.unlink(cur);
        self.index.remove(&key);
        Some(key)
    }

    fn len(&self) -> usize {
        self.index.len()
    }

    fn name(&self) -> &'static str {
        PolicyKind::Sieve.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::{drain, insert_all};

    #[test]
    fn unvisited_entries_leave_in_insertion_order() {
        let mut sieve = Sieve::new();
        insert_all(&mut sieve, &[1, 2, 3]);
        assert_eq!(drain(&mut sieve), [1, 2, 3]);
    }

    #[test]
    fn visited_entry_survives_one_pass_in_place() {
        let mut sieve = Sieve::new();
        insert_all(&mut sieve, &[1, 2, 3, 4]);
        sieve.on_access(&1);
        sieve.on_access(&3);
        // The hand clears 1's bit and evicts 2, then stops there.
        assert_eq!(sieve.pop_victim(), Some(2));
        // A hit on 1 again before the hand returns keeps it once more; the
        // hand resumes at 3 (visited, cleared) and takes 4.
        sieve.on_access(&1);
        assert_eq!(sieve.pop_victim(), Some(4));
        // Wrapping to the tail: 1 is visited (cleared), 3 is not any more.
        assert_eq!(sieve.pop_victim(), Some(3));
        assert_eq!(sieve.pop_victim(), Some(1));
        assert_eq!(sieve.pop_victim(), None);
    }

    #[test]
    fn new_entries_do_not_move_the_hand_and_are_not_skipped() {
        let mut sieve = Sieve::new();
        insert_all(&mut sieve, &[1, 2, 3]);
        sieve.on_access(&1);
        assert_eq!(sieve.pop_victim(), Some(2));
        // 5 is newer than everything, so the hand (at 3) reaches it last.
        insert_all(&mut sieve, &[5]);
        assert_eq!(sieve.pop_victim(), Some(3));
        assert_eq!(sieve.pop_victim(), Some(5));
        assert_eq!(sieve.pop_victim(), Some(1));
    }

    #[test]
    fn removing_the_entry_under_the_hand_moves_the_hand_on() {
        let mut sieve = Sieve::new();
        insert_all(&mut sieve, &[1, 2, 3, 4]);
        sieve.on_access(&1);
        sieve.on_access(&3);
        assert_eq!(sieve.pop_victim(), Some(2));
        sieve.on_access(&1);
        assert!(sieve.remove(&3));
        assert_eq!(sieve.pop_victim(), Some(4));
        assert_eq!(drain(&mut sieve), [1]);
    }

    #[test]
    fn all_visited_evicts_the_oldest_after_one_lap() {
        let mut sieve = Sieve::new();
        insert_all(&mut sieve, &[1, 2, 3]);
        for k in [1, 2, 3] {
            sieve.on_access(&k);
        }
        assert_eq!(sieve.pop_victim(), Some(1));
    }
}
