//! S3-FIFO (Yang et al., "FIFO queues are all you need for cache eviction",
//! SOSP '23).
//!
//! Most entries of a cache are read once and never again (a scan, a one-off
//! query). S3-FIFO filters them out early with three FIFO queues:
//!
//! - **small** (about 10% of the bytes held): every new entry starts here.
//!   When the small queue is over its share, its oldest entry leaves: to the
//!   main queue if it was read while in small, otherwise out of the cache,
//!   its key remembered in the ghost queue.
//! - **main** (the rest): a FIFO with reinsertion. The oldest entry is
//!   evicted if its 2-bit frequency counter is 0; otherwise the counter is
//!   decremented and the entry goes back to the head.
//! - **ghost**: keys (no data) recently evicted from small, up to about as
//!   many bytes as main holds. An entry admitted again while its key is a
//!   ghost was evicted too early, so it goes straight to main.
//!
//! Hits only bump a saturating counter (no list surgery), so like SIEVE it
//! is cheap on hits; unlike SIEVE a one-hit wonder never reaches main, so a
//! long scan cannot flush the entries that are read again.
//!
//! Sizes are in bytes throughout: the queues' shares are of bytes held, as
//! the tiers budget bytes. Costs are ignored.
//!
//! `foyer-memory` has an S3-FIFO, but its queues are intrusive lists over
//! foyer's own entry records (raw pointers, values owned by the cache), with
//! no way to ask for a victim key; it does not fit [`EvictionPolicy`], so this
//! is a small implementation over the shared [`SlabList`].

use std::collections::{HashMap, VecDeque};

use super::list::{NodeId, SlabList};
use super::{CacheKey, EvictionPolicy, PolicyKind};

/// The small queue's share of the bytes held, as in the paper.
const SMALL_SHARE: f64 = 0.1;
/// Highest value of the 2-bit frequency counter.
const MAX_FREQ: u8 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Queue {
    Small,
    Main,
}

struct Entry<K> {
    key: K,
    size: u64,
    freq: u8,
}

/// A FIFO queue of entries and the bytes they hold.
struct Fifo<K> {
    list: SlabList<Entry<K>>,
    bytes: u64,
}

impl<K> Fifo<K> {
    fn new() -> Self {
        Fifo {
            list: SlabList::new(),
            bytes: 0,
        }
    }

    fn push(&mut self, entry: Entry<K>) -> NodeId {
        self.bytes += entry.size;
        self.list.push_front(entry)
    }

    fn remove(&mut self, id: NodeId) -> Entry<K> {
        let entry = self.list.remove(id);
        self.bytes -= entry.size;
        entry
    }

    /// Removes and returns the oldest entry.
    fn pop_oldest(&mut self) -> Option<Entry<K>> {
        let id = self.list.back()?;
        Some(self.remove(id))
    }
}

/// Keys recently evicted from the small queue, oldest first, bounded in the
/// bytes their entries held. A key that leaves early (admitted again) stays
/// in `order` as a stale record until it reaches the front or the queue is
/// compacted; `live` says which records still count.
struct Ghost<K> {
    /// key -> (sequence number of its live record, size).
    live: HashMap<K, (u64, u64)>,
    order: VecDeque<(K, u64)>,
    bytes: u64,
    next_seq: u64,
}

impl<K: CacheKey> Ghost<K> {
    fn new() -> Self {
        Ghost {
            live: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            next_seq: 0,
        }
    }

    fn add(&mut self, key: K, size: u64) {
        self.take(&key);
        self.next_seq += 1;
        self.live.insert(key.clone(), (self.next_seq, size));
        self.order.push_back((key, self.next_seq));
        self.bytes += size;
        // Stale records are at most as many as the live ones (plus slack), so
        // compaction is amortised O(1) per record.
        if self.order.len() > 2 * self.live.len() + 64 {
            let live = &self.live;
            self.order.retain(|(k, seq)| live.get(k).is_some_and(|(s, _)| s == seq));
        }
    }

    /// Forgets `key`; returns whether it was a ghost.
    fn take(&mut self, key: &K) -> bool {
        match self.live.remove(key) {
            Some((_, size)) => {
                self.bytes -= size;
                true
            }
            None => false,
        }
    }

    /// Forgets the oldest ghosts until at most `limit` bytes are remembered.
    fn trim(&mut self, limit: u64) {
        while self.bytes > limit {
            let Some((key, seq)) = self.order.pop_front() else {
                break;
            };
            if self.live.get(&key).is_some_and(|(s, _)| *s == seq) {
                self.take(&key);
            }
        }
    }
}

/// S3-FIFO over keys `K`.
pub struct S3Fifo<K> {
    index: HashMap<K, (Queue, NodeId)>,
    small: Fifo<K>,
    main: Fifo<K>,
    ghost: Ghost<K>,
}

impl<K: CacheKey> S3Fifo<K> {
    /// An empty policy.
    pub fn new() -> Self {
        S3Fifo {
            index: HashMap::new(),
            small: Fifo::new(),
            main: Fifo::new(),
            ghost: Ghost::new(),
        }
    }

    fn queue(&mut self, queue: Queue) -> &mut Fifo<K> {
        match queue {
            Queue::Small => &mut self.small,
            Queue::Main => &mut self.main,
        }
    }

    fn push(&mut self, queue: Queue, entry: Entry<K>) {
        let key = entry.key.clone();
        let id = self.queue(queue).push(entry);
        self.index.insert(key, (queue, id));
    }

    /// Whether the next victim comes from the small queue: it is over its
    /// share of the bytes held, or main has nothing to give.
    fn evict_from_small(&self) -> bool {
        let held = self.small.bytes + self.main.bytes;
        self.small.list.back().is_some()
            && (self.main.list.back().is_none() || self.small.bytes as f64 >= SMALL_SHARE * held as f64)
    }

    /// Takes the oldest small entry: read while in small, it moves to main
    /// (counter cleared) and `None` is returned; otherwise it is the victim
    /// and its key becomes a ghost.
    fn evict_small(&mut self) -> Option<K> {
        let mut entry = self.small.pop_oldest()?;
        self.index.remove(&entry.key);
        if entry.freq > 0 {
            entry.freq = 0;
            self.push(Queue::Main, entry);
            return None;
        }
        self.ghost.add(entry.key.clone(), entry.size);
        self.ghost.trim(self.main.bytes.max(1));
        Some(entry.key)
    }

    /// Takes the oldest main entry: with a non-zero counter it is decremented
    /// and the entry reinserted (`None`); otherwise it is the victim.
    fn evict_main(&mut self) -> Option<K> {
        let mut entry = self.main.pop_oldest()?;
        self.index.remove(&entry.key);
        if entry.freq > 0 {
            entry.freq -= 1;
            self.push(Queue::Main, entry);
            return None;
        }
        Some(entry.key)
    }
}

impl<K: CacheKey> Default for S3Fifo<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: CacheKey> EvictionPolicy<K> for S3Fifo<K> {
    fn on_insert(&mut self, key: K, size: u64, _cost: f64) {
        self.remove(&key);
        let queue = if self.ghost.take(&key) {
            Queue::Main
        } else {
            Queue::Small
        };
        self.push(queue, Entry { key, size, freq: 0 });
    }

    fn on_access(&mut self, key: &K) {
        if let Some(&(queue, id)) = self.index.get(key) {
            let entry = self.queue(queue).list.get_mut(id);
            entry.freq = (entry.freq + 1).min(MAX_FREQ);
        }
    }

    fn remove(&mut self, key: &K) -> bool {
        match self.index.remove(key) {
            Some((queue, id)) => {
                self.queue(queue).remove(id);
                true
            }
            None => false,
        }
    }

    /// Amortised O(1): every entry moved from small to main, and every
    /// reinsertion in main, spends a counter value that a hit paid for.
    fn pop_victim(&mut self) -> Option<K> {
        while !self.index.is_empty() {
            let victim = if self.evict_from_small() {
                self.evict_small()
            } else {
                self.evict_main()
            };
            if victim.is_some() {
                return victim;
            }
        }
        None
    }

    fn kept(&mut self, key: &K) {
        self.ghost.take(key);
    }

    fn len(&self) -> usize {
        self.index.len()
    }

    fn name(&self) -> &'static str {
        PolicyKind::S3Fifo.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::replay::{price, replay, summarize};
    use crate::policy::testing::{check_invariants, drain, insert_all, synthetic_traces};
    use crate::policy::{BudgetedCache, CostModel, PolicyKind};

    #[test]
    fn one_hit_wonders_leave_first_and_become_ghosts() {
        let mut s3 = S3Fifo::new();
        insert_all(&mut s3, &[1, 2, 3]);
        s3.on_access(&2);
        // Main is empty, so small gives: 1 (unread) goes; 2 (read) moves to
        // main; 3 goes.
        assert_eq!(s3.pop_victim(), Some(1));
        assert_eq!(s3.pop_victim(), Some(3));
        assert_eq!((s3.small.bytes, s3.main.bytes), (0, 1));
        // Ghosts are bounded by main's bytes (1 here): only 3 is remembered.
        // 3 comes back: straight to main, behind 2; 1 starts in small again.
        insert_all(&mut s3, &[3, 1]);
        assert_eq!((s3.index[&3].0, s3.index[&1].0), (Queue::Main, Queue::Small));
        assert_eq!(drain(&mut s3), [1, 2, 3]);
    }

    #[test]
    fn main_reinserts_entries_with_a_count_left() {
        let mut s3 = S3Fifo::new();
        insert_all(&mut s3, &[1, 2, 3]);
        for k in [1, 2, 3] {
            s3.on_access(&k);
        }
        // All three were read in small: the first eviction moves them to main
        // (counters cleared) and then takes main's oldest.
        assert_eq!(s3.pop_victim(), Some(1));
        assert_eq!(s3.small.list.len(), 0);
        for _ in 0..4 {
            s3.on_access(&2);
        }
        assert_eq!(
            s3.main.list.get(s3.index[&2].1).freq,
            MAX_FREQ,
            "2-bit counter saturates"
        );
        // 2 is passed over (3 -> 2) and 3, never read in main, leaves.
        assert_eq!(s3.pop_victim(), Some(3));
        assert_eq!(s3.main.list.get(s3.index[&2].1).freq, 2);
        assert_eq!(drain(&mut s3), [2]);
    }

    #[test]
    fn a_scan_goes_through_the_small_queue_only() {
        let mut cache = BudgetedCache::new(100, Box::new(S3Fifo::new()));
        // 90 hot keys, each read after its admission, then a scan of 500
        // keys read once: the scan evicts only its own keys (the small queue
        // keeps its 10% share), and every hot key stays.
        for _ in 0..3 {
            for k in 0..90u32 {
                if cache.access(&k).is_none() {
                    cache.insert(k, 1, 0.0);
                }
            }
        }
        for k in 1000..1500 {
            let ins = cache.insert(k, 1, 0.0);
            assert!(ins.evicted.iter().all(|&v| v >= 1000), "{k} evicted {:?}", ins.evicted);
        }
        assert!((0..90).all(|k| cache.contains(&k)));
    }

    #[test]
    fn ghosts_are_bounded_by_the_bytes_in_main() {
        let mut s3 = S3Fifo::new();
        for k in 0..10 {
            s3.on_insert(k, 10, 0.0);
            s3.on_access(&k);
        }
        for k in 100..10_000 {
            s3.on_insert(k, 10, 0.0);
            if s3.len() > 20 {
                s3.pop_victim();
            }
        }
        assert!(
            s3.ghost.bytes <= s3.main.bytes.max(1),
            "{} > {}",
            s3.ghost.bytes,
            s3.main.bytes
        );
        assert!(s3.ghost.order.len() <= 2 * s3.ghost.live.len() + 65);
    }

    #[test]
    fn keeps_its_invariants_under_random_operations() {
        let mut s3 = S3Fifo::new();
        check_invariants(&mut s3, 20_000);
        assert_eq!((s3.small.bytes, s3.main.bytes), (0, 0));
        assert_eq!(s3.small.list.len() + s3.main.list.len(), 0);
    }

    #[test]
    fn resists_a_scan_better_than_lru() {
        let (_, trace) = synthetic_traces(|_| 100)
            .into_iter()
            .find(|(name, _)| *name == "hot+scan")
            .expect("the shared traces include a scan");
        let priced = price(&trace, &CostModel::default(), |id| id);
        let capacity = summarize(&priced).footprint_bytes / 50;
        let s3 = replay(&priced, capacity, PolicyKind::S3Fifo);
        let lru = replay(&priced, capacity, PolicyKind::Lru);
        assert!(s3.hits > lru.hits, "s3-fifo {} <= lru {}", s3.hits, lru.hits);
    }
}
