//! Manifest lists and manifests (Iceberg spec, "Manifests"): Avro object
//! container files, read as generic Avro values so that v1 and v2 files and
//! any partition type read alike.

use apache_avro::types::Value;

use crate::{LakehouseError, Result};

/// One manifest a snapshot's manifest list names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestEntryFile {
    pub path: String,
    /// Data manifests list data files; delete manifests, delete files.
    pub content: ManifestContent,
    /// The sequence number of the commit that added the manifest: what its
    /// ADDED entries without one of their own inherit (v2).
    pub sequence_number: i64,
    /// The partition spec its files are partitioned by.
    pub spec_id: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManifestContent {
    Data,
    Deletes,
}

/// What a file in a manifest holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileContent {
    Data,
    /// Rows to drop by (file, position).
    PositionDeletes,
    /// Rows to drop by the values of some columns.
    EqualityDeletes,
}

/// A live file of a snapshot (an ADDED or EXISTING manifest entry).
#[derive(Debug, Clone, PartialEq)]
pub struct ContentFile {
    pub content: FileContent,
    /// Its absolute URL, as the writer spelled it.
    pub path: String,
    /// `PARQUET`, `AVRO` or `ORC`.
    pub format: String,
    pub record_count: i64,
    pub size: u64,
    /// Its data sequence number: a delete file applies to data files with a
    /// smaller one (position deletes: smaller or equal).
    pub sequence_number: i64,
    /// The partition tuple, by partition field name (Avro values as JSON).
    pub partition: serde_json::Value,
    /// The partition spec of `partition` (its manifest's).
    pub spec_id: i32,
    /// Equality delete files: the field ids of the columns whose values
    /// identify a deleted row (empty for other files).
    pub equality_ids: Vec<i32>,
    /// What the writer recorded of the file's columns.
    pub metrics: ColumnMetrics,
}

/// A data file's column metrics (the manifest's `lower_bounds`,
/// `upper_bounds`, `null_value_counts`), by field id. Bounds are in
/// Iceberg's single-value binary form (spec, "Binary single-value
/// serialization"); they bound the values but need not be exact: a string
/// bound may be truncated (a truncated upper bound is rounded up).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColumnMetrics {
    pub lower: Vec<(i32, Vec<u8>)>,
    pub upper: Vec<(i32, Vec<u8>)>,
    pub nulls: Vec<(i32, u64)>,
}

impl ColumnMetrics {
    /// From a manifest's `data_file` record. Metrics that do not read as
    /// maps of field ids are left out (they only prune).
    fn of(file: &Value) -> ColumnMetrics {
        let bytes = |v: &Value| match v {
            Value::Bytes(b) | Value::Fixed(_, b) => Some(b.clone()),
            _ => None,
        };
        let count = |v: &Value| as_long(v).and_then(|n| u64::try_from(n).ok());
        ColumnMetrics {
            lower: id_map(file, "lower_bounds", bytes),
            upper: id_map(file, "upper_bounds", bytes),
            nulls: id_map(file, "null_value_counts", count),
        }
    }
}

/// An Iceberg `map<int, T>` field of `record`: Avro writes it as an array
/// of `{key, value}` records. Entries whose value `read` refuses are left
/// out.
fn id_map<T>(record: &Value, name: &str, read: impl Fn(&Value) -> Option<T>) -> Vec<(i32, T)> {
    let Some(Value::Array(entries)) = field(record, name) else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|entry| {
            let id = i32::try_from(as_long(field(entry, "key")?)?).ok()?;
            Some((id, read(field(entry, "value")?)?))
        })
        .collect()
}

/// The manifests of a manifest list's bytes.
pub fn read_manifest_list(path: &str, bytes: &[u8]) -> Result<Vec<ManifestEntryFile>> {
    records(path, "Iceberg manifest list", bytes)?
        .iter()
        .map(|record| {
            let bad = |reason: &str| invalid(path, "Iceberg manifest list", reason);
            let content = match field(record, "content").and_then(as_long).unwrap_or(0) {
                0 => ManifestContent::Data,
                1 => ManifestContent::Deletes,
                other => return Err(bad(&format!("manifest content {other}"))),
            };
            Ok(ManifestEntryFile {
                path: field(record, "manifest_path")
                    .and_then(as_str)
                    .ok_or_else(|| bad("an entry without manifest_path"))?
                    .to_string(),
                content,
                sequence_number: field(record, "sequence_number").and_then(as_long).unwrap_or(0),
                spec_id: field(record, "partition_spec_id")
                    .and_then(as_long)
                    .and_then(|id| i32::try_from(id).ok())
                    .unwrap_or(0),
            })
        })
        .collect()
}

/// The live files (ADDED and EXISTING entries) of `manifest`'s bytes.
pub fn read_manifest(manifest: &ManifestEntryFile, bytes: &[u8]) -> Result<Vec<ContentFile>> {
    let what = "Iceberg manifest";
    let path = manifest.path.as_str();
    let mut files = Vec::new();
    for entry in records(path, what, bytes)? {
        let bad = |reason: &str| invalid(path, what, reason);
        let status = field(&entry, "status")
            .and_then(as_long)
            .ok_or_else(|| bad("an entry without status"))?;
        match status {
            0 | 1 => {}    // EXISTING, ADDED: live
            2 => continue, // DELETED: no longer in this snapshot
            other => return Err(bad(&format!("entry status {other}"))),
        }
        let file = field(&entry, "data_file").ok_or_else(|| bad("an entry without data_file"))?;
        let content = match field(file, "content").and_then(as_long).unwrap_or(0) {
            0 => FileContent::Data,
            1 => FileContent::PositionDeletes,
            2 => FileContent::EqualityDeletes,
            other => return Err(bad(&format!("file content {other}"))),
        };
        files.push(ContentFile {
            content,
            path: field(file, "file_path")
                .and_then(as_str)
                .ok_or_else(|| bad("a file without file_path"))?
                .to_string(),
            format: field(file, "file_format")
                .and_then(as_str)
                .unwrap_or("PARQUET")
                .to_ascii_uppercase(),
            record_count: field(file, "record_count").and_then(as_long).unwrap_or(0),
            size: field(file, "file_size_in_bytes")
                .and_then(as_long)
                .and_then(|s| u64::try_from(s).ok())
                .ok_or_else(|| bad("a file without file_size_in_bytes"))?,
            // An ADDED entry may leave its sequence number to the manifest's
            // (v2); v1 has none (0). An EXISTING entry without one is taken
            // the same way rather than refused.
            sequence_number: field(&entry, "sequence_number")
                .and_then(as_long)
                .unwrap_or(manifest.sequence_number),
            partition: field(file, "partition").map(to_json).unwrap_or(serde_json::Value::Null),
            spec_id: manifest.spec_id,
            equality_ids: match field(file, "equality_ids") {
                Some(Value::Array(ids)) => ids
                    .iter()
                    .map(|id| as_long(unwrap_union(id)).and_then(|id| i32::try_from(id).ok()))
                    .collect::<Option<_>>()
                    .ok_or_else(|| bad("equality_ids that are not field ids"))?,
                _ => Vec::new(),
            },
            metrics: ColumnMetrics::of(file),
        });
        if let Some(f) = files.last().filter(|f| f.content == FileContent::EqualityDeletes) {
            let mut ids = f.equality_ids.clone();
            ids.sort_unstable();
            ids.dedup();
            if ids.is_empty() || ids.len() != f.equality_ids.len() {
                return Err(bad(&format!(
                    "equality delete file {} has equality_ids {:?}",
                    f.path, f.equality_ids
                )));
            }
        }
    }
    Ok(files)
}

/// The records of an Avro object container file.
fn records(path: &str, what: &'static str, bytes: &[u8]) -> Result<Vec<Value>> {
    let reader = apache_avro::Reader::new(bytes).map_err(|e| invalid(path, what, &e.to_string()))?;
    reader
        .map(|r| r.map_err(|e| invalid(path, what, &e.to_string())))
        .collect()
}

fn invalid(path: &str, what: &'static str, reason: &str) -> LakehouseError {
    LakehouseError::Invalid {
        path: path.to_string(),
        what,
        reason: reason.to_string(),
    }
}

/// Field `name` of a record (through a union's branch), if set.
fn field<'a>(record: &'a Value, name: &str) -> Option<&'a Value> {
    let Value::Record(fields) = unwrap_union(record) else {
        return None;
    };
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| unwrap_union(v))
        .filter(|v| !matches!(v, Value::Null))
}

fn unwrap_union(v: &Value) -> &Value {
    match v {
        Value::Union(_, inner) => unwrap_union(inner),
        other => other,
    }
}

fn as_long(v: &Value) -> Option<i64> {
    match v {
        Value::Long(n) => Some(*n),
        Value::Int(n) => Some(i64::from(*n)),
        _ => None,
    }
}

fn as_str(v: &Value) -> Option<&str> {
    match v {
        Value::String(s) => Some(s),
        Value::Enum(_, s) => Some(s),
        _ => None,
    }
}

/// An Avro value as JSON (partition tuples: small, for display and pruning).
fn to_json(v: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match unwrap_union(v) {
        Value::Null => J::Null,
        Value::Boolean(b) => J::Bool(*b),
        Value::Int(n) | Value::Date(n) | Value::TimeMillis(n) => J::from(*n),
        Value::Long(n)
        | Value::TimestampMillis(n)
        | Value::TimestampMicros(n)
        | Value::TimestampNanos(n)
        | Value::TimeMicros(n)
        | Value::LocalTimestampMillis(n)
        | Value::LocalTimestampMicros(n)
        | Value::LocalTimestampNanos(n) => J::from(*n),
        Value::Float(f) => J::from(f64::from(*f)),
        Value::Double(f) => J::from(*f),
        Value::String(s) | Value::Enum(_, s) => J::String(s.clone()),
        Value::Uuid(u) => J::String(u.to_string()),
        Value::Record(fields) => J::Object(fields.iter().map(|(k, v)| (k.clone(), to_json(v))).collect()),
        Value::Array(items) => J::Array(items.iter().map(to_json).collect()),
        other => J::String(format!("{other:?}")),
    }
}
