//! Iceberg tables: the metadata file, a snapshot, its live files.
//!
//! Reading a snapshot's files takes one metadata read (which snapshot is
//! current), one manifest-list read and one read per manifest, all through
//! the caller's store. A table is named by its metadata JSON
//! (`.../metadata/00003-<uuid>.metadata.json`) or by its folder: then the
//! current version is `metadata/version-hint.text` (Hadoop tables), else
//! the highest-numbered `*.metadata.json` in `metadata/` (what catalogs
//! write; with a catalog the catalog's answer is the authority).

mod manifest;
mod memo;
mod metadata;
mod partition;
pub mod rest;
mod schema;

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

pub use manifest::{
    ColumnMetrics, ContentFile, FileContent, ManifestContent, ManifestEntryFile, read_manifest, read_manifest_list,
};
pub use memo::MetadataMemo;
pub use metadata::{Snapshot, SnapshotChoice, SnapshotLogEntry, TableMetadata};
pub use partition::{PartitionField, PartitionSpec, Transform};
pub use schema::{IcebergField, IcebergSchema, IcebergType};

use crate::{LakehouseError, ObjectLocator, Result};

/// Manifests read at once.
const MANIFEST_READS: usize = 8;

/// A table's metadata as of one metadata file.
#[derive(Debug, Clone)]
pub struct IcebergTable {
    /// The metadata file read.
    pub metadata_path: Path,
    pub metadata: Arc<TableMetadata>,
}

/// The live files of one snapshot.
#[derive(Debug, Clone, Default)]
pub struct SnapshotFiles {
    /// Data files, sorted by path.
    pub data: Vec<ContentFile>,
    /// Position and equality delete files, sorted by path.
    pub deletes: Vec<ContentFile>,
}

impl IcebergTable {
    /// The table at `location` (a metadata JSON, or the table's folder).
    /// Metadata files are immutable under their names: one `memo` has read
    /// and parsed, it does not read again, so a warm load of a table folder
    /// costs one request (the version hint, or the LIST of `metadata/`).
    ///
    /// Found by listing, the newest metadata file may still be being
    /// written (a local or NFS warehouse; object-store writes are atomic):
    /// one that does not parse is passed over for the next newest, at most
    /// [`UNREADABLE_NEWEST`] times, so a commit in progress is seen once it
    /// is whole rather than failing queries meanwhile.
    pub async fn load(store: &dyn ObjectStore, location: &Path, memo: &MetadataMemo) -> Result<IcebergTable> {
        let candidates = current_metadata_paths(store, location, memo).await?;
        let mut failed = None;
        for metadata_path in candidates.into_iter().take(UNREADABLE_NEWEST + 1) {
            let parsed = memo
                .metadata(&metadata_path, || async {
                    let bytes = read(store, &metadata_path).await?;
                    TableMetadata::parse(metadata_path.as_ref(), &bytes)
                })
                .await;
            match parsed {
                Ok(metadata) => {
                    return Ok(IcebergTable {
                        metadata_path,
                        metadata,
                    });
                }
                Err(e @ LakehouseError::Invalid { .. }) => {
                    failed.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(failed.unwrap_or_else(|| LakehouseError::NoSuchSnapshot {
            table: location.to_string(),
            reason: "no metadata file".into(),
        }))
    }

    /// The live files of the snapshot `choice` names (none for a table
    /// without snapshots), their URLs resolved in `store` by `locator`;
    /// manifest lists and manifests `memo` holds are not read again.
    pub async fn files(
        &self,
        store: &dyn ObjectStore,
        locator: &ObjectLocator,
        choice: SnapshotChoice,
        memo: &MetadataMemo,
    ) -> Result<SnapshotFiles> {
        let Some(snapshot) = self.metadata.snapshot(choice)? else {
            return Ok(SnapshotFiles::default());
        };
        let manifests = match (&snapshot.manifest_list, &snapshot.manifests) {
            (Some(list), _) => {
                let path = locator.path(list)?;
                memo.manifest_list(list, || async {
                    let bytes = read(store, &path).await?;
                    read_manifest_list(list, &bytes)
                })
                .await?
                .as_ref()
                .clone()
            }
            // v1 without a manifest list: the manifests, all of data.
            (None, Some(paths)) => paths
                .iter()
                .map(|p| ManifestEntryFile {
                    path: p.clone(),
                    content: ManifestContent::Data,
                    sequence_number: 0,
                    // Only deletes (v2) compare specs.
                    spec_id: 0,
                })
                .collect(),
            (None, None) => {
                return Err(LakehouseError::Invalid {
                    path: self.metadata_path.to_string(),
                    what: "Iceberg table metadata file",
                    reason: format!("snapshot {} names no manifests", snapshot.snapshot_id),
                });
            }
        };
        let per_manifest: Vec<Vec<ContentFile>> = futures::stream::iter(manifests)
            .map(|m| async move {
                let path = locator.path(&m.path)?;
                let files = memo
                    .manifest(&m.path, || async {
                        let bytes = read(store, &path).await?;
                        read_manifest(&m, &bytes)
                    })
                    .await?;
                Ok::<_, LakehouseError>(files.as_ref().clone())
            })
            .buffered(MANIFEST_READS)
            .try_collect()
            .await?;
        let (mut data, mut deletes): (Vec<ContentFile>, Vec<ContentFile>) = per_manifest
            .into_iter()
            .flatten()
            .partition(|f| f.content == FileContent::Data);
        data.sort_by(|a, b| a.path.cmp(&b.path));
        deletes.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(SnapshotFiles { data, deletes })
    }
}

/// Newest metadata files found by listing that may be passed over as
/// unreadable (being written) before a load fails.
const UNREADABLE_NEWEST: usize = 2;

/// The current metadata file of the table at `location`, first; when it was
/// found by listing, the older ones follow, newest first. One request (the
/// version hint's GET, or the LIST of `metadata/`) when `memo` has read the
/// file the hint names.
pub async fn current_metadata_paths(
    store: &dyn ObjectStore,
    location: &Path,
    memo: &MetadataMemo,
) -> Result<Vec<Path>> {
    if location.as_ref().ends_with(".metadata.json") {
        return Ok(vec![location.clone()]);
    }
    let folder = location.clone().join("metadata");
    if memo.is_hintless(&folder) {
        return latest_metadata(store, &folder, None).await;
    }
    let hint = folder.clone().join("version-hint.text");
    match store.get(&hint).await {
        Ok(result) => {
            let text = result.bytes().await.map_err(|e| store_error(&hint, e))?;
            let text = String::from_utf8_lossy(&text).trim().to_string();
            if text.ends_with(".metadata.json") {
                return Ok(vec![folder.join(text.as_str())]);
            }
            let version: u64 = text.parse().map_err(|_| LakehouseError::Invalid {
                path: hint.to_string(),
                what: "Iceberg version hint",
                reason: format!("{text:?} is not a version number"),
            })?;
            let named = folder.clone().join(format!("v{version}.metadata.json").as_str());
            if memo.has_metadata(&named) || store.head(&named).await.is_ok() {
                return Ok(vec![named]);
            }
            latest_metadata(store, &folder, Some(version)).await
        }
        Err(object_store::Error::NotFound { .. }) => {
            let latest = latest_metadata(store, &folder, None).await?;
            memo.set_hintless(&folder);
            Ok(latest)
        }
        Err(e) => Err(store_error(&hint, e)),
    }
}

/// The `*.metadata.json` in `folder`, highest version (`vN.` or
/// `0000N-uuid.`) first, or those of exactly version `want`.
async fn latest_metadata(store: &dyn ObjectStore, folder: &Path, want: Option<u64>) -> Result<Vec<Path>> {
    let listed: Vec<_> = store
        .list(Some(folder))
        .try_collect()
        .await
        .map_err(|e| store_error(folder, e))?;
    let mut found: Vec<(u64, Path)> = listed
        .into_iter()
        .filter_map(|meta| {
            let name = meta.location.filename()?.to_string();
            let version = metadata_version(&name)?;
            Some((version, meta.location))
        })
        .filter(|(v, _)| want.is_none_or(|w| *v == w))
        .collect();
    found.sort_by(|a, b| b.cmp(a));
    if found.is_empty() {
        return Err(LakehouseError::NoSuchSnapshot {
            table: folder.to_string(),
            reason: match want {
                Some(v) => format!("no metadata file of version {v}"),
                None => "no *.metadata.json: not an Iceberg table folder".to_string(),
            },
        });
    }
    Ok(found.into_iter().map(|(_, path)| path).collect())
}

/// The version of a metadata file name: `v12.metadata.json` and
/// `00012-<uuid>.metadata.json` are version 12. Compressed ones
/// (`.gz.metadata.json`) are not read yet.
fn metadata_version(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".metadata.json")?;
    if stem.ends_with(".gz") {
        return None;
    }
    let digits = match stem.strip_prefix('v') {
        Some(rest) => rest,
        None => stem.split('-').next()?,
    };
    digits.parse().ok()
}

async fn read(store: &dyn ObjectStore, path: &Path) -> Result<bytes::Bytes> {
    let result = store.get(path).await.map_err(|e| store_error(path, e))?;
    result.bytes().await.map_err(|e| store_error(path, e))
}

fn store_error(path: &Path, source: object_store::Error) -> LakehouseError {
    LakehouseError::Store {
        path: path.to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_file_names_carry_their_version() {
        assert_eq!(metadata_version("v12.metadata.json"), Some(12));
        assert_eq!(
            metadata_version("00012-6b0d9f1c-7f52-4d3a-9d6e-1c2f3a4b5c6d.metadata.json"),
            Some(12)
        );
        assert_eq!(metadata_version("00001-x.gz.metadata.json"), None);
        assert_eq!(metadata_version("snap-1-0-x.avro"), None);
        assert_eq!(metadata_version("version-hint.text"), None);
    }
}
