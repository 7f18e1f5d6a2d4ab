//! The metadata tier: decoded Parquet footers with their page indexes,
//! shared by every query and client of a server.
//!
//! DataFusion's Parquet reader already knows how to use a footer cache (the
//! runtime's `FileMetadataCache`, which also makes it load the page index
//! and keep it); this tier is that cache with two additions Silt needs:
//! - entries are checked against the object version the server validated
//!   (ETag included), not only size and modification time, so an object
//!   overwritten with one of the same size in the same second is never read
//!   with the old footer;
//! - hits, misses and bytes are reported as `tier="metadata"`.
//!
//! Paths are unique per server because every table's store is namespaced
//! (see `silt_cache::CachedStore`), so a path names one object.

use std::sync::Arc;
use std::time::Duration;

use datafusion::common::{HashMap, TableReference};
use datafusion::execution::cache::cache_manager::CachedFileMetadataEntry;
use datafusion::execution::cache::default_cache::DefaultCache;
use datafusion::execution::cache::{Cache, CacheEntryInfo, CacheValue};
use object_store::path::Path;
use silt_cache::{CacheMetrics, ObjectKey, ObjectVersion, VersionRegistry, VersionedTier};
use silt_store::location::path_from_raw;

/// Footers keyed by object path and checked against the validated version.
pub struct MetadataTier {
    entries: DefaultCache<Path, CachedFileMetadataEntry>,
    versions: Arc<VersionRegistry>,
    metrics: CacheMetrics,
}

impl MetadataTier {
    /// A tier holding at most `budget` bytes of decoded metadata.
    pub fn new(budget: usize, versions: Arc<VersionRegistry>, metrics: CacheMetrics) -> Self {
        MetadataTier {
            entries: DefaultCache::new(budget).with_name("silt-metadata-tier"),
            versions,
            metrics,
        }
    }

    /// Bytes of decoded metadata held.
    pub fn used_bytes(&self) -> usize {
        self.entries.memory_used()
    }

    fn refresh_gauge(&self) {
        self.metrics.bytes.set(self.entries.memory_used() as f64);
    }

    /// Whether `entry` was read from the version of `path` validated last.
    fn is_current(&self, path: &Path, entry: &CachedFileMetadataEntry) -> bool {
        match self.versions.get(path) {
            Some((v, _)) => ObjectVersion::same(&v.meta, &entry.meta),
            None => true,
        }
    }
}

impl VersionedTier for MetadataTier {
    /// Drops the footer of `keep`'s object if it is of another version. The
    /// tier is keyed by the namespaced path (`store/path`).
    fn drop_other_versions(&self, keep: &ObjectKey) {
        let path = path_from_raw(&format!("{}/{}", keep.store, keep.path));
        if let Some(entry) = self.entries.get(&path)
            && ObjectVersion::from_meta(&entry.meta).tag != keep.version
        {
            self.entries.remove(&path);
        }
        // Pinned footers and bloom filters of other versions (walks the
        // entries: runs only when a version changed).
        for key in self.entries.list_entries().into_keys() {
            if crate::footer::is_other_version(&key, &path, &keep.version) {
                self.entries.remove(&key);
            }
        }
        self.refresh_gauge();
    }
}

impl Cache<Path, CachedFileMetadataEntry> for MetadataTier {
    fn get(&self, key: &Path) -> Option<CachedFileMetadataEntry> {
        let found = self.entries.get(key).filter(|e| {
            let current = self.is_current(key, e);
            if !current {
                self.entries.remove(key);
                self.refresh_gauge();
            }
            current
        });
        self.metrics.record_lookup(found.as_ref().map(|e| e.size()));
        found
    }

    fn put(&self, key: &Path, value: CachedFileMetadataEntry) -> Option<CachedFileMetadataEntry> {
        self.metrics.miss_bytes.increment(value.size() as u64);
        let before = self.entries.len();
        let previous = self.entries.put(key, value);
        if self.entries.len() < before + usize::from(previous.is_none()) {
            self.metrics.evictions.increment(1);
        }
        self.refresh_gauge();
        previous
    }

    fn remove(&self, k: &Path) -> Option<CachedFileMetadataEntry> {
        let r = self.entries.remove(k);
        self.refresh_gauge();
        r
    }

    fn contains_key(&self, k: &Path) -> bool {
        self.entries.contains_key(k)
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn clear(&self) {
        self.entries.clear();
        self.refresh_gauge();
    }

    fn name(&self) -> String {
        self.entries.name()
    }

    fn cache_limit(&self) -> usize {
        self.entries.cache_limit()
    }

    fn update_cache_limit(&self, limit: usize) {
        self.entries.update_cache_limit(limit);
        self.refresh_gauge();
    }

    fn cache_ttl(&self) -> Option<Duration> {
        self.entries.cache_ttl()
    }

    fn update_cache_ttl(&self, ttl: Option<Duration>) {
        self.entries.update_cache_ttl(ttl);
    }

    fn drop_table_entries(&self, table_ref: &TableReference) -> datafusion::common::Result<()> {
        self.entries.drop_table_entries(table_ref)
    }

    fn list_entries(&self) -> HashMap<Path, CacheEntryInfo<CachedFileMetadataEntry>> {
        self.entries.list_entries()
    }
}
