//! Cache-access traces stored as Parquet, for replaying eviction policies
//! offline (`silt bench replay`, [`silt_cache::policy::replay`]).
//!
//! A trace has one row per access, in time order, with at least the columns
//! `entry_id` (u64) and `entry_size` (u64, bytes). Other columns (the traces in
//! the shared data set also carry `cache_memory_bytes` and `time_stamp_nanos`)
//! are not read: replay needs only the order of accesses, not their timing.
//!
//! The traces carry no record of which object-store GET brought each entry,
//! which the cost model needs (an entry's cost is its share of that GET).
//! Their ids tell it: an id packs `file << 48 | row group << 32 | column << 16
//! | batch`, the batch being 8192 rows within its row group. This layout is
//! read off the data (not documented by the traces' source): the low 16 bits
//! never exceed 49, bits 32..48 take 226 values (about 100M rows of `hits` in
//! row groups of up to 50 batches), bits 16..32 up to 105 (the `hits`
//! columns). A Parquet reader fetches a column chunk with one ranged read, so
//! [`column_chunk`] groups the batches one GET brings back.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Schema, UInt64Type};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use silt_cache::policy::replay::Access;

/// The column holding each access's entry id.
pub const ID_COLUMN: &str = "entry_id";
/// The column holding each access's entry size in bytes.
pub const SIZE_COLUMN: &str = "entry_size";

/// The column chunk (file, row group, column) of an entry id of the shared
/// traces: the id without its batch bits. Entries of one chunk come from one
/// GET, so [`price`](silt_cache::policy::replay::price) shares its latency
/// among them.
pub fn column_chunk(entry_id: u64) -> u64 {
    entry_id >> 16
}

/// Errors while reading a trace; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("opening trace {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("reading trace {path} as Parquet: {source}")]
    Parquet {
        path: PathBuf,
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error("decoding trace {path}: {source}")]
    Decode {
        path: PathBuf,
        #[source]
        source: arrow::error::ArrowError,
    },
    #[error("trace {path} has no column '{column}' (it has: {found})")]
    MissingColumn {
        path: PathBuf,
        column: &'static str,
        found: String,
    },
    #[error("trace {path}: column '{column}' is {found}, expected UInt64")]
    ColumnType {
        path: PathBuf,
        column: &'static str,
        found: DataType,
    },
    #[error("trace {path}: column '{column}' has nulls")]
    Nulls { path: PathBuf, column: &'static str },
}

/// Reads the `(entry_id, entry_size)` of every access in `path`, in file
/// order. Only the two columns are decoded.
pub fn read_trace(path: &Path) -> Result<Vec<Access>, TraceError> {
    let file = File::open(path).map_err(|source| TraceError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let parquet_error = |source| TraceError::Parquet {
        path: path.to_path_buf(),
        source,
    };
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(parquet_error)?;
    let schema = builder.schema().clone();
    let roots = [
        u64_column_index(path, &schema, ID_COLUMN)?,
        u64_column_index(path, &schema, SIZE_COLUMN)?,
    ];
    let rows = builder.metadata().file_metadata().num_rows();
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
    let reader = builder.with_projection(mask).build().map_err(parquet_error)?;

    let mut accesses = Vec::with_capacity(usize::try_from(rows).unwrap_or(0));
    for batch in reader {
        let batch = batch.map_err(|source| TraceError::Decode {
            path: path.to_path_buf(),
            source,
        })?;
        let ids = u64_values(path, &batch, ID_COLUMN)?;
        let sizes = u64_values(path, &batch, SIZE_COLUMN)?;
        accesses.extend(ids.iter().copied().zip(sizes.iter().copied()));
    }
    Ok(accesses)
}

/// Index of `column` in `schema`, checking that it is a UInt64 column.
fn u64_column_index(path: &Path, schema: &Schema, column: &'static str) -> Result<usize, TraceError> {
    let Some((index, field)) = schema.column_with_name(column) else {
        let found: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        return Err(TraceError::MissingColumn {
            path: path.to_path_buf(),
            column,
            found: found.join(", "),
        });
    };
    if field.data_type() != &DataType::UInt64 {
        return Err(TraceError::ColumnType {
            path: path.to_path_buf(),
            column,
            found: field.data_type().clone(),
        });
    }
    Ok(index)
}

/// The values of the (already type-checked) UInt64 `column` of `batch`.
fn u64_values<'a>(path: &Path, batch: &'a RecordBatch, column: &'static str) -> Result<&'a [u64], TraceError> {
    let array = batch
        .column_by_name(column)
        .and_then(|a| a.as_primitive_opt::<UInt64Type>())
        .ok_or_else(|| TraceError::ColumnType {
            path: path.to_path_buf(),
            column,
            found: batch
                .column_by_name(column)
                .map_or(DataType::Null, |a| a.data_type().clone()),
        })?;
    if array.null_count() > 0 {
        return Err(TraceError::Nulls {
            path: path.to_path_buf(),
            column,
        });
    }
    Ok(array.values())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, UInt64Array};
    use parquet::arrow::ArrowWriter;

    use super::*;

    fn write(path: &Path, columns: Vec<(&str, ArrayRef)>) {
        let batch = RecordBatch::try_from_iter(columns).unwrap();
        let mut writer = ArrowWriter::try_new(File::create(path).unwrap(), batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
    }

    fn u64s(values: &[u64]) -> ArrayRef {
        Arc::new(UInt64Array::from(values.to_vec()))
    }

    #[test]
    fn reads_ids_and_sizes_in_file_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.parquet");
        write(
            &path,
            vec![
                ("time_stamp_nanos", u64s(&[1, 2, 3])),
                (SIZE_COLUMN, u64s(&[10, 20, 10])),
                (ID_COLUMN, u64s(&[7, 8, 7])),
            ],
        );
        assert_eq!(read_trace(&path).unwrap(), [(7, 10), (8, 20), (7, 10)]);
    }

    #[test]
    fn batches_of_one_column_chunk_share_a_group() {
        let id = |rg: u64, col: u64, batch: u64| (1 << 48) | (rg << 32) | (col << 16) | batch;
        assert_eq!(column_chunk(id(3, 13, 0)), column_chunk(id(3, 13, 49)));
        assert_ne!(column_chunk(id(3, 13, 0)), column_chunk(id(4, 13, 0)));
        assert_ne!(column_chunk(id(3, 13, 0)), column_chunk(id(3, 14, 0)));
    }

    #[test]
    fn missing_column_names_file_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no-size.parquet");
        write(&path, vec![(ID_COLUMN, u64s(&[1]))]);
        let err = read_trace(&path).unwrap_err().to_string();
        assert!(err.contains("no-size.parquet") && err.contains("'entry_size'"), "{err}");
    }

    #[test]
    fn wrong_type_and_missing_file_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("signed.parquet");
        let signed: ArrayRef = Arc::new(Int64Array::from(vec![1]));
        write(&path, vec![(ID_COLUMN, signed), (SIZE_COLUMN, u64s(&[1]))]);
        let err = read_trace(&path).unwrap_err().to_string();
        assert!(err.contains("'entry_id' is Int64"), "{err}");

        let err = read_trace(&dir.path().join("absent.parquet")).unwrap_err().to_string();
        assert!(
            err.starts_with("opening trace") && err.contains("absent.parquet"),
            "{err}"
        );
    }
}
