//! Partition specs (Iceberg spec, "Partitioning"): how a file's partition
//! tuple was derived from its rows' source columns. A tuple value bounds
//! the source column's values in the file (hidden partitioning: a filter on
//! `ts` prunes files partitioned by `day(ts)`), which is what the scan
//! prunes files by before any footer is read.

use serde_json::Value;

use super::metadata::TableMetadata;

/// One partition spec: the fields of its tuples, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionSpec {
    pub spec_id: i32,
    pub fields: Vec<PartitionField>,
}

/// A field of a partition tuple: `transform` of the column `source_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionField {
    /// The field id of the source column.
    pub source_id: i32,
    /// The tuple field's name (manifests key tuples by it).
    pub name: String,
    pub transform: Transform,
}

/// A partition transform (Iceberg spec, "Partition Transforms").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transform {
    Identity,
    /// A hash of the value into `n` buckets: bounds nothing.
    Bucket(u32),
    /// Integers rounded down to a multiple of `w`; strings cut to `w`
    /// characters.
    Truncate(u32),
    /// Years since 1970 (of a date or timestamp).
    Year,
    /// Months since 1970-01.
    Month,
    /// Days since 1970-01-01 (a date).
    Day,
    /// Hours since the epoch.
    Hour,
    /// Always null.
    Void,
    /// A transform this reader does not know: bounds nothing.
    Unknown(String),
}

impl Transform {
    /// Parses a transform's spelling (`identity`, `bucket[16]`, `day`, ...).
    pub fn parse(text: &str) -> Transform {
        let argument = |prefix: &str| {
            text.strip_prefix(prefix)?
                .strip_prefix('[')?
                .strip_suffix(']')?
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
        };
        match text {
            "identity" => Transform::Identity,
            "year" => Transform::Year,
            "month" => Transform::Month,
            "day" => Transform::Day,
            "hour" => Transform::Hour,
            "void" => Transform::Void,
            _ => {
                if let Some(n) = argument("bucket") {
                    Transform::Bucket(n)
                } else if let Some(w) = argument("truncate") {
                    Transform::Truncate(w)
                } else {
                    Transform::Unknown(text.to_string())
                }
            }
        }
    }
}

impl TableMetadata {
    /// The partition spec `spec_id`, if the metadata has it (v2:
    /// `partition-specs`; v1 may carry only `partition-spec`, spec 0).
    /// A spec that does not parse is `None`: its files are not pruned by
    /// their tuples.
    pub fn partition_spec(&self, spec_id: i32) -> Option<PartitionSpec> {
        let fields = match self
            .partition_specs
            .iter()
            .find(|s| s.get("spec-id").and_then(Value::as_i64) == Some(i64::from(spec_id)))
        {
            Some(spec) => spec.get("fields")?,
            None if spec_id == 0 => self.partition_spec.as_ref()?,
            None => return None,
        };
        let fields = fields
            .as_array()?
            .iter()
            .map(|f| {
                Some(PartitionField {
                    source_id: i32::try_from(f.get("source-id")?.as_i64()?).ok()?,
                    name: f.get("name")?.as_str()?.to_string(),
                    transform: Transform::parse(f.get("transform")?.as_str()?),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(PartitionSpec { spec_id, fields })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_by_id_with_their_transforms() {
        let json = r#"{
            "format-version": 2, "location": "file:///t",
            "partition-specs": [
                {"spec-id": 0, "fields": [{"source-id": 2, "field-id": 1000, "name": "cat", "transform": "identity"}]},
                {"spec-id": 1, "fields": [
                    {"source-id": 4, "field-id": 1001, "name": "ts_day", "transform": "day"},
                    {"source-id": 1, "field-id": 1002, "name": "id_trunc", "transform": "truncate[1000]"},
                    {"source-id": 1, "field-id": 1003, "name": "id_bucket", "transform": "bucket[ 4 ]"},
                    {"source-id": 3, "field-id": 1004, "name": "x", "transform": "zorder"}
                ]},
                {"spec-id": 2, "fields": [{"source-id": 2, "name": "broken"}]}
            ]
        }"#;
        let m = TableMetadata::parse("m.json", json.as_bytes()).unwrap();
        assert_eq!(m.partition_spec(0).unwrap().fields[0].transform, Transform::Identity);
        let transforms: Vec<Transform> = m
            .partition_spec(1)
            .unwrap()
            .fields
            .into_iter()
            .map(|f| f.transform)
            .collect();
        assert_eq!(
            transforms,
            [
                Transform::Day,
                Transform::Truncate(1000),
                Transform::Bucket(4),
                Transform::Unknown("zorder".into())
            ]
        );
        assert!(m.partition_spec(2).is_none(), "a field without a transform");
        assert!(m.partition_spec(7).is_none());
        assert_eq!(
            Transform::parse("truncate[0]"),
            Transform::Unknown("truncate[0]".into())
        );

        let v1 = r#"{"format-version": 1, "location": "file:///t",
            "partition-spec": [{"source-id": 3, "field-id": 1000, "name": "d_month", "transform": "month"}]}"#;
        let m = TableMetadata::parse("v1.json", v1.as_bytes()).unwrap();
        assert_eq!(m.partition_spec(0).unwrap().fields[0].transform, Transform::Month);
    }
}
