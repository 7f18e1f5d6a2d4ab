//! Lakehouse tables (Iceberg, Delta Lake): the files of a table come from
//! its metadata — the snapshot (version) a query reads — rather than from
//! a listing.
//!
//! A query resolves the table to one snapshot ([`LakehouseFiles::resolve`]):
//! under `always` one read of the table's current pointer per query (Iceberg:
//! the version hint, or the LIST of `metadata/`; Delta: the LIST of
//! `_delta_log/` after the newest commit known), else as the table's
//! freshness allows; metadata files are immutable under their names and
//! parsed once. The snapshot's data files are read as immutable objects
//! ([`ObjectVersion::immutable_meta`]): known by path and size, never
//! listed or HEADed, so every file a new snapshot keeps (after an append or
//! a compaction) stays warm in every tier.
//!
//! Deleted rows — Iceberg position delete files, Delta deletion vectors —
//! are read into per-file sorted row positions ([`PositionDeletes`]) and
//! applied by the scan before any filter, aggregate or limit sees a row
//! ([`crate::cached_scan`]).
//!
//! What differs per format is behind [`SnapshotSource`]: where the current
//! pointer is, and how a snapshot's files, schema and deletes are read
//! ([`iceberg::IcebergSnapshots`], [`delta::DeltaSnapshots`]).

mod bounds;
pub mod bucket;
mod deletes;
pub mod delta;
pub mod equality;
pub mod iceberg;
mod iceberg_bounds;
mod partitions;
mod schema;
pub mod time_travel;

use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::cache::cache_manager::FileMetadataCache;
use datafusion::parquet::arrow::PARQUET_FIELD_ID_META_KEY;
use datafusion::parquet::file::metadata::ParquetMetaData;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use object_store::ObjectMeta;
use object_store::path::Path;
use parking_lot::Mutex;
use silt_cache::{CacheError, CachedStore, Freshness, ObjectVersion, ValidationGate};
use silt_lakehouse::{ObjectLocator, SnapshotChoice};

pub use bounds::{ColumnBounds, FileBounds, KnownValues};
pub use deletes::{DeleteFiles, PositionDeletes};
pub use equality::EqualityDeletes;
pub use partitions::PartitionValues;
pub use schema::arrow_schema;
pub use time_travel::{TimeTravelSchema, parse_time_travel, split_snapshot};

/// What one query reads of a table: the files (sorted by path) and the rows
/// deleted from them.
#[derive(Debug, Clone, Default)]
pub struct TableFiles {
    pub files: Vec<ObjectMeta>,
    /// Deleted row positions per file (empty for a table without deletes).
    pub deletes: PositionDeletes,
    /// Rows deleted by their values, per file (Iceberg equality deletes).
    pub equality: EqualityDeletes,
    /// Values of partition columns kept outside the files (Delta).
    pub partitions: PartitionValues,
    /// What the metadata says of each file's values (Delta's statistics,
    /// Iceberg's manifest metrics and partition tuples): files they rule
    /// out are not opened.
    pub bounds: FileBounds,
    /// Whether some column's name or type differs between the table's
    /// schemas (an Iceberg rename or promotion): older files then name or
    /// type it otherwise than the table, which only the server's scan
    /// (matching columns by field id, [`crate::file_columns`]) reads right.
    pub columns_changed: bool,
    /// The snapshot the files are of (lakehouse tables).
    pub snapshot_id: Option<i64>,
    /// The snapshot's schema (lakehouse tables): what its scans read.
    pub schema: Option<SchemaRef>,
    /// The metadata file the snapshot was read from (Iceberg), or its
    /// commit file (Delta): the pointer a confirmation compares.
    pub metadata_path: Option<Path>,
}

impl TableFiles {
    /// Why a client that decodes row groups itself cannot be given this
    /// snapshot's layout, if it cannot: unless the client
    /// `honors_server_only` (scans row groups so marked on the server:
    /// [`Self::server_only`], and files whose columns it would not find by
    /// name, [`crate::file_columns::found_by_name`]), columns renamed or
    /// retyped (the layout names file columns, matched by field id only on
    /// the server), rows deleted by position or value and partition values
    /// kept outside the files, which the server's scan and lookups
    /// ([`crate::lookup`]) apply and a client's own decode would not.
    pub fn layout_refusal(&self, honors_server_only: bool) -> Option<&'static str> {
        if honors_server_only {
            None
        } else if self.columns_changed {
            Some("the table renamed or retyped columns, which only the server's scan matches by field id")
        } else if !self.deletes.is_empty() {
            Some("the table's snapshot deletes rows by position, which only the server's scan applies")
        } else if !self.equality.is_empty() {
            Some("the table's snapshot deletes rows by their values, which only the server's scan applies")
        } else if !self.partitions.is_empty() {
            Some("the table keeps partition values outside its files, which only the server's scan fills in")
        } else {
            None
        }
    }

    /// Whether only the server's scan reads row group `rg` of `file` (whose
    /// footer is `metadata`) right: the snapshot deletes some
    /// of them by position, or may delete any of them by value. (A column
    /// kept outside the file needs no mark: the layout lists only the
    /// file's own columns, and a client scans a row group lacking a needed
    /// column on the server.)
    pub fn server_only(&self, file: &Path, metadata: &ParquetMetaData, rg: usize) -> bool {
        if !self.equality.of(file).is_empty() {
            return true;
        }
        if self.deletes.of(file).is_none() {
            return false;
        }
        let rows = metadata.row_group(rg).num_rows().max(0) as usize;
        let first = crate::column_loader::first_row(metadata, rg);
        !self.deletes.deleted_in(file, first, rows).is_empty()
    }
}

/// What differs between table formats: where a table's current pointer is
/// and how a snapshot's files are read. Both are given the table's
/// [`TableStore`] (its store and the naming of its files).
#[derive(Debug)]
pub enum SnapshotSource {
    Iceberg(iceberg::IcebergSnapshots),
    Delta(delta::DeltaSnapshots),
}

impl SnapshotSource {
    /// The table's current pointer (one metadata read): compared with the
    /// [`TableFiles::metadata_path`] a query read speculatively.
    async fn current_pointer(&self, table: &TableStore) -> Result<Path> {
        match self {
            SnapshotSource::Iceberg(s) => s.current_pointer(table).await,
            SnapshotSource::Delta(s) => s.current_pointer(table).await,
        }
    }

    /// The files of the snapshot `choice` names.
    async fn files_at(&self, table: &TableStore, choice: SnapshotChoice) -> Result<TableFiles> {
        match self {
            SnapshotSource::Iceberg(s) => s.files_at(table, choice).await,
            SnapshotSource::Delta(s) => s.files_at(table, choice).await,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            SnapshotSource::Iceberg(_) => "Iceberg",
            SnapshotSource::Delta(_) => "Delta",
        }
    }
}

/// A lakehouse table's store and the naming of its files, as every format
/// reads them.
pub struct TableStore {
    pub(crate) locator: ObjectLocator,
    /// The URL of the store's root: part of every file's cache generation.
    root: String,
    pub(crate) store: Arc<CachedStore>,
    /// Strings and binaries read as views (DataFusion's default for Parquet).
    pub(crate) view_types: bool,
    /// Delete files read (Iceberg position deletes).
    pub(crate) deletes: DeleteFiles,
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

/// A lakehouse table's files, resolved per query from its metadata.
pub struct LakehouseFiles {
    source: SnapshotSource,
    table: TableStore,
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

impl std::fmt::Debug for LakehouseFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LakehouseFiles")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl LakehouseFiles {
    /// The table `source` reads, in `store`, whose metadata names files by
    /// URLs below `root` (the URL of the store's empty path).
    /// Footers of delete files are kept in `footers` (the metadata tier);
    /// `view_types`: strings and binaries read as views.
    pub fn new(
        source: SnapshotSource,
        store: Arc<CachedStore>,
        footers: Arc<FileMetadataCache>,
        root: url::Url,
        view_types: bool,
    ) -> Self {
        LakehouseFiles {
            source,
            table: TableStore {
                view_types,
                root: root.to_string(),
                locator: ObjectLocator::new(root),
                deletes: DeleteFiles::new(store.clone(), footers),
                store,
            },
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
        if self.table.store.freshness() != Freshness::Always || !gate.may_speculate() {
            return None;
        }
        let files = self.last_resolved()?;
        if self.outdated.lock().as_ref().is_some_and(|o| Arc::ptr_eq(o, &files)) {
            return None;
        }
        let read = files.metadata_path.clone()?;
        let (this, start, stale) = (self.clone(), gate.started(), files.clone());
        let confirmation = tokio::spawn(async move {
            let current = this
                .source
                .current_pointer(&this.table)
                .await
                .map_err(|e| CacheError::Store {
                    path: read.to_string(),
                    source: Arc::new(object_store::Error::Generic {
                        store: this.source.name(),
                        source: Box::new(e),
                    }),
                })?;
            if current == read {
                return Ok(());
            }
            this.per_query.invalidate(&start);
            *this.outdated.lock() = Some(stale);
            Err(CacheError::changed(&read, current.as_ref()))
        });
        let confirmation: Confirmation = async move {
            confirmation.await.map_err(|e| CacheError::Corrupt {
                path: "lakehouse table metadata".into(),
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
        (fresh || self.table.store.freshness().still_valid(at.elapsed())).then(|| files.clone())
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
        self.source.files_at(&self.table, choice).await
    }

    /// `files` (of this table) as read in `schema`: re-marked with that
    /// schema's generation where they carry another.
    pub fn read_in(&self, files: &[ObjectMeta], schema: &Schema) -> Vec<ObjectMeta> {
        self.table.read_in(files, schema)
    }
}

impl TableStore {
    /// The cache generation of the table's files read in `schema` (`None`:
    /// files read in their own schema, delete files): a stable hash of the
    /// store's root and the schema's columns, so a batch decoded for one
    /// schema is never served to a reader in another, and a store put in
    /// another table's place by a config change never shares its cache.
    pub(crate) fn generation(&self, schema: Option<&Schema>) -> String {
        let mut text = self.root.clone();
        for field in schema.iter().flat_map(|s| s.fields()) {
            text.push_str(&format!("|{}:{}", field.name(), field.data_type()));
            // Columns matched by field id: the same names and types with
            // other ids read other file columns.
            if let Some(id) = field.metadata().get(PARQUET_FIELD_ID_META_KEY) {
                text.push_str(&format!("#{id}"));
            }
            // Columns matched by physical name (Delta column mapping): a
            // dropped column's name and type given to a new one.
            if let Some(physical) = field.metadata().get(crate::file_columns::PHYSICAL_NAME) {
                text.push_str(&format!("@{physical}"));
            }
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
    pub(crate) fn namespaced(&self, url: &str) -> Result<Path> {
        let path = self.locator.path(url).map_err(external)?;
        Ok(self.store.qualify(&path))
    }

    /// `files` as immutable objects of this table read in `schema`:
    /// namespaced, marked with the schema's generation, sorted by path.
    pub(crate) fn data_files(&self, files: impl IntoIterator<Item = (Path, u64)>, schema: &Schema) -> Vec<ObjectMeta> {
        let generation = self.generation(Some(schema));
        let mut files: Vec<ObjectMeta> = files
            .into_iter()
            .map(|(path, size)| ObjectVersion::immutable_meta(path, size, &generation))
            .collect();
        files.sort_by(|a, b| a.location.cmp(&b.location));
        files
    }
}

/// FNV-1a, 64 bits: a hash that stays the same across builds and restarts
/// (the disk tier keeps entries under it).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

pub(crate) fn external(e: silt_lakehouse::LakehouseError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

impl LakehouseFiles {
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
                .ok_or_else(|| DataFusionError::Internal("a resolved lakehouse snapshot without a schema".into())),
        }
    }

    /// The schema of the last snapshot resolved.
    pub fn last_schema(&self) -> Option<SchemaRef> {
        self.last_resolved().and_then(|f| f.schema.clone())
    }
}
