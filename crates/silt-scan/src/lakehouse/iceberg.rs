//! Iceberg tables: the current pointer is the metadata file (the version
//! hint, or the newest `*.metadata.json` listed); a snapshot's files come
//! from its manifest list and manifests, its deletes from position and
//! equality delete files ([`super::deletes`], [`super::equality`]).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::error::{DataFusionError, Result};
use object_store::path::Path;
use silt_cache::ObjectVersion;
use silt_lakehouse::SnapshotChoice;
use silt_lakehouse::iceberg::rest::RestTable;
use silt_lakehouse::iceberg::{ContentFile, FileContent, IcebergTable, MetadataMemo, PartitionSpec, TableMetadata};

use super::equality::{self, EqualityDeletes, KeySet};
use super::{FileBounds, PositionDeletes, TableFiles, TableStore, arrow_schema, external, iceberg_bounds};

/// An Iceberg table's snapshots.
#[derive(Debug)]
pub struct IcebergSnapshots {
    /// The table's folder or metadata JSON, in the store (not namespaced).
    location: Path,
    /// The REST catalog whose answer is the table's current metadata file,
    /// if the table is a catalog's (then `location` is only where it was).
    catalog: Option<RestTable>,
    memo: MetadataMemo,
}

impl IcebergSnapshots {
    /// The table at `location`: a folder or a metadata JSON.
    pub fn new(location: Path) -> Self {
        IcebergSnapshots {
            location,
            catalog: None,
            memo: MetadataMemo::default(),
        }
    }

    /// The table `catalog` names: its current metadata file is the
    /// catalog's answer, read from the table's store.
    pub fn in_catalog(location: Path, catalog: RestTable) -> Self {
        IcebergSnapshots {
            catalog: Some(catalog),
            ..Self::new(location)
        }
    }

    /// The table's current metadata (one pointer read: the folder's, or
    /// the catalog's answer).
    async fn load(&self, store: &TableStore) -> Result<IcebergTable> {
        let location = match &self.catalog {
            None => self.location.clone(),
            Some(catalog) => {
                let url = catalog.metadata_location().await.map_err(external)?;
                store.locator.path(&url).map_err(external)?
            }
        };
        IcebergTable::load(store.store.inner(), &location, &self.memo)
            .await
            .map_err(external)
    }

    /// The current metadata file's path.
    pub(super) async fn current_pointer(&self, store: &TableStore) -> Result<Path> {
        Ok(self.load(store).await?.metadata_path)
    }

    /// The files of the snapshot `choice` names.
    pub(super) async fn files_at(&self, store: &TableStore, choice: SnapshotChoice) -> Result<TableFiles> {
        let table = self.load(store).await?;
        let snapshot = table.metadata.snapshot(choice).map_err(external)?;
        let snapshot_id = snapshot.map(|s| s.snapshot_id);
        // The current table reads in the table's current schema (a schema
        // change needs no data commit); time travel in the snapshot's.
        let schema_of = if choice == SnapshotChoice::Current {
            None
        } else {
            snapshot
        };
        let schema = table.metadata.schema_of(schema_of).map_err(external)?;
        let schema = Arc::new(arrow_schema(&schema, store.view_types)?);
        let live = table
            .files(store.store.inner(), &store.locator, choice, &self.memo)
            .await
            .map_err(external)?;
        if let Some(f) = live.data.iter().find(|f| f.format != "PARQUET") {
            return Err(DataFusionError::NotImplemented(format!(
                "{}: data file {} is {}; Silt reads Parquet data files only",
                table.metadata_path, f.path, f.format
            )));
        }
        if let Some(f) = live.deletes.iter().find(|f| f.format != "PARQUET") {
            return Err(DataFusionError::NotImplemented(format!(
                "{}: delete file {} is {}; Silt reads Parquet delete files only",
                table.metadata_path, f.path, f.format
            )));
        }
        let files = live
            .data
            .iter()
            .map(|f| Ok((store.namespaced(&f.path)?, f.size)))
            .collect::<Result<Vec<_>>>()?;
        let files = store.data_files(files, &schema);
        let bounds = self.file_bounds(store, &table.metadata, &live.data, &schema)?;
        let deletes = self.position_deletes(store, &live.data, &live.deletes).await?;
        let equality = self.equality_deletes(store, &live.data, &live.deletes).await?;
        Ok(TableFiles {
            files,
            deletes,
            equality,
            partitions: Default::default(),
            bounds,
            columns_changed: table.metadata.columns_changed(),
            snapshot_id,
            schema: Some(schema),
            metadata_path: Some(table.metadata_path.clone()),
        })
    }

    /// Per data file, what its manifest entry says of its columns of
    /// `schema`: metrics and partition tuple ([`iceberg_bounds`]).
    fn file_bounds(
        &self,
        store: &TableStore,
        metadata: &TableMetadata,
        data: &[ContentFile],
        schema: &Schema,
    ) -> Result<FileBounds> {
        let mut specs: HashMap<i32, Option<PartitionSpec>> = HashMap::new();
        let per_file = data
            .iter()
            .map(|f| {
                let spec = specs
                    .entry(f.spec_id)
                    .or_insert_with(|| metadata.partition_spec(f.spec_id));
                Ok((
                    store.namespaced(&f.path)?,
                    iceberg_bounds::known_values(f, schema, spec.as_ref()),
                ))
            })
            .collect::<Result<_>>()?;
        Ok(FileBounds::new(per_file))
    }

    /// Per data file, the positions every position delete file that applies
    /// to it (a data sequence number at or above the data file's) deletes.
    async fn position_deletes(
        &self,
        store: &TableStore,
        data: &[ContentFile],
        deletes: &[ContentFile],
    ) -> Result<PositionDeletes> {
        if deletes.is_empty() {
            return Ok(PositionDeletes::default());
        }
        // By store path: writers may spell one file's URL two ways.
        let sequence: HashMap<Path, i64> = data
            .iter()
            .map(|f| Ok((store.namespaced(&f.path)?, f.sequence_number)))
            .collect::<Result<_>>()?;
        let generation = store.generation(None);
        let mut per_file: HashMap<Path, Vec<u64>> = HashMap::new();
        for delete in deletes.iter().filter(|d| d.content == FileContent::PositionDeletes) {
            let location = ObjectVersion::immutable_meta(store.namespaced(&delete.path)?, delete.size, &generation);
            let positions = store.deletes.read(&location).await?;
            for (data_file, rows) in positions.iter() {
                let Ok(data_file) = store.namespaced(data_file) else {
                    continue; // a file of another store: not this table's
                };
                match sequence.get(&data_file) {
                    Some(&seq) if seq <= delete.sequence_number => {
                        per_file.entry(data_file).or_default().extend(rows);
                    }
                    _ => {} // an older file's, or one no longer in the table
                }
            }
        }
        Ok(PositionDeletes::from_unsorted(per_file))
    }

    /// Per data file, the equality delete files that apply to it
    /// ([`equality::applies_to`]: newer, and of its partition).
    async fn equality_deletes(
        &self,
        store: &TableStore,
        data: &[ContentFile],
        deletes: &[ContentFile],
    ) -> Result<EqualityDeletes> {
        let generation = store.generation(None);
        let mut per_file: HashMap<Path, Vec<Arc<KeySet>>> = HashMap::new();
        for delete in deletes.iter().filter(|d| d.content == FileContent::EqualityDeletes) {
            let location = ObjectVersion::immutable_meta(store.namespaced(&delete.path)?, delete.size, &generation);
            let keys = store.deletes.keys(&location, &delete.equality_ids).await?;
            for file in data {
                if equality::applies_to(delete, file) {
                    per_file
                        .entry(store.namespaced(&file.path)?)
                        .or_default()
                        .push(keys.clone());
                }
            }
        }
        Ok(EqualityDeletes::new(per_file))
    }
}
