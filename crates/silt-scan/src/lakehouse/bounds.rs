//! What a table's metadata says of each file's values before its footer is
//! read — Delta's `add.stats`: the row count and, per column, the minimum,
//! maximum and null count — as [`FileStatistics`] the scan prunes whole
//! files by ([`crate::scan_filter::ScanFilter::may_match_file`]), together
//! with the file's partition values.
//!
//! Bounds are taken only for types whose statistics writers keep exact:
//! integers, dates and decimals. Strings are truncated by some writers (a
//! truncated maximum is below the real one), timestamps are written in
//! milliseconds (the maximum may be below the real microseconds), floats
//! may hide NaN: those columns prune nothing here (the footers still prune
//! their row groups).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::ScalarValue;
use object_store::path::Path;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::scan_filter::FileStatistics;

/// Per data file (namespaced path), the statistics the log gives it.
/// Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct FileBounds(Arc<HashMap<Path, LogStats>>);

impl FileBounds {
    /// Whether no file has statistics.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One file's `stats` (Delta protocol, "Per-file Statistics").
#[derive(Debug, Default, Deserialize)]
pub struct LogStats {
    #[serde(rename = "numRecords")]
    rows: Option<u64>,
    #[serde(rename = "minValues", default)]
    min: Map<String, Value>,
    #[serde(rename = "maxValues", default)]
    max: Map<String, Value>,
    #[serde(rename = "nullCount", default)]
    nulls: Map<String, Value>,
}

impl FileBounds {
    /// From each file's `stats` JSON; a file whose statistics do not parse
    /// has none (it is never pruned by them).
    pub fn from_json(per_file: impl IntoIterator<Item = (Path, String)>) -> Self {
        let parsed = per_file
            .into_iter()
            .filter_map(|(path, json)| Some((path, serde_json::from_str::<LogStats>(&json).ok()?)))
            .collect();
        FileBounds(Arc::new(parsed))
    }

    /// What is known of `file`'s columns of `schema`: its `constants`
    /// (partition values, per column) and the log's exact bounds.
    pub fn statistics(&self, file: &Path, schema: &Schema, constants: &[Option<ScalarValue>]) -> FileStatistics {
        let stats = self.0.get(file);
        let rows = stats.and_then(|s| s.rows);
        let (mut min, mut max, mut nulls) = (Vec::new(), Vec::new(), Vec::new());
        for (c, field) in schema.fields().iter().enumerate() {
            if let Some(Some(value)) = constants.get(c) {
                min.push(Some(value.clone()));
                max.push(Some(value.clone()));
                nulls.push(if value.is_null() { rows } else { Some(0) });
                continue;
            }
            let name = field.name();
            let bound = |of: &Map<String, Value>| exact(of.get(name)?, field.data_type());
            min.push(stats.and_then(|s| bound(&s.min)));
            max.push(stats.and_then(|s| bound(&s.max)));
            nulls.push(stats.and_then(|s| s.nulls.get(name)?.as_u64()));
        }
        FileStatistics { min, max, nulls, rows }
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
        let bounds = FileBounds::from_json([(file.clone(), stats.to_string())]);
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("day", DataType::Date32, true),
            Field::new("s", DataType::Utf8View, true),
            Field::new("x", DataType::Float64, true),
            Field::new("cat", DataType::Utf8View, true),
        ]);
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
        let unknown = FileBounds::from_json([(file.clone(), "not json".to_string())]);
        assert!(unknown.statistics(&file, &schema, &[]).is_empty());
    }
}
