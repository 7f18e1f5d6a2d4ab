//! The byte budget every policy is held to.
//!
//! Policies only order keys; this wrapper owns the accounting (how many bytes
//! are held, the size of each entry) and the one rule shared by every tier:
//! before an entry is admitted, victims are evicted until it fits, and an
//! entry larger than the whole budget is not admitted at all (it would flush
//! the cache and then not fit anyway). Keeping the rule here means it is
//! written and tested once, and `used_bytes() <= capacity()` holds whatever
//! the policy does.
//!
//! **Plan-aware eviction.** Given [`Reservations`] (the server's scan sets,
//! `silt_cache::ScanSets`), the cache evicts by
//! `silt_cache::EntryState`: a victim the policy proposes that
//! registered scans will still read (`Reserved`) is set aside, out of the
//! policy's order, and the policy proposes the next; only when the policy has
//! nothing left (every entry is `Reserved`) does a set-aside entry go, the
//! one whose next use is furthest first: needed by no running scan before
//! needed by one (a queued query runs later), then the fewest remaining
//! scans, ties by least recent use, counted in
//! [`Insertion::reserved_evicted`]. A set-aside entry whose scans have all
//! passed is `Cached` again, and the policy had already chosen it: it is
//! evicted before the policy's next victims (in release order; released
//! together, least recently used first), unless it is read again meanwhile,
//! which returns it to the policy with the reads it had while set aside
//! replayed (so a hot entry does not come back as cold as a new one).
//! Returning released entries to the policy's order as new ones instead kept
//! every chunk a scan had read for a whole further round of the policy: under
//! `silt bench mixed` that turned sieve's scan resistance into scan
//! pollution. Released entries are found when the policy runs dry, or at an
//! eviction after a release ([`Reservations::epoch`]) once a quarter of the
//! set-aside count was evicted since the last such sweep (so sweeps cost O(1)
//! per eviction, amortised). The order among set-aside entries is taken when
//! the policy first runs dry and used until it is spent, or until the
//! reservations changed (a release, a scan starting) and a quarter of it was
//! used: counts may be stale meanwhile, an approximation that keeps eviction
//! O(log n) amortised.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::{CacheKey, EvictionPolicy};

/// Reads of a set-aside entry replayed to the policy when it returns, at
/// most: enough for every policy here to tell a hot entry from a cold one.
const MAX_REPLAYED_READS: u32 = 4;

/// A set-aside (Reserved) entry: when it was last read, and how often since
/// it was set aside.
#[derive(Debug, Clone, Copy)]
struct SetAside {
    tick: u64,
    reads: u32,
}

/// How many registered scans still need a key, and how many of those are
/// running: the plan's knowledge the tiers evict by. Implemented by
/// `silt_cache::ScanSets`.
pub trait Reservations<K>: Send + Sync {
    /// Registered scans that have not yet passed `key`.
    fn remaining_scans(&self, key: &K) -> u32;

    /// Of those, scans already executing (not waiting for a slot): an entry
    /// a running scan needs is used sooner than one only queued queries
    /// need, so among Reserved entries it is evicted last.
    fn running_scans(&self, key: &K) -> u32 {
        let _ = key;
        0
    }

    /// [`Self::running_scans`] and [`Self::remaining_scans`] of `key` at
    /// once, for implementations that answer both from one lookup (the scan
    /// sets ask the page tiers whether a memory-tier chunk is held below).
    fn running_and_remaining(&self, key: &K) -> (u32, u32) {
        (self.running_scans(key), self.remaining_scans(key))
    }

    /// Changes whenever some reservation is released, so a cache knows when
    /// entries it set aside as reserved may have become evictable.
    fn epoch(&self) -> u64;
}

/// A set of cached keys with their sizes, within a byte budget, evicting by a
/// pluggable [`EvictionPolicy`] (and, given [`Reservations`], plan-aware:
/// module doc). It holds no values: the tier keeps those and drops the ones
/// reported in [`Insertion::evicted`].
pub struct BudgetedCache<K> {
    capacity: u64,
    used: u64,
    /// Size and refetch cost of every held entry.
    sizes: HashMap<K, (u64, f64)>,
    policy: Box<dyn EvictionPolicy<K>>,
    reservations: Option<Arc<dyn Reservations<K>>>,
    /// Entries taken out of the policy's order because scans will read them:
    /// the tick of their last use and the reads since they were set aside.
    reserved: HashMap<K, SetAside>,
    /// Set-aside entries whose scans all passed, evicted before the policy's
    /// victims (the policy had chosen them already): the tick of each one's
    /// release; `released_order` lists them oldest release first (with
    /// stale pairs of entries since read, dropped or released again, skipped
    /// by their tick).
    released: HashMap<K, u64>,
    released_order: VecDeque<(K, u64)>,
    /// Victim order among `reserved`, best victim last; rebuilt when empty,
    /// or when the reservations changed since it was built and a quarter of
    /// it has been used (so a rebuild costs O(log n) per eviction, amortised).
    reserved_order: Vec<K>,
    /// The reservations' epoch and `reserved_order`'s length when it was built.
    order_built: (u64, usize),
    /// The reservations' epoch when `reserved` was last swept.
    swept_epoch: u64,
    /// Evictions since that sweep.
    evicted_since_sweep: u64,
    tick: u64,
}

/// What [`BudgetedCache::insert`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insertion<K> {
    /// Whether the entry is now cached.
    pub admitted: bool,
    /// Entries evicted to make room, in eviction order.
    pub evicted: Vec<K>,
    /// How many of `evicted` were still reserved by registered scans.
    pub reserved_evicted: u64,
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
            reservations: None,
            reserved: HashMap::new(),
            released: HashMap::new(),
            released_order: VecDeque::new(),
            reserved_order: Vec::new(),
            order_built: (0, 0),
            swept_epoch: 0,
            evicted_since_sweep: 0,
            tick: 0,
        }
    }

    /// Evicts plan-aware: entries `reservations` says scans will still read
    /// go last (module doc).
    pub fn with_reservations(mut self, reservations: Option<Arc<dyn Reservations<K>>>) -> Self {
        self.reservations = reservations;
        self
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
        let (size, cost) = *self.sizes.get(key)?;
        self.tick += 1;
        if self.released.remove(key).is_some() {
            // Read after its scans passed: the policy takes it back.
            self.restore(key.clone(), size, cost, 1);
        } else if let Some(aside) = self.reserved.get_mut(key) {
            aside.tick = self.tick;
            aside.reads += 1;
            let reads = aside.reads;
            if self.remaining(key) == 0 {
                // Its scans have passed: back in the policy's order.
                self.reserved.remove(key);
                self.restore(key.clone(), size, cost, reads);
            }
        } else {
            self.policy.on_access(key);
        }
        Some(size)
    }

    /// Admits `key` of `size` bytes with estimated refetch `cost` (see
    /// [`CostModel`](super::CostModel)), evicting until it fits. An entry
    /// already cached under `key` is replaced (and not listed as evicted). An
    /// entry larger than the budget is not admitted and evicts nothing.
    pub fn insert(&mut self, key: K, size: u64, cost: f64) -> Insertion<K> {
        self.remove(&key);
        if self.capacity == 0 || size > self.capacity {
            return Insertion {
                admitted: false,
                evicted: Vec::new(),
                reserved_evicted: 0,
            };
        }
        let (evicted, reserved_evicted) = self.evict_until(self.capacity - size);
        // Only a policy that lost track of entries can leave too little room;
        // the budget still holds.
        let admitted = self.used + size <= self.capacity;
        debug_assert!(admitted, "policy {} ran out of victims", self.policy.name());
        if admitted {
            self.used += size;
            self.sizes.insert(key.clone(), (size, cost));
            self.policy.on_insert(key, size, cost);
        }
        Insertion {
            admitted,
            evicted,
            reserved_evicted,
        }
    }

    /// Drops `key` (e.g. its object changed version); returns its size if it
    /// was cached.
    pub fn remove(&mut self, key: &K) -> Option<u64> {
        let (size, _) = self.sizes.remove(key)?;
        self.used -= size;
        if self.reserved.remove(key).is_none() && self.released.remove(key).is_none() {
            self.policy.remove(key);
        }
        Some(size)
    }

    /// Records that `key`'s entry now takes `size` bytes, no more than before
    /// (an entry replaced by a smaller form of itself, keeping its place in
    /// the policy's order); returns whether it was cached.
    pub fn shrink(&mut self, key: &K, size: u64) -> bool {
        match self.sizes.get_mut(key) {
            Some((held, _)) if size <= *held => {
                self.used -= *held - size;
                *held = size;
                true
            }
            _ => false,
        }
    }

    /// Changes the budget; a smaller one evicts (plan-aware, like an insert)
    /// until the held bytes fit, and returns what was evicted.
    pub fn set_capacity(&mut self, capacity: u64) -> Insertion<K> {
        self.capacity = capacity;
        let (evicted, reserved_evicted) = self.evict_until(capacity);
        Insertion {
            admitted: true,
            evicted,
            reserved_evicted,
        }
    }

    /// Evicts (plan-aware) until at most `target` bytes are held; returns
    /// the victims and how many of them were reserved.
    fn evict_until(&mut self, target: u64) -> (Vec<K>, u64) {
        let (mut evicted, mut reserved_evicted) = (Vec::new(), 0);
        // A sweep costs one look per set-aside entry: at most one per quarter
        // of them evicted since the last (and whenever the policy runs dry).
        if self.used > target && self.evicted_since_sweep * 4 >= self.reserved.len() as u64 {
            self.sweep_released();
        }
        while self.used > target {
            let Some((victim, was_reserved)) = self.next_victim() else {
                break;
            };
            if let Some((freed, _)) = self.sizes.remove(&victim) {
                self.used -= freed;
            }
            reserved_evicted += u64::from(was_reserved);
            evicted.push(victim);
            self.evicted_since_sweep += 1;
        }
        (evicted, reserved_evicted)
    }

    fn remaining(&self, key: &K) -> u32 {
        self.reservations.as_ref().map_or(0, |r| r.remaining_scans(key))
    }

    /// Moves set-aside entries whose scans have all passed to the released
    /// queue (the next victims), when some reservation was released since
    /// the last sweep.
    fn sweep_released(&mut self) {
        let Some(reservations) = &self.reservations else {
            return;
        };
        let epoch = reservations.epoch();
        if epoch == self.swept_epoch || self.reserved.is_empty() {
            return;
        }
        self.swept_epoch = epoch;
        self.evicted_since_sweep = 0;
        let mut released: Vec<(u64, K)> = self
            .reserved
            .iter()
            .filter(|(k, _)| reservations.remaining_scans(k) == 0)
            .map(|(k, aside)| (aside.tick, k.clone()))
            .collect();
        // Least recently used first.
        released.sort_unstable_by_key(|(tick, _)| *tick);
        for (_, key) in released {
            if self.reserved.remove(&key).is_some() {
                self.tick += 1;
                self.released.insert(key.clone(), self.tick);
                self.released_order.push_back((key, self.tick));
            }
        }
    }

    /// Returns a set-aside entry to the policy with the reads it had while
    /// set aside (up to [`MAX_REPLAYED_READS`]): the policy lost its history
    /// when it proposed it, and without them a hot entry (the kind many
    /// scans reserve) would come back as cold as a new one, and go first.
    fn restore(&mut self, key: K, size: u64, cost: f64, reads: u32) {
        self.policy.on_insert(key.clone(), size, cost);
        for _ in 0..reads.min(MAX_REPLAYED_READS) {
            self.policy.on_access(&key);
        }
    }

    /// Takes `victim` (out of the policy's order) aside as Reserved.
    fn set_aside(&mut self, victim: K) {
        self.tick += 1;
        self.reserved.insert(
            victim,
            SetAside {
                tick: self.tick,
                reads: 0,
            },
        );
    }

    /// The next entry to evict, and whether scans still needed it: released
    /// entries, then the policy's victims that are not reserved, then the
    /// set-aside ones.
    fn next_victim(&mut self) -> Option<(K, bool)> {
        loop {
            while let Some((victim, released_at)) = self.released_order.pop_front() {
                if self.released.get(&victim) != Some(&released_at) {
                    continue;
                }
                self.released.remove(&victim);
                if self.remaining(&victim) == 0 {
                    return Some((victim, false));
                }
                // Reserved again by a scan registered since.
                self.set_aside(victim);
            }
            while let Some(victim) = self.policy.pop_victim() {
                if self.remaining(&victim) == 0 {
                    return Some((victim, false));
                }
                self.policy.kept(&victim);
                self.set_aside(victim);
            }
            if self.reserved.is_empty() {
                return None;
            }
            // Only Reserved entries are left in order: first those whose
            // scans have passed since (they are Cached again) go.
            self.sweep_released();
            if !self.released.is_empty() {
                continue;
            }
            let reservations = self.reservations.as_ref().expect("reserved entries imply reservations");
            let (built_epoch, built_len) = self.order_built;
            let stale = reservations.epoch() != built_epoch && (built_len - self.reserved_order.len()) * 4 >= built_len;
            if self.reserved_order.is_empty() || stale {
                let mut order: Vec<(bool, u32, u64, K)> = self
                    .reserved
                    .iter()
                    .map(|(k, &SetAside { tick, .. })| {
                        let (running, remaining) = reservations.running_and_remaining(k);
                        (running > 0, remaining, tick, k.clone())
                    })
                    .collect();
                // Best victim last: no running scan needs it, then fewest
                // remaining scans, then least recent use.
                order.sort_by_key(|o| std::cmp::Reverse((o.0, o.1, o.2)));
                self.reserved_order = order.into_iter().map(|(_, _, _, k)| k).collect();
                self.order_built = (reservations.epoch(), self.reserved_order.len());
            }
            while let Some(victim) = self.reserved_order.pop() {
                if self.reserved.remove(&victim).is_some() {
                    let still = self.remaining(&victim) > 0;
                    return Some((victim, still));
                }
            }
        }
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
                let held: u64 = c.sizes.values().map(|(s, _)| s).sum();
                assert_eq!(held, c.used_bytes(), "{kind} lost count");
                assert_eq!(
                    c.len(),
                    c.policy.len() + c.reserved.len() + c.released.len(),
                    "{kind} out of step with its policy"
                );
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
        assert_eq!(ins.reserved_evicted, 0);
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
    fn a_smaller_capacity_evicts_until_the_entries_fit() {
        let mut c = cache(100);
        for k in 0..4 {
            c.insert(k, 25, 0.0);
        }
        let shrunk = c.set_capacity(60);
        assert_eq!(shrunk.evicted, [0, 1]);
        assert_eq!((c.used_bytes(), c.capacity()), (50, 60));
        assert!(!c.insert(9, 61, 0.0).admitted);
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

    /// Key `k` is read by `scans[k]` registered scans, of which the keys in
    /// `running` have a running one.
    struct Plan {
        scans: std::sync::Mutex<HashMap<u64, u32>>,
        running: Vec<u64>,
        epoch: std::sync::atomic::AtomicU64,
    }

    impl Plan {
        fn new(scans: &[(u64, u32)]) -> Arc<Self> {
            Self::running(scans, &[])
        }
        fn running(scans: &[(u64, u32)], running: &[u64]) -> Arc<Self> {
            Arc::new(Plan {
                scans: std::sync::Mutex::new(scans.iter().copied().collect()),
                running: running.to_vec(),
                epoch: Default::default(),
            })
        }
        fn reserve(&self, key: u64) {
            *self.scans.lock().unwrap().entry(key).or_default() += 1;
            self.epoch.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        fn release(&self, key: u64) {
            self.scans.lock().unwrap().remove(&key);
            self.epoch.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    impl Reservations<u64> for Plan {
        fn remaining_scans(&self, key: &u64) -> u32 {
            self.scans.lock().unwrap().get(key).copied().unwrap_or(0)
        }
        fn running_scans(&self, key: &u64) -> u32 {
            u32::from(self.running.contains(key) && self.remaining_scans(key) > 0)
        }
        fn epoch(&self) -> u64 {
            self.epoch.load(std::sync::atomic::Ordering::Relaxed)
        }
    }

    fn plan_aware(capacity: u64, plan: &Arc<Plan>) -> BudgetedCache<u64> {
        cache(capacity).with_reservations(Some(plan.clone() as Arc<dyn Reservations<u64>>))
    }

    #[test]
    fn a_reserved_entry_survives_an_eviction_that_would_take_it_and_goes_once_released() {
        let plan = Plan::new(&[(0, 1)]);
        let mut c = plan_aware(100, &plan);
        for k in 0..4 {
            c.insert(k, 25, 0.0);
        }
        // LRU alone would take 0 first; it is reserved, so 1 goes.
        let ins = c.insert(4, 25, 0.0);
        assert_eq!((ins.evicted, ins.reserved_evicted), (vec![1], 0));
        assert!(c.contains(&0));
        // Released (its last scan just read it): Cached again, and the
        // policy had chosen it: it goes first.
        plan.release(0);
        let mut evicted = Vec::new();
        for k in 5..9 {
            let ins = c.insert(k, 25, 0.0);
            assert_eq!(ins.reserved_evicted, 0);
            evicted.extend(ins.evicted);
        }
        assert_eq!(evicted, [0, 2, 3, 4]);
        assert_eq!(c.len(), c.policy.len() + c.reserved.len() + c.released.len());
    }

    #[test]
    fn reserved_entries_go_only_when_nothing_else_is_left_fewest_remaining_scans_first() {
        let plan = Plan::new(&[(0, 3), (1, 1), (2, 2), (3, 1)]);
        let mut c = plan_aware(100, &plan);
        for k in 0..4 {
            c.insert(k, 25, 0.0);
        }
        let ins = c.insert(9, 50, 0.0);
        // 1 and 3 have one scan left each; 1 was set aside first (less recent).
        assert_eq!((ins.evicted, ins.reserved_evicted), (vec![1, 3], 2));
        assert!(ins.admitted && c.used_bytes() <= c.capacity());
        // Reading a reserved entry keeps it reserved while its scans remain.
        assert_eq!(c.access(&0), Some(25));
        let ins = c.insert(10, 25, 0.0);
        // 9 is not reserved: the policy's victim, before any reserved one.
        assert_eq!((ins.evicted, ins.reserved_evicted), (vec![9], 0));
    }

    #[test]
    fn among_reserved_entries_those_only_queued_queries_need_go_first() {
        // 1 and 3 have one scan left, but a running scan needs 1: 3 goes,
        // then 2 (queued only, two scans) before 1 and 0 (running).
        let plan = Plan::running(&[(0, 3), (1, 1), (2, 2), (3, 1)], &[0, 1]);
        let mut c = plan_aware(100, &plan);
        for k in 0..4 {
            c.insert(k, 25, 0.0);
        }
        let ins = c.insert(9, 50, 0.0);
        assert_eq!((ins.evicted, ins.reserved_evicted), (vec![3, 2], 2));
    }

    #[test]
    fn a_released_entry_goes_first_unless_read_again_or_reserved_again() {
        let plan = Plan::new(&[(0, 1), (1, 1), (2, 1)]);
        let mut c = plan_aware(100, &plan);
        for k in 0..4 {
            c.insert(k, 25, 0.0);
        }
        // LRU proposes 0, 1, 2: set aside; 3 goes.
        assert_eq!(c.insert(4, 25, 0.0).evicted, vec![3]);
        for k in 0..3 {
            plan.release(k);
        }
        // Released, in the order the policy had chosen them: 0 goes first.
        assert_eq!(c.insert(5, 25, 0.0).evicted, vec![0]);
        // 1 is read again (back to the policy, as its most recent entry),
        // 2 is reserved again by a new scan: LRU's victim 4 goes instead.
        c.access(&1);
        plan.reserve(2);
        assert_eq!(c.insert(6, 25, 0.0).evicted, vec![4]);
        assert!(c.contains(&1) && c.contains(&2));
        assert_eq!(c.len(), c.policy.len() + c.reserved.len() + c.released.len());
    }

    #[test]
    fn a_set_aside_entry_returns_with_the_reads_it_had_meanwhile() {
        // LFU: 0 is proposed first (the least used), set aside while a scan
        // reads it four times, then released: it must come back that hot.
        let plan = Plan::new(&[(0, 1)]);
        let mut c = BudgetedCache::new(100, PolicyKind::Lfu.build())
            .with_reservations(Some(plan.clone() as Arc<dyn Reservations<u64>>));
        for k in 0..4 {
            c.insert(k, 25, 1.0);
        }
        for k in 1..4 {
            c.access(&k);
        }
        let ins = c.insert(4, 25, 1.0);
        assert!(!ins.evicted.contains(&0), "0 is reserved");
        for _ in 0..3 {
            c.access(&0);
        }
        plan.release(0);
        c.access(&0);
        // 2 and 3 go first (older), then 4 and 5, read once; returned
        // without its reads, 0 would tie with them and go before 5.
        for k in 5..9 {
            c.insert(k, 25, 1.0);
        }
        assert!(c.contains(&0), "the reads 0 had while set aside were lost");
        assert!(!c.contains(&4) && !c.contains(&5));
    }
}
