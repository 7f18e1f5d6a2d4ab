//! Counters of the disk tier: `metrics` handles for export, plus plain atomic
//! counters so the server can report numbers without reading metrics back.

use std::sync::atomic::{AtomicU64, Ordering};

use metrics::{Counter, Key, Label, Level, Metadata, Recorder};

use crate::page_cache::CacheMetrics;

static METADATA: Metadata<'static> = Metadata::new("silt_cache", Level::INFO, None);

/// Metric handles of the disk tier. The hit/miss/bytes series are the same as
/// every tier's ([`CacheMetrics`] with `tier="disk"`); the rest are specific
/// to a tier that can find damaged pages and survives restarts.
#[derive(Clone)]
pub struct DiskMetrics {
    /// `silt_cache_{hits,misses,hit_bytes,miss_bytes,evictions}_total{tier="disk"}`
    /// and the `silt_cache_bytes{tier="disk"}` gauge (bytes charged to the budget).
    pub tier: CacheMetrics,
    /// `silt_cache_corrupt_pages_total`: pages that failed verification (at
    /// read or recovery) and were forgotten.
    pub corrupt_pages: Counter,
    /// `silt_cache_recovered_pages_total`: pages of a previous run taken
    /// back into the index.
    pub recovered_pages: Counter,
    /// `silt_cache_recovered_dropped_total`: slots recovery found damaged.
    pub recovered_dropped: Counter,
    /// `silt_cache_write_errors_total{tier="disk"}`: pages that could not be written.
    pub write_errors: Counter,
    /// `silt_cache_disk_reads_total`: read requests made for pages (one per
    /// run of neighbouring slots), so hits / reads is the pages per request.
    pub read_requests: Counter,
}

impl DiskMetrics {
    /// Registers the disk tier's series with `recorder`.
    pub fn register(recorder: &dyn Recorder) -> Self {
        let tiered = |name: &'static str| Key::from_parts(name, vec![Label::new("tier", "disk")]);
        let plain = |name: &'static str| Key::from_name(name);
        DiskMetrics {
            tier: CacheMetrics::register(recorder, "disk"),
            corrupt_pages: recorder.register_counter(&plain("silt_cache_corrupt_pages_total"), &METADATA),
            recovered_pages: recorder.register_counter(&plain("silt_cache_recovered_pages_total"), &METADATA),
            recovered_dropped: recorder.register_counter(&plain("silt_cache_recovered_dropped_total"), &METADATA),
            write_errors: recorder.register_counter(&tiered("silt_cache_write_errors_total"), &METADATA),
            read_requests: recorder.register_counter(&plain("silt_cache_disk_reads_total"), &METADATA),
        }
    }

    /// Handles that record nothing (tests, tools).
    pub fn noop() -> Self {
        DiskMetrics {
            tier: CacheMetrics::noop(),
            corrupt_pages: Counter::noop(),
            recovered_pages: Counter::noop(),
            recovered_dropped: Counter::noop(),
            write_errors: Counter::noop(),
            read_requests: Counter::noop(),
        }
    }
}

/// A snapshot of the disk tier's numbers, from [`DiskTier::stats`](super::DiskTier::stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskStats {
    pub hits: u64,
    pub misses: u64,
    pub hit_bytes: u64,
    /// Only what callers report with [`DiskTier::record_miss_bytes`](super::DiskTier::record_miss_bytes).
    pub miss_bytes: u64,
    pub evictions: u64,
    pub corrupt_pages: u64,
    pub recovered_pages: u64,
    pub recovered_dropped: u64,
    pub write_errors: u64,
    /// Read requests made for pages (neighbouring slots are read with one).
    pub read_requests: u64,
    /// Bytes charged to the budget (one slot per page).
    pub used_bytes: u64,
    pub budget_bytes: u64,
    /// Pages in the index (including pages being written).
    pub pages: u64,
    pub recovery_done: bool,
}

/// The metric handles plus atomic mirrors of each counter.
pub(crate) struct Counters {
    pub metrics: DiskMetrics,
    hits: AtomicU64,
    misses: AtomicU64,
    hit_bytes: AtomicU64,
    miss_bytes: AtomicU64,
    evictions: AtomicU64,
    corrupt_pages: AtomicU64,
    recovered_pages: AtomicU64,
    recovered_dropped: AtomicU64,
    write_errors: AtomicU64,
    read_requests: AtomicU64,
}

fn bump(atomic: &AtomicU64, counter: &Counter, n: u64) {
    if n > 0 {
        atomic.fetch_add(n, Ordering::Relaxed);
        counter.increment(n);
    }
}

impl Counters {
    pub fn new(metrics: DiskMetrics) -> Self {
        Counters {
            metrics,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            hit_bytes: AtomicU64::new(0),
            miss_bytes: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            corrupt_pages: AtomicU64::new(0),
            recovered_pages: AtomicU64::new(0),
            recovered_dropped: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            read_requests: AtomicU64::new(0),
        }
    }

    pub fn hit(&self, bytes: u64) {
        bump(&self.hits, &self.metrics.tier.hits, 1);
        bump(&self.hit_bytes, &self.metrics.tier.hit_bytes, bytes);
    }

    pub fn miss(&self) {
        bump(&self.misses, &self.metrics.tier.misses, 1);
    }

    pub fn miss_bytes(&self, bytes: u64) {
        bump(&self.miss_bytes, &self.metrics.tier.miss_bytes, bytes);
    }

    pub fn evictions(&self, n: u64) {
        bump(&self.evictions, &self.metrics.tier.evictions, n);
    }

    pub fn reserved_evictions(&self, n: u64) {
        self.metrics.tier.reserved_evictions.increment(n);
    }

    pub fn corrupt(&self) {
        bump(&self.corrupt_pages, &self.metrics.corrupt_pages, 1);
    }

    pub fn recovered(&self, n: u64) {
        bump(&self.recovered_pages, &self.metrics.recovered_pages, n);
    }

    pub fn recovered_dropped(&self) {
        bump(&self.recovered_dropped, &self.metrics.recovered_dropped, 1);
    }

    pub fn write_error(&self) {
        bump(&self.write_errors, &self.metrics.write_errors, 1);
    }

    pub fn read_request(&self) {
        bump(&self.read_requests, &self.metrics.read_requests, 1);
    }

    pub fn used_bytes(&self, used: u64) {
        self.metrics.tier.bytes.set(used as f64);
    }

    /// The counters' part of a [`DiskStats`]; the caller fills in the rest.
    pub fn snapshot(&self) -> DiskStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DiskStats {
            hits: get(&self.hits),
            misses: get(&self.misses),
            hit_bytes: get(&self.hit_bytes),
            miss_bytes: get(&self.miss_bytes),
            evictions: get(&self.evictions),
            corrupt_pages: get(&self.corrupt_pages),
            recovered_pages: get(&self.recovered_pages),
            recovered_dropped: get(&self.recovered_dropped),
            write_errors: get(&self.write_errors),
            read_requests: get(&self.read_requests),
            ..DiskStats::default()
        }
    }
}
