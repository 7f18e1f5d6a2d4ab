//! Delete files, read once per file (immutable, like every file a table's
//! metadata names): position deletes, Parquet files of `(file_path, pos)`
//! rows (Iceberg spec, "Position Delete Files"), into the deleted positions
//! of each data file; equality deletes into [`KeySet`]s.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, BooleanBufferBuilder, RecordBatch};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type, Schema};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::cache::cache_manager::FileMetadataCache;
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::parquet::arrow::arrow_reader::ArrowReaderMetadata;
use datafusion::parquet::arrow::arrow_reader::ArrowReaderOptions;
use datafusion::parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use futures::TryStreamExt;
use object_store::ObjectMeta;
use object_store::path::Path;
use silt_cache::CachedStore;

use super::equality::{KeySet, column_with_field_id, concatenated};
use crate::column_loader::FileContext;
use crate::file_reader::CachedFileReader;
use crate::footer::pinned_footer;

/// Delete files read, by path: a few hundred bytes per deleted row at most
/// while held; 1,024 files.
const DELETE_FILES: u64 = 1024;

/// Deleted row positions (0-based, in the file) per data file (namespaced
/// path), sorted and without repeats. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct PositionDeletes(Arc<HashMap<Path, Arc<Vec<u64>>>>);

impl PositionDeletes {
    /// From positions in any order, with repeats.
    pub fn from_unsorted(per_file: HashMap<Path, Vec<u64>>) -> Self {
        let sorted = per_file
            .into_iter()
            .map(|(path, mut rows)| {
                rows.sort_unstable();
                rows.dedup();
                (path, Arc::new(rows))
            })
            .collect();
        PositionDeletes(Arc::new(sorted))
    }

    /// Whether no row of any file is deleted.
    pub fn is_empty(&self) -> bool {
        self.0.values().all(|rows| rows.is_empty())
    }

    /// The deleted positions of `file`, if any.
    pub fn of(&self, file: &Path) -> Option<&Arc<Vec<u64>>> {
        self.0.get(file).filter(|rows| !rows.is_empty())
    }

    /// The deleted positions of `file` among the `rows` rows from position
    /// `first` on.
    pub fn deleted_in(&self, file: &Path, first: u64, rows: usize) -> &[u64] {
        let Some(deleted) = self.of(file) else {
            return &[];
        };
        let end = first + rows as u64;
        &deleted[deleted.partition_point(|&p| p < first)..deleted.partition_point(|&p| p < end)]
    }

    /// Which rows of row group `rg` of `file` are not deleted; `None` when
    /// none of them is (at once for a file without deletes).
    pub fn live_rows(&self, file: &FileContext, rg: usize) -> Option<BooleanBuffer> {
        let path = &file.meta.location;
        self.of(path)?;
        let rows = file.rows(rg);
        let first = file.first_row(rg);
        let here = self.deleted_in(path, first, rows);
        if here.is_empty() {
            return None;
        }
        let mut live = BooleanBufferBuilder::new(rows);
        live.append_n(rows, true);
        for &p in here {
            live.set_bit((p - first) as usize, false);
        }
        Some(live.finish())
    }
}

/// Reads position delete files through the table's cached store.
pub struct DeleteFiles {
    store: Arc<CachedStore>,
    footers: Arc<FileMetadataCache>,
    read: moka::sync::Cache<Path, Arc<HashMap<String, Vec<u64>>>>,
    keys: moka::sync::Cache<Path, Arc<KeySet>>,
}

impl DeleteFiles {
    pub fn new(store: Arc<CachedStore>, footers: Arc<FileMetadataCache>) -> Self {
        DeleteFiles {
            store,
            footers,
            read: moka::sync::Cache::new(DELETE_FILES),
            keys: moka::sync::Cache::new(DELETE_FILES),
        }
    }

    /// The positions the delete file `meta` (an immutable object) deletes,
    /// per data file URL as the file spells it.
    pub async fn read(&self, meta: &ObjectMeta) -> Result<Arc<HashMap<String, Vec<u64>>>> {
        if let Some(held) = self.read.get(&meta.location) {
            return Ok(held);
        }
        let invalid =
            |reason: String| DataFusionError::Execution(format!("position delete file {}: {reason}", meta.location));
        let batches = self
            .read_columns(meta, |schema| {
                let column = |name: &str| schema.index_of(name).map_err(|_| invalid(format!("no column {name}")));
                Ok(vec![column("file_path")?, column("pos")?])
            })
            .await?;
        let mut per_file: HashMap<String, Vec<u64>> = HashMap::new();
        for batch in batches {
            let named = |name: &str| {
                batch
                    .column_by_name(name)
                    .ok_or_else(|| invalid(format!("no column {name}")))
            };
            let paths = cast(named("file_path")?, &DataType::Utf8)?;
            let positions = cast(named("pos")?, &DataType::Int64)?;
            let (paths, positions) = (paths.as_string::<i32>(), positions.as_primitive::<Int64Type>());
            if paths.null_count() > 0 || positions.null_count() > 0 {
                return Err(invalid("a null file_path or pos".into()));
            }
            for (path, pos) in paths.iter().zip(positions.iter()) {
                let (Some(path), Some(pos)) = (path, pos) else { continue };
                let pos = u64::try_from(pos).map_err(|_| invalid(format!("position {pos}")))?;
                per_file.entry(path.to_string()).or_default().push(pos);
            }
        }
        let per_file = Arc::new(per_file);
        self.read.insert(meta.location.clone(), per_file.clone());
        Ok(per_file)
    }

    /// The rows the equality delete file `meta` (an immutable object)
    /// deletes: its columns of Iceberg field ids `field_ids`.
    pub async fn keys(&self, meta: &ObjectMeta, field_ids: &[i32]) -> Result<Arc<KeySet>> {
        if let Some(held) = self.keys.get(&meta.location) {
            return Ok(held);
        }
        let invalid =
            |reason: String| DataFusionError::Execution(format!("equality delete file {}: {reason}", meta.location));
        let mut roots = Vec::new();
        let batches = self
            .read_columns(meta, |schema| {
                for &id in field_ids {
                    let root = column_with_field_id(schema, id)
                        .ok_or_else(|| invalid(format!("no column of field id {id}")))?;
                    roots.push(root);
                }
                Ok(roots.clone())
            })
            .await?;
        let Some(first) = batches.first() else {
            return Ok(Arc::new(KeySet::try_new(field_ids.to_vec(), &[])?));
        };
        // The projected batch holds the key columns in file order.
        let mut sorted = roots.clone();
        sorted.sort_unstable();
        let columns = roots
            .iter()
            .map(|root| {
                let at = sorted.binary_search(root).expect("a projected root");
                let arrays: Vec<_> = batches.iter().map(|b| b.column(at).clone()).collect();
                concatenated(&arrays, first.column(at).data_type())
            })
            .collect::<Result<Vec<_>>>()?;
        let keys = Arc::new(KeySet::try_new(field_ids.to_vec(), &columns).map_err(|e| invalid(e.to_string()))?);
        self.keys.insert(meta.location.clone(), keys.clone());
        Ok(keys)
    }

    /// Every row of the root columns `pick` chooses (given the file's Arrow
    /// schema) of the delete file `meta`, read through the cached store.
    async fn read_columns(
        &self,
        meta: &ObjectMeta,
        pick: impl FnOnce(&Schema) -> Result<Vec<usize>>,
    ) -> Result<Vec<RecordBatch>> {
        let (object, metadata) = pinned_footer(&self.store, &self.footers, meta).await?;
        let reader_metadata = ArrowReaderMetadata::try_new(metadata.clone(), ArrowReaderOptions::new())?;
        let roots = pick(reader_metadata.schema())?;
        let mask = ProjectionMask::roots(metadata.file_metadata().schema_descr(), roots);
        let reader = CachedFileReader {
            store: self.store.clone(),
            object,
            metadata,
        };
        Ok(
            ParquetRecordBatchStreamBuilder::new_with_metadata(reader, reader_metadata)
                .with_projection(mask)
                .build()?
                .try_collect()
                .await?,
        )
    }
}
