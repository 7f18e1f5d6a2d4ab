//! Column-chunk bloom filters, read at the pinned object version and kept
//! decoded in the metadata tier beside that version's footer.
//!
//! A bloom filter answers "is this value certainly absent from the row
//! group?", which statistics cannot when a column's values are spread over
//! its whole range (ids, hashes, user names). The scan asks it for the
//! literals of `=` and `IN` conjuncts ([`row_group_bloom_filters`]); a point
//! lookup can ask it directly ([`column_bloom_filter`]).
//!
//! Each filter is read once per object version, through the same pinned
//! reader as the column pages (so it is never of another version), and kept
//! under a key below the pinned footer's (`footer::pinned_entry_key`): the
//! metadata tier's budget and LRU cover it, and `CacheTiers::invalidate`
//! drops it with the footer when the object changes. A warm scan therefore
//! reads no bloom-filter bytes.

use datafusion::common::HashMap;
use std::any::Any;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::datasource::physical_plan::parquet::BloomFilterStatistics;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::cache::cache_manager::{CachedFileMetadataEntry, FileMetadata, FileMetadataCache};
use datafusion::parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use datafusion::parquet::basic::Type as PhysicalType;
use datafusion::parquet::bloom_filter::Sbbf;
use datafusion::parquet::schema::types::SchemaDescriptor;
use silt_cache::{CacheError, CachedStore};

use crate::column_loader::FileContext;
use crate::file_reader::CachedFileReader;
use crate::footer::pinned_entry_key;

/// A decoded bloom filter as a metadata-tier entry.
struct BloomEntry(Arc<Sbbf>);

impl FileMetadata for BloomEntry {
    fn as_any(&self) -> &dyn Any {
        self
    }

    /// The bitset (32-byte blocks) plus the entry itself.
    fn memory_size(&self) -> usize {
        self.0.num_blocks() * 32 + std::mem::size_of::<Self>()
    }

    fn extra_info(&self) -> HashMap<String, String> {
        HashMap::from([("kind".to_string(), "bloom_filter".to_string())])
    }
}

/// The bloom filter of Parquet leaf column `column` in row group `rg` of
/// `file` (at the version the scan pinned), or `None` when the writer wrote
/// none. From the metadata tier when it holds it, else read through the
/// page and disk tiers and admitted.
pub async fn column_bloom_filter(
    store: &Arc<CachedStore>,
    cache: &Arc<FileMetadataCache>,
    file: &FileContext,
    rg: usize,
    column: usize,
) -> Result<Option<Arc<Sbbf>>> {
    let metadata = file.reader.metadata();
    if rg >= metadata.num_row_groups() || column >= metadata.file_metadata().schema_descr().num_columns() {
        return Err(DataFusionError::Execution(format!(
            "{} has no column {column} in row group {rg}",
            file.meta.location
        )));
    }
    if metadata.row_group(rg).column(column).bloom_filter_offset().is_none() {
        return Ok(None);
    }
    let (rg_part, column_part) = (rg.to_string(), column.to_string());
    let key = pinned_entry_key(
        &file.meta.location,
        &file.object.key.version,
        ["bloom", rg_part.as_str(), column_part.as_str()],
    );
    if let Some(entry) = cache.get(&key)
        && let Some(bloom) = entry.file_metadata.as_any().downcast_ref::<BloomEntry>()
    {
        return Ok(Some(bloom.0.clone()));
    }
    let reader = CachedFileReader {
        store: store.clone(),
        object: file.object.clone(),
        metadata: metadata.clone(),
    };
    let mut builder = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, file.reader.clone());
    let Some(sbbf) = builder
        .get_row_group_column_bloom_filter(rg, column)
        .await
        .map_err(|e| {
            DataFusionError::from(e).context(format!(
                "reading the bloom filter of column {column} in row group {rg} of {}",
                file.meta.location
            ))
        })?
    else {
        return Ok(None);
    };
    let sbbf = Arc::new(sbbf);
    cache.put(
        &key,
        CachedFileMetadataEntry::new(file.meta.clone(), Arc::new(BloomEntry(sbbf.clone()))),
    );
    Ok(Some(sbbf))
}

/// The bloom filters of row group `rg` for the table columns named
/// `columns` (those the filter compares with literals), in the form
/// DataFusion's pruning predicate reads them.
///
/// Left out (so they prune nothing): columns the file lacks or has without a
/// filter, columns whose Parquet type would hash differently from the
/// table type's literals ([`hashes_like`]), and filters that fail to decode
/// (a malformed filter only costs pruning, as in DataFusion). A failure to
/// read the bytes (the object changed, the store is down) is returned.
pub async fn row_group_bloom_filters(
    store: &Arc<CachedStore>,
    cache: &Arc<FileMetadataCache>,
    file: &FileContext,
    table_schema: &Schema,
    rg: usize,
    columns: &[String],
) -> Result<BloomFilterStatistics> {
    let descr = file.reader.metadata().file_metadata().schema_descr();
    let mut filters = BloomFilterStatistics::with_capacity(columns.len());
    for name in columns {
        let root = table_schema.index_of(name).ok().and_then(|c| file.file_columns[c]);
        let Some(leaf) = root.and_then(|root| primitive_leaf(descr, root)) else {
            continue;
        };
        let physical = descr.column(leaf).physical_type();
        let Ok(field) = table_schema.field_with_name(name) else {
            continue;
        };
        if !hashes_like(field.data_type(), physical) {
            continue;
        }
        match column_bloom_filter(store, cache, file, rg, leaf).await {
            Ok(Some(sbbf)) => filters.insert(
                name.clone(),
                sbbf.as_ref().clone(),
                physical,
                descr.column(leaf).type_length(),
            ),
            Ok(None) => {}
            Err(e) if CacheError::find(&e).is_some() => return Err(e),
            Err(e) => tracing::debug!("ignoring an unreadable bloom filter: {e}"),
        }
    }
    Ok(filters)
}

/// The leaf column of root column `root` if it is a primitive column (one
/// leaf, the only kind with a bloom filter DataFusion checks).
fn primitive_leaf(descr: &SchemaDescriptor, root: usize) -> Option<usize> {
    if !descr.root_schema().get_fields().get(root)?.is_primitive() {
        return None;
    }
    (0..descr.num_columns()).find(|&leaf| descr.get_column_root_idx(leaf) == root)
}

/// Whether literals of the table type `data_type` hash (for a bloom-filter
/// check) like the values a column of Parquet type `physical` stored. A file
/// whose column has another width than the table's (an `INT32` column of an
/// `Int64` table column) would hash differently and so wrongly look absent.
/// Types DataFusion's check does not hash (it answers "maybe") pass.
fn hashes_like(data_type: &DataType, physical: PhysicalType) -> bool {
    use DataType::*;
    match data_type {
        Int32 | UInt32 => physical == PhysicalType::INT32,
        Int64 | UInt64 => physical == PhysicalType::INT64,
        Float32 => physical == PhysicalType::FLOAT,
        Float64 => physical == PhysicalType::DOUBLE,
        Boolean => physical == PhysicalType::BOOLEAN,
        Utf8 | LargeUtf8 | Utf8View | Binary | LargeBinary | BinaryView => physical == PhysicalType::BYTE_ARRAY,
        FixedSizeBinary(_) => physical == PhysicalType::FIXED_LEN_BYTE_ARRAY,
        // Decimals are checked against the physical type by DataFusion itself.
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_hash_like_only_matching_physical_types() {
        assert!(hashes_like(&DataType::Int64, PhysicalType::INT64));
        assert!(!hashes_like(&DataType::Int64, PhysicalType::INT32));
        assert!(!hashes_like(&DataType::Int32, PhysicalType::INT64));
        assert!(hashes_like(&DataType::Utf8View, PhysicalType::BYTE_ARRAY));
        assert!(!hashes_like(&DataType::Float64, PhysicalType::FLOAT));
    }
}
