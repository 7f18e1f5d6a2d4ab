//! The query engine inside the server: registered tables and views, the
//! safe SQL surface, pushdown scans, and per-query resource limits.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::RwLock;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::TableReference;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::cache::cache_manager::CacheManagerConfig;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::{GreedyMemoryPool, TrackConsumersPool};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{DataFrame, SessionConfig, SessionContext};
use datafusion_proto::bytes::Serializeable;
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use silt_cache::transcoder::LiquidTranscoder;
use silt_cache::{
    CacheTiers, CachedStore, ColumnCache, DiskConfig, DiskMetrics, DiskTier, MemoryForm, PageCache, PageCacheConfig,
    PageStore, PageTier, ScanSets, ValidationGate,
};
use silt_proto::{QueryContext, ROW_MARKER_COLUMN, ScanRequest, SegmentScope};
use silt_scan::column_loader::Admission;
use silt_scan::lookup::LookupIndexes;
use silt_scan::scope::ScanScope;
use silt_scan::{MetadataTier, PushdownScan, plan_pushdown};
use tracing::warn;

use crate::config::ServerConfig;
use crate::error::ServerError;
use crate::guard;
use crate::metrics::ServerMetrics;
use crate::query_clock::QueryClock;
use crate::query_slots::QuerySlots;
pub use crate::registry::{CatalogEntry, EntryKind};

/// Catalog name under which tables are visible (`silt.public.<table>`).
pub const CATALOG: &str = "silt";
/// Schema name under which tables are visible.
pub const SCHEMA: &str = "public";

/// Bytes of lookup indexes (page min/max of key columns) kept.
const LOOKUP_INDEX_BUDGET: u64 = 64 << 20;

/// Bytes of decoded key columns kept for lookups that read pages (8 MiB
/// per million 8-byte keys): a lookup from the disk tier then reads no key
/// page.
const LOOKUP_KEYS_BUDGET: u64 = 128 << 20;

/// A planned query, ready to execute in its own context.
pub struct PlannedQuery {
    pub ctx: SessionContext,
    pub df: DataFrame,
    /// The objects the query reads (table URLs), for error messages.
    pub sources: String,
    /// The physical plan to run instead of `df`'s, when a pushed partial
    /// aggregate sits on the scan ([`crate::partial_aggregate`]).
    pub physical: Option<Arc<dyn ExecutionPlan>>,
}

impl PlannedQuery {
    pub fn schema(&self) -> SchemaRef {
        match &self.physical {
            Some(plan) => plan.schema(),
            None => Arc::new(self.df.schema().as_arrow().clone()),
        }
    }

    /// This query with every scan admitting decoded column chunks to the
    /// memory tier as `admission` says (the default is
    /// [`Admission::SecondTouch`]).
    pub fn with_admission(mut self, admission: Admission) -> Self {
        let admission = Arc::new(admission);
        let (mut state, plan) = self.df.into_parts();
        state.config_mut().set_extension(admission.clone());
        self.df = DataFrame::new(state, plan);
        self.ctx.state_ref().write().config_mut().set_extension(admission);
        self
    }

    /// Execute all partitions in parallel, merged into one stream.
    pub async fn execute(self) -> Result<SendableRecordBatchStream, ServerError> {
        let sources = self.sources;
        let stream = match self.physical {
            Some(plan) => datafusion::physical_plan::execute_stream(plan, self.ctx.task_ctx()),
            None => self.df.execute_stream().await,
        };
        stream.map_err(|e| ServerError::reading(&sources, e))
    }
}

/// The store and path of a table whose URL names one object.
type SingleObject = (Arc<dyn ObjectStore>, ObjectPath);

/// Owns the DataFusion context shared by all queries. Fields are
/// `pub(crate)` for its other half: table registration and resolution
/// ([`crate::registry`]).
pub struct Engine {
    pub(crate) base: SessionContext,
    pub(crate) config: ServerConfig,
    pub(crate) metrics: Arc<ServerMetrics>,
    pub(crate) memory_store: Arc<InMemory>,
    pub(crate) tiers: Arc<CacheTiers>,
    disk: Option<Arc<DiskTier>>,
    metadata: Arc<MetadataTier>,
    /// Each registered table's cached store (for preload and per-table stats).
    pub(crate) stores: RwLock<BTreeMap<String, Arc<CachedStore>>>,
    pub(crate) catalog: RwLock<BTreeMap<String, CatalogEntry>>,
    /// Tables whose URL names one object: checked with a HEAD before each
    /// query so a deleted object is an error, not an empty table.
    pub(crate) single_files: RwLock<BTreeMap<String, SingleObject>>,
    /// Held by a registration pass (one at a time).
    pub(crate) registering: tokio::sync::Mutex<()>,
    /// Per object version and key column: what point lookups need.
    lookup_indexes: LookupIndexes,
    /// A copy of the base session's state made once, for listings outside
    /// a query (lookups): copying it per call cost more than the lookup.
    listing_state: SessionState,
    /// Admission: queries executing at once ([`crate::query_slots`]).
    query_slots: QuerySlots,
    /// When each client query was first seen ([`crate::query_clock`]).
    query_clock: QueryClock,
    /// The last hour of counter samples, for the dashboard.
    history: crate::history::History,
    /// The exclusive lock on `cache_dir`, held while the engine lives.
    _cache_dir_lock: std::fs::File,
}

impl Engine {
    /// Build the engine and register every table and view. Tables that cannot
    /// be reached are kept as *unavailable* (queries naming them get the
    /// cause) and retried; the server starts regardless.
    pub async fn new(config: ServerConfig, metrics: Arc<ServerMetrics>) -> Result<Arc<Self>, ServerError> {
        // Own the cache dir before touching anything in it: a second server on
        // the same dir (whatever its page size) fails here, leaving the first
        // one's pages alone.
        std::fs::create_dir_all(&config.cache_dir).map_err(|source| ServerError::Io {
            path: config.cache_dir.display().to_string(),
            source,
        })?;
        let cache_dir_lock = silt_cache::disk::lock_dir(&config.cache_dir).map_err(|source| ServerError::Io {
            path: config.cache_dir.display().to_string(),
            source,
        })?;
        let spill_dir = config.cache_dir.join("spill");
        std::fs::create_dir_all(&spill_dir).map_err(|source| ServerError::Io {
            path: spill_dir.display().to_string(),
            source,
        })?;
        let page_cache = PageCache::new(
            PageCacheConfig {
                page_size: config.page_size,
                capacity_bytes: config.page_memory_budget,
            },
            metrics.pages.clone(),
        );
        // What planned queries will read: consulted by both tiers' eviction.
        let scan_sets = ScanSets::with_horizon(config.plan_horizon);
        let disk = open_disk_tier(&config, &metrics, &scan_sets)?;
        let mut pages = PageStore::builder(page_cache).merge_gap(config.page_size);
        if let Some(disk) = &disk {
            pages = pages.disk(disk.clone() as Arc<dyn PageTier>);
        }
        let mut columns = ColumnCache::builder(config.memory_budget, metrics.memory.clone())
            .eviction(config.memory_policy)
            .scan_sets(scan_sets)
            .plan_aware(config.plan_aware);
        if config.memory_form == MemoryForm::Liquid {
            let inline_after = usize::try_from(config.transcode_inline_after).unwrap_or(usize::MAX);
            columns = columns.transcode(LiquidTranscoder::start_with_inline_after(inline_after));
        }
        let tiers = CacheTiers::new(pages.build(), columns.build());
        let metadata = Arc::new(MetadataTier::new(
            usize::try_from(config.metadata_budget).unwrap_or(usize::MAX),
            tiers.versions().clone(),
            metrics.metadata.clone(),
        ));
        tiers.add_versioned_tier(metadata.clone());
        let runtime = RuntimeEnvBuilder::new()
            .with_cache_manager(CacheManagerConfig::default().with_file_metadata_cache(Some(metadata.clone())))
            .with_metadata_cache_limit(usize::try_from(config.metadata_budget).unwrap_or(usize::MAX))
            .with_disk_manager_builder(
                DiskManagerBuilder::default().with_mode(DiskManagerMode::Directories(vec![spill_dir])),
            )
            // List a table's files on every query so new and overwritten
            // objects are seen (validation `always`).
            .with_object_list_cache_limit(0)
            .build_arc()?;
        let mut session_config = SessionConfig::new()
            .with_default_catalog_and_schema(CATALOG, SCHEMA)
            .with_create_default_catalog_and_schema(true)
            .with_information_schema(false);
        session_config.options_mut().execution.collect_statistics = true;
        let state = SessionStateBuilder::new()
            .with_config(session_config)
            .with_runtime_env(runtime)
            .with_default_features()
            .build();
        let mut catalog = BTreeMap::new();
        for (index, (name, table)) in config.tables.iter().enumerate() {
            catalog.insert(
                name.clone(),
                CatalogEntry {
                    kind: EntryKind::Table {
                        index,
                        config: table.clone(),
                    },
                    unavailable: Some("not registered yet".into()),
                    tables: vec![name.clone()],
                },
            );
        }
        for (name, sql) in &config.views {
            catalog.insert(
                name.clone(),
                CatalogEntry {
                    kind: EntryKind::View { sql: sql.clone() },
                    unavailable: Some("not registered yet".into()),
                    tables: Vec::new(),
                },
            );
        }
        let query_slots = QuerySlots::new(config.max_concurrent_queries, metrics.queued_queries.clone());
        let listing_state = state.clone();
        let engine = Arc::new(Engine {
            base: SessionContext::new_with_state(state),
            config,
            metrics,
            memory_store: Arc::new(InMemory::new()),
            tiers,
            disk,
            metadata,
            stores: RwLock::new(BTreeMap::new()),
            catalog: RwLock::new(catalog),
            single_files: RwLock::new(BTreeMap::new()),
            registering: tokio::sync::Mutex::new(()),
            lookup_indexes: LookupIndexes::new(LOOKUP_INDEX_BUDGET, LOOKUP_KEYS_BUDGET),
            listing_state,
            query_slots,
            query_clock: QueryClock::default(),
            history: Default::default(),
            _cache_dir_lock: cache_dir_lock,
        });
        crate::system_tables::register(&engine)?;
        crate::memory_pressure::spawn(Arc::downgrade(&engine), engine.config.memory_pressure_floor);
        engine.start_registration(engine.config.registration_wait).await;
        Ok(engine)
    }

    /// The shared in-memory object store behind `memory://` tables.
    pub fn memory_store(&self) -> Arc<InMemory> {
        self.memory_store.clone()
    }

    pub fn metrics(&self) -> &Arc<ServerMetrics> {
        &self.metrics
    }

    /// Runs `f` on a blocking thread. For introspection that renders every
    /// metric or walks the tiers (`/stats`, `/metrics`, `silt_system`, the
    /// history sampler): no work for an async worker, which would stall
    /// queries.
    pub async fn off_worker<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Engine) -> T + Send + 'static,
    ) -> Result<T, tokio::task::JoinError> {
        let engine = self.clone();
        tokio::task::spawn_blocking(move || f(&engine)).await
    }

    /// The last hour of counter samples ([`crate::history`]).
    pub fn history(&self) -> &crate::history::History {
        &self.history
    }

    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The context every query's context is made from (tables, caches).
    pub fn base_context(&self) -> &SessionContext {
        &self.base
    }

    /// The base session's state as it was at start (its catalog, runtime
    /// and object stores are shared, so it sees tables registered since):
    /// what a listing outside a query runs on.
    pub fn listing_state(&self) -> &SessionState {
        &self.listing_state
    }

    /// The lookup indexes shared by every lookup.
    pub fn lookup_indexes(&self) -> &LookupIndexes {
        &self.lookup_indexes
    }

    /// Admission of queries to execution.
    pub fn query_slots(&self) -> &QuerySlots {
        &self.query_slots
    }

    /// The cache tiers shared by every table.
    pub fn tiers(&self) -> &Arc<CacheTiers> {
        &self.tiers
    }

    /// The disk tier, unless disabled (`disk_budget = 0`).
    pub fn disk_tier(&self) -> Option<&Arc<DiskTier>> {
        self.disk.as_ref()
    }

    /// The metadata tier.
    pub fn metadata_tier(&self) -> &Arc<MetadataTier> {
        &self.metadata
    }

    /// A context for one query: shares tables and caches with every other
    /// query, but has its own memory pool so a query over the limit fails alone.
    /// A `gate` travels in the session config (see [`ValidationGate`]) so the
    /// query's listings may run ahead of their validation.
    fn query_context(&self, gate: Option<&Arc<ValidationGate>>) -> Result<SessionContext, ServerError> {
        let limit = usize::try_from(self.config.query_memory_limit).unwrap_or(usize::MAX);
        let pool = TrackConsumersPool::new(GreedyMemoryPool::new(limit), NonZeroUsize::new(3).expect("3 > 0"));
        let runtime = RuntimeEnvBuilder::from_runtime_env(self.base.runtime_env().as_ref())
            .with_memory_pool(Arc::new(pool))
            .build_arc()?;
        let mut state = SessionStateBuilder::new_from_existing(self.base.state())
            .with_runtime_env(runtime)
            .build();
        if let Some(gate) = gate {
            state.config_mut().set_extension(gate.clone());
        }
        Ok(SessionContext::new_with_state(state))
    }

    /// Check the names a query reads and return the objects behind them
    /// (for error messages). Single-object tables get a HEAD so a deleted
    /// object is reported instead of read as an empty table (speculative
    /// under `gate`, like the query's listings).
    async fn check_names(
        &self,
        refs: &[TableReference],
        gate: Option<&Arc<ValidationGate>>,
    ) -> Result<String, ServerError> {
        let catalog = self.catalog();
        let all: BTreeSet<String> = catalog.keys().cloned().collect();
        guard::check_references(refs, &all)?;
        let mut tables = BTreeSet::new();
        for r in refs.iter().filter(|r| !guard::names_system_table(r)) {
            let entry = catalog.get(r.table());
            if let Some(cause) = entry.and_then(|e| e.unavailable.clone()) {
                return Err(ServerError::Unavailable {
                    name: r.table().to_string(),
                    cause,
                });
            }
            tables.extend(entry.map(|e| e.tables.clone()).unwrap_or_default());
        }
        let mut urls = Vec::new();
        for t in &tables {
            let Some(CatalogEntry {
                kind: EntryKind::Table { config, .. },
                ..
            }) = catalog.get(t)
            else {
                continue;
            };
            urls.push(format!("{t}={}", config.url));
            let single = self.single_files.read().get(t).cloned();
            if let Some((mut store, path)) = single {
                if let Some(gate) = gate
                    && let Some(cached) = self.stores.read().get(t)
                {
                    store = Arc::new(cached.gated(gate.clone()));
                }
                match store.head(&path).await {
                    Ok(_) => {}
                    Err(object_store::Error::NotFound { .. }) => {
                        return Err(ServerError::ObjectNotFound {
                            table: t.clone(),
                            url: config.url.clone(),
                        });
                    }
                    Err(e) => return Err(ServerError::reading(&urls.join(", "), e.into())),
                }
            }
        }
        Ok(urls.join(", "))
    }

    /// Plan one SQL statement from a Flight SQL client, refusing anything but
    /// a read-only query over registered tables.
    pub async fn plan_sql(&self, sql: &str) -> Result<PlannedQuery, ServerError> {
        self.plan_sql_gated(sql, None).await
    }

    /// [`Engine::plan_sql`] for a query whose results are held until `gate`
    /// confirms the versions it read speculatively.
    pub async fn plan_sql_gated(
        &self,
        sql: &str,
        gate: Option<&Arc<ValidationGate>>,
    ) -> Result<PlannedQuery, ServerError> {
        let statement = guard::parse_single_query(sql)?;
        let ctx = self.query_context(gate)?;
        let state = ctx.state();
        let refs = state.resolve_table_references(&statement)?;
        let sources = self.check_names(&refs, gate).await?;
        let plan: LogicalPlan = state
            .statement_to_plan(statement)
            .await
            .map_err(|e| ServerError::reading(&sources, e))?;
        guard::check_plan(&plan, &self.available())?;
        let df = ctx
            .execute_logical_plan(plan)
            .await
            .map_err(|e| ServerError::reading(&sources, e))?;
        Ok(PlannedQuery {
            ctx,
            df,
            sources,
            physical: None,
        })
    }

    /// `sql`, a scan's SQL-text filter, as an expression over `table`'s
    /// columns. A subquery, an aggregate or a window is refused: a filter
    /// reads one row of the table.
    async fn parse_scan_filter(&self, ctx: &SessionContext, table: &str, sql: &str) -> Result<Expr, ServerError> {
        let invalid = |e: &dyn std::fmt::Display| {
            ServerError::InvalidRequest(format!("the SQL filter {sql:?} of scan on '{table}': {e}"))
        };
        let df = ctx.table(TableReference::bare(table)).await.map_err(|e| invalid(&e))?;
        let expr = df.parse_sql_expr(sql).map_err(|e| invalid(&e))?;
        let mut nested = false;
        expr.apply(|e| {
            nested |= matches!(
                e,
                Expr::ScalarSubquery(_)
                    | Expr::Exists(_)
                    | Expr::InSubquery(_)
                    | Expr::AggregateFunction(_)
                    | Expr::WindowFunction(_)
            );
            Ok(TreeNodeRecursion::Continue)
        })
        .map_err(|e| invalid(&e))?;
        if nested {
            return Err(invalid(
                &"only a row-level expression is allowed (no subquery, aggregate or window)",
            ));
        }
        Ok(expr)
    }

    /// Plan a pushdown scan from Silt's client.
    pub async fn plan_scan(&self, request: &ScanRequest) -> Result<PlannedQuery, ServerError> {
        self.plan_scan_gated(request, None).await
    }

    /// [`Engine::plan_scan`] for a query whose results are held until `gate`
    /// confirms the versions it read speculatively.
    pub async fn plan_scan_gated(
        &self,
        request: &ScanRequest,
        gate: Option<&Arc<ValidationGate>>,
    ) -> Result<PlannedQuery, ServerError> {
        let sources = self
            .check_names(&[TableReference::bare(request.table.as_str())], gate)
            .await?;
        let ctx = self.query_context(gate)?;
        let task = ctx.task_ctx();
        let filters = request
            .filters
            .iter()
            .enumerate()
            .map(|(i, bytes)| {
                Expr::from_bytes_with_ctx(bytes, &task).map_err(|e| {
                    ServerError::InvalidRequest(format!("filter #{i} of scan on '{}': {e}", request.table))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let filters = match request.filter_sql.as_deref().filter(|f| !f.trim().is_empty()) {
            None => filters,
            Some(sql) => {
                let mut filters = filters;
                filters.push(self.parse_scan_filter(&ctx, &request.table, sql).await?);
                filters
            }
        };
        let limit = request
            .limit
            .map(|l| usize::try_from(l).map_err(|_| ServerError::InvalidRequest(format!("limit {l} is too large"))))
            .transpose()?;
        if let Some(scope) = &request.scope {
            let scope = scan_scope(scope)?;
            ctx.state_ref().write().config_mut().set_extension(Arc::new(scope));
        }
        if request.layout_only {
            let df = self.layout(request, &ctx).await?;
            return Ok(PlannedQuery {
                ctx,
                df,
                sources,
                physical: None,
            });
        }
        let scan = PushdownScan {
            table: request.table.clone(),
            projection: request.projection.as_ref().map(|p| p.columns.clone()),
            filters,
            limit,
        };
        let df = plan_pushdown(&ctx, scan, ROW_MARKER_COLUMN)
            .await
            .map_err(|e| ServerError::reading(&sources, e))?;
        guard::check_plan(df.logical_plan(), &self.available())?;
        let physical = match &request.partial_aggregate {
            None => None,
            Some(fragment) => {
                let scan = df
                    .clone()
                    .create_physical_plan()
                    .await
                    .map_err(|e| ServerError::reading(&sources, e))?;
                let plan = crate::partial_aggregate::attach(fragment, scan, &task, &request.table)?;
                self.metrics().partial_aggregates.increment(1);
                Some(plan)
            }
        };
        Ok(PlannedQuery {
            ctx,
            df,
            sources,
            physical,
        })
    }

    /// The layout a client cache plans a scan from ([`silt_scan::scope`]):
    /// the table's object versions as `ctx` lists them (gated like a scan),
    /// their row groups, and the sizes of the projected columns.
    async fn layout(&self, request: &ScanRequest, ctx: &SessionContext) -> Result<DataFrame, ServerError> {
        let table = self.resolve_table(&request.table, "layouts are only of").await?;
        let columns: Vec<String> = match &request.projection {
            Some(p) => p.columns.clone(),
            None => table
                .parquet()?
                .schema_ref()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect(),
        };
        let sources = format!("{}={}", table.name, table.config.url);
        let batch = table
            .parquet()?
            .layout(&ctx.state(), &columns)
            .await
            .map_err(|e| ServerError::reading(&sources, e))?;
        Ok(ctx.read_batch(batch)?)
    }

    /// When the client query `query` started: its first scan's arrival
    /// ([`crate::query_clock`]). On that first sighting, every table it
    /// names (a view: the tables under it) is validated in the background
    /// from that instant, so its later scans find their validations done.
    pub fn query_started(self: &Arc<Self>, query: &QueryContext) -> Instant {
        let (at, first) = self.query_clock.started(&query.id);
        if first {
            let catalog = self.catalog();
            let tables: BTreeSet<String> = query
                .tables
                .iter()
                .take(MAX_PREVALIDATED_NAMES)
                .filter_map(|n| catalog.get(n))
                .flat_map(|e| e.tables.iter().cloned())
                .collect();
            let engine = self.clone();
            tokio::spawn(async move { engine.prevalidate(tables, at).await });
        }
        at
    }

    /// Lists `tables` as a query that started at `since` would (so under
    /// `always` the LISTs and HEADs sent now confirm that query), dropping
    /// the answers: a scan that needs them joins them.
    async fn prevalidate(&self, tables: BTreeSet<String>, since: Instant) {
        let gate = ValidationGate::starting_at(since);
        let Ok(ctx) = self.query_context(Some(&gate)) else {
            return;
        };
        let state = ctx.state();
        let lists = tables.iter().map(|t| {
            let state = &state;
            async move {
                if let Ok(table) = self.resolve_table(t, "validations are of").await
                    && let Ok(parquet) = table.parquet()
                    && let Err(e) = parquet.list_files(state).await
                {
                    tracing::debug!(table = %t, error = %e, "validating at a query's start failed; its scan will say why");
                }
            }
        });
        futures::future::join_all(lists).await;
    }

    /// Arrow schema of a registered table or view.
    pub async fn table_schema(&self, name: &str) -> Option<SchemaRef> {
        self.base
            .table_provider(TableReference::bare(name))
            .await
            .ok()
            .map(|t| t.schema())
    }

    /// Row count of a table or view, from Parquet statistics (exact when the
    /// files' footers say so).
    pub async fn row_count(&self, planned: &PlannedQuery) -> Option<usize> {
        let plan = planned.df.clone().create_physical_plan().await.ok()?;
        row_count_of(plan.as_ref())
    }
}

/// Opens the disk tier under `cache_dir/disk/p<page size>`: pages of another
/// page size (from an earlier configuration) are keyed differently and are
/// deleted rather than left to fill the disk outside the budget.
/// The scan scope a request carries, with its row bitmaps. A request whose
/// bitmaps do not pair up with its row groups is refused.
fn scan_scope(scope: &SegmentScope) -> Result<ScanScope, ServerError> {
    let mut scan_scope = ScanScope::new(scope.objects.iter().map(|o| {
        let groups = o.row_groups.iter().map(|&g| g as usize).collect();
        (o.path.clone(), o.version.clone(), groups)
    }));
    for o in &scope.objects {
        if o.selections.is_empty() {
            continue;
        }
        if o.selections.len() != o.row_groups.len() {
            return Err(ServerError::InvalidRequest(format!(
                "scope of '{}' has {} row groups but {} row selections",
                o.path,
                o.row_groups.len(),
                o.selections.len()
            )));
        }
        for (&group, bitmap) in o.row_groups.iter().zip(&o.selections) {
            if !bitmap.is_empty() {
                scan_scope.select(&o.path, group as usize, bitmap.clone());
            }
        }
    }
    Ok(scan_scope)
}

fn open_disk_tier(
    config: &ServerConfig,
    metrics: &ServerMetrics,
    scan_sets: &Arc<ScanSets>,
) -> Result<Option<Arc<DiskTier>>, ServerError> {
    if config.disk_budget == 0 {
        return Ok(None);
    }
    let root = config.cache_dir.join("disk");
    let name = format!("p{}", config.page_size);
    let io_err = |path: &std::path::Path, source| ServerError::Io {
        path: path.display().to_string(),
        source,
    };
    std::fs::create_dir_all(&root).map_err(|e| io_err(&root, e))?;
    for entry in std::fs::read_dir(&root).map_err(|e| io_err(&root, e))?.flatten() {
        let stale = entry.file_name().to_string_lossy().starts_with('p') && entry.file_name() != name.as_str();
        if stale {
            warn!(dir = %entry.path().display(), "removing disk-tier pages of another page size");
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let dir = root.join(name);
    let disk = DiskTier::open(
        DiskConfig {
            dir: dir.clone(),
            budget_bytes: config.disk_budget,
            page_bytes: config.page_size,
            direct_io: config.direct_io,
            policy: config.disk_policy,
            reservations: config
                .plan_aware
                .then(|| scan_sets.clone() as Arc<dyn silt_cache::policy::Reservations<silt_cache::PageKey>>),
        },
        DiskMetrics::register(metrics.recorder()),
    )
    .map_err(|e| io_err(&dir, e))?;
    Ok(Some(disk))
}

fn row_count_of(plan: &dyn datafusion::physical_plan::ExecutionPlan) -> Option<usize> {
    use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
    let stats = StatisticsContext::new().compute(plan, &StatisticsArgs::new()).ok()?;
    {
        match stats.num_rows {
            Precision::Exact(n) | Precision::Inexact(n) => Some(n),
            Precision::Absent => None,
        }
    }
}

/// Table names of one query validated at its start, at most (a bound
/// against a hostile list; real queries name a few).
const MAX_PREVALIDATED_NAMES: usize = 64;
