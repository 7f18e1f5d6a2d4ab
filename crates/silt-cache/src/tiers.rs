//! The cache tiers one server shares among all its tables.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use bytes::Bytes;
use object_store::path::Path;

use crate::batch_cache::BatchCache;
use crate::inflight::InFlight;
use crate::page_cache::{PageCache, PageKey};
use crate::policy::{CostModel, MeasuredCost};
use crate::version::ObjectVersion;

/// A tier below memory that keeps pages (the disk tier). A trait so the read
/// path in [`crate::CachedStore`] does not depend on how pages are stored.
/// Calls block on I/O; callers run them on blocking threads.
pub trait PageTier: Send + Sync {
    /// The page's verified bytes, or `None` on a miss.
    fn get(&self, key: &PageKey) -> Option<Bytes>;
    /// Keeps a page (best effort: a failed write is logged and counted).
    /// `cost` is the estimated time in ns to fetch it again, measured by the
    /// caller that fetched it (its share of that GET), for cost-aware eviction.
    fn put(&self, key: PageKey, data: &[u8], cost: f64);
    /// Drops the pages of `path` in `store` whose version is not `keep`.
    fn drop_other_versions(&self, store: &str, path: &str, keep: &str) -> usize;
}

/// What a validation found, compared with the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Validation {
    /// First validation of the object since the server started.
    FirstSight,
    /// Same version as last time.
    Unchanged,
    /// A new version: the object was overwritten upstream.
    Changed,
}

/// The version of every object the server has validated, keyed by the path
/// the query engine sees (namespaced per table store, so unique per server).
///
/// The metadata tier checks it so a footer cached for one version is never
/// used for another, even when size and modification time are equal.
#[derive(Default)]
pub struct VersionRegistry {
    versions: RwLock<HashMap<Path, (ObjectVersion, Instant)>>,
}

impl VersionRegistry {
    /// The last validated version of `path` and when it was validated.
    pub fn get(&self, path: &Path) -> Option<(ObjectVersion, Instant)> {
        self.versions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(path)
            .cloned()
    }

    /// Records a validation and says how it relates to the previous one.
    pub(crate) fn record(&self, path: &Path, version: ObjectVersion) -> Validation {
        let mut map = self.versions.write().unwrap_or_else(|e| e.into_inner());
        let tag = version.tag.clone();
        match map.insert(path.clone(), (version, Instant::now())) {
            None => Validation::FirstSight,
            Some((previous, _)) if previous.tag == tag => Validation::Unchanged,
            Some(_) => Validation::Changed,
        }
    }

    /// Forgets `path` (deleted upstream).
    pub(crate) fn forget(&self, path: &Path) {
        self.versions.write().unwrap_or_else(|e| e.into_inner()).remove(path);
    }
}

/// Everything the stores of one server share: the memory tier (decoded
/// column batches), the page buffer and disk tier (object bytes), the
/// fetches in flight, and the validated versions.
pub struct CacheTiers {
    pub(crate) batches: Arc<BatchCache>,
    pub(crate) pages: Arc<PageCache>,
    pub(crate) disk: Option<Arc<dyn PageTier>>,
    pub(crate) inflight: InFlight,
    pub(crate) versions: Arc<VersionRegistry>,
    /// Missing runs separated by at most this many bytes of cached pages are
    /// fetched with one GET (re-reading the gap is cheaper than a request).
    pub(crate) merge_gap: u64,
    /// The object store's latency and bandwidth as measured on this server's
    /// GETs: what a fetched page is priced at for the disk tier's policy.
    pub(crate) fetch_cost: MeasuredCost,
}

impl CacheTiers {
    pub fn new(
        batches: Arc<BatchCache>,
        pages: Arc<PageCache>,
        disk: Option<Arc<dyn PageTier>>,
        merge_gap: u64,
    ) -> Arc<Self> {
        Arc::new(CacheTiers {
            batches,
            pages,
            disk,
            inflight: InFlight::default(),
            versions: Arc::default(),
            merge_gap,
            fetch_cost: MeasuredCost::new(CostModel {
                // The tiers below memory keep raw bytes: a hit decodes them
                // as a refetch would, so caching saves no decoding.
                decode_ns_per_byte: 0.0,
                ..CostModel::default()
            }),
        })
    }

    /// The measured latency and bandwidth of the object store, which price
    /// fetched pages for the disk tier's eviction policy.
    pub fn fetch_cost(&self) -> &MeasuredCost {
        &self.fetch_cost
    }

    /// The versions validated so far (shared with the metadata tier).
    pub fn versions(&self) -> &Arc<VersionRegistry> {
        &self.versions
    }

    /// The memory tier: decoded column batches.
    pub fn batches(&self) -> &Arc<BatchCache> {
        &self.batches
    }

    /// The page buffer: recently read object bytes in memory, in front of
    /// the disk tier.
    pub fn pages(&self) -> &Arc<PageCache> {
        &self.pages
    }

    pub fn page_size(&self) -> u64 {
        self.pages.page_size()
    }

    /// Drops every cached page and batch of `path` in `store` that is not of
    /// version `keep`. On first sight only the disk can hold other versions
    /// (pages recovered from an earlier run); memory is filled only after a
    /// validation, so it is searched only when a version changed.
    pub(crate) fn drop_other_versions(&self, store: &Arc<str>, path: &Arc<str>, keep: &Arc<str>, seen: Validation) {
        if seen == Validation::Changed {
            self.pages.drop_other_versions(store, path, keep);
            self.batches.drop_other_versions(store, path, keep);
        }
        if let Some(disk) = self.disk.clone() {
            let (store, path, keep) = (store.clone(), path.clone(), keep.clone());
            let drop = move || {
                disk.drop_other_versions(&store, &path, &keep);
            };
            match tokio::runtime::Handle::try_current() {
                Ok(h) => {
                    h.spawn_blocking(drop);
                }
                Err(_) => drop(),
            }
        }
    }
}

impl PageTier for crate::disk::DiskTier {
    fn get(&self, key: &PageKey) -> Option<Bytes> {
        crate::disk::DiskTier::get(self, key)
    }

    fn put(&self, key: PageKey, data: &[u8], cost: f64) {
        crate::disk::DiskTier::put(self, key, data, cost)
    }

    fn drop_other_versions(&self, store: &str, path: &str, keep: &str) -> usize {
        crate::disk::DiskTier::drop_other_versions(self, store, path, keep)
    }
}
