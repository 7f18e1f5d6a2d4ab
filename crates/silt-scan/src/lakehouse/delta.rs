//! Delta Lake tables: the current pointer is the newest commit in
//! `_delta_log/` (one LIST after the newest commit known); a version's files
//! come from the log's replay ([`silt_lakehouse::delta::DeltaLog`]), its
//! deletes from deletion vectors, read once each (inline in the log, or a
//! range of a `.bin` file, checked by its CRC) and kept by identity.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::error::{DataFusionError, Result};
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;
use object_store::path::Path;
use silt_lakehouse::delta::deletion_vector::{decode, decode_framed};
use silt_lakehouse::delta::{DeletionVector, DeltaLog, DeltaSchema, DeltaType, VectorBytes, below};
use silt_lakehouse::{ObjectLocator, SnapshotChoice};

use super::{FileBounds, PartitionValues, PositionDeletes, TableFiles, TableStore, external};

/// Bytes of deletion vectors kept decoded per table (8 per deleted row):
/// 256 MiB, 32 million deleted rows.
const VECTOR_BYTES: u64 = 256 << 20;

/// Deletion vector files read at once.
const VECTOR_READS: usize = 8;

/// A Delta table's versions.
#[derive(Debug)]
pub struct DeltaSnapshots {
    log: DeltaLog,
    vectors: moka::sync::Cache<DeletionVector, Arc<Vec<u64>>>,
}

impl DeltaSnapshots {
    /// The table whose root folder (holding `_delta_log/`) is `root`, in a
    /// store whose root URL `locator` resolves.
    pub fn new(root: Path, locator: ObjectLocator) -> Self {
        DeltaSnapshots {
            log: DeltaLog::new(root, locator),
            vectors: moka::sync::Cache::builder()
                .weigher(|_, rows: &Arc<Vec<u64>>| u32::try_from(rows.len() * 8).unwrap_or(u32::MAX))
                .max_capacity(VECTOR_BYTES)
                .build(),
        }
    }

    /// The newest commit file's path.
    pub(super) async fn current_pointer(&self, store: &TableStore) -> Result<Path> {
        self.log.current_commit(store.store.inner()).await.map_err(external)
    }

    /// The files of the version `choice` names (snapshot ids are versions),
    /// in that version's schema.
    pub(super) async fn files_at(&self, store: &TableStore, choice: SnapshotChoice) -> Result<TableFiles> {
        let snapshot = self.log.snapshot(store.store.inner(), choice).await.map_err(external)?;
        let files = snapshot.files(self.log.root()).map_err(external)?;
        let schema = Arc::new(arrow_schema(&snapshot.schema, store.view_types)?);
        let partitions: HashMap<_, _> = files
            .iter()
            .filter(|f| !f.partition_values.is_empty())
            .map(|f| (store.store.qualify(&f.path), f.partition_values.clone()))
            .collect();
        let with_vectors: Vec<(Path, DeletionVector)> = files
            .iter()
            .filter_map(|f| Some((store.store.qualify(&f.path), f.deletion_vector.clone()?)))
            .collect();
        let deleted: HashMap<Path, Vec<u64>> = futures::stream::iter(with_vectors)
            .map(|(path, vector)| async move {
                let rows = self.vector(store, &vector).await?;
                Ok::<_, DataFusionError>((path, rows.as_ref().clone()))
            })
            .buffered(VECTOR_READS)
            .try_collect()
            .await?;
        let data = files.iter().map(|f| (store.store.qualify(&f.path), f.size));
        Ok(TableFiles {
            files: store.data_files(data, &schema),
            deletes: PositionDeletes::from_unsorted(deleted),
            equality: Default::default(),
            partitions: PartitionValues::new(partitions),
            bounds: FileBounds::from_delta_json(
                files
                    .iter()
                    .filter_map(|f| Some((store.store.qualify(&f.path), f.stats.clone()?))),
                &schema,
            ),
            // Renames need column mapping, which the log refuses.
            columns_changed: false,
            snapshot_id: i64::try_from(snapshot.version).ok(),
            schema: Some(schema),
            metadata_path: Some(snapshot.commit_path.clone()),
        })
    }

    /// The rows `vector` deletes: decoded once, read (if in a file) with
    /// one ranged GET.
    async fn vector(&self, store: &TableStore, vector: &DeletionVector) -> Result<Arc<Vec<u64>>> {
        if let Some(rows) = self.vectors.get(vector) {
            return Ok(rows);
        }
        let rows = match vector.bytes().map_err(external)? {
            VectorBytes::Inline(bytes) => decode(&vector.unique_id(), &bytes, vector).map_err(external)?,
            VectorBytes::File {
                path,
                relative,
                offset,
                size,
            } => {
                let path = if relative {
                    // Named by the protocol's rule, not URL-encoded.
                    below(self.log.root(), &Path::from(path.as_str()))
                } else {
                    store.locator.path(&path).map_err(external)?
                };
                let range = offset..offset + size + 8;
                let framed = store
                    .store
                    .inner()
                    .get_range(&path, range)
                    .await
                    .map_err(|e| DataFusionError::External(Box::new(e)))?;
                decode_framed(path.as_ref(), &framed, vector).map_err(external)?
            }
        };
        let rows = Arc::new(rows);
        self.vectors.insert(vector.clone(), rows.clone());
        Ok(rows)
    }
}

/// A Delta schema in Arrow; `view_types`: strings and binaries as views.
/// Nested columns are refused: the scans do not read them from lakehouse
/// tables yet.
pub fn arrow_schema(schema: &DeltaSchema, view_types: bool) -> Result<Schema> {
    let fields = schema
        .fields
        .iter()
        .map(|f| {
            let data_type = arrow_type(&f.data_type, view_types).ok_or_else(|| {
                DataFusionError::NotImplemented(format!(
                    "column {} is a nested Delta type ({:?}); Silt reads primitive columns of lakehouse tables only",
                    f.name, f.data_type
                ))
            })?;
            Ok(Field::new(&f.name, data_type, f.nullable))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Schema::new(fields))
}

fn arrow_type(t: &DeltaType, view_types: bool) -> Option<DataType> {
    Some(match t {
        DeltaType::String if view_types => DataType::Utf8View,
        DeltaType::String => DataType::Utf8,
        DeltaType::Binary if view_types => DataType::BinaryView,
        DeltaType::Binary => DataType::Binary,
        DeltaType::Long => DataType::Int64,
        DeltaType::Integer => DataType::Int32,
        DeltaType::Short => DataType::Int16,
        DeltaType::Byte => DataType::Int8,
        DeltaType::Float => DataType::Float32,
        DeltaType::Double => DataType::Float64,
        DeltaType::Boolean => DataType::Boolean,
        DeltaType::Date => DataType::Date32,
        DeltaType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        DeltaType::TimestampNtz => DataType::Timestamp(TimeUnit::Microsecond, None),
        DeltaType::Decimal { precision, scale } => DataType::Decimal128(*precision, *scale),
        DeltaType::Nested(_) => return None,
    })
}
