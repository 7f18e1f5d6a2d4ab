//! Delta Lake tables: the log, a version, its live files.
//!
//! A table is its root folder; `_delta_log/` holds one JSON commit per
//! version (`00000000000000000007.json`) and, now and then, a checkpoint of
//! the whole state at a version (`...10.checkpoint.parquet`, or in parts).
//! The files of a version are the `add` actions not undone by a `remove`,
//! replayed from the newest checkpoint at or before it.
//!
//! [`DeltaLog`] keeps what it has listed and the last version it replayed:
//! a warm read of the current version is one LIST of the log after the
//! newest file known (S3's start-after), plus one GET per new commit, which
//! is applied to the replayed state rather than replaying from the start.
//! Commit and checkpoint files are immutable under their names.
//!
//! Read correctly: adds, removes, deletion vectors (their rows are the
//! caller's to read and apply, [`deletion_vector`]), schema changes, classic
//! single- and multi-part checkpoints, and protocol checks (a table needing
//! a reader feature this reader lacks is refused, never misread).
//! Partition columns' values are in the log, not in the data files: each
//! [`DeltaFile`] carries them for the scan to fill in.
//!
//! Column mapping (modes `name` and `id`): partition values come out keyed
//! by the schema's names; data files' columns are found by physical name or
//! field id by the scan ([`DeltaSnapshot::column_mapping`]).
//! Not yet: v2 checkpoints and in-commit timestamps (time travel by time
//! uses the commit files' modification times).

mod actions;
mod checkpoint;
pub mod deletion_vector;
mod schema;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parking_lot::Mutex;

pub use actions::{Action, Add, ColumnMapping, Metadata, Protocol};
pub use deletion_vector::{DeletionVector, VectorBytes};
pub use schema::{DeltaField, DeltaSchema, DeltaType};

use crate::{LakehouseError, ObjectLocator, Result, SnapshotChoice};

/// A data file of a version.
#[derive(Debug, Clone, PartialEq)]
pub struct DeltaFile {
    /// Its path in the store.
    pub path: Path,
    pub size: u64,
    /// The rows deleted from it, if any.
    pub deletion_vector: Option<DeletionVector>,
    /// Its partition columns' values (not in the file), sorted by column;
    /// `None` is null.
    pub partition_values: Vec<(String, Option<String>)>,
    /// Its statistics as the log gives them (JSON), if any.
    pub stats: Option<String>,
}

/// The table at one version.
#[derive(Debug, Clone)]
pub struct DeltaSnapshot {
    pub version: u64,
    /// The commit file of the version (the version's identity in the store).
    pub commit_path: Path,
    pub schema: DeltaSchema,
    pub metadata: Metadata,
    pub protocol: Protocol,
    /// Live files by (store path, deletion vector id): writers may spell
    /// one file's path two ways (relative, absolute, encoded differently),
    /// so an add and its remove are matched on the path they name.
    live: BTreeMap<(Path, String), Add>,
}

impl DeltaSnapshot {
    /// The version's data files, by path; an error for a table this reader
    /// cannot read correctly (a protocol feature or layout it lacks).
    pub fn files(&self, root: &Path) -> Result<Vec<DeltaFile>> {
        if let Some(reason) = self.protocol.unsupported().or_else(|| self.metadata.unsupported()) {
            return Err(LakehouseError::Unsupported {
                table: root.to_string(),
                reason: format!("Delta table at version {}: {reason}", self.version),
            });
        }
        let mut files = self
            .live
            .iter()
            .map(|((path, _), add)| {
                Ok(DeltaFile {
                    path: path.clone(),
                    size: add.size,
                    deletion_vector: add.deletion_vector.clone(),
                    stats: add.stats.clone(),
                    partition_values: {
                        // Keyed by physical names under column mapping.
                        let mut values: Vec<_> = add
                            .partition_values
                            .iter()
                            .map(|(column, value)| (self.logical_name(column).to_string(), value.clone()))
                            .collect();
                        values.sort();
                        values
                    },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(files)
    }

    /// The table's column mapping mode; every column has what the mode
    /// finds it by (else the table is refused).
    pub fn column_mapping(&self) -> Result<ColumnMapping> {
        let mapping = self
            .metadata
            .column_mapping()
            .map_err(|reason| LakehouseError::Unsupported {
                table: self.commit_path.to_string(),
                reason,
            })?;
        let lacking = self.schema.fields.iter().find(|f| match mapping {
            ColumnMapping::None => false,
            ColumnMapping::Name => f.physical_name.is_none(),
            ColumnMapping::Id => f.id.is_none() || f.physical_name.is_none(),
        });
        match lacking {
            Some(f) => Err(LakehouseError::Invalid {
                path: self.commit_path.to_string(),
                what: "Delta schema",
                reason: format!("column {} has no column mapping ({mapping:?} mode)", f.name),
            }),
            None => Ok(mapping),
        }
    }

    /// The schema's name of the column data files and the log call
    /// `physical` (itself without column mapping).
    fn logical_name<'a>(&'a self, physical: &'a str) -> &'a str {
        self.schema
            .fields
            .iter()
            .find(|f| f.physical_name.as_deref() == Some(physical))
            .map_or(physical, |f| f.name.as_str())
    }

    /// Applies one commit's (or a checkpoint's) actions, in order; paths
    /// are resolved against the table's `root` by `locator`.
    fn apply(&mut self, actions: Vec<Action>, root: &Path, locator: &ObjectLocator) -> Result<()> {
        for action in actions {
            if let Some(add) = action.add {
                let id = add.deletion_vector.as_ref().map(|d| d.unique_id()).unwrap_or_default();
                self.live.insert((file_path(root, locator, &add.path)?, id), add);
            }
            if let Some(remove) = action.remove {
                let id = remove
                    .deletion_vector
                    .as_ref()
                    .map(|d| d.unique_id())
                    .unwrap_or_default();
                self.live.remove(&(file_path(root, locator, &remove.path)?, id));
            }
            if let Some(metadata) = action.metadata {
                self.metadata = metadata;
            }
            if let Some(protocol) = action.protocol {
                self.protocol = protocol;
            }
        }
        Ok(())
    }
}

/// The store path of a file the log names: relative to the table's root
/// (URL-encoded), or an absolute URI of the table's store.
pub fn file_path(root: &Path, locator: &ObjectLocator, spelled: &str) -> Result<Path> {
    if spelled.contains("://") {
        return locator.path(spelled);
    }
    let relative = Path::from_url_path(spelled).map_err(|e| LakehouseError::Invalid {
        path: spelled.to_string(),
        what: "Delta file path",
        reason: e.to_string(),
    })?;
    Ok(below(root, &relative))
}

/// `relative` below the folder `root`.
pub fn below(root: &Path, relative: &Path) -> Path {
    root.parts().chain(relative.parts()).collect()
}

/// One log file listed.
#[derive(Debug, Clone)]
struct Listed {
    path: Path,
    /// Its modification time, milliseconds since the epoch.
    modified_ms: i64,
}

/// What has been listed of a log, and the newest version replayed.
#[derive(Debug, Default)]
struct LogState {
    commits: BTreeMap<u64, Listed>,
    /// Checkpoint files by version, then by how many parts the checkpoint
    /// has (a failed writer may leave another attempt's parts), then by
    /// part number (1-based).
    checkpoints: BTreeMap<u64, BTreeMap<usize, BTreeMap<usize, Path>>>,
    replayed: Option<Arc<DeltaSnapshot>>,
}

/// A Delta table's log, read through one store.
#[derive(Debug)]
pub struct DeltaLog {
    /// The table's root folder.
    root: Path,
    /// Resolves the absolute URIs the log may name files by.
    locator: ObjectLocator,
    state: Mutex<LogState>,
    /// One refresh and replay at a time.
    reading: tokio::sync::Mutex<()>,
}

impl DeltaLog {
    /// The table whose root folder is `root`, in a store whose root URL
    /// `locator` resolves.
    pub fn new(root: Path, locator: ObjectLocator) -> Self {
        DeltaLog {
            root,
            locator,
            state: Mutex::new(LogState::default()),
            reading: tokio::sync::Mutex::new(()),
        }
    }

    /// The table's root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn folder(&self) -> Path {
        self.root.clone().join("_delta_log")
    }

    /// The newest commit file: one LIST of the log after the newest file
    /// already known (the table's current-version pointer).
    pub async fn current_commit(&self, store: &dyn ObjectStore) -> Result<Path> {
        let _one = self.reading.lock().await;
        self.refresh(store).await?;
        let state = self.state.lock();
        state
            .commits
            .last_key_value()
            .map(|(_, listed)| listed.path.clone())
            .ok_or_else(|| self.not_a_table())
    }

    /// The table at the version `choice` names (`Current`: after a LIST of
    /// the log; `AsOf`: the newest commit made at or before the time).
    pub async fn snapshot(&self, store: &dyn ObjectStore, choice: SnapshotChoice) -> Result<Arc<DeltaSnapshot>> {
        let _one = self.reading.lock().await;
        let known = |state: &LogState, v: u64| state.commits.contains_key(&v);
        let needs_listing = match choice {
            SnapshotChoice::Id(v) => !known(&self.state.lock(), u64::try_from(v).unwrap_or(0)),
            _ => true,
        };
        if needs_listing {
            self.refresh(store).await?;
        }
        if matches!(choice, SnapshotChoice::AsOf(_)) {
            // Whether commit times are the files' depends on the table's
            // current properties.
            let newest = *self
                .state
                .lock()
                .commits
                .last_key_value()
                .ok_or_else(|| self.not_a_table())?
                .0;
            let current = self.replay(store, newest).await?;
            self.remember(current);
        }
        let target = {
            let state = self.state.lock();
            match choice {
                SnapshotChoice::Current => *state.commits.last_key_value().ok_or_else(|| self.not_a_table())?.0,
                SnapshotChoice::Id(v) => u64::try_from(v)
                    .ok()
                    .filter(|v| known(&state, *v))
                    .ok_or_else(|| self.missing(format!("no version {v} in the log")))?,
                SnapshotChoice::AsOf(_) if self.in_commit_timestamps(&state) => {
                    return Err(LakehouseError::Unsupported {
                        table: self.root.to_string(),
                        reason: "time travel by time on a table with in-commit timestamps is not read yet \
                                 (commit times are in the commits, not the files' times); name the version"
                            .into(),
                    });
                }
                SnapshotChoice::AsOf(ms) => state
                    .commits
                    .iter()
                    .rev()
                    .find(|(_, listed)| listed.modified_ms <= ms)
                    .map(|(v, _)| *v)
                    .ok_or_else(|| self.missing(format!("no commit at or before {ms} ms since the epoch")))?,
            }
        };
        let snapshot = self.replay(store, target).await?;
        self.remember(snapshot.clone());
        Ok(snapshot)
    }

    /// Keeps `snapshot` as the replayed state if it is the newest yet.
    fn remember(&self, snapshot: Arc<DeltaSnapshot>) {
        let mut state = self.state.lock();
        if state.replayed.as_ref().is_none_or(|r| r.version < snapshot.version) {
            state.replayed = Some(snapshot);
        }
    }

    /// Lists the log from the newest commit known on: from its version's
    /// prefix, so a checkpoint of that version written after the commit
    /// (`N.checkpoint.parquet` sorts before `N.json`) is seen too.
    async fn refresh(&self, store: &dyn ObjectStore) -> Result<()> {
        let folder = self.folder();
        let after = {
            let state = self.state.lock();
            state
                .commits
                .last_key_value()
                .map(|(v, _)| folder.clone().join(format!("{v:020}").as_str()))
        };
        let listed: Vec<_> = match &after {
            Some(offset) => store.list_with_offset(Some(&folder), offset).try_collect().await,
            None => store.list(Some(&folder)).try_collect().await,
        }
        .map_err(|e| LakehouseError::Store {
            path: folder.to_string(),
            source: e,
        })?;
        let depth = folder.parts().count() + 1;
        let mut state = self.state.lock();
        for meta in listed {
            if meta.location.parts().count() != depth {
                continue; // `_commits/` and other subfolders
            }
            let Some(name) = meta.location.filename().map(str::to_string) else {
                continue;
            };
            match log_file(&name) {
                Some(LogFile::Commit(v)) => {
                    state.commits.insert(
                        v,
                        Listed {
                            path: meta.location.clone(),
                            modified_ms: meta.last_modified.timestamp_millis(),
                        },
                    );
                }
                Some(LogFile::Checkpoint { version, part, parts }) => {
                    state
                        .checkpoints
                        .entry(version)
                        .or_default()
                        .entry(parts)
                        .or_default()
                        .insert(part, meta.location.clone());
                }
                None => {}
            }
        }
        Ok(())
    }

    /// The table at `target`: from the replayed state when it is at or
    /// before it, else from the newest complete checkpoint at or before it,
    /// else from version 0; then each commit up to `target`.
    async fn replay(&self, store: &dyn ObjectStore, target: u64) -> Result<Arc<DeltaSnapshot>> {
        let (base, commits) = {
            let state = self.state.lock();
            // The newest checkpoint at or before `target` with every part
            // (1 to n) of one attempt present.
            let checkpoint = state.checkpoints.range(..=target).rev().find_map(|(v, attempts)| {
                attempts.iter().find_map(|(&parts, found)| {
                    (found.keys().copied().eq(1..=parts)).then(|| (*v, found.values().cloned().collect::<Vec<_>>()))
                })
            });
            let base = match (&state.replayed, &checkpoint) {
                (Some(r), _) if r.version == target => return Ok(r.clone()),
                (Some(r), Some((c, _))) if r.version < target && r.version >= *c => Base::Replayed(r.clone()),
                (Some(r), None) if r.version < target => Base::Replayed(r.clone()),
                (_, Some((c, parts))) => Base::Checkpoint(*c, parts.clone()),
                (_, None) => Base::Empty,
            };
            let from = match &base {
                Base::Replayed(r) => r.version + 1,
                Base::Checkpoint(c, _) => c + 1,
                Base::Empty => 0,
            };
            let commits = (from..=target)
                .map(|v| {
                    state
                        .commits
                        .get(&v)
                        .map(|l| (v, l.path.clone()))
                        .ok_or_else(|| self.missing(format!("commit {v} is missing from the log")))
                })
                .collect::<Result<Vec<_>>>()?;
            (base, commits)
        };
        let mut snapshot = match base {
            Base::Replayed(r) => r.as_ref().clone(),
            Base::Checkpoint(version, mut parts) => {
                parts.sort();
                let mut snapshot = self.empty(version);
                for part in parts {
                    let bytes = read(store, &part).await?;
                    let actions = checkpoint::parse_checkpoint(part.as_ref(), bytes)?;
                    snapshot.apply(actions, &self.root, &self.locator)?;
                }
                snapshot
            }
            Base::Empty => self.empty(0),
        };
        for (version, path) in commits {
            let bytes = read(store, &path).await?;
            snapshot.apply(actions::parse_commit(path.as_ref(), &bytes)?, &self.root, &self.locator)?;
            snapshot.version = version;
        }
        snapshot.commit_path = self
            .state
            .lock()
            .commits
            .get(&target)
            .map(|l| l.path.clone())
            .ok_or_else(|| self.missing(format!("commit {target} is missing from the log")))?;
        if snapshot.metadata.schema_string.is_empty() {
            return Err(LakehouseError::Invalid {
                path: snapshot.commit_path.to_string(),
                what: "Delta log",
                reason: "no metaData action up to this version".into(),
            });
        }
        snapshot.schema = DeltaSchema::parse(&snapshot.metadata.schema_string)?;
        Ok(Arc::new(snapshot))
    }

    /// Whether the last version replayed enables in-commit timestamps.
    fn in_commit_timestamps(&self, state: &LogState) -> bool {
        state.replayed.as_ref().is_some_and(|r| {
            r.metadata
                .configuration
                .get("delta.enableInCommitTimestamps")
                .cloned()
                .flatten()
                .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        })
    }

    fn empty(&self, version: u64) -> DeltaSnapshot {
        DeltaSnapshot {
            version,
            commit_path: Path::default(),
            schema: DeltaSchema { fields: Vec::new() },
            metadata: Metadata {
                schema_string: String::new(),
                partition_columns: Vec::new(),
                configuration: HashMap::new(),
            },
            protocol: Protocol {
                min_reader_version: 1,
                reader_features: None,
            },
            live: BTreeMap::new(),
        }
    }

    fn not_a_table(&self) -> LakehouseError {
        self.missing(format!("no commits in {}: not a Delta table", self.folder()))
    }

    fn missing(&self, reason: String) -> LakehouseError {
        LakehouseError::NoSuchSnapshot {
            table: self.root.to_string(),
            reason,
        }
    }
}

/// Where a replay starts.
enum Base {
    Replayed(Arc<DeltaSnapshot>),
    Checkpoint(u64, Vec<Path>),
    Empty,
}

/// The kinds of log file a reader uses.
#[derive(Debug, PartialEq)]
enum LogFile {
    Commit(u64),
    /// Part `part` (1-based) of a checkpoint of `parts` parts.
    Checkpoint {
        version: u64,
        part: usize,
        parts: usize,
    },
}

/// `00000000000000000007.json` is commit 7; `...10.checkpoint.parquet` the
/// checkpoint of version 10, `...10.checkpoint.0000000002.0000000003.parquet`
/// its second of three parts. Others (`.crc`, `_last_checkpoint`, v2
/// checkpoints named by UUID, compacted logs) are not read.
fn log_file(name: &str) -> Option<LogFile> {
    let (digits, rest) = name.split_once('.')?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let version = digits.parse().ok()?;
    match rest {
        "json" => Some(LogFile::Commit(version)),
        "checkpoint.parquet" => Some(LogFile::Checkpoint {
            version,
            part: 1,
            parts: 1,
        }),
        multi => {
            let numbers = multi.strip_prefix("checkpoint.")?.strip_suffix(".parquet")?;
            let (part, parts) = numbers.split_once('.')?;
            if part.len() != 10 || parts.len() != 10 {
                return None;
            }
            let (part, parts): (usize, usize) = (part.parse().ok()?, parts.parse().ok()?);
            (1..=parts)
                .contains(&part)
                .then_some(LogFile::Checkpoint { version, part, parts })
        }
    }
}

async fn read(store: &dyn ObjectStore, path: &Path) -> Result<bytes::Bytes> {
    let error = |e| LakehouseError::Store {
        path: path.to_string(),
        source: e,
    };
    store.get(path).await.map_err(error)?.bytes().await.map_err(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_file_names_carry_their_version() {
        assert_eq!(log_file("00000000000000000007.json"), Some(LogFile::Commit(7)));
        assert_eq!(
            log_file("00000000000000000010.checkpoint.parquet"),
            Some(LogFile::Checkpoint {
                version: 10,
                part: 1,
                parts: 1
            })
        );
        assert_eq!(
            log_file("00000000000000000010.checkpoint.0000000002.0000000003.parquet"),
            Some(LogFile::Checkpoint {
                version: 10,
                part: 2,
                parts: 3
            })
        );
        assert_eq!(
            log_file("00000000000000000010.checkpoint.0000000004.0000000003.parquet"),
            None
        );
        assert_eq!(log_file("00000000000000000007.crc"), None);
        assert_eq!(log_file("_last_checkpoint"), None);
        assert_eq!(
            log_file("00000000000000000010.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.parquet"),
            None
        );
        assert_eq!(log_file("7.json"), None);
    }

    #[tokio::test]
    async fn removes_match_adds_however_spelled_and_partial_checkpoints_are_passed_over() {
        let store = object_store::memory::InMemory::new();
        let commit = |name: &str, lines: &[&str]| {
            let path = Path::from(format!("t/_delta_log/{name}"));
            let text = lines.join("\n");
            let store = &store;
            async move { store.put(&path, text.into()).await.unwrap() }
        };
        let schema = r#"{\"type\":\"struct\",\"fields\":[{\"name\":\"id\",\"type\":\"long\",\"nullable\":true,\"metadata\":{}}]}"#;
        let metadata = format!(
            r#"{{"metaData":{{"id":"x","format":{{"provider":"parquet"}},"schemaString":"{schema}","partitionColumns":[],"configuration":{{}}}}}}"#
        );
        commit(
            "00000000000000000000.json",
            &[
                r#"{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}"#,
                &metadata,
                r#"{"add":{"path":"a%20b.parquet","partitionValues":{},"size":10,"dataChange":true}}"#,
                r#"{"add":{"path":"c.parquet","partitionValues":{},"size":20,"dataChange":true}}"#,
            ],
        )
        .await;
        // Removed by its absolute URI, unencoded.
        commit(
            "00000000000000000001.json",
            &[r#"{"remove":{"path":"memory:///t/a b.parquet","dataChange":true}}"#],
        )
        .await;
        // One part of two of an unfinished checkpoint: never read (it is
        // not Parquet; reading it would fail).
        commit(
            "00000000000000000001.checkpoint.0000000001.0000000002.parquet",
            &["junk"],
        )
        .await;
        let log = DeltaLog::new(
            Path::from("t"),
            ObjectLocator::new(url::Url::parse("memory:///").unwrap()),
        );
        let current = log.snapshot(&store, SnapshotChoice::Current).await.unwrap();
        let files: Vec<String> = current
            .files(log.root())
            .unwrap()
            .iter()
            .map(|f| f.path.to_string())
            .collect();
        assert_eq!((current.version, files), (1, vec!["t/c.parquet".to_string()]));
        let first = log.snapshot(&store, SnapshotChoice::Id(0)).await.unwrap();
        assert_eq!(first.files(log.root()).unwrap().len(), 2);
        assert!(log.snapshot(&store, SnapshotChoice::Id(7)).await.is_err());
    }

    #[test]
    fn paths_are_relative_to_the_root_or_absolute_in_the_store() {
        let root = Path::from("wh/t");
        let locator = ObjectLocator::new(url::Url::parse("s3://lake/").unwrap());
        assert_eq!(
            file_path(&root, &locator, "part-0%20a.parquet").unwrap().as_ref(),
            "wh/t/part-0 a.parquet"
        );
        assert_eq!(
            file_path(&root, &locator, "s3://lake/elsewhere/f.parquet")
                .unwrap()
                .as_ref(),
            "elsewhere/f.parquet"
        );
        assert!(file_path(&root, &locator, "s3://other/f.parquet").is_err());
    }
}
