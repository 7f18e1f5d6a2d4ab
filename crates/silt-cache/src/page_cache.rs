//! Pages of object bytes held in memory, budgeted in bytes.

use std::sync::Arc;

use bytes::Bytes;
use metrics::{Counter, Gauge, Key, Label, Level, Metadata, Recorder};
use moka::sync::Cache;

use crate::key::ObjectKey;
use crate::segments::Segment;

static METADATA: Metadata<'static> = Metadata::new("silt_cache", Level::INFO, None);

/// Sizing of the page cache.
#[derive(Debug, Clone, Copy)]
pub struct PageCacheConfig {
    /// Page size in bytes: reads are widened to page boundaries.
    pub page_size: u64,
    /// Budget for all cached pages, in bytes.
    pub capacity_bytes: u64,
}

impl Default for PageCacheConfig {
    fn default() -> Self {
        PageCacheConfig {
            page_size: 1 << 20,
            capacity_bytes: 1 << 30,
        }
    }
}

/// Hit/miss counters of one cache tier (`tier` label).
#[derive(Clone)]
pub struct CacheMetrics {
    pub evictions: Counter,
    pub hits: Counter,
    pub misses: Counter,
    pub hit_bytes: Counter,
    pub miss_bytes: Counter,
    pub bytes: Gauge,
    /// `silt_cache_reserved_evictions_total`: evictions of segments that
    /// registered scans still needed (the budget could not be held otherwise).
    pub reserved_evictions: Counter,
}

impl CacheMetrics {
    pub fn register(recorder: &dyn Recorder, tier: &'static str) -> Self {
        let key = |name: &'static str| Key::from_parts(name, vec![Label::new("tier", tier)]);
        CacheMetrics {
            evictions: recorder.register_counter(&key("silt_cache_evictions_total"), &METADATA),
            hits: recorder.register_counter(&key("silt_cache_hits_total"), &METADATA),
            misses: recorder.register_counter(&key("silt_cache_misses_total"), &METADATA),
            hit_bytes: recorder.register_counter(&key("silt_cache_hit_bytes_total"), &METADATA),
            miss_bytes: recorder.register_counter(&key("silt_cache_miss_bytes_total"), &METADATA),
            bytes: recorder.register_gauge(&key("silt_cache_bytes"), &METADATA),
            reserved_evictions: recorder.register_counter(&key("silt_cache_reserved_evictions_total"), &METADATA),
        }
    }

    /// Counts one lookup: a hit of `Some(bytes)`, or a miss.
    pub fn record_lookup(&self, hit_bytes: Option<usize>) {
        match hit_bytes {
            Some(bytes) => {
                self.hits.increment(1);
                self.hit_bytes.increment(bytes as u64);
            }
            None => self.misses.increment(1),
        }
    }

    /// A moka cache of at most `capacity` bytes, entries weighed by `size`,
    /// that keeps this tier's `bytes` gauge and eviction counter (the caller
    /// adds an entry's size to the gauge when it inserts).
    pub(crate) fn sized_cache<K, V>(&self, capacity: u64, size: fn(&V) -> usize) -> Cache<K, V>
    where
        K: std::hash::Hash + Eq + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
    {
        let bytes_gauge = self.bytes.clone();
        let evictions = self.evictions.clone();
        Cache::builder()
            .weigher(move |_k: &K, v: &V| u32::try_from(size(v)).unwrap_or(u32::MAX))
            .max_capacity(capacity)
            .support_invalidation_closures()
            .eviction_listener(move |_k, v: V, cause| {
                bytes_gauge.decrement(size(&v) as f64);
                if cause == moka::notification::RemovalCause::Size {
                    evictions.increment(1);
                }
            })
            .build()
    }

    pub fn noop() -> Self {
        CacheMetrics {
            evictions: Counter::noop(),
            hits: Counter::noop(),
            misses: Counter::noop(),
            hit_bytes: Counter::noop(),
            miss_bytes: Counter::noop(),
            bytes: Gauge::noop(),
            reserved_evictions: Counter::noop(),
        }
    }
}

/// Identifies one page of one version of one object.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PageKey {
    /// The object version the page is of.
    pub object: ObjectKey,
    /// Page number: bytes `page * page_size ..` of the object.
    pub page: u64,
}

impl PageKey {
    pub fn new(object: ObjectKey, page: u64) -> Self {
        PageKey { object, page }
    }
}

/// The memory tier: a byte-budgeted map from [`PageKey`] to page bytes,
/// shared by every [`crate::CachedStore`] of a server. Eviction is moka's
/// TinyLFU (admission by frequency sketch, then LRU), a well-kept
/// implementation of the policy this tier wants: hot footers and small
/// column chunks stay, one-off scans do not flush them.
pub struct PageCache {
    pages: Cache<PageKey, Bytes>,
    config: PageCacheConfig,
    pub(crate) metrics: CacheMetrics,
}

impl PageCache {
    pub fn new(config: PageCacheConfig, metrics: CacheMetrics) -> Arc<Self> {
        let pages = metrics.sized_cache(config.capacity_bytes, Bytes::len);
        Arc::new(PageCache { pages, config, metrics })
    }

    pub fn page_size(&self) -> u64 {
        self.config.page_size
    }

    pub(crate) fn get(&self, key: &PageKey) -> Option<Bytes> {
        self.pages.get(key)
    }

    pub(crate) fn insert(&self, key: PageKey, page: Bytes) {
        self.metrics.bytes.increment(page.len() as f64);
        self.pages.insert(key, page);
    }

    /// Drops the pages of `keep`'s object of any version but `keep`'s.
    pub(crate) fn drop_other_versions(&self, keep: &ObjectKey) {
        let keep = keep.clone();
        let _ = self
            .pages
            .invalidate_entries_if(move |k, _| keep.is_other_version(&k.object));
    }

    /// One [`Segment`] per page held. Walks every entry: for
    /// introspection, not for query paths.
    pub fn segments(&self) -> Vec<Segment> {
        self.pages
            .iter()
            .map(|(k, v)| Segment::page("pages", &k, v.len() as u64))
            .collect()
    }

    /// The budget in bytes.
    pub fn capacity(&self) -> u64 {
        self.config.capacity_bytes
    }

    /// Bytes currently held (after pending evictions are applied).
    pub fn weighted_size(&self) -> u64 {
        self.pages.run_pending_tasks();
        self.pages.weighted_size()
    }
}
