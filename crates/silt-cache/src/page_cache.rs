//! Pages of object bytes held in memory, budgeted in bytes.

use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use metrics::{Counter, Gauge, Key, Label, Level, Metadata, Recorder};
use moka::sync::Cache;

use crate::held::HeldUnit;
use crate::{ObjectKey, PageKey};

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

/// The bytes a tier holds of one page: the whole page, or a contiguous part
/// of it. Reads fetch exact byte ranges (pages are a storage unit, not a
/// fetch unit), so the pages at either end of a fetched range hold only the
/// part that was asked for; a later read that needs more of such a page
/// fetches what it lacks, and the parts are merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Where `bytes` start, counted from the page's first byte.
    pub offset: u64,
    /// The bytes held, from `offset` on.
    pub bytes: Bytes,
}

impl Page {
    /// A page held from its first byte (a whole page, or an object's short last one).
    pub fn whole(bytes: Bytes) -> Self {
        Page { offset: 0, bytes }
    }

    /// The byte range held, in page coordinates.
    pub fn range(&self) -> Range<u64> {
        self.offset..self.offset + self.bytes.len() as u64
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Whether the bytes `needed` (page coordinates) are all held.
    pub fn covers(&self, needed: &Range<u64>) -> bool {
        self.offset <= needed.start && needed.end <= self.range().end
    }

    /// The bytes `needed` (page coordinates), if all held: a slice, no copy.
    pub fn slice(&self, needed: &Range<u64>) -> Option<Bytes> {
        self.covers(needed).then(|| {
            self.bytes
                .slice((needed.start - self.offset) as usize..(needed.end - self.offset) as usize)
        })
    }

    /// The union of two parts of one page when they overlap or touch (one
    /// copy), else `None`. Where they overlap both hold the same bytes (one
    /// version of one object), so either may be kept.
    pub fn merge(&self, other: &Page) -> Option<Page> {
        let (a, b) = (self.range(), other.range());
        joined(&a, &b)?;
        if self.covers(&b) {
            return Some(self.clone());
        }
        if other.covers(&a) {
            return Some(other.clone());
        }
        let (first, second) = if a.start <= b.start {
            (self, other)
        } else {
            (other, self)
        };
        let mut joined = BytesMut::with_capacity((a.end.max(b.end) - first.offset) as usize);
        joined.extend_from_slice(&first.bytes);
        joined.extend_from_slice(&second.bytes[(first.range().end - second.offset) as usize..]);
        Some(Page {
            offset: first.offset,
            bytes: joined.freeze(),
        })
    }

    /// What a tier keeps when it holds `self` and is given `new`: their
    /// union when they touch, else the larger (the newer on a tie).
    pub fn keep_with(&self, new: Page) -> Page {
        match self.merge(&new) {
            Some(joined) => joined,
            None if self.len() > new.len() => self.clone(),
            None => new,
        }
    }
}

/// The span of two byte ranges when they overlap or touch, else `None`.
pub(crate) fn joined(a: &Range<u64>, b: &Range<u64>) -> Option<Range<u64>> {
    (a.start <= b.end && b.start <= a.end).then(|| a.start.min(b.start)..a.end.max(b.end))
}

/// What to fetch of a page to cover `need` when `held` is held of it: what
/// `need` lacks where that is one range (the held part overlaps one end of
/// it), else all of `need` (also when `held` covers it: callers ask only
/// for what is missing).
pub(crate) fn still_needed(need: &Range<u64>, held: Option<Range<u64>>) -> Range<u64> {
    match held {
        Some(h) if h.start <= need.start && need.start < h.end && h.end < need.end => h.end..need.end,
        Some(h) if need.start < h.start && h.start < need.end && need.end <= h.end => need.start..h.start,
        _ => need.clone(),
    }
}

/// What a read fetches of a page to cover `need` when `held` is held of it,
/// so that the page then holds one part: [`still_needed`], except that when
/// `held` lies apart from `need` the fetch also spans the gap between them.
/// A tier keeps one part per page, the larger of two apart
/// ([`Page::keep_with`]); without the gap the smaller was dropped, and every
/// later read of it fetched it again (the last column chunk of a file beside
/// the footer's part of its page was a GET per read). The gap is under a page.
pub(crate) fn fetch_joining(need: &Range<u64>, held: Option<Range<u64>>) -> Range<u64> {
    match held {
        Some(h) if h.end < need.start => h.end..need.end,
        Some(h) if need.end < h.start => need.start..h.start,
        held => still_needed(need, held),
    }
}

/// The memory tier: a byte-budgeted map from [`PageKey`] to page bytes,
/// shared by every [`crate::CachedStore`] of a server. Eviction is moka's
/// TinyLFU (admission by frequency sketch, then LRU), a well-kept
/// implementation of the policy this tier wants: hot footers and small
/// column chunks stay, one-off scans do not flush them.
pub struct PageCache {
    pages: Cache<PageKey, Page>,
    config: PageCacheConfig,
    pub(crate) metrics: CacheMetrics,
}

impl PageCache {
    pub fn new(config: PageCacheConfig, metrics: CacheMetrics) -> Arc<Self> {
        let pages = metrics.sized_cache(config.capacity_bytes, Page::len);
        Arc::new(PageCache { pages, config, metrics })
    }

    pub fn page_size(&self) -> u64 {
        self.config.page_size
    }

    pub(crate) fn get(&self, key: &PageKey) -> Option<Page> {
        self.pages.get(key)
    }

    /// Whether (a part of) `key` is held, without counting a read.
    pub(crate) fn contains(&self, key: &PageKey) -> bool {
        self.pages.contains_key(key)
    }

    /// Keeps `page` for `key`, merged with the part already held when they
    /// touch ([`Page::keep_with`]).
    pub(crate) fn insert(&self, key: PageKey, page: Page) {
        use moka::ops::compute::Op;
        self.pages.entry(key).and_compute_with(|held| {
            let kept = match held {
                Some(held) => {
                    let held = held.into_value();
                    let kept = held.keep_with(page);
                    if kept == held {
                        return Op::Nop;
                    }
                    // The replaced part leaves through the eviction listener
                    // (cause `Replaced`), which takes it off the gauge.
                    kept
                }
                None => page,
            };
            self.metrics.bytes.increment(kept.len() as f64);
            Op::Put(kept)
        });
    }

    /// Drops the pages of `keep`'s object of any version but `keep`'s.
    pub(crate) fn drop_other_versions(&self, keep: &ObjectKey) {
        let keep = keep.clone();
        let _ = self
            .pages
            .invalidate_entries_if(move |k, _| keep.is_other_version(&k.object));
    }

    /// One [`HeldUnit`] per page held. Walks every entry: for
    /// introspection, not for query paths.
    pub fn held_units(&self) -> Vec<HeldUnit> {
        self.pages
            .iter()
            .map(|(k, v)| HeldUnit::page("pages", &k, v.len() as u64))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn part(range: Range<u64>) -> Page {
        let all: Vec<u8> = (0..=255).collect();
        Page {
            offset: range.start,
            bytes: Bytes::copy_from_slice(&all[range.start as usize..range.end as usize]),
        }
    }

    #[test]
    fn parts_that_touch_merge_and_others_keep_the_larger() {
        assert_eq!(part(0..10).merge(&part(10..30)), Some(part(0..30)));
        assert_eq!(part(20..40).merge(&part(5..25)), Some(part(5..40)));
        assert_eq!(part(0..50).merge(&part(5..25)), Some(part(0..50)));
        assert_eq!(part(0..10).merge(&part(11..30)), None);
        assert_eq!(part(0..10).keep_with(part(11..30)), part(11..30));
        assert_eq!(part(0..30).keep_with(part(31..40)), part(0..30));
        assert!(part(5..30).covers(&(5..30)) && !part(5..30).covers(&(4..6)));
        assert_eq!(part(5..30).slice(&(10..12)).unwrap(), Bytes::from_static(&[10, 11]));
    }

    #[test]
    fn the_memory_tier_merges_the_parts_of_a_page() {
        let cache = PageCache::new(
            PageCacheConfig {
                page_size: 256,
                capacity_bytes: 1 << 20,
            },
            CacheMetrics::noop(),
        );
        let key = PageKey::new(ObjectKey::new("s", "p", "v"), 0);
        cache.insert(key.clone(), part(100..200));
        assert_eq!(cache.get(&key), Some(part(100..200)));
        cache.insert(key.clone(), part(0..100));
        assert_eq!(cache.get(&key), Some(part(0..200)));
        cache.insert(key.clone(), part(10..20));
        assert_eq!(cache.get(&key), Some(part(0..200)));
        assert_eq!(cache.weighted_size(), 200);
    }
}
