//! `CachedParquetTable`: a Parquet table whose scans go through the memory
//! tier of decoded column batches ([`CachedScanExec`]).
//!
//! Schema inference stays with DataFusion's `ListingTable`, and so does the
//! listing rule (which objects under a URL are the table's:
//! [`ListingTableUrl::list_all_files`](datafusion::datasource::listing::ListingTableUrl)).
//! The scan lists (the LIST or HEAD per query that validates versions under
//! `always`), pins each listed object version, and takes the file statistics
//! from the pinned footers, so planning and reading see the same version of
//! every object (DataFusion's own statistics reads would re-resolve the
//! version per read). Tables with nested columns are read by the
//! `ListingTable` itself (their Parquet-to-Arrow mapping is not one column
//! chunk per root column).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::{ColumnStatistics, Statistics};
use datafusion::datasource::listing::ListingTable;
use datafusion::datasource::physical_plan::parquet::ParquetFileMetrics;
use datafusion::datasource::physical_plan::parquet::metadata::DFParquetMetadata;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use futures::{StreamExt, TryStreamExt};
use object_store::{ObjectMeta, ObjectStore};
use silt_cache::{CacheError, ValidationGate};

use crate::cached_scan::needed_columns;
use crate::cached_scan::{CachedScanExec, ScanSources, ScanSpec};
use crate::file_columns::{found_by_name, named_as_in_file};
use crate::footer::pinned_footer;
use crate::lakehouse::{LakehouseFiles, TableFiles};
use crate::scan_filter::ScanFilter;
use crate::scan_set::{PinnedFile, scan_set_chunks};
use crate::scope::{LayoutBuilder, ScanScope};
use silt_lakehouse::SnapshotChoice;

#[derive(Debug)]
pub struct CachedParquetTable {
    files: Files,
    sources: ScanSources,
    /// Whether scans read through the memory tier (false: nested columns).
    cached: bool,
}

/// Where a table's files come from.
#[derive(Debug)]
enum Files {
    /// A listing of its URL (loose Parquet files).
    Listing(Arc<ListingTable>),
    /// A lakehouse table: the snapshot each query resolves. `planned`: the
    /// schema this provider was handed out with for planning one query
    /// (fixed, so its `schema()` and its scan agree); `None` for the
    /// registered provider, whose schema is the last resolved snapshot's.
    Lakehouse {
        files: Arc<LakehouseFiles>,
        planned: Option<SchemaRef>,
    },
    /// A lakehouse table at one snapshot (time travel), and its schema.
    Snapshot(Arc<TableFiles>),
}

impl std::fmt::Debug for ScanSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanSources").finish_non_exhaustive()
    }
}

impl CachedParquetTable {
    pub fn new(listing: ListingTable, sources: ScanSources) -> Self {
        let cached = !listing.schema().fields().iter().any(|f| f.data_type().is_nested());
        CachedParquetTable {
            files: Files::Listing(Arc::new(listing)),
            sources,
            cached,
        }
    }

    /// A lakehouse table (primitive columns: read through the tiers), its
    /// files and schema from the snapshot each query resolves; `files` has
    /// resolved one already.
    pub fn lakehouse(files: Arc<LakehouseFiles>, sources: ScanSources) -> Self {
        CachedParquetTable {
            files: Files::Lakehouse { files, planned: None },
            sources,
            cached: true,
        }
    }

    /// The snapshot id of the table's last resolved snapshot (lakehouse
    /// tables that have resolved one), for `silt_system`.
    pub fn snapshot_id(&self) -> Option<i64> {
        match &self.files {
            Files::Listing(_) => None,
            Files::Lakehouse { files, .. } => files.last_resolved().and_then(|f| f.snapshot_id),
            Files::Snapshot(at) => at.snapshot_id,
        }
    }

    /// This lakehouse table at the snapshot `choice` names, in that
    /// snapshot's schema (time travel: [`crate::lakehouse::time_travel`]).
    pub async fn at_snapshot(&self, choice: SnapshotChoice) -> Result<CachedParquetTable> {
        let Files::Lakehouse { files, .. } = &self.files else {
            return Err(DataFusionError::Plan(
                "only lakehouse tables have snapshots to read".into(),
            ));
        };
        Ok(CachedParquetTable {
            files: Files::Snapshot(Arc::new(files.files_at(choice).await?)),
            sources: self.sources.clone(),
            cached: true,
        })
    }

    /// For a lakehouse table, a provider to plan one query with: the same
    /// table, its schema fixed at the last resolved snapshot's, so planning
    /// and the scan read columns by the same indices whatever snapshot
    /// another query resolves meanwhile. `None` for other tables (their
    /// schema never changes).
    pub fn for_query(&self) -> Option<CachedParquetTable> {
        let Files::Lakehouse { files, planned: None } = &self.files else {
            return None;
        };
        Some(CachedParquetTable {
            files: Files::Lakehouse {
                files: files.clone(),
                planned: Some(self.schema_ref()),
            },
            sources: self.sources.clone(),
            cached: true,
        })
    }
}

impl CachedParquetTable {
    /// What the table reads through (store, memory tier, metadata tier).
    pub fn sources(&self) -> &ScanSources {
        &self.sources
    }

    /// The table's schema (a lakehouse table's: its last resolved
    /// snapshot's).
    pub fn schema_ref(&self) -> SchemaRef {
        match &self.files {
            Files::Listing(listing) => listing.schema(),
            Files::Lakehouse {
                planned: Some(schema), ..
            } => schema.clone(),
            Files::Lakehouse { files, .. } => files.last_schema().unwrap_or_else(|| Arc::new(Schema::empty())),
            Files::Snapshot(at) => at.schema.clone().unwrap_or_else(|| Arc::new(Schema::empty())),
        }
    }

    /// Whether scans and lookups read through the tiers (false: the table
    /// has nested columns and is read by DataFusion's own listing scan).
    pub fn is_cached(&self) -> bool {
        self.cached
    }
}

/// Footers read at once while planning a scan of a table of many files.
const FOOTER_CONCURRENCY: usize = 8;

impl CachedParquetTable {
    /// The table's objects, as DataFusion's listing finds them (through the
    /// table's store, which records their versions), sorted by path.
    ///
    /// A query that carries a [`ValidationGate`] in its session config (the
    /// Flight service's queries) lists through the store gated for it: under
    /// `always` a warm listing is then the last validated one, confirmed
    /// through the gate before the query's results are released.
    pub async fn list_files(&self, state: &dyn Session) -> Result<Vec<ObjectMeta>> {
        let gate = state.config().get_extension::<ValidationGate>();
        self.list_files_gated(state, gate).await
    }

    /// [`Self::list_files`] with the validation gate given rather than read
    /// from `state`, so a caller with one shared state (the lookup path)
    /// need not copy the session to attach its gate.
    pub async fn list_files_gated(
        &self,
        state: &dyn Session,
        gate: Option<Arc<ValidationGate>>,
    ) -> Result<Vec<ObjectMeta>> {
        Ok(self.table_files_gated(state, gate).await?.files.clone())
    }

    /// What a query reads of the table: its files (as [`Self::list_files`])
    /// and, for a lakehouse table, the rows deleted from them, all of one
    /// snapshot.
    pub async fn table_files(&self, state: &dyn Session) -> Result<Arc<TableFiles>> {
        let gate = state.config().get_extension::<ValidationGate>();
        self.table_files_gated(state, gate).await
    }

    /// [`Self::table_files`] with the validation gate given.
    pub async fn table_files_gated(
        &self,
        state: &dyn Session,
        gate: Option<Arc<ValidationGate>>,
    ) -> Result<Arc<TableFiles>> {
        let listing = match &self.files {
            Files::Listing(listing) => listing,
            // The snapshot is the version: its metadata read validates.
            Files::Lakehouse { files, .. } => return files.resolve(gate.as_ref()).await,
            Files::Snapshot(at) => return Ok(at.clone()),
        };
        let gated = gate.map(|gate| self.sources.store.gated(gate));
        let store: &dyn ObjectStore = match &gated {
            Some(gated) => gated,
            None => self.sources.store.as_ref(),
        };
        let mut files = Vec::new();
        for url in listing.table_paths() {
            let listed: Vec<ObjectMeta> = url
                .list_all_files(state, store, ".parquet")
                .await?
                .try_collect()
                .await?;
            if listed.is_empty() && !url.is_collection() {
                // A one-object table whose object is gone: not found, not empty.
                let gone = CacheError::NotFound {
                    path: url.to_string(),
                    source: None,
                };
                return Err(DataFusionError::External(Box::new(gone)));
            }
            files.extend(listed);
        }
        files.sort_by(|a, b| a.location.cmp(&b.location));
        Ok(Arc::new(TableFiles {
            files,
            ..Default::default()
        }))
    }

    /// Whether `column` is one the table keeps outside its files (a Delta
    /// partition column: its value is in the log), as of the last snapshot
    /// resolved. Lookups by such a column are refused
    /// ([`crate::lookup::lookup`]): SQL of a lookup's shape on one takes the
    /// general path.
    pub fn keeps_outside_files(&self, column: &str) -> bool {
        let last = match &self.files {
            Files::Listing(_) => return false,
            Files::Lakehouse { files, .. } => files.last_resolved(),
            Files::Snapshot(at) => Some(at.clone()),
        };
        last.is_some_and(|f| f.partitions.columns().contains(column))
    }

    /// Whether the (namespaced) `path` is one of the table's objects by the
    /// rule of [`Self::list_files`] (DataFusion's: a `.parquet` object
    /// directly under the table's URL, or under `key=value` folders, unless
    /// `ignore_subdirectory` (the session's `listing_table_ignore_subdirectory`)
    /// is off), without listing.
    /// For a lakehouse table: whether the last snapshot resolved holds it.
    pub fn holds(&self, path: &object_store::path::Path, ignore_subdirectory: bool) -> bool {
        match &self.files {
            Files::Listing(listing) => {
                path.as_ref().ends_with(".parquet")
                    && listing
                        .table_paths()
                        .iter()
                        .any(|url| url.contains(path, ignore_subdirectory))
            }
            Files::Lakehouse { files, .. } => files
                .last_resolved()
                .is_some_and(|f| f.files.binary_search_by(|m| m.location.cmp(path)).is_ok()),
            Files::Snapshot(at) => at.files.binary_search_by(|m| m.location.cmp(path)).is_ok(),
        }
    }

    /// The table's layout for a client that caches row groups itself
    /// ([`crate::scope`]): per listed object version, row group and column
    /// of `columns`, the rows and the column chunk's uncompressed size.
    /// Lists like a scan (validated the same way). Row groups whose
    /// statistics rule out `filters` (the scan's) are left out, as a scan
    /// would skip them: the client never fetches or runs what cannot match.
    /// `honors_server_only`: the client scans row groups marked
    /// [`silt_proto::layout::SERVER_ONLY`] on the server (else a snapshot
    /// with such row groups has no layout: [`TableFiles::layout_refusal`]).
    pub async fn layout(
        &self,
        state: &dyn Session,
        columns: &[String],
        filters: &[Expr],
        honors_server_only: bool,
    ) -> Result<RecordBatch> {
        if !self.cached {
            return Err(DataFusionError::Plan(
                "the table has nested columns: it has no row-group layout for a client cache".into(),
            ));
        }
        let snapshot = self.table_files(state).await?;
        if let Some(reason) = snapshot.layout_refusal(honors_server_only) {
            return Err(DataFusionError::Plan(format!(
                "{reason}: its scans go to the server, so it has no row-group layout for a client cache"
            )));
        }
        let files = &snapshot.files;
        let reads = files.iter().cloned().map(|meta| {
            let (store, cache) = (self.sources.store.clone(), self.sources.metadata_cache.clone());
            async move {
                let (_, metadata) = pinned_footer(&store, &cache, &meta).await?;
                Ok::<_, DataFusionError>((meta, metadata))
            }
        });
        let footers: Vec<_> = futures::stream::iter(reads)
            .buffered(FOOTER_CONCURRENCY)
            .try_collect()
            .await?;
        let schema = self.schema();
        let filter = ScanFilter::try_new(state, &schema, filters)?;
        let scratch = ParquetFileMetrics::new(0, "", &ExecutionPlanMetricsSet::new());
        let mut layout = LayoutBuilder::default();
        for (meta, metadata) in &footers {
            let groups = match &filter {
                Some(filter) => filter.row_groups(&schema, metadata, &scratch),
                None => (0..metadata.num_row_groups()).collect(),
            };
            // A file whose columns a client would not find by their names
            // (renamed, or a name reused) is read on the server only.
            let misnamed = snapshot.columns_changed && !found_by_name(&schema, metadata, columns);
            layout.add(meta, metadata, columns, &groups, |rg| {
                misnamed || snapshot.server_only(&meta.location, metadata, rg)
            });
        }
        layout.finish()
    }

    /// Each listed file pinned to its listed version, with that version's
    /// footer (the scan then finds the same footers in the metadata tier).
    async fn pinned_footers(&self, files: &[ObjectMeta]) -> Result<Vec<PinnedFile>> {
        let reads = files.iter().cloned().map(|meta| {
            let (store, cache) = (self.sources.store.clone(), self.sources.metadata_cache.clone());
            async move {
                let (object, metadata) = pinned_footer(&store, &cache, &meta).await?;
                Ok::<_, DataFusionError>(PinnedFile { meta, object, metadata })
            }
        });
        futures::stream::iter(reads)
            .buffered(FOOTER_CONCURRENCY)
            .try_collect()
            .await
    }

    /// The table's statistics, from the footers of exactly the listed versions.
    fn statistics(files: &[PinnedFile], schema: &SchemaRef) -> Result<Statistics> {
        let per_file = files
            .iter()
            .map(|f| {
                DFParquetMetadata::statistics_from_parquet_metadata(&f.metadata, &named_as_in_file(schema, &f.metadata))
            })
            .collect::<Result<Vec<_>>>()?;
        Statistics::try_merge_iter(&per_file, schema)
    }
}

#[async_trait]
impl TableProvider for CachedParquetTable {
    fn schema(&self) -> SchemaRef {
        self.schema_ref()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    /// Filters are applied in the scan but reported inexact, so DataFusion
    /// re-checks surviving rows: a filter the scan cannot fully decide (say,
    /// on a column a file lacks) never changes an answer.
    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| {
                if self.cached && !f.is_volatile() {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if let (false, Files::Listing(listing)) = (self.cached, &self.files) {
            return listing.scan(state, projection, filters, limit).await;
        }
        let table_schema = self.schema_ref();
        let projection: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..table_schema.fields().len()).collect(),
        };
        let snapshot = self.table_files(state).await?;
        // A lakehouse table's files are read in the schema the query was
        // planned with (`table_schema`), by column name: should a schema
        // change have been committed since, its new columns are not read
        // and a column it dropped reads as nulls, so the rows are still all
        // of one snapshot. What is cached of them is kept per schema.
        let mut files = match &self.files {
            Files::Lakehouse { files: lakehouse, .. } => lakehouse.read_in(&snapshot.files, &table_schema),
            _ => snapshot.files.clone(),
        };
        let deletes = snapshot.deletes.clone();
        let equality = snapshot.equality.clone();
        let partitions = snapshot.partitions.clone();
        let mut row_groups = None;
        if let Some(scope) = state.config().get_extension::<ScanScope>() {
            let (kept, groups) = scope.restrict(files)?;
            files = kept;
            row_groups = Some(groups);
        }
        // Filters are Inexact: one the scan cannot compile is left to the
        // FilterExec DataFusion keeps above the scan.
        let filter = ScanFilter::try_new(state, &table_schema, filters).unwrap_or_else(|e| {
            tracing::debug!("scan filter not compiled, evaluated above the scan: {e}");
            None
        });
        if let Some(filter) = &filter
            && !(partitions.is_empty() && snapshot.bounds.is_empty())
        {
            // Partition pruning and the log's statistics: files whose
            // partition values or bounds rule the filter out are not opened
            // (their footers are not read).
            let read = filter.columns();
            files.retain(|f| {
                let constants = partitions.constants(&f.location, &table_schema).unwrap_or_default();
                let wanted = |c: usize| read.binary_search(&c).is_ok();
                let known = snapshot
                    .bounds
                    .statistics_of(&f.location, &table_schema, &constants, wanted);
                filter.may_match_file(&table_schema, &known)
            });
        }
        if files.is_empty() {
            return Ok(Arc::new(EmptyExec::new(Arc::new(table_schema.project(&projection)?))));
        }
        let pinned = self.pinned_footers(&files).await?;
        let mut statistics = Self::statistics(&pinned, &table_schema)?.project(Some(&projection));
        if filter.is_some() || !deletes.is_empty() || !snapshot.equality.is_empty() {
            statistics = statistics.to_inexact();
        }
        if !partitions.is_empty() {
            // The footers know nothing of a column kept outside the files.
            statistics = statistics.to_inexact();
            let outside = partitions.columns();
            for (slot, &c) in projection.iter().enumerate() {
                if outside.contains(table_schema.field(c).name().as_str()) {
                    statistics.column_statistics[slot] = ColumnStatistics::new_unknown();
                }
            }
        }
        // Registered now, at planning: a query waiting for a slot already
        // protects what it will read.
        let needed = needed_columns(&projection, filter.as_ref());
        let chunks = scan_set_chunks(&pinned, &table_schema, &needed, filter.as_ref(), row_groups.as_ref());
        let tiers = self.sources.store.tiers();
        let scan_set = tiers.scan_sets().register(chunks, tiers.page_size());
        let spec = ScanSpec {
            files,
            table_schema,
            projection,
            filter,
            limit,
            statistics,
            row_groups,
            scan_set: Some(scan_set),
            deletes,
            equality,
            partitions,
        };
        let partitions = state.config().target_partitions();
        Ok(Arc::new(CachedScanExec::new(spec, self.sources.clone(), partitions)?))
    }
}
