//! The actions of a Delta log that decide which rows a version holds
//! (Delta protocol, "Actions"): `add`, `remove`, `metaData` and `protocol`.
//! Commit files are JSON lines, one
//! action per line; checkpoints hold the same actions as Parquet columns
//! (read into the same structures, [`super::checkpoint`]). Actions this
//! reader has no use for (`commitInfo`, `txn`, `cdc`, `domainMetadata`, ...)
//! are skipped.

use std::collections::HashMap;

use serde::Deserialize;

use super::deletion_vector::DeletionVector;
use crate::{LakehouseError, Result};

/// One line of a commit file, or one row of a checkpoint: at most one of
/// its fields is set.
#[derive(Debug, Default, Deserialize)]
pub struct Action {
    pub add: Option<Add>,
    pub remove: Option<Remove>,
    #[serde(rename = "metaData")]
    pub metadata: Option<Metadata>,
    pub protocol: Option<Protocol>,
}

/// A data file added to the table (or re-added with a new deletion vector).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Add {
    /// Relative to the table's root (URL-encoded), or an absolute URI.
    pub path: String,
    #[serde(default)]
    pub partition_values: HashMap<String, Option<String>>,
    pub size: u64,
    #[serde(default)]
    pub deletion_vector: Option<DeletionVector>,
    /// The file's statistics (JSON: row count, per-column min, max, nulls).
    #[serde(default)]
    pub stats: Option<String>,
}

/// A data file (with the deletion vector it had) no longer in the table.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Remove {
    pub path: String,
    #[serde(default)]
    pub deletion_vector: Option<DeletionVector>,
}

/// The table's schema, partition columns and properties.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub schema_string: String,
    #[serde(default)]
    pub partition_columns: Vec<String>,
    #[serde(default)]
    pub configuration: HashMap<String, Option<String>>,
}

/// What a reader must support to read the table correctly.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Protocol {
    pub min_reader_version: i32,
    #[serde(default)]
    pub reader_features: Option<Vec<String>>,
}

/// The actions of one commit file (`path` names it in errors).
pub fn parse_commit(path: &str, bytes: &[u8]) -> Result<Vec<Action>> {
    let text = std::str::from_utf8(bytes).map_err(|e| invalid(path, e.to_string()))?;
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).map_err(|e| invalid(path, e.to_string())))
        .collect()
}

fn invalid(path: &str, reason: String) -> LakehouseError {
    LakehouseError::Invalid {
        path: path.to_string(),
        what: "Delta log file",
        reason,
    }
}

/// Reader features whose tables this reader reads correctly: deletion
/// vectors are applied; the others change nothing for a reader of
/// primitive columns (a variant column itself is refused by the schema).
pub const READER_FEATURES: [&str; 6] = [
    "columnMapping",
    "deletionVectors",
    "timestampNtz",
    "vacuumProtocolCheck",
    "variantType",
    "variantType-preview",
];

impl Protocol {
    /// Why this reader cannot read a table of this protocol, if it cannot.
    pub fn unsupported(&self) -> Option<String> {
        match self.min_reader_version {
            1 | 2 => None,
            3 => {
                let missing: Vec<&str> = self
                    .reader_features
                    .iter()
                    .flatten()
                    .map(String::as_str)
                    .filter(|f| !READER_FEATURES.contains(f))
                    .collect();
                (!missing.is_empty()).then(|| format!("reader features {missing:?} are not supported"))
            }
            v => Some(format!("reader version {v} is not supported (at most 3)")),
        }
    }
}

/// How a table's columns are found in its data files (Delta protocol,
/// "Column Mapping").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnMapping {
    /// By the schema's names.
    None,
    /// By each column's `physicalName`.
    Name,
    /// By each column's field id (`delta.columnMapping.id`).
    Id,
}

impl Metadata {
    /// The table's column mapping mode, or why this reader cannot read it.
    pub fn column_mapping(&self) -> std::result::Result<ColumnMapping, String> {
        let mode = self
            .configuration
            .get("delta.columnMapping.mode")
            .cloned()
            .flatten()
            .unwrap_or_default();
        match mode.as_str() {
            "" | "none" => Ok(ColumnMapping::None),
            "name" => Ok(ColumnMapping::Name),
            "id" => Ok(ColumnMapping::Id),
            other => Err(format!("column mapping mode {other:?} is not known")),
        }
    }

    /// Why this reader cannot read a table of this metadata, if it cannot.
    pub fn unsupported(&self) -> Option<String> {
        self.column_mapping().err()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_lines_become_actions() {
        let commit = r#"{"commitInfo":{"timestamp":1795817303826,"operation":"DELETE"}}
{"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["deletionVectors"],"writerFeatures":["deletionVectors"]}}
{"add":{"path":"part-0%201.parquet","partitionValues":{},"size":809,"modificationTime":1,"dataChange":true,"stats":"{}","tags":null}}
{"remove":{"path":"part-00000-a.parquet","dataChange":true,"deletionTimestamp":1,"size":833}}
{"txn":{"appId":"x","version":3}}
"#;
        let actions = parse_commit("00003.json", commit.as_bytes()).unwrap();
        assert_eq!(actions.len(), 5);
        assert_eq!(actions[1].protocol.as_ref().unwrap().unsupported(), None);
        let add = actions[2].add.as_ref().unwrap();
        assert_eq!((add.path.as_str(), add.size), ("part-0%201.parquet", 809));
        assert_eq!(actions[3].remove.as_ref().unwrap().path, "part-00000-a.parquet");
        assert!(actions[4].add.is_none() && actions[4].remove.is_none());
        assert!(parse_commit("x.json", b"{not json").is_err());
    }

    #[test]
    fn unknown_reader_features_and_mapping_modes_are_refused() {
        let protocol = |v, f: &[&str]| Protocol {
            min_reader_version: v,
            reader_features: Some(f.iter().map(|s| s.to_string()).collect()),
        };
        assert!(protocol(3, &["deletionVectors", "variantType"]).unsupported().is_none());
        assert!(protocol(3, &["columnMapping"]).unsupported().is_none());
        assert!(protocol(3, &["icebergCompatV9"]).unsupported().is_some());
        assert!(protocol(4, &[]).unsupported().is_some());
        let metadata = |mode: &str, partitions: &[&str]| Metadata {
            schema_string: String::new(),
            partition_columns: partitions.iter().map(|s| s.to_string()).collect(),
            configuration: HashMap::from([("delta.columnMapping.mode".to_string(), Some(mode.to_string()))]),
        };
        assert!(metadata("none", &[]).unsupported().is_none());
        assert_eq!(metadata("name", &[]).column_mapping(), Ok(ColumnMapping::Name));
        assert_eq!(metadata("id", &[]).column_mapping(), Ok(ColumnMapping::Id));
        assert!(metadata("names", &[]).unsupported().is_some());
        assert!(metadata("none", &["day"]).unsupported().is_none());
    }
}
