//! Equality deletes (Iceberg spec, "Equality Delete Files"): a delete file
//! holds values of some columns (its `equality_ids`); a row of a data file
//! it applies to is deleted when its values of those columns equal one of
//! the file's rows, nulls equal to nulls. A delete applies to the data
//! files of its partition (any, for an unpartitioned delete) whose data
//! sequence number is strictly below its own ([`applies_to`]).
//!
//! Each delete file is read once (by field id, [`crate::file_columns`])
//! into a [`KeySet`]: its rows in Arrow's row format over widened types
//! (integers as 64-bit, strings and binaries without views, decimals at
//! full precision), so a column promoted since the file was written, or
//! read as a view, compares alike. The scan loads a row group's key columns
//! and ANDs "not in the set" into the rows it may return, beside position
//! deletes (`CachedScanExec::requested_rows`), before the filter, a limit or
//! a partial aggregate sees a row.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::compute::{cast, concat};
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::error::{DataFusionError, Result};
use datafusion::parquet::arrow::PARQUET_FIELD_ID_META_KEY;
use object_store::path::Path;
use silt_lakehouse::iceberg::ContentFile;

/// The rows one equality delete file deletes: its key columns' field ids
/// and their values, as rows.
pub struct KeySet {
    field_ids: Vec<i32>,
    types: Vec<DataType>,
    converter: RowConverter,
    keys: HashSet<Box<[u8]>>,
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySet")
            .field("field_ids", &self.field_ids)
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl KeySet {
    /// The set of the rows of `columns` (one array per field of
    /// `field_ids`, all of one length).
    pub fn try_new(field_ids: Vec<i32>, columns: &[ArrayRef]) -> Result<KeySet> {
        let types: Vec<DataType> = columns.iter().map(|c| widened(c.data_type())).collect();
        let converter = RowConverter::new(types.iter().cloned().map(SortField::new).collect())?;
        let widened = widen(columns, &types)?;
        let rows = converter.convert_columns(&widened)?;
        let keys = rows.iter().map(|row| Box::from(row.data())).collect();
        Ok(KeySet {
            field_ids,
            types,
            converter,
            keys,
        })
    }

    /// The field ids of the key columns, in the order [`Self::live`] takes them.
    pub fn field_ids(&self) -> &[i32] {
        &self.field_ids
    }

    /// Of rows given by their key `columns` (in [`Self::field_ids`] order,
    /// any type that casts to the keys'), which are not deleted.
    pub fn live(&self, columns: &[ArrayRef]) -> Result<BooleanBuffer> {
        if self.keys.is_empty() {
            // An empty delete file deletes nothing (and knows no key types).
            let rows = columns.first().map_or(0, |c| c.len());
            return Ok(BooleanBuffer::new_set(rows));
        }
        let widened = widen(columns, &self.types)?;
        let rows = self.converter.convert_columns(&widened)?;
        Ok(BooleanBuffer::collect_bool(rows.num_rows(), |i| {
            !self.keys.contains(rows.row(i).data())
        }))
    }
}

/// `data_type` as keys compare it: integers as 64-bit, strings and
/// binaries without views or large offsets, decimals at full precision.
fn widened(data_type: &DataType) -> DataType {
    use DataType::*;
    match data_type {
        Int8 | Int16 | Int32 | Int64 => Int64,
        UInt8 | UInt16 | UInt32 => Int64,
        Float16 | Float32 | Float64 => Float64,
        Utf8View | LargeUtf8 => Utf8,
        BinaryView | LargeBinary => Binary,
        Decimal32(_, s) | Decimal64(_, s) | Decimal128(_, s) => Decimal128(38, *s),
        other => other.clone(),
    }
}

fn widen(columns: &[ArrayRef], types: &[DataType]) -> Result<Vec<ArrayRef>> {
    if columns.len() != types.len() {
        return Err(DataFusionError::Internal(format!(
            "{} key columns for {} key types",
            columns.len(),
            types.len()
        )));
    }
    columns.iter().zip(types).map(|(c, t)| Ok(cast(c, t)?)).collect()
}

/// The arrays of one column of many batches as one array (`data_type`
/// when there are none).
pub fn concatenated(arrays: &[ArrayRef], data_type: &DataType) -> Result<ArrayRef> {
    match arrays {
        [] => Ok(datafusion::arrow::array::new_empty_array(data_type)),
        [one] => Ok(one.clone()),
        many => {
            let refs: Vec<&dyn Array> = many.iter().map(AsRef::as_ref).collect();
            Ok(concat(&refs)?)
        }
    }
}

/// Whether an equality delete `delete` applies to the data file `data`
/// (Iceberg spec, "Scan Planning"): an older file (strictly smaller data
/// sequence number), of the same partition (spec and tuple) unless the
/// delete's is unpartitioned (an empty tuple).
pub fn applies_to(delete: &ContentFile, data: &ContentFile) -> bool {
    let unpartitioned = match &delete.partition {
        serde_json::Value::Null => true,
        serde_json::Value::Object(fields) => fields.is_empty(),
        _ => false,
    };
    data.sequence_number < delete.sequence_number
        && (unpartitioned || (delete.spec_id == data.spec_id && delete.partition == data.partition))
}

/// The equality delete sets that apply to each data file (namespaced path).
/// Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct EqualityDeletes(Arc<HashMap<Path, Vec<Arc<KeySet>>>>);

impl EqualityDeletes {
    pub fn new(per_file: HashMap<Path, Vec<Arc<KeySet>>>) -> Self {
        EqualityDeletes(Arc::new(per_file))
    }

    /// Whether no delete applies to any file.
    pub fn is_empty(&self) -> bool {
        self.0.values().all(Vec::is_empty)
    }

    /// The sets that apply to `file` (empty for none).
    pub fn of(&self, file: &Path) -> &[Arc<KeySet>] {
        self.0.get(file).map(Vec::as_slice).unwrap_or_default()
    }
}

/// The indices in `schema` of `keys`' columns (its field ids), or an error
/// naming the one the schema no longer has.
pub fn key_columns(keys: &KeySet, schema: &Schema) -> Result<Vec<usize>> {
    keys.field_ids()
        .iter()
        .map(|&id| {
            column_with_field_id(schema, id).ok_or_else(|| {
                DataFusionError::NotImplemented(format!(
                    "an equality delete on field id {id}, which the table's schema no longer has"
                ))
            })
        })
        .collect()
}

/// The index in `schema` of the column with Iceberg field id `id`.
pub fn column_with_field_id(schema: &Schema, id: i32) -> Option<usize> {
    let id = id.to_string();
    schema
        .fields()
        .iter()
        .position(|f| f.metadata().get(PARQUET_FIELD_ID_META_KEY) == Some(&id))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int32Array, Int64Array, StringArray, StringViewArray};
    use serde_json::json;
    use silt_lakehouse::iceberg::FileContent;

    use super::*;

    #[test]
    fn keys_match_across_widths_views_and_nulls() {
        let ids: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), Some(2), None]));
        let names: ArrayRef = Arc::new(StringArray::from(vec![Some("a"), None, Some("c")]));
        let set = KeySet::try_new(vec![1, 2], &[ids, names]).unwrap();
        let data_ids: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), Some(1), Some(2), None, None]));
        let data_names: ArrayRef = Arc::new(StringViewArray::from(vec![Some("a"), Some("b"), None, Some("c"), None]));
        let live = set.live(&[data_ids, data_names]).unwrap();
        assert_eq!(
            live.iter().collect::<Vec<_>>(),
            vec![false, true, false, false, true],
            "(1,a) and (2,null) and (null,c) are deleted; nulls equal nulls"
        );
        assert!(set.live(&[Arc::new(Int64Array::from(vec![1])) as ArrayRef]).is_err());
        let empty = KeySet::try_new(vec![1], &[]).unwrap();
        let all = empty
            .live(&[Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef])
            .unwrap();
        assert_eq!(all.count_set_bits(), 2, "an empty delete file deletes nothing");
    }

    #[test]
    fn deletes_apply_to_older_files_of_their_partition() {
        let file = |partition: serde_json::Value, spec_id: i32, sequence_number: i64| ContentFile {
            content: FileContent::Data,
            path: "x".into(),
            format: "PARQUET".into(),
            record_count: 1,
            size: 1,
            sequence_number,
            partition,
            spec_id,
            equality_ids: Vec::new(),
            metrics: Default::default(),
        };
        let (a, b) = (json!({"cat": "a"}), json!({"cat": "b"}));
        let delete = file(a.clone(), 1, 5);
        assert!(applies_to(&delete, &file(a.clone(), 1, 4)));
        assert!(!applies_to(&delete, &file(a.clone(), 1, 5)), "strictly older data only");
        assert!(!applies_to(&delete, &file(b.clone(), 1, 4)), "another partition");
        assert!(
            !applies_to(&delete, &file(a.clone(), 0, 4)),
            "the same tuple of another spec"
        );
        assert!(
            applies_to(&file(json!({}), 0, 5), &file(b, 1, 4)),
            "an unpartitioned delete applies everywhere"
        );
        assert!(applies_to(&file(serde_json::Value::Null, 0, 5), &file(a, 1, 1)));
    }
}
