//! The memory tier: decoded column batches, budgeted by their real buffer
//! sizes.
//!
//! A query that finds its columns here skips the object store, the disk and
//! Parquet decoding alike; this is what makes a warm pushdown scan cost only
//! its filter. Entries are one column of one batch of up to
//! [`BATCH_ROWS`] rows of one row group of one object version, so a query
//! touching two columns of a wide table keeps only those two in memory.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef};
use moka::sync::Cache;

use crate::page_cache::CacheMetrics;

/// Rows per cached batch (the unit of the memory tier and of the scan).
pub const BATCH_ROWS: usize = 8192;

/// Identifies one column of one batch of one row group of one object
/// version.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BatchKey {
    /// Which store (a server may read several buckets or folders).
    pub store: Arc<str>,
    /// The object's path in that store.
    pub path: Arc<str>,
    /// The object version the column was decoded from.
    pub version: Arc<str>,
    pub row_group: u32,
    /// Root column index in the table's schema.
    pub column: u32,
    /// Batch index within the row group (rows `batch * BATCH_ROWS ..`).
    pub batch: u32,
}

/// One cached column batch. An enum so the liquid form (issue 4) can join
/// Arrow without changing the tier's interface.
#[derive(Debug, Clone)]
pub enum CachedColumn {
    /// Plain decoded Arrow.
    Arrow(ArrayRef),
}

impl CachedColumn {
    /// Heap bytes the entry holds (the sizes of its buffers, as allocated).
    pub fn heap_size(&self) -> usize {
        match self {
            CachedColumn::Arrow(a) => a.get_array_memory_size(),
        }
    }

    /// The column as Arrow.
    pub fn to_arrow(&self) -> ArrayRef {
        match self {
            CachedColumn::Arrow(a) => a.clone(),
        }
    }
}

/// The byte-budgeted map from [`BatchKey`] to [`CachedColumn`], shared by
/// every table of a server. Eviction is moka's TinyLFU: a one-off scan of a
/// large table does not flush the columns hot queries keep using.
pub struct BatchCache {
    entries: Cache<BatchKey, CachedColumn>,
    capacity: u64,
    pub(crate) metrics: CacheMetrics,
}

impl BatchCache {
    /// A tier holding at most `capacity` bytes of decoded columns.
    pub fn new(capacity: u64, metrics: CacheMetrics) -> Arc<Self> {
        let entries = metrics.sized_cache(capacity, CachedColumn::heap_size);
        Arc::new(BatchCache {
            entries,
            capacity,
            metrics,
        })
    }

    /// The column batch for `key`, counting a hit or a miss.
    pub fn get(&self, key: &BatchKey) -> Option<CachedColumn> {
        let found = self.entries.get(key);
        self.metrics.record_lookup(found.as_ref().map(CachedColumn::heap_size));
        found
    }

    /// Whether `key` is held, without counting a lookup.
    pub fn contains(&self, key: &BatchKey) -> bool {
        self.entries.contains_key(key)
    }

    /// Admits a decoded column batch. An entry larger than the whole budget
    /// is not kept (moka would evict it at once).
    pub fn insert(&self, key: BatchKey, column: CachedColumn) {
        let size = column.heap_size() as u64;
        self.metrics.miss_bytes.increment(size);
        if size > self.capacity {
            return;
        }
        self.metrics.bytes.increment(size as f64);
        self.entries.insert(key, column);
    }

    /// Drops the batches of `path` in `store` of any version but `keep`.
    pub(crate) fn drop_other_versions(&self, store: &Arc<str>, path: &Arc<str>, keep: &Arc<str>) {
        let (store, path, keep) = (store.clone(), path.clone(), keep.clone());
        let _ = self
            .entries
            .invalidate_entries_if(move |k, _| k.store == store && k.path == path && k.version != keep);
    }

    /// Entries currently held (after pending evictions are applied).
    pub fn entry_count(&self) -> u64 {
        self.entries.run_pending_tasks();
        self.entries.entry_count()
    }

    /// The budget in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes currently held (after pending evictions are applied).
    pub fn weighted_size(&self) -> u64 {
        self.entries.run_pending_tasks();
        self.entries.weighted_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;

    fn key(batch: u32, version: &str) -> BatchKey {
        BatchKey {
            store: "t0".into(),
            path: "a.parquet".into(),
            version: version.into(),
            row_group: 0,
            column: 1,
            batch,
        }
    }

    fn column(n: usize) -> CachedColumn {
        CachedColumn::Arrow(Arc::new(Int64Array::from_iter_values(0..n as i64)))
    }

    #[test]
    fn accounts_real_buffer_sizes_and_stays_under_budget() {
        let one = column(BATCH_ROWS).heap_size() as u64;
        assert!(one >= (BATCH_ROWS * 8) as u64, "{one}");
        let cache = BatchCache::new(one * 3, CacheMetrics::noop());
        for b in 0..10 {
            cache.insert(key(b, "v1"), column(BATCH_ROWS));
            assert!(cache.weighted_size() <= one * 3);
        }
        assert!(cache.weighted_size() > 0);
    }

    #[test]
    fn drops_other_versions_only() {
        let cache = BatchCache::new(1 << 30, CacheMetrics::noop());
        cache.insert(key(0, "v1"), column(10));
        cache.insert(key(1, "v2"), column(10));
        cache.drop_other_versions(&"t0".into(), &"a.parquet".into(), &"v2".into());
        cache.entries.run_pending_tasks();
        assert!(cache.get(&key(0, "v1")).is_none());
        assert!(cache.get(&key(1, "v2")).is_some());
    }

    #[test]
    fn an_entry_over_the_whole_budget_is_not_kept() {
        let cache = BatchCache::new(100, CacheMetrics::noop());
        cache.insert(key(0, "v1"), column(1000));
        assert!(cache.get(&key(0, "v1")).is_none());
        assert_eq!(cache.weighted_size(), 0);
    }
}
