//! The table metadata JSON (Iceberg spec, "Table Metadata"): the fields
//! that say which snapshots exist and which one is current. Schemas and
//! partition specs are kept as JSON for the scans to read.

use serde::Deserialize;

use crate::{LakehouseError, Result};

/// One version of a table's metadata (`vN.metadata.json`,
/// `0000N-uuid.metadata.json`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TableMetadata {
    pub format_version: u8,
    /// The table's base URL (data and metadata live below it by default).
    pub location: String,
    #[serde(default)]
    pub table_uuid: Option<String>,
    #[serde(default)]
    pub last_updated_ms: i64,
    /// `None` or `-1` (v1 writers): the table has no snapshot yet.
    #[serde(default)]
    pub current_snapshot_id: Option<i64>,
    #[serde(default)]
    pub snapshots: Vec<Snapshot>,
    /// Which snapshot was current when, oldest first: what time travel by
    /// timestamp follows (a snapshot staged but never made current is not in
    /// it; a rolled-back one stays, for the time it was current).
    #[serde(default)]
    pub snapshot_log: Vec<SnapshotLogEntry>,
    #[serde(default)]
    pub current_schema_id: Option<i32>,
    /// The schemas, as JSON (`schema-id`, `fields` with ids and names).
    #[serde(default)]
    pub schemas: Vec<serde_json::Value>,
    /// v1 tables may carry a single `schema` instead.
    #[serde(default)]
    pub schema: Option<serde_json::Value>,
    /// The partition specs, as JSON (`spec-id`, `fields` with `source-id`,
    /// `name`, `transform`): see [`TableMetadata::partition_spec`].
    #[serde(default)]
    pub partition_specs: Vec<serde_json::Value>,
    /// v1 tables may carry only the fields of spec 0.
    #[serde(default)]
    pub partition_spec: Option<serde_json::Value>,
}

/// A snapshot: the table's state after one commit.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Snapshot {
    pub snapshot_id: i64,
    #[serde(default)]
    pub parent_snapshot_id: Option<i64>,
    /// 0 for v1 tables.
    #[serde(default)]
    pub sequence_number: i64,
    pub timestamp_ms: i64,
    /// The Avro file listing the snapshot's manifests (v2; most v1 writers too).
    #[serde(default)]
    pub manifest_list: Option<String>,
    /// v1 only, when there is no manifest list: the manifests themselves.
    #[serde(default)]
    pub manifests: Option<Vec<String>>,
    #[serde(default)]
    pub schema_id: Option<i32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SnapshotLogEntry {
    pub snapshot_id: i64,
    pub timestamp_ms: i64,
}

pub use crate::SnapshotChoice;

impl TableMetadata {
    /// Parses a metadata file's bytes (`path` names it in errors).
    pub fn parse(path: &str, bytes: &[u8]) -> Result<TableMetadata> {
        let metadata: TableMetadata = serde_json::from_slice(bytes).map_err(|e| LakehouseError::Invalid {
            path: path.to_string(),
            what: "Iceberg table metadata file",
            reason: e.to_string(),
        })?;
        if !(1..=2).contains(&metadata.format_version) {
            return Err(LakehouseError::Unsupported {
                table: metadata.location.clone(),
                reason: format!(
                    "Iceberg format version {} (Silt reads versions 1 and 2)",
                    metadata.format_version
                ),
            });
        }
        Ok(metadata)
    }

    /// The snapshot `choice` names; `Ok(None)` for a table with no snapshot
    /// yet (it has no rows), an error for one that does not exist.
    pub fn snapshot(&self, choice: SnapshotChoice) -> Result<Option<&Snapshot>> {
        let missing = |reason: String| LakehouseError::NoSuchSnapshot {
            table: self.location.clone(),
            reason,
        };
        let id = match choice {
            SnapshotChoice::Current => match self.current_snapshot_id.filter(|id| *id != -1) {
                None => return Ok(None),
                Some(id) => id,
            },
            SnapshotChoice::Id(id) => id,
            SnapshotChoice::AsOf(ms) => {
                let log: Vec<(i64, i64)> = if self.snapshot_log.is_empty() {
                    // No log (some v1 writers): the current snapshot and its
                    // ancestors, never a staged snapshot that was not current.
                    let mut line = Vec::new();
                    let mut next = self.current_snapshot_id.filter(|id| *id != -1);
                    while let Some(snapshot) = next.and_then(|id| self.snapshots.iter().find(|s| s.snapshot_id == id)) {
                        line.push((snapshot.timestamp_ms, snapshot.snapshot_id));
                        next = snapshot.parent_snapshot_id;
                        if line.len() > self.snapshots.len() {
                            break; // a cycle in damaged metadata
                        }
                    }
                    line.reverse();
                    line
                } else {
                    self.snapshot_log
                        .iter()
                        .map(|e| (e.timestamp_ms, e.snapshot_id))
                        .collect()
                };
                match log.iter().rev().find(|(t, _)| *t <= ms) {
                    Some((_, id)) => *id,
                    None => return Err(missing(format!("no snapshot was current at {ms} ms since the epoch"))),
                }
            }
        };
        self.snapshots
            .iter()
            .find(|s| s.snapshot_id == id)
            .map(Some)
            .ok_or_else(|| missing(format!("no snapshot {id} (it may have been expired)")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const METADATA: &str = r#"{
        "format-version": 2, "table-uuid": "u", "location": "s3://b/t",
        "last-updated-ms": 30, "current-snapshot-id": 2,
        "snapshots": [
            {"snapshot-id": 1, "sequence-number": 1, "timestamp-ms": 10, "manifest-list": "s3://b/t/metadata/snap-1.avro"},
            {"snapshot-id": 2, "parent-snapshot-id": 1, "sequence-number": 2, "timestamp-ms": 20, "manifest-list": "s3://b/t/metadata/snap-2.avro"},
            {"snapshot-id": 3, "parent-snapshot-id": 1, "sequence-number": 3, "timestamp-ms": 25, "manifest-list": "s3://b/t/metadata/snap-3.avro"}
        ],
        "snapshot-log": [{"snapshot-id": 1, "timestamp-ms": 10}, {"snapshot-id": 2, "timestamp-ms": 20}],
        "current-schema-id": 0, "schemas": [{"type": "struct", "schema-id": 0, "fields": []}],
        "some-future-field": {"ignored": true}
    }"#;

    #[test]
    fn snapshots_by_current_id_and_time() {
        let m = TableMetadata::parse("m.json", METADATA.as_bytes()).unwrap();
        let id = |c| m.snapshot(c).unwrap().map(|s| s.snapshot_id);
        assert_eq!(id(SnapshotChoice::Current), Some(2));
        assert_eq!(id(SnapshotChoice::Id(3)), Some(3));
        assert!(m.snapshot(SnapshotChoice::Id(9)).is_err());
        assert_eq!(id(SnapshotChoice::AsOf(15)), Some(1));
        // Snapshot 3 (a staged commit) was never current.
        assert_eq!(id(SnapshotChoice::AsOf(27)), Some(2));
        assert!(m.snapshot(SnapshotChoice::AsOf(5)).is_err(), "before the first commit");
    }

    #[test]
    fn without_a_log_time_travel_follows_the_current_line() {
        let no_log = METADATA.replace(
            r#""snapshot-log": [{"snapshot-id": 1, "timestamp-ms": 10}, {"snapshot-id": 2, "timestamp-ms": 20}],"#,
            "",
        );
        let m = TableMetadata::parse("m.json", no_log.as_bytes()).unwrap();
        let at = |t| m.snapshot(SnapshotChoice::AsOf(t)).unwrap().unwrap().snapshot_id;
        assert_eq!(at(15), 1);
        assert_eq!(at(27), 2, "the staged snapshot 3 is not on the current line");
    }

    #[test]
    fn an_empty_table_and_bad_files() {
        let empty = r#"{"format-version": 1, "location": "file:///t", "current-snapshot-id": -1}"#;
        let m = TableMetadata::parse("e.json", empty.as_bytes()).unwrap();
        assert!(m.snapshot(SnapshotChoice::Current).unwrap().is_none());
        assert!(TableMetadata::parse("x.json", b"{not json").is_err());
        let v3 = r#"{"format-version": 3, "location": "file:///t"}"#;
        let err = TableMetadata::parse("v3.json", v3.as_bytes()).unwrap_err().to_string();
        assert!(err.contains("format version 3"), "{err}");
    }
}
