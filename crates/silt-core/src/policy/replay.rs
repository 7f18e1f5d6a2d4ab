//! Offline replay of cache-access traces, to compare policies on real
//! workloads before they run in a tier.
//!
//! Pure computation (no I/O): a trace is a slice of `(entry id, size in
//! bytes)` in access order; reading trace files lives in `silt-bench`.
//! [`price`] gives every access its refetch cost with the same rule the disk
//! tier uses for a fetched page ([`CostModel::share_of_request`]: a share of
//! the GET that brings the entry, plus its own transfer and decode), so
//! `weighted-lfu` is replayed as it runs live. The simulated cache is
//! demand-filled: every access is a hit or a miss, and a miss inserts the
//! entry through [`BudgetedCache`], evicting as the policy says. Belady's
//! offline optimum is the reference row: no online policy can know the
//! future, so it bounds what a better policy could still win.

use std::collections::{BTreeSet, HashMap};

use super::{BudgetedCache, CostModel, PolicyKind};

/// One access: the entry's id and its size in bytes. An id is assumed to keep
/// its size; the size seen when an entry is inserted is the one charged.
pub type Access = (u64, u64);

/// An access with its estimated refetch cost in nanoseconds: what a replay
/// runs on. Built by [`price`].
pub type PricedAccess = (u64, u64, f64);

/// Prices every access as the live tier prices a fetched page: entries that
/// `fetch_group` maps to the same value are fetched by one GET, so each
/// costs `model.share_of_request(n, size)` where `n` is how many distinct
/// entries of the trace the group has. `|id| id` makes every entry its own
/// GET (`latency + transfer + decode` each).
pub fn price(accesses: &[Access], model: &CostModel, fetch_group: impl Fn(u64) -> u64) -> Vec<PricedAccess> {
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    for &(id, size) in accesses {
        sizes.entry(id).or_insert(size);
    }
    let mut members: HashMap<u64, usize> = HashMap::new();
    for &id in sizes.keys() {
        *members.entry(fetch_group(id)).or_default() += 1;
    }
    accesses
        .iter()
        .map(|&(id, size)| {
            let n = members.get(&fetch_group(id)).copied().unwrap_or(1);
            (id, size, model.share_of_request(n, size))
        })
        .collect()
}

/// Name of Belady's row in [`compare`].
pub const BELADY: &str = "belady";

/// Counts from one replay.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReplayStats {
    /// Accesses that found their entry cached.
    pub hits: u64,
    /// Accesses that did not.
    pub misses: u64,
    /// Bytes of the accesses that hit.
    pub hit_bytes: u64,
    /// Bytes of all accesses.
    pub total_bytes: u64,
    /// Estimated refetch time saved by hits, in nanoseconds (as [`price`]d):
    /// what `weighted-lfu` optimises.
    pub hit_cost: f64,
    /// Estimated refetch time of all accesses, in nanoseconds.
    pub total_cost: f64,
}

impl ReplayStats {
    fn record(&mut self, size: u64, cost: f64, hit: bool) {
        self.total_bytes += size;
        self.total_cost += cost;
        if hit {
            self.hits += 1;
            self.hit_bytes += size;
            self.hit_cost += cost;
        } else {
            self.misses += 1;
        }
    }

    /// Number of accesses replayed.
    pub fn accesses(&self) -> u64 {
        self.hits + self.misses
    }

    /// Hits per access (0 for an empty trace).
    pub fn hit_ratio(&self) -> f64 {
        ratio(self.hits as f64, self.accesses() as f64)
    }

    /// Bytes served from the cache per byte accessed (0 for an empty trace).
    pub fn byte_hit_ratio(&self) -> f64 {
        ratio(self.hit_bytes as f64, self.total_bytes as f64)
    }

    /// Share of the estimated refetch time that hits saved (0 for an empty
    /// trace).
    pub fn cost_hit_ratio(&self) -> f64 {
        ratio(self.hit_cost, self.total_cost)
    }
}

fn ratio(part: f64, whole: f64) -> f64 {
    if whole > 0.0 { part / whole } else { 0.0 }
}

/// The shape of a trace, for sizing the cache in a replay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TraceSummary {
    /// Accesses in the trace.
    pub accesses: u64,
    /// Distinct entry ids.
    pub distinct: u64,
    /// Bytes of all distinct entries: the capacity at which nothing is ever
    /// evicted, so capacities are given as fractions of it.
    pub footprint_bytes: u64,
}

/// Counts accesses, distinct entries and the footprint of `accesses`.
pub fn summarize(accesses: &[PricedAccess]) -> TraceSummary {
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    for &(id, size, _) in accesses {
        sizes.entry(id).or_insert(size);
    }
    TraceSummary {
        accesses: accesses.len() as u64,
        distinct: sizes.len() as u64,
        footprint_bytes: sizes.values().sum(),
    }
}

/// Replays `accesses` through a demand-filled cache of `capacity` bytes using
/// `policy`; each access's cost goes to cost-aware policies on insertion and
/// into [`ReplayStats::hit_cost`].
pub fn replay(accesses: &[PricedAccess], capacity: u64, policy: PolicyKind) -> ReplayStats {
    let mut cache = BudgetedCache::new(capacity, policy.build());
    let mut stats = ReplayStats::default();
    for &(id, size, c) in accesses {
        let hit = cache.access(&id).is_some();
        if !hit {
            cache.insert(id, size, c);
        }
        stats.record(size, c, hit);
    }
    stats
}

/// Belady's offline policy: on a miss, admit the entry, then while over budget
/// evict the cached entry (the new one included) whose next use is farthest in
/// the future, entries never used again first.
///
/// With equal sizes this is MIN, the optimal hit ratio. With varying sizes the
/// exact optimum is NP-hard; "farthest next use" is the standard approximation
/// used as the reference in the caching literature, and it is close to but not
/// a strict bound on what online policies reach, particularly in byte hit
/// ratio. Entries are admitted under the same rule as [`BudgetedCache`] (none
/// larger than the budget, none at all with a budget of 0).
///
/// O(n log n): next-use indices are precomputed in one backward pass, and the
/// cached entries are kept ordered by next use.
pub fn belady(accesses: &[PricedAccess], capacity: u64) -> ReplayStats {
    let next = next_uses(accesses);
    // id -> (next use, size), and the same entries ordered by next use.
    let mut held: HashMap<u64, (usize, u64)> = HashMap::new();
    let mut by_next: BTreeSet<(usize, u64)> = BTreeSet::new();
    let mut used = 0u64;
    let mut stats = ReplayStats::default();
    for (i, &(id, size, c)) in accesses.iter().enumerate() {
        let cached = held.get_mut(&id);
        stats.record(size, c, cached.is_some());
        if let Some(entry) = cached {
            by_next.remove(&(entry.0, id));
            entry.0 = next[i];
            by_next.insert((next[i], id));
            continue;
        }
        if capacity == 0 || size > capacity {
            continue;
        }
        held.insert(id, (next[i], size));
        by_next.insert((next[i], id));
        used += size;
        while used > capacity {
            let Some((_, victim)) = by_next.pop_last() else {
                break;
            };
            if let Some((_, freed)) = held.remove(&victim) {
                used -= freed;
            }
        }
    }
    stats
}

/// For each access, the index of the next access to the same id
/// (`usize::MAX` when there is none).
fn next_uses(accesses: &[PricedAccess]) -> Vec<usize> {
    let mut next = vec![usize::MAX; accesses.len()];
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for (i, &(id, _, _)) in accesses.iter().enumerate().rev() {
        if let Some(later) = seen.insert(id, i) {
            next[i] = later;
        }
    }
    next
}

/// Replays `accesses` with each of `policies` and then Belady, returning one
/// `(name, stats)` row per policy with Belady ([`BELADY`]) last.
pub fn compare(accesses: &[PricedAccess], capacity: u64, policies: &[PolicyKind]) -> Vec<(&'static str, ReplayStats)> {
    policies
        .iter()
        .map(|&p| (p.as_str(), replay(accesses, capacity, p)))
        .chain([(BELADY, belady(accesses, capacity))])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::synthetic_traces;

    const COST: CostModel = CostModel {
        request_latency: std::time::Duration::from_millis(1),
        bandwidth_bytes_per_sec: 1_000_000,
        decode_ns_per_byte: 0.0,
    };

    fn priced(trace: &[Access]) -> Vec<PricedAccess> {
        price(trace, &COST, |id| id)
    }

    #[test]
    fn lru_and_belady_on_a_small_trace() {
        let trace = priced(&[1, 2, 1, 3, 2, 1].map(|id| (id, 10)));
        // LRU with two slots: 1 2 1(hit) 3(evicts 2) 2(evicts 1) 1(evicts 3).
        let lru = replay(&trace, 20, PolicyKind::Lru);
        assert_eq!((lru.hits, lru.misses), (1, 5));
        // Belady at 3: keeps 1, and 3 (never used again) leaves for 2.
        let opt = belady(&trace, 20);
        assert_eq!((opt.hits, opt.hit_bytes, opt.total_bytes), (3, 30, 60));
        assert_eq!(opt.hit_ratio(), 0.5);
    }

    #[test]
    fn belady_is_at_least_every_online_policy_with_equal_sizes() {
        for (name, trace) in synthetic_traces(|_| 100) {
            let trace = priced(&trace);
            let footprint = summarize(&trace).footprint_bytes;
            for capacity in [footprint / 20, footprint / 5, footprint / 2] {
                let rows = compare(&trace, capacity, &PolicyKind::ALL);
                let (_, opt) = rows.last().copied().unwrap();
                for (policy, stats) in &rows {
                    assert!(
                        opt.hits >= stats.hits,
                        "{name} at {capacity}: belady {} < {policy} {}",
                        opt.hits,
                        stats.hits
                    );
                }
                assert!(opt.hits > 0, "{name} at {capacity}");
            }
        }
    }

    #[test]
    fn zero_capacity_never_hits() {
        for (_, trace) in synthetic_traces(|id| id % 7) {
            let trace = priced(&trace);
            for (policy, stats) in compare(&trace, 0, &PolicyKind::ALL) {
                assert_eq!((stats.hits, stats.hit_ratio()), (0, 0.0), "{policy}");
                assert_eq!(stats.misses, trace.len() as u64);
            }
        }
    }

    #[test]
    fn unbounded_capacity_misses_only_first_uses() {
        for (name, trace) in synthetic_traces(|id| 1 + id % 50 * 100) {
            let trace = priced(&trace);
            let summary = summarize(&trace);
            let expected = 1.0 - summary.distinct as f64 / summary.accesses as f64;
            for (policy, stats) in compare(&trace, summary.footprint_bytes, &PolicyKind::ALL) {
                assert!((stats.hit_ratio() - expected).abs() < 1e-12, "{name} {policy}");
                assert_eq!(
                    stats.total_bytes - stats.hit_bytes,
                    summary.footprint_bytes,
                    "{name} {policy}"
                );
            }
        }
    }

    #[test]
    fn rows_come_in_order_with_belady_last() {
        let names: Vec<_> = compare(&[], 10, &[PolicyKind::Sieve, PolicyKind::Lru])
            .into_iter()
            .map(|(n, s)| {
                assert_eq!(s.hit_ratio(), 0.0);
                n
            })
            .collect();
        assert_eq!(names, ["sieve", "lru", BELADY]);
    }

    #[test]
    fn next_uses_point_forward() {
        assert_eq!(
            next_uses(&priced(&[(1, 0), (2, 0), (1, 0)])),
            [2, usize::MAX, usize::MAX]
        );
    }

    #[test]
    fn entries_of_one_get_share_its_round_trip() {
        // Ids 10 and 11 come in one GET, 20 alone; repeats do not count twice.
        let trace = price(&[(10, 1000), (11, 1000), (20, 1000), (10, 1000)], &COST, |id| id / 10);
        let costs: Vec<f64> = trace.iter().map(|a| a.2).collect();
        let (shared, alone) = (COST.share_of_request(2, 1000), COST.cost(1000));
        assert_eq!(costs, [shared, shared, alone, shared]);
        assert!(alone > shared);
    }

    #[test]
    fn cost_aware_policy_saves_more_cost_when_gets_differ() {
        // Equal sizes and reuse; half the entries come alone, half in runs of
        // 16. Weighted LFU keeps the lone ones and saves more refetch time
        // than LFU, which cannot tell them apart.
        let mut rng = crate::policy::testing::XorShift::new(3);
        let trace: Vec<Access> = (0..20_000).map(|_| (rng.below(400), 100)).collect();
        let trace = price(&trace, &COST, |id| if id % 2 == 0 { id } else { 1_000 + id / 32 });
        let capacity = summarize(&trace).footprint_bytes / 4;
        let wlfu = replay(&trace, capacity, PolicyKind::WeightedLfu);
        let lfu = replay(&trace, capacity, PolicyKind::Lfu);
        assert!(
            wlfu.cost_hit_ratio() > lfu.cost_hit_ratio() + 0.03,
            "weighted-lfu {} vs lfu {}",
            wlfu.cost_hit_ratio(),
            lfu.cost_hit_ratio()
        );
    }
}
