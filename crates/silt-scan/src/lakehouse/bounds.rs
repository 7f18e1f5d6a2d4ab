//! What a table's metadata says of each file's values before its footer is
//! read — the row count and, per column, bounds and the null count — as
//! [`FileStatistics`] the scan prunes whole files by
//! ([`crate::scan_filter::ScanFilter::may_match_file`]), together with the
//! file's partition values. Bounds only prune: they must hold every value
//! of the file, but need not be reached (nothing answers an aggregate from
//! them).
//!
//! Delta's `add.stats` give bounds here only for types whose statistics
//! writers keep exact: integers, dates and decimals. Strings are truncated
//! by some writers (a truncated maximum is below the real one), timestamps
//! are written in milliseconds (the maximum may be below the real
//! microseconds), floats may hide NaN: those columns prune nothing here
//! (the footers still prune their row groups). Iceberg's manifests are read
//! in [`super::iceberg_bounds`].

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::ScalarValue;
use object_store::path::Path;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::file_columns::{field_id, physical_name};
use crate::scan_filter::FileStatistics;

/// Per data file (namespaced path), what the metadata knows of its values.
/// Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct FileBounds(Arc<HashMap<Path, KnownValues>>);

/// What the metadata knows of one file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KnownValues {
    pub rows: Option<u64>,
    /// By column name (Delta column mapping: physical name, so a query
    /// planned in an older schema never takes a since-dropped column's name
    /// for a new one's).
    pub columns: HashMap<String, ColumnBounds>,
}

/// What the metadata knows of one column of one file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ColumnBounds {
    /// The column's field id (Iceberg): the bounds are of the column that
    /// has it, whatever it is named by the schema a query planned with.
    pub field_id: Option<i32>,
    pub min: Option<ScalarValue>,
    pub max: Option<ScalarValue>,
    pub nulls: Option<u64>,
    /// Every value is in bucket `.1` of `.0` (an Iceberg `bucket[N]`
    /// partition): rules out files for equality and `IN` filters.
    pub bucket: Option<(u32, i32)>,
}

impl FileBounds {
    pub fn new(per_file: HashMap<Path, KnownValues>) -> Self {
        FileBounds(Arc::new(per_file))
    }

    /// Whether no file has statistics.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// From each file's Delta `stats` JSON, read as the columns of
    /// `schema`; a file whose statistics do not parse has none (it is
    /// never pruned by them).
    pub fn from_delta_json(per_file: impl IntoIterator<Item = (Path, String)>, schema: &Schema) -> Self {
        let parsed = per_file
            .into_iter()
            .filter_map(|(path, json)| {
                let stats = serde_json::from_str::<LogStats>(&json).ok()?;
                Some((path, stats.known(schema)))
            })
            .collect();
        FileBounds::new(parsed)
    }

    /// What is known of `file`'s columns of `schema`: its `constants`
    /// (partition values, per column) and the metadata's bounds. A bound of
    /// another type than the column's (a schema change since) is cast, or
    /// not used; one of another field id is not used.
    pub fn statistics(&self, file: &Path, schema: &Schema, constants: &[Option<ScalarValue>]) -> FileStatistics {
        self.statistics_of(file, schema, constants, |_| true)
    }

    /// [`Self::statistics`] of the columns `wanted` keeps (nothing is known
    /// of the others): what a scan's filter reads, per file per query.
    pub fn statistics_of(
        &self,
        file: &Path,
        schema: &Schema,
        constants: &[Option<ScalarValue>],
        wanted: impl Fn(usize) -> bool,
    ) -> FileStatistics {
        let known = self.0.get(file);
        let rows = known.and_then(|k| k.rows);
        let (mut min, mut max, mut nulls, mut buckets) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (c, field) in schema.fields().iter().enumerate() {
            if !wanted(c) {
                min.push(None);
                max.push(None);
                nulls.push(None);
                buckets.push(None);
                continue;
            }
            if let Some(Some(value)) = constants.get(c) {
                min.push(Some(value.clone()));
                max.push(Some(value.clone()));
                nulls.push(if value.is_null() { rows } else { Some(0) });
                buckets.push(None);
                continue;
            }
            let field_id = field_id(field);
            let column = known
                .and_then(|k| k.columns.get(physical_name(field)))
                .filter(|b| b.field_id.is_none() || field_id.is_none() || b.field_id == field_id);
            let typed = |bound: &Option<ScalarValue>| {
                let value = bound.as_ref()?;
                if value.data_type() == *field.data_type() {
                    Some(value.clone())
                } else {
                    value.cast_to(field.data_type()).ok()
                }
            };
            min.push(column.and_then(|b| typed(&b.min)));
            max.push(column.and_then(|b| typed(&b.max)));
            nulls.push(column.and_then(|b| b.nulls));
            buckets.push(column.and_then(|b| b.bucket));
        }
        FileStatistics {
            min,
            max,
            nulls,
            rows,
            buckets,
        }
    }
}

/// One file's `stats` (Delta protocol, "Per-file Statistics").
#[derive(Debug, Default, Deserialize)]
struct LogStats {
    #[serde(rename = "numRecords")]
    rows: Option<u64>,
    #[serde(rename = "minValues", default)]
    min: Map<String, Value>,
    #[serde(rename = "maxValues", default)]
    max: Map<String, Value>,
    #[serde(rename = "nullCount", default)]
    nulls: Map<String, Value>,
}

impl LogStats {
    /// The exact bounds (module doc) and null counts of `schema`'s columns.
    fn known(&self, schema: &Schema) -> KnownValues {
        let columns = schema
            .fields()
            .iter()
            .map(|field| {
                // Under column mapping the log names columns physically.
                let name = physical_name(field);
                let bound = |of: &Map<String, Value>| exact(of.get(name)?, field.data_type());
                let bounds = ColumnBounds {
                    field_id: None,
                    min: bound(&self.min),
                    max: bound(&self.max),
                    nulls: self.nulls.get(name).and_then(Value::as_u64),
                    bucket: None,
                };
                (name.to_string(), bounds)
            })
            .filter(|(_, b)| *b != ColumnBounds::default())
            .collect();
        KnownValues {
            rows: self.rows,
            columns,
        }
    }
}

/// `value` as a bound of a column of type `data_type`, for the types whose
/// statistics are exact (module doc).
fn exact(value: &Value, data_type: &DataType) -> Option<ScalarValue> {
    let text = match (value, data_type) {
        (
            Value::Number(n),
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Decimal128(..),
        ) => n.to_string(),
        (Value::String(s), DataType::Date32) => s.clone(),
        _ => return None,
    };
    ScalarValue::try_from_string(text, data_type).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Field;

    #[test]
    fn exact_types_give_bounds_and_others_none() {
        let file = Path::from("t/part-0.parquet");
        let stats = r#"{"numRecords":10,"minValues":{"id":3,"day":"2026-11-01","s":"a","x":1.5},
            "maxValues":{"id":9,"day":"2026-11-27","s":"zz","x":2.5},"nullCount":{"id":0,"s":2}}"#;
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("day", DataType::Date32, true),
            Field::new("s", DataType::Utf8View, true),
            Field::new("x", DataType::Float64, true),
            Field::new("cat", DataType::Utf8View, true),
        ]);
        let bounds = FileBounds::from_delta_json([(file.clone(), stats.to_string())], &schema);
        let cat = Some(ScalarValue::Utf8View(Some("b".into())));
        let known = bounds.statistics(&file, &schema, &[None, None, None, None, cat.clone()]);
        assert_eq!(known.rows, Some(10));
        assert_eq!(known.min[0], Some(ScalarValue::Int64(Some(3))));
        assert_eq!(known.max[0], Some(ScalarValue::Int64(Some(9))));
        assert_eq!(known.max[1], Some(ScalarValue::Date32(Some(20784))));
        assert_eq!(
            (known.min[2].clone(), known.min[3].clone()),
            (None, None),
            "strings, floats"
        );
        assert_eq!((known.min[4].clone(), known.nulls[4]), (cat, Some(0)));
        assert_eq!(known.nulls[2], Some(2));
        let unknown = FileBounds::from_delta_json([(file.clone(), "not json".to_string())], &schema);
        assert!(unknown.statistics(&file, &schema, &[]).is_empty());
    }
}
