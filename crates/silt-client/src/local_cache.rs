//! The compute-side cache: decoded column chunks kept next to the client's
//! DataFusion, so a scan whose row groups are all here runs without moving
//! data (FlexPushdownDB's "caching" half of hybrid execution).
//!
//! Entries are column chunks, one column of one row group of one object
//! version, named by the same [`ChunkKey`] the server's tiers use (the
//! table's name as the store, the column's index in the table); versions
//! come from the server's validated listing, so a chunk of an overwritten
//! object is never found again under the new version (it ages out under the
//! policy). Sizes are the held form's heap size
//! ([`CachedColumn::heap_size`]), and the budget is never exceeded: a chunk
//! that does not fit after evicting what the policy allows is not admitted.
//!
//! Eviction and admission follow a [`CachePolicy`], a score per chunk kept
//! in a [`Ranked`] order (so finding victims walks only the lowest-scored
//! chunks). The default, Weighted-LFU, scores a chunk by how often scans
//! used it times its *benefit per byte*: what a scan pays when the chunk is
//! not here, i.e. the bytes pushdown would move for it (its share of the
//! result: observed selectivity, for a projected column) plus the server's
//! work of scanning it, per byte of cache it takes. A filter-only column of
//! a selective scan thus ranks below a projected column of an unselective
//! one, which is FlexPushdownDB's point: keep what saves the most, not what
//! is used most.
//!
//! Chunks are kept in the server's column forms ([`CachedColumn`] in a
//! [`MemoryForm`]), liquid by default: close to Parquet's size, so the same
//! budget holds ~2-4x the row groups Arrow would, and a filtered read
//! decodes only the rows that pass ([`CachedColumn::filter`]). Types liquid
//! cannot encode stay Arrow.

use std::collections::HashMap;
use std::sync::Mutex;

use datafusion::arrow::array::ArrayRef;
use silt_core::policy::Ranked;
use silt_core::{CachedColumn, ChunkKey, MemoryForm};

use crate::aggregate_placement::{Placement, PlacementTimes, RunBytes, TryRates};

/// Which column chunks a full cache gives up first: what a chunk is scored by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CachePolicy {
    /// Uses × benefit per byte (see the module docs).
    #[default]
    WeightedLfu,
    /// Uses only.
    Lfu,
    /// Least recently used.
    Lru,
}

impl std::str::FromStr for CachePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "weighted-lfu" | "wlfu" => Ok(CachePolicy::WeightedLfu),
            "lfu" => Ok(CachePolicy::Lfu),
            "lru" => Ok(CachePolicy::Lru),
            other => Err(format!("unknown cache policy '{other}' (weighted-lfu, lfu, lru)")),
        }
    }
}

/// Relative cost of moving a byte from the server (per byte of result).
const NETWORK_WEIGHT: f64 = 1.0;
/// Relative cost of the server scanning a byte of a column.
const SCAN_WEIGHT: f64 = 0.25;

/// The benefit per byte of keeping a column chunk: `selectivity` of the scans
/// that read it when the column is returned, plus the server's scan work.
pub fn benefit_per_byte(projected: bool, selectivity: f64) -> f64 {
    let moved = if projected { selectivity.clamp(0.0, 1.0) } else { 0.0 };
    moved * NETWORK_WEIGHT + SCAN_WEIGHT
}

/// Uses of a column chunk (cached or not) that make it worth fetching.
pub const ADMIT_AFTER_USES: u64 = 2;

/// Column chunks remembered while not cached (their use counts, for admission).
const GHOSTS_REMEMBERED: usize = 1 << 16;

/// Scans (per table, filters, aggregate) whose measurements are kept; past
/// it the measurements start over rather than grow without bound.
const MAX_OBSERVED_KEYS: usize = 4096;

#[derive(Debug)]
struct Entry {
    column: CachedColumn,
    bytes: usize,
}

#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    uses: u64,
    last_use: u64,
    benefit: f64,
    /// The chunk's size in memory when it was last fetched (0: never).
    bytes: usize,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<ChunkKey, Entry>,
    /// The cached chunks by the policy's score, lowest first.
    ranked: Ranked<ChunkKey>,
    /// Uses of every chunk seen (cached or not, bounded for the latter).
    usage: HashMap<ChunkKey, Usage>,
    used: usize,
    tick: u64,
    /// Observed selectivity per (table, filters).
    selectivity: HashMap<String, f64>,
    /// The same, of pushed runs only (their join filters included).
    pushed_selectivity: HashMap<String, f64>,
    /// Tables whose server gives no layout (views, nested columns).
    no_layout: std::collections::HashSet<String>,
    /// Measured placements of scans per (table, filters, any partial aggregate).
    placement_times: HashMap<String, PlacementTimes>,
    /// What trying a placement costs per byte, learned from every scan.
    try_rates: TryRates,
    stats: LocalCacheStats,
}

/// Counters of a [`LocalCache`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LocalCacheStats {
    pub hits: u64,
    pub misses: u64,
    pub admitted: u64,
    pub evicted: u64,
    pub rejected: u64,
}

/// Decoded column chunks under a byte budget (see the module docs).
#[derive(Debug)]
pub struct LocalCache {
    budget: usize,
    policy: CachePolicy,
    form: MemoryForm,
    /// Bytes per second to the server ([`crate::path_cost`]).
    link_bytes_per_second: f64,
    /// Scans never pushed down ([`crate::SiltTableOptions::caching_only`]).
    caching_only: bool,
    inner: Mutex<Inner>,
}

impl LocalCache {
    pub fn new(budget: usize, policy: CachePolicy) -> Self {
        LocalCache {
            budget,
            policy,
            form: MemoryForm::default(),
            link_bytes_per_second: crate::path_cost::DEFAULT_LINK_BYTES_PER_SECOND,
            caching_only: false,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// This cache, for scans that are never pushed down when `on`.
    pub fn caching_only(mut self, on: bool) -> Self {
        self.caching_only = on;
        self
    }

    /// This cache, keeping column chunks in `form`.
    pub fn with_form(mut self, form: MemoryForm) -> Self {
        self.form = form;
        self
    }

    /// The form column chunks are kept in.
    pub fn form(&self) -> MemoryForm {
        self.form
    }

    /// This cache, for a client `bytes_per_second` from its server, as the
    /// user configured it. The path cost model does not read it: it runs on
    /// the estimates its client learns ([`crate::SiltClient::calibration`]),
    /// whose link prior the same option sets.
    pub fn with_link(mut self, bytes_per_second: f64) -> Self {
        self.link_bytes_per_second = bytes_per_second;
        self
    }

    pub fn link_bytes_per_second(&self) -> f64 {
        self.link_bytes_per_second
    }

    /// Whether scans through this cache are never pushed down.
    pub fn is_caching_only(&self) -> bool {
        self.caching_only
    }

    pub fn budget(&self) -> usize {
        self.budget
    }

    pub fn policy(&self) -> CachePolicy {
        self.policy
    }

    /// Bytes held now (never above the budget).
    pub fn used(&self) -> usize {
        self.lock().used
    }

    pub fn stats(&self) -> LocalCacheStats {
        self.lock().stats
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere cannot leave the maps inconsistent (every
        // mutation below completes before unlocking): keep serving.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that a scan uses `keys` (each with its benefit per byte).
    pub fn record_use(&self, keys: &[(ChunkKey, f64)]) {
        let mut inner = self.lock();
        let inner = &mut *inner;
        inner.tick += 1;
        let tick = inner.tick;
        if inner.usage.len() > GHOSTS_REMEMBERED + inner.entries.len() {
            let Inner { usage, entries, .. } = &mut *inner;
            usage.retain(|k, _| entries.contains_key(k));
        }
        for (key, benefit) in keys {
            let usage = inner.usage.entry(key.clone()).or_default();
            usage.uses += 1;
            usage.last_use = tick;
            // A running mean: the benefit as scans saw it lately.
            usage.benefit = if usage.uses == 1 {
                *benefit
            } else {
                0.7 * usage.benefit + 0.3 * benefit
            };
            let score = self.score(Some(usage));
            if inner.entries.contains_key(key) {
                inner.ranked.set(key.clone(), score);
            }
        }
    }

    /// Each of `keys`' column chunks that is cached (each counted as a hit
    /// or a miss).
    pub fn get_each(&self, keys: &[ChunkKey]) -> Vec<Option<CachedColumn>> {
        let mut inner = self.lock();
        let found: Vec<Option<CachedColumn>> = keys
            .iter()
            .map(|k| inner.entries.get(k).map(|e| e.column.clone()))
            .collect();
        let hits = found.iter().filter(|f| f.is_some()).count() as u64;
        inner.stats.hits += hits;
        inner.stats.misses += keys.len() as u64 - hits;
        found
    }

    fn score(&self, usage: Option<&Usage>) -> f64 {
        let u = usage.copied().unwrap_or_default();
        match self.policy {
            CachePolicy::WeightedLfu => u.uses as f64 * u.benefit,
            CachePolicy::Lfu => u.uses as f64,
            CachePolicy::Lru => u.last_use as f64,
        }
    }

    /// Cached chunks the policy would give up, lowest score first, to free
    /// `bytes`, none of them scoring `limit` or more and none in `keep`;
    /// `None` when that cannot free enough.
    fn victims(&self, inner: &Inner, bytes: usize, limit: f64, keep: &[ChunkKey]) -> Option<Vec<ChunkKey>> {
        if bytes > self.budget {
            return None;
        }
        let mut needed = (inner.used + bytes).saturating_sub(self.budget);
        if needed == 0 {
            return Some(Vec::new());
        }
        let mut out = Vec::new();
        for (key, score) in inner.ranked.lowest().filter(|(k, _)| !keep.contains(k)) {
            if score >= limit {
                return None;
            }
            out.push(key.clone());
            needed = needed.saturating_sub(inner.entries[key].bytes);
            if needed == 0 {
                return Some(out);
            }
        }
        None
    }

    /// Whether the policy would keep `chunks` (keys and their estimated
    /// sizes) if fetched, on top of `pending` bytes this scan already plans
    /// to fetch: each has been used [`ADMIT_AFTER_USES`] times, and they fit
    /// in free space or in place of chunks that score lower. Returns the
    /// bytes they are expected to take (a chunk fetched before counts at
    /// its real size, not the estimate).
    pub fn admission(&self, chunks: &[(ChunkKey, usize)], pending: usize) -> Option<usize> {
        self.admission_after(chunks, pending, ADMIT_AFTER_USES)
    }

    /// [`LocalCache::admission`] without the uses a chunk must have had:
    /// for a scan tried here on purpose ([`crate::aggregate_placement`]),
    /// which has run often enough already (pushed whole, where its chunks'
    /// uses are not seen).
    pub fn admission_now(&self, chunks: &[(ChunkKey, usize)], pending: usize) -> Option<usize> {
        self.admission_after(chunks, pending, 0)
    }

    /// [`LocalCache::admission`] with `uses` as the uses a chunk needs.
    fn admission_after(&self, chunks: &[(ChunkKey, usize)], pending: usize, uses: u64) -> Option<usize> {
        if self.budget == 0 || chunks.is_empty() {
            return None;
        }
        let inner = self.lock();
        let used_enough = chunks
            .iter()
            .all(|(k, _)| uses == 0 || inner.usage.get(k).is_some_and(|u| u.uses >= uses));
        if !used_enough {
            return None;
        }
        let bytes: usize = chunks
            .iter()
            .map(|(k, estimate)| match inner.usage.get(k).map(|u| u.bytes) {
                Some(known) if known > 0 => known,
                _ => *estimate,
            })
            .sum();
        let score = chunks
            .iter()
            .map(|(k, _)| self.score(inner.usage.get(k)))
            .fold(f64::INFINITY, f64::min);
        let keep: Vec<ChunkKey> = chunks.iter().map(|(k, _)| k.clone()).collect();
        self.victims(&inner, bytes + pending, score, &keep).map(|_| bytes)
    }

    /// Admits a row group's column `chunks` together (all or none), in the
    /// cache's [`MemoryForm`], evicting chunks that score lower than the
    /// lowest of them. Returns whether they were admitted (not when they
    /// cannot fit).
    pub fn insert_group(&self, chunks: Vec<(ChunkKey, ArrayRef)>) -> bool {
        // Encode before locking: scans of other row groups go on meanwhile.
        let chunks: Vec<(ChunkKey, CachedColumn, usize)> = chunks
            .into_iter()
            .map(|(k, a)| {
                let column = CachedColumn::encode(a, self.form);
                let bytes = column.heap_size();
                (k, column, bytes)
            })
            .collect();
        let mut inner = self.lock();
        let inner = &mut *inner;
        for (key, _, bytes) in &chunks {
            if let Some(old) = inner.entries.remove(key) {
                inner.used -= old.bytes;
                inner.ranked.remove(key);
            }
            inner.usage.entry(key.clone()).or_default().bytes = *bytes;
        }
        let total: usize = chunks.iter().map(|(_, _, b)| b).sum();
        let score = chunks
            .iter()
            .map(|(k, _, _)| self.score(inner.usage.get(k)))
            .fold(f64::INFINITY, f64::min);
        let keep: Vec<ChunkKey> = chunks.iter().map(|(k, _, _)| k.clone()).collect();
        let Some(victims) = self.victims(inner, total, score, &keep) else {
            inner.stats.rejected += chunks.len() as u64;
            return false;
        };
        for victim in victims {
            if let Some(e) = inner.entries.remove(&victim) {
                inner.ranked.remove(&victim);
                inner.used -= e.bytes;
                inner.stats.evicted += 1;
            }
        }
        for (key, column, bytes) in chunks {
            inner.used += bytes;
            inner.ranked.set(key.clone(), self.score(inner.usage.get(&key)));
            inner.entries.insert(key, Entry { column, bytes });
            inner.stats.admitted += 1;
        }
        true
    }

    /// The selectivity scans with `filters` on `table` showed last (`None`:
    /// never seen).
    pub fn selectivity(&self, filters: &str) -> Option<f64> {
        self.lock().selectivity.get(filters).copied()
    }

    /// Records that a scan with `filters` kept `kept` of `read` rows.
    pub fn observe_selectivity(&self, filters: &str, kept: usize, read: usize) {
        let mut inner = self.lock();
        observe(&mut inner.selectivity, filters, kept, read);
    }

    /// The selectivity pushed runs of scans with `filters` showed last.
    pub fn pushed_selectivity(&self, filters: &str) -> Option<f64> {
        self.lock().pushed_selectivity.get(filters).copied()
    }

    /// Records that a pushed scan with `filters` sent `kept` of `read` rows.
    pub fn observe_pushed_selectivity(&self, filters: &str, kept: usize, read: usize) {
        let mut inner = self.lock();
        observe(&mut inner.pushed_selectivity, filters, kept, read);
    }

    /// The measured placements of scans with `filters` (and any partial
    /// aggregate: [`crate::aggregate_placement`]), with what trying a
    /// placement costs per byte on this client.
    pub fn placement_times(&self, filters: &str) -> (PlacementTimes, TryRates) {
        let inner = self.lock();
        let times = inner.placement_times.get(filters).copied().unwrap_or_default();
        (times, inner.try_rates)
    }

    /// Records a run of such a scan in `placement` that took `elapsed` and
    /// read `bytes`.
    pub fn observe_placement(
        &self,
        filters: &str,
        placement: Placement,
        elapsed: std::time::Duration,
        bytes: RunBytes,
    ) {
        let mut inner = self.lock();
        if inner.placement_times.len() >= MAX_OBSERVED_KEYS && !inner.placement_times.contains_key(filters) {
            inner.placement_times.clear();
        }
        let warm = inner
            .placement_times
            .entry(filters.to_string())
            .or_default()
            .observe(placement, elapsed, bytes);
        inner.try_rates.observe(placement, warm, elapsed, bytes);
    }

    /// Whether `table`'s server gave no layout before (a view, a table
    /// with nested columns): its scans are pushed down whole.
    pub fn lacks_layout(&self, table: &str) -> bool {
        self.lock().no_layout.contains(table)
    }

    pub fn mark_no_layout(&self, table: &str) {
        self.lock().no_layout.insert(table.to_string());
    }
}

/// Folds `kept` of `read` rows into the running selectivity of `key`.
fn observe(map: &mut HashMap<String, f64>, key: &str, kept: usize, read: usize) {
    if read == 0 {
        return;
    }
    let observed = kept as f64 / read as f64;
    let entry = map.entry(key.to_string()).or_insert(observed);
    *entry = 0.5 * *entry + 0.5 * observed;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Array, BooleanArray, Int64Array};
    use datafusion::arrow::compute::filter;
    use silt_core::ObjectKey;

    use super::*;

    /// Column `column` (by name, of the tests' table) of row group `rg`.
    fn key(rg: u32, column: &str) -> ChunkKey {
        let columns = ["a", "frequent", "valuable", "big"];
        let index = columns.iter().position(|c| *c == column).expect("a test column") as u32;
        ChunkKey::new(ObjectKey::new("t", "t/a.parquet", "v1"), rg, index)
    }

    fn array(rows: usize) -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(0..rows as i64))
    }

    fn arrow_cache(budget: usize, policy: CachePolicy) -> LocalCache {
        LocalCache::new(budget, policy).with_form(MemoryForm::Arrow)
    }

    #[test]
    fn never_exceeds_its_budget_and_admits_only_after_uses() {
        let size = array(1000).get_array_memory_size();
        let cache = arrow_cache(size * 2, CachePolicy::WeightedLfu);
        let a = key(0, "a");
        assert!(cache.admission(&[(a.clone(), size)], 0).is_none(), "not used yet");
        cache.record_use(&[(a.clone(), 1.0)]);
        cache.record_use(&[(a.clone(), 1.0)]);
        assert_eq!(cache.admission(&[(a.clone(), size)], 0), Some(size));
        assert!(
            cache.admission(&[(a.clone(), size)], size * 2).is_none(),
            "no room beside what is pending"
        );
        assert!(cache.insert_group(vec![(a.clone(), array(1000))]));
        assert_eq!(cache.used(), size);
        for rg in 1..5 {
            let k = key(rg, "a");
            cache.record_use(&[(k.clone(), 1.0)]);
            cache.insert_group(vec![(k, array(1000))]);
            assert!(cache.used() <= cache.budget());
        }
        assert!(
            !cache.insert_group(vec![(key(9, "big"), array(10_000))]),
            "bigger than the budget"
        );
        assert!(cache.used() <= cache.budget());
    }

    #[test]
    fn weighted_lfu_keeps_what_saves_more_and_lfu_what_is_used_more() {
        let size = array(1000).get_array_memory_size();
        for (policy, kept) in [(CachePolicy::WeightedLfu, "valuable"), (CachePolicy::Lfu, "frequent")] {
            let cache = arrow_cache(size, policy);
            let frequent = key(0, "frequent");
            let valuable = key(0, "valuable");
            for _ in 0..3 {
                cache.record_use(&[(frequent.clone(), benefit_per_byte(false, 0.0))]);
            }
            for _ in 0..2 {
                cache.record_use(&[(valuable.clone(), benefit_per_byte(true, 1.0))]);
            }
            // The lower scorer is in the cache first; the higher one displaces it.
            let (first, second) = if kept == "valuable" {
                (frequent.clone(), valuable.clone())
            } else {
                (valuable.clone(), frequent.clone())
            };
            assert!(cache.insert_group(vec![(first.clone(), array(1000))]));
            assert!(cache.admission(&[(second.clone(), size)], 0).is_some(), "{policy:?}");
            assert!(cache.insert_group(vec![(second.clone(), array(1000))]));
            assert!(cache.get_each(std::slice::from_ref(&second))[0].is_some());
            assert!(cache.get_each(std::slice::from_ref(&first))[0].is_none());
            // And the displaced one cannot come back over it.
            assert!(cache.admission(&[(first, size)], 0).is_none(), "{policy:?}");
        }
    }

    #[test]
    fn another_version_is_another_segment() {
        let cache = LocalCache::new(1 << 20, CachePolicy::Lru);
        let old = key(0, "a");
        cache.insert_group(vec![(old.clone(), array(10))]);
        let new = ChunkKey {
            object: ObjectKey::new("t", "t/a.parquet", "v2"),
            ..old.clone()
        };
        assert!(cache.get_each(&[new])[0].is_none());
        assert!(cache.get_each(&[old])[0].is_some());
    }

    #[test]
    fn liquid_segments_are_smaller_and_decode_to_the_same_rows() {
        let values: ArrayRef = Arc::new(Int64Array::from_iter(
            (0..10_000i64).map(|i| (i % 7 != 0).then_some(i % 1000)),
        ));
        let cache = LocalCache::new(1 << 20, CachePolicy::Lru);
        assert_eq!(cache.form(), MemoryForm::Liquid, "liquid by default");
        assert!(cache.insert_group(vec![(key(0, "a"), values.clone())]));
        let segment = cache.get_each(&[key(0, "a")])[0].clone().unwrap();
        assert!(segment.is_liquid());
        assert!(segment.heap_size() < values.get_array_memory_size() / 2);
        assert_eq!(cache.used(), segment.heap_size(), "accounted at its liquid size");
        assert_eq!(&segment.to_arrow(), &values);
        let mask = BooleanArray::from_iter((0..10_000).map(|i| match i % 3 {
            0 => Some(true),
            1 => None,
            _ => Some(false),
        }));
        assert_eq!(&segment.filter(&mask).unwrap(), &filter(&values, &mask).unwrap());
    }
}
