//! Delta Lake tables: the current pointer is the newest commit in
//! `_delta_log/` (one LIST after the newest commit known); a version's files
//! come from the log's replay ([`silt_lakehouse::delta::DeltaLog`]), its
//! deletes from deletion vectors, read once each (inline in the log, or a
//! range of a `.bin` file, checked by its CRC) and kept by identity.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::error::{DataFusionError, Result};
use datafusion::parquet::arrow::PARQUET_FIELD_ID_META_KEY;
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;
use object_store::path::Path;
use silt_lakehouse::delta::deletion_vector::{decode, decode_framed};
use silt_lakehouse::delta::{ColumnMapping, DeletionVector, DeltaLog, DeltaSchema, DeltaType, VectorBytes, below};
use silt_lakehouse::{ObjectLocator, SnapshotChoice};

use super::{FileBounds, PartitionValues, PositionDeletes, TableFiles, TableStore, external};
use crate::file_columns::{MATCH_BY_FIELD_ID, PHYSICAL_NAME};

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
        let mapping = snapshot.column_mapping().map_err(external)?;
        let schema = Arc::new(arrow_schema(&snapshot.schema, mapping, store.view_types)?);
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
            // Under column mapping files name columns otherwise than the
            // table (and a rename keeps the file's name): like an Iceberg
            // table with renames, only the server matches them.
            columns_changed: mapping != ColumnMapping::None,
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
/// Under column mapping each field carries what its data files' column is
/// found by: its physical name ([`PHYSICAL_NAME`], mode `name`), or its
/// field id (mode `id`, with the schema's [`MATCH_BY_FIELD_ID`] marker);
/// the log's statistics are read by the physical name in both modes.
/// Nested columns are refused: the scans do not read them from lakehouse
/// tables yet.
pub fn arrow_schema(schema: &DeltaSchema, mapping: ColumnMapping, view_types: bool) -> Result<Schema> {
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
            let mut metadata = HashMap::new();
            if let (ColumnMapping::Name | ColumnMapping::Id, Some(physical)) = (mapping, &f.physical_name) {
                metadata.insert(PHYSICAL_NAME.to_string(), physical.clone());
            }
            if let (ColumnMapping::Id, Some(id)) = (mapping, f.id) {
                metadata.insert(PARQUET_FIELD_ID_META_KEY.to_string(), id.to_string());
            }
            Ok(Field::new(&f.name, data_type, f.nullable).with_metadata(metadata))
        })
        .collect::<Result<Vec<_>>>()?;
    let by_id = match mapping {
        ColumnMapping::Id => HashMap::from([(MATCH_BY_FIELD_ID.to_string(), "true".to_string())]),
        _ => HashMap::new(),
    };
    Ok(Schema::new_with_metadata(fields, by_id))
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

#[cfg(test)]
mod tests {
    use super::*;
    use silt_lakehouse::delta::DeltaField;

    #[test]
    fn column_mapping_marks_how_files_name_columns() {
        let schema = DeltaSchema {
            fields: vec![DeltaField {
                name: "amount".into(),
                data_type: DeltaType::Double,
                nullable: true,
                id: Some(3),
                physical_name: Some("col-9f".into()),
            }],
        };
        let plain = arrow_schema(&schema, ColumnMapping::None, true).unwrap();
        assert!(plain.field(0).metadata().is_empty() && plain.metadata().is_empty());
        let by_name = arrow_schema(&schema, ColumnMapping::Name, true).unwrap();
        assert_eq!(by_name.field(0).metadata().get(PHYSICAL_NAME).unwrap(), "col-9f");
        assert!(!by_name.metadata().contains_key(MATCH_BY_FIELD_ID));
        let by_id = arrow_schema(&schema, ColumnMapping::Id, true).unwrap();
        assert_eq!(by_id.field(0).metadata().get(PARQUET_FIELD_ID_META_KEY).unwrap(), "3");
        assert!(by_id.metadata().contains_key(MATCH_BY_FIELD_ID));
    }
}
