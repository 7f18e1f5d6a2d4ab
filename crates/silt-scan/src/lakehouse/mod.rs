//! Lakehouse tables (Iceberg): the files of a table come from its metadata
//! — the snapshot a query reads — rather than from a listing.
//!
//! A query resolves the table to one snapshot ([`IcebergFiles::resolve`]):
//! under `always` one read of the current-metadata pointer per query (the
//! version hint, or the LIST of `metadata/`), else as the table's freshness
//! allows; metadata files, manifest lists and manifests are immutable under
//! their names and parsed once ([`MetadataMemo`]). The snapshot's data files
//! are read as immutable objects ([`ObjectVersion::immutable_meta`]): known
//! by path and size, never listed or HEADed, so every file a new snapshot
//! keeps (after an append or a compaction) stays warm in every tier.
//!
//! Position deletes are read into per-file sorted row positions
//! ([`PositionDeletes`]) and applied by the scan before any filter,
//! aggregate or limit sees a row ([`crate::cached_scan`]).

mod deletes;
mod schema;
pub mod time_travel;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::cache::cache_manager::FileMetadataCache;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use object_store::ObjectMeta;
use object_store::path::Path;
use parking_lot::Mutex;
use silt_cache::{CacheError, CachedStore, Freshness, ObjectVersion, ValidationGate};
use silt_lakehouse::ObjectLocator;
use silt_lakehouse::iceberg::{ContentFile, FileContent, IcebergTable, MetadataMemo, SnapshotChoice};

pub use deletes::{DeleteFiles, PositionDeletes};
pub use schema::arrow_schema;
pub use time_travel::{TimeTravelSchema, parse_time_travel, split_snapshot};

/// What one query reads of a table: the files (sorted by path) and the rows
/// deleted from them.
#[derive(Debug, Clone, Default)]
pub struct TableFiles {
    pub files: Vec<ObjectMeta>,
    /// Deleted row positions per file (empty for a table without deletes).
    pub deletes: PositionDeletes,
    /// The snapshot the files are of (lakehouse tables).
    pub snapshot_id: Option<i64>,
    /// The snapshot's schema (lakehouse tables): what its scans read.
    pub schema: Option<SchemaRef>,
    /// The metadata file the snapshot was read from (lakehouse tables).
    pub metadata_path: Option<Path>,
}

/// A confirmation that a speculatively read snapshot was current, shared by
/// the gates of one query.
type Confirmation = Shared<BoxFuture<'static, silt_cache::CacheResult<()>>>;

/// The snapshot one query reads, and the confirmation it awaits if it read
/// it speculatively.
#[derive(Clone)]
struct QueryRead {
    files: Arc<TableFiles>,
    confirmation: Option<Confirmation>,
}

impl QueryRead {
    /// A snapshot resolved at or after the query started: nothing to confirm.
    fn confirmed(files: Arc<TableFiles>) -> Self {
        QueryRead {
            files,
            confirmation: None,
        }
    }
}

/// An Iceberg table's files, resolved per query from its metadata.
pub struct IcebergFiles {
    /// The table's folder or metadata JSON, in the store (not namespaced).
    location: Path,
    locator: ObjectLocator,
    /// The URL of the store's root: part of every file's cache generation.
    root: String,
    store: Arc<CachedStore>,
    /// Strings and binaries read as views (DataFusion's default for Parquet).
    view_types: bool,
    memo: MetadataMemo,
    deletes: DeleteFiles,
    /// The last snapshot resolved, and when: reused while the table's
    /// freshness trusts it, and by any query that started before it was.
    last: Mutex<Option<(Instant, Arc<TableFiles>)>>,
    /// The snapshot each recent query (by its start) read, so every scan of
    /// one query reads the same snapshot whatever commits land meanwhile.
    per_query: moka::sync::Cache<Instant, QueryRead>,
    /// The last snapshot resolved, once a confirmation found a newer one
    /// committed: not speculated on again (it stays the table's schema
    /// until the next resolution replaces it).
    outdated: Mutex<Option<Arc<TableFiles>>>,
    resolving: tokio::sync::Mutex<()>,
}

/// Queries whose snapshots are remembered, and for how long after their
/// last scan was planned.
const QUERIES_REMEMBERED: u64 = 4096;
const QUERY_MEMORY: std::time::Duration = std::time::Duration::from_secs(600);

impl std::fmt::Debug for IcebergFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IcebergFiles")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl IcebergFiles {
    /// The table at `location` (a folder or a metadata JSON) of `store`,
    /// whose metadata names files by URLs below `root` (the URL of the
    /// store's empty path).
    /// Footers of delete files are kept in `footers` (the metadata tier);
    /// `view_types`: strings and binaries read as views.
    pub fn new(
        store: Arc<CachedStore>,
        footers: Arc<FileMetadataCache>,
        location: Path,
        root: url::Url,
        view_types: bool,
    ) -> Self {
        IcebergFiles {
            view_types,
            location,
            root: root.to_string(),
            locator: ObjectLocator::new(root),
            deletes: DeleteFiles::new(store.clone(), footers),
            store,
            memo: MetadataMemo::default(),
            last: Mutex::new(None),
            // LRU, not the default admission policy: a new query's entry
            // is always kept, and a running query's (touched by each scan)
            // is never the one evicted.
            per_query: moka::sync::Cache::builder()
                .eviction_policy(moka::policy::EvictionPolicy::lru())
                .max_capacity(QUERIES_REMEMBERED)
                .time_to_idle(QUERY_MEMORY)
                .build(),
            outdated: Mutex::new(None),
            resolving: tokio::sync::Mutex::new(()),
        }
    }

    /// The table's current metadata (one pointer read).
    pub async fn load(&self) -> Result<IcebergTable> {
        IcebergTable::load(self.store.inner(), &self.location, &self.memo)
            .await
            .map_err(external)
    }

    /// The current snapshot's files for the query whose validation gate is
    /// `gate` (`None`: a read outside any query), as the table's freshness
    /// allows: the snapshot that query already read; else under `always` a
    /// snapshot resolved since the query started, or the last one read
    /// speculatively ([`Self::speculate`]): one pointer read per query,
    /// off its critical path; else the last one while it is trusted.
    pub async fn resolve(self: &Arc<Self>, gate: Option<&Arc<ValidationGate>>) -> Result<Arc<TableFiles>> {
        let query_start = gate.map(|g| g.started());
        if let Some(files) = self.reusable(query_start) {
            return Ok(self.remember(gate, QueryRead::confirmed(files)));
        }
        if let Some(gate) = gate
            && let Some(read) = self
                .per_query
                .optionally_get_with(gate.started(), || self.speculate(gate))
        {
            // Every gate of the query (its scans', its validation at start)
            // waits for the one confirmation.
            return Ok(self.remember(Some(gate), read));
        }
        // One resolution at a time: a query's scans (and its validation at
        // start) planned together read the pointer once.
        let _one = self.resolving.lock().await;
        if let Some(files) = self.reusable(query_start) {
            return Ok(self.remember(gate, QueryRead::confirmed(files)));
        }
        let resolved_at = Instant::now();
        let files = Arc::new(self.files_at(SnapshotChoice::Current).await?);
        *self.last.lock() = Some((resolved_at, files.clone()));
        Ok(self.remember(gate, QueryRead::confirmed(files)))
    }

    /// Under `always`, for a query with a validation gate: the last snapshot
    /// resolved, at once, with a confirmation — a read of the current-
    /// metadata pointer started now, running while the query does — that
    /// the query's gates await before any result is released (as
    /// speculative listings are confirmed). If a commit moved the pointer,
    /// the confirmation fails as changed, the stale snapshot is not
    /// speculated on again, and the query, nothing sent yet, is restarted
    /// without speculation and reads the new one. `None` when there is
    /// nothing to speculate on.
    fn speculate(self: &Arc<Self>, gate: &Arc<ValidationGate>) -> Option<QueryRead> {
        if self.store.freshness() != Freshness::Always || !gate.may_speculate() {
            return None;
        }
        let files = self.last_resolved()?;
        if self.outdated.lock().as_ref().is_some_and(|o| Arc::ptr_eq(o, &files)) {
            return None;
        }
        let read = files.metadata_path.clone()?;
        let (this, start, stale) = (self.clone(), gate.started(), files.clone());
        let confirmation = tokio::spawn(async move {
            let current = this.load().await.map_err(|e| CacheError::Store {
                path: read.to_string(),
                source: Arc::new(object_store::Error::Generic {
                    store: "iceberg",
                    source: Box::new(e),
                }),
            })?;
            if current.metadata_path == read {
                return Ok(());
            }
            this.per_query.invalidate(&start);
            *this.outdated.lock() = Some(stale);
            Err(CacheError::changed(&read, current.metadata_path.as_ref()))
        });
        let confirmation: Confirmation = async move {
            confirmation.await.map_err(|e| CacheError::Corrupt {
                path: "iceberg metadata".into(),
                detail: format!("the snapshot's confirmation failed: {e}"),
            })?
        }
        .boxed()
        .shared();
        Some(QueryRead {
            files,
            confirmation: Some(confirmation),
        })
    }

    /// A snapshot already resolved that the query starting at `query_start`
    /// may read without a confirmation (see [`Self::resolve`]).
    fn reusable(&self, query_start: Option<Instant>) -> Option<Arc<TableFiles>> {
        let last = self.last.lock();
        let (at, files) = last.as_ref()?;
        let fresh = query_start.is_some_and(|start| *at >= start);
        (fresh || self.store.freshness().still_valid(at.elapsed())).then(|| files.clone())
    }

    /// What the query of `gate` reads: what it already read if it did (its
    /// confirmation, if any, registered on `gate` too), else `read`.
    fn remember(&self, gate: Option<&Arc<ValidationGate>>, read: QueryRead) -> Arc<TableFiles> {
        let Some(gate) = gate else {
            return read.files;
        };
        let read = self.per_query.get_with(gate.started(), || read);
        if let Some(confirmation) = read.confirmation {
            gate.register(confirmation.boxed());
        }
        read.files
    }

    /// The files of the last snapshot resolved, if any (without reading).
    pub fn last_resolved(&self) -> Option<Arc<TableFiles>> {
        self.last.lock().as_ref().map(|(_, f)| f.clone())
    }

    /// The files of the snapshot `choice` names.
    pub async fn files_at(&self, choice: SnapshotChoice) -> Result<TableFiles> {
        let table = self.load().await?;
        let snapshot = table.metadata.snapshot(choice).map_err(external)?;
        let snapshot_id = snapshot.map(|s| s.snapshot_id);
        // The current table reads in the table's current schema (a schema
        // change needs no data commit); time travel in the snapshot's.
        let schema_of = if choice == SnapshotChoice::Current {
            None
        } else {
            snapshot
        };
        let schema = table.metadata.schema_of(schema_of).map_err(external)?;
        let schema = Arc::new(arrow_schema(&schema, self.view_types)?);
        let generation = self.generation(Some(&schema));
        let live = table
            .files(self.store.inner(), &self.locator, choice, &self.memo)
            .await
            .map_err(external)?;
        if let Some(f) = live.data.iter().find(|f| f.format != "PARQUET") {
            return Err(DataFusionError::NotImplemented(format!(
                "{}: data file {} is {}; Silt reads Parquet data files only",
                table.metadata_path, f.path, f.format
            )));
        }
        if let Some(f) = live.deletes.iter().find(|f| f.format != "PARQUET") {
            return Err(DataFusionError::NotImplemented(format!(
                "{}: delete file {} is {}; Silt reads Parquet position deletes only",
                table.metadata_path, f.path, f.format
            )));
        }
        if let Some(f) = live.deletes.iter().find(|f| f.content == FileContent::EqualityDeletes) {
            return Err(DataFusionError::NotImplemented(format!(
                "{}: equality delete file {}: Silt applies position deletes only, so far",
                table.metadata_path, f.path
            )));
        }
        let mut files = Vec::with_capacity(live.data.len());
        for f in &live.data {
            files.push(ObjectVersion::immutable_meta(
                self.namespaced(&f.path)?,
                f.size,
                &generation,
            ));
        }
        files.sort_by(|a, b| a.location.cmp(&b.location));
        let deletes = self.position_deletes(&live.data, &live.deletes).await?;
        Ok(TableFiles {
            files,
            deletes,
            snapshot_id,
            schema: Some(schema),
            metadata_path: Some(table.metadata_path.clone()),
        })
    }

    /// Per data file, the positions every position delete file that applies
    /// to it (a data sequence number at or above the data file's) deletes.
    async fn position_deletes(&self, data: &[ContentFile], deletes: &[ContentFile]) -> Result<PositionDeletes> {
        if deletes.is_empty() {
            return Ok(PositionDeletes::default());
        }
        // By store path: writers may spell one file's URL two ways.
        let sequence: HashMap<Path, i64> = data
            .iter()
            .map(|f| Ok((self.namespaced(&f.path)?, f.sequence_number)))
            .collect::<Result<_>>()?;
        let generation = self.generation(None);
        let mut per_file: HashMap<Path, Vec<u64>> = HashMap::new();
        for delete in deletes {
            let location = ObjectVersion::immutable_meta(self.namespaced(&delete.path)?, delete.size, &generation);
            let positions = self.deletes.read(&location).await?;
            for (data_file, rows) in positions.iter() {
                let Ok(data_file) = self.namespaced(data_file) else {
                    continue; // a file of another store: not this table's
                };
                match sequence.get(&data_file) {
                    Some(&seq) if seq <= delete.sequence_number => {
                        per_file.entry(data_file).or_default().extend(rows);
                    }
                    _ => {} // an older file's, or one no longer in the table
                }
            }
        }
        Ok(PositionDeletes::from_unsorted(per_file))
    }

    /// The cache generation of the table's files read in `schema` (`None`:
    /// files read in their own schema, delete files): a stable hash of the
    /// store's root and the schema's columns, so a batch decoded for one
    /// schema is never served to a reader in another, and a store put in
    /// another table's place by a config change never shares its cache.
    fn generation(&self, schema: Option<&Schema>) -> String {
        let mut text = self.root.clone();
        for field in schema.iter().flat_map(|s| s.fields()) {
            text.push_str(&format!("|{}:{}", field.name(), field.data_type()));
        }
        format!("{:016x}", fnv1a(text.as_bytes()))
    }

    /// `files` (of this table) as read in `schema`: re-marked with that
    /// schema's generation where they carry another.
    pub fn read_in(&self, files: &[ObjectMeta], schema: &Schema) -> Vec<ObjectMeta> {
        let generation = self.generation(Some(schema));
        files
            .iter()
            .map(|m| ObjectVersion::immutable_meta(m.location.clone(), m.size, &generation))
            .collect()
    }

    /// The namespaced path (as scans see objects) of a file's URL.
    fn namespaced(&self, url: &str) -> Result<Path> {
        let path = self.locator.path(url).map_err(external)?;
        Ok(self.store.qualify(&path))
    }
}

/// FNV-1a, 64 bits: a hash that stays the same across builds and restarts
/// (the disk tier keeps entries under it).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn external(e: silt_lakehouse::LakehouseError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

impl IcebergFiles {
    /// The schema of the last snapshot resolved (the table's schema as
    /// queries plan with it), resolving the current one if none was.
    pub async fn schema(self: &Arc<Self>) -> Result<SchemaRef> {
        match self.last_schema() {
            Some(schema) => Ok(schema),
            None => self
                .resolve(None)
                .await?
                .schema
                .clone()
                .ok_or_else(|| DataFusionError::Internal("a resolved Iceberg snapshot without a schema".into())),
        }
    }

    /// The schema of the last snapshot resolved.
    pub fn last_schema(&self) -> Option<SchemaRef> {
        self.last_resolved().and_then(|f| f.schema.clone())
    }
}
