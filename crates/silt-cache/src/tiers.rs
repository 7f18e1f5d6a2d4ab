//! The cache tiers one server shares among all its tables, and the one call
//! that drops an object's other versions from all of them.

use std::sync::Arc;

use parking_lot::RwLock;

use crate::ObjectKey;
use crate::column_cache::ColumnCache;
use crate::page_store::PageStore;
use crate::versions::{Validation, VersionRegistry};

/// A tier outside this crate that holds entries per object version (the
/// metadata tier of decoded footers): told when a new version is seen, so
/// that [`CacheTiers::invalidate`] is the one place invalidation happens.
pub trait VersionedTier: Send + Sync {
    /// Drops what the tier holds of `keep`'s object at another version.
    fn drop_other_versions(&self, keep: &ObjectKey);
}

/// Everything the stores of one server share: the page store (object bytes
/// in memory and on disk), the column cache (decoded batches), the validated
/// versions, and any further versioned tiers.
pub struct CacheTiers {
    pages: Arc<PageStore>,
    batches: Arc<ColumnCache>,
    versions: Arc<VersionRegistry>,
    others: RwLock<Vec<Arc<dyn VersionedTier>>>,
}

impl CacheTiers {
    pub fn new(pages: Arc<PageStore>, batches: Arc<ColumnCache>) -> Arc<Self> {
        // Chunks whose pages these hold are not protected in memory.
        let below: std::sync::Weak<dyn crate::scan_sets::PageResidency> = Arc::downgrade(&pages) as _;
        batches.scan_sets().attach_pages(below);
        Arc::new(CacheTiers {
            pages,
            batches,
            versions: Arc::default(),
            others: RwLock::default(),
        })
    }

    /// Adds a tier to invalidate with the others (the metadata tier).
    pub fn add_versioned_tier(&self, tier: Arc<dyn VersionedTier>) {
        self.others.write().push(tier);
    }

    /// The versions validated so far (shared with the metadata tier).
    pub fn versions(&self) -> &Arc<VersionRegistry> {
        &self.versions
    }

    /// The column cache: decoded column batches (the memory tier).
    pub fn batches(&self) -> &Arc<ColumnCache> {
        &self.batches
    }

    /// Object bytes: memory pages, disk pages.
    pub fn pages(&self) -> &Arc<PageStore> {
        &self.pages
    }

    /// What registered scans are about to read (consulted by the memory and
    /// disk tiers' eviction).
    pub fn scan_sets(&self) -> &Arc<crate::ScanSets> {
        self.batches.scan_sets()
    }

    pub fn page_size(&self) -> u64 {
        self.pages.page_size()
    }

    /// Drops every cached page, batch and footer of `keep`'s object that is
    /// not of `keep`'s version. On first sight only the disk can hold other
    /// versions (pages recovered from an earlier run); memory is filled only
    /// after a validation, so it is searched only when a version changed.
    pub(crate) fn invalidate(&self, keep: &ObjectKey, seen: Validation) {
        let changed = seen == Validation::Changed;
        self.pages.drop_other_versions(keep, changed);
        // Like the disk's pages, squeezed chunks may be of a version an
        // earlier run saw.
        if let Some(squeezed) = self.batches.squeezed() {
            squeezed.drop_other_versions(keep);
        }
        if changed {
            self.batches.drop_other_versions(keep);
            for tier in self.others.read().iter() {
                tier.drop_other_versions(keep);
            }
        }
    }
}

impl crate::page_store::PageTier for crate::disk::DiskTier {
    fn get_many(&self, keys: &[crate::PageKey]) -> Vec<Option<crate::Page>> {
        crate::disk::DiskTier::get_many(self, keys)
    }

    fn put(&self, key: crate::PageKey, page: &crate::Page, cost: f64) {
        crate::disk::DiskTier::put_at(self, key, page.offset, &page.bytes, cost)
    }

    fn drop_other_versions(&self, keep: &ObjectKey) -> usize {
        crate::disk::DiskTier::drop_other_versions(self, &keep.store, &keep.path, &keep.version)
    }

    fn holds(&self, key: &crate::PageKey) -> bool {
        crate::disk::DiskTier::holds(self, key)
    }
}
