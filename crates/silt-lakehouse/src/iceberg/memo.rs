//! Parsed metadata files, by name. Iceberg never rewrites a metadata file,
//! manifest list or manifest in place (each commit writes new ones), so a
//! parsed file is good for as long as it is named: a warm query reads only
//! the pointer to the current metadata.

use std::future::Future;
use std::sync::Arc;

use object_store::path::Path;

use super::manifest::{ContentFile, ManifestEntryFile};
use super::metadata::TableMetadata;
use crate::Result;

/// Parsed files kept per kind. Bounded by entries (a manifest of a large
/// table holds thousands of files; 4,096 of them is a few hundred MB at
/// worst, far less for the usual manifest of tens of files).
const ENTRIES: u64 = 4096;

/// Parsed metadata files, manifest lists and manifests, by path.
#[derive(Clone)]
pub struct MetadataMemo {
    metadata: moka::sync::Cache<String, Arc<TableMetadata>>,
    manifest_lists: moka::sync::Cache<String, Arc<Vec<ManifestEntryFile>>>,
    manifests: moka::sync::Cache<String, Arc<Vec<ContentFile>>>,
    /// Table folders found without a version hint (catalog-written tables):
    /// their current metadata is found by listing, without asking for the
    /// hint again.
    hintless: moka::sync::Cache<String, ()>,
}

impl Default for MetadataMemo {
    fn default() -> Self {
        MetadataMemo {
            metadata: moka::sync::Cache::new(ENTRIES),
            manifest_lists: moka::sync::Cache::new(ENTRIES),
            manifests: moka::sync::Cache::new(ENTRIES),
            hintless: moka::sync::Cache::new(ENTRIES),
        }
    }
}

impl std::fmt::Debug for MetadataMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataMemo")
            .field("metadata", &self.metadata.entry_count())
            .field("manifest_lists", &self.manifest_lists.entry_count())
            .field("manifests", &self.manifests.entry_count())
            .finish()
    }
}

impl MetadataMemo {
    /// Whether the table folder `folder` was found without a version hint.
    pub fn is_hintless(&self, folder: &Path) -> bool {
        self.hintless.contains_key(folder.as_ref())
    }

    /// Records that `folder` has no version hint.
    pub fn set_hintless(&self, folder: &Path) {
        self.hintless.insert(folder.to_string(), ());
    }

    /// Whether the metadata file at `path` has been read.
    pub fn has_metadata(&self, path: &Path) -> bool {
        self.metadata.contains_key(path.as_ref())
    }

    /// The metadata file at `path`, read by `read` unless held.
    pub async fn metadata<F, Fut>(&self, path: &Path, read: F) -> Result<Arc<TableMetadata>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<TableMetadata>>,
    {
        memoized(&self.metadata, path.as_ref(), read).await
    }

    /// The manifest list at `url`, read by `read` unless held.
    pub async fn manifest_list<F, Fut>(&self, url: &str, read: F) -> Result<Arc<Vec<ManifestEntryFile>>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<ManifestEntryFile>>>,
    {
        memoized(&self.manifest_lists, url, read).await
    }

    /// The live files of the manifest at `url`, read by `read` unless held.
    pub async fn manifest<F, Fut>(&self, url: &str, read: F) -> Result<Arc<Vec<ContentFile>>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<ContentFile>>>,
    {
        memoized(&self.manifests, url, read).await
    }
}

/// `cache[key]`, else what `read` parses (kept; a failure is not).
async fn memoized<T, F, Fut>(cache: &moka::sync::Cache<String, Arc<T>>, key: &str, read: F) -> Result<Arc<T>>
where
    T: Send + Sync + 'static,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    if let Some(held) = cache.get(key) {
        return Ok(held);
    }
    let parsed = Arc::new(read().await?);
    cache.insert(key.to_string(), parsed.clone());
    Ok(parsed)
}
