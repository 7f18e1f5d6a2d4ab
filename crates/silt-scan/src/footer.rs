//! The decoded footer (with page index) of a pinned object version: from
//! the metadata tier when it holds that exact version, else read at that
//! version through the page store and admitted.
//!
//! The one place a footer is looked up for Silt's own reads (scans, preload),
//! so a footer of one version is never combined with pages of another: the
//! entry is keyed by the pinned version ([`pinned_key`]), and a miss reads
//! the footer with the same pinned reader the pages use.

use std::sync::Arc;

use datafusion::datasource::physical_plan::parquet::metadata::{CachedParquetMetaData, DFParquetMetadata};
use datafusion::error::Result;
use datafusion::execution::cache::cache_manager::{CachedFileMetadataEntry, FileMetadataCache};
use datafusion::parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};
use object_store::ObjectMeta;
use object_store::path::Path;
use silt_cache::{CachedStore, PinnedObject};
use silt_store::location::path_from_raw;

/// Separates a pinned footer's key from the object path.
pub const VERSION_MARK: char = '@';

/// The metadata-tier key of the footer of `version` of `location`: the path
/// with the version appended. Only [`pinned_footer`] reads or writes these
/// keys, so an entry under one is exactly that version's footer (DataFusion's
/// own footer reads use the plain path, and may see another version).
pub fn pinned_key(location: &Path, version: &str) -> Path {
    path_from_raw(&format!("{location}{VERSION_MARK}{version}"))
}

/// The metadata-tier key of something else kept per pinned version beside
/// its footer (a column chunk's bloom filter): below [`pinned_key`], so it is
/// dropped with the footer when the version changes
/// ([`is_other_version`]).
pub fn pinned_entry_key<'a>(location: &Path, version: &str, parts: impl IntoIterator<Item = &'a str>) -> Path {
    parts
        .into_iter()
        .fold(pinned_key(location, version), |key, part| key.join(part))
}

/// Whether `key` is a pinned footer of `location` (or an entry beside it),
/// of a version other than `version`.
pub fn is_other_version(key: &Path, location: &Path, version: &str) -> bool {
    let pinned = format!("{location}{VERSION_MARK}");
    key.as_ref().starts_with(&pinned) && !key.prefix_matches(&pinned_key(location, version))
}

/// Pins `meta` (a namespaced object of `store`, as listed) and returns its
/// footer at exactly that version.
pub async fn pinned_footer(
    store: &CachedStore,
    cache: &Arc<FileMetadataCache>,
    meta: &ObjectMeta,
) -> Result<(PinnedObject, Arc<ParquetMetaData>)> {
    let object = store.pin(meta)?;
    let key = pinned_key(&meta.location, &object.key.version);
    if let Some(entry) = cache.get(&key)
        && let Some(cached) = entry.file_metadata.as_any().downcast_ref::<CachedParquetMetaData>()
    {
        return Ok((object, cached.parquet_metadata().clone()));
    }
    let pinned = store.pinned_store(object.clone());
    let metadata = DFParquetMetadata::new(pinned.as_ref(), meta)
        .with_page_index_policy(Some(PageIndexPolicy::Optional))
        .fetch_metadata()
        .await?;
    cache.put(
        &key,
        CachedFileMetadataEntry::new(meta.clone(), Arc::new(CachedParquetMetaData::new(metadata.clone()))),
    );
    Ok((object, metadata))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_beside_a_pinned_footer_go_with_its_version() {
        let location = Path::from("t0/a/x.parquet");
        let bloom = pinned_entry_key(&location, "v1", ["bloom", "0", "3"]);
        assert!(!is_other_version(&bloom, &location, "v1"));
        assert!(!is_other_version(&pinned_key(&location, "v1"), &location, "v1"));
        assert!(is_other_version(&bloom, &location, "v2"));
        // A version whose tag extends another's is another version.
        assert!(is_other_version(&pinned_key(&location, "v12"), &location, "v1"));
        assert!(is_other_version(
            &pinned_entry_key(&location, "v12", ["bloom"]),
            &location,
            "v1"
        ));
        // Other objects and DataFusion's own (unpinned) entry are left alone.
        assert!(!is_other_version(&location, &location, "v2"));
        assert!(!is_other_version(
            &pinned_key(&Path::from("t0/a/y.parquet"), "v1"),
            &location,
            "v2"
        ));
    }
}
