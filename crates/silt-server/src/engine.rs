//! The engine inside the server: the DataFusion context every query's
//! context is made from (tables, views, caches, the runtime), the catalog,
//! and the shared resources queries draw on (cache tiers, execution slots,
//! lookup indexes). A query's life — admission, deadline, validation,
//! restarts, trace — is [`crate::query`]'s; registration is
//! [`crate::registry`]'s; the observers (system tables, memory pressure,
//! history) are started beside the engine by [`crate::start`].

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider, MemorySchemaProvider};
use datafusion::execution::cache::cache_manager::CacheManagerConfig;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::prelude::{SessionConfig, SessionContext};
use object_store::memory::InMemory;
use silt_cache::{CacheTiers, DiskTier};
use silt_scan::MetadataTier;
use silt_scan::lakehouse::TimeTravelSchema;
use silt_scan::lookup::LookupIndexes;

pub use crate::catalog::{CATALOG, Catalog, CatalogEntry, EntryKind, SCHEMA};
use crate::config::ServerConfig;
use crate::error::{ServerError, UnavailableCause};
use crate::history::History;
use crate::metrics::ServerMetrics;
use crate::query::slots::QuerySlots;
use crate::server_tiers::ServerTiers;

/// Bytes of lookup indexes (page min/max of key columns) kept.
const LOOKUP_INDEX_BUDGET: u64 = 64 << 20;

/// Bytes of decoded key columns kept for lookups that read pages (8 MiB
/// per million 8-byte keys): a lookup from the disk tier then reads no key
/// page.
const LOOKUP_KEYS_BUDGET: u64 = 128 << 20;

/// Owns the DataFusion context shared by all queries. Fields are
/// `pub(crate)` for its other halves: table registration and resolution
/// ([`crate::registry`]) and planning ([`crate::query::plan`]).
pub struct Engine {
    pub(crate) base: SessionContext,
    pub(crate) config: ServerConfig,
    pub(crate) metrics: Arc<ServerMetrics>,
    pub(crate) memory_store: Arc<InMemory>,
    pub(crate) tiers: Arc<CacheTiers>,
    disk: Option<Arc<DiskTier>>,
    metadata: Arc<MetadataTier>,
    /// The tables and views served, with their stores.
    pub(crate) catalog: Arc<Catalog>,
    /// Held by a registration pass (one at a time).
    pub(crate) registering: tokio::sync::Mutex<()>,
    /// Per object version and key column: what point lookups need.
    lookup_indexes: LookupIndexes,
    /// A copy of the base session's state made once, for listings outside
    /// a query (lookups): copying it per call cost more than the lookup.
    listing_state: SessionState,
    /// Admission: queries executing at once ([`crate::query::slots`]).
    query_slots: QuerySlots,
    /// Whether the server is draining, and its running requests.
    drain: Arc<crate::drain::Drain>,
    /// `[cluster] servers` as they change (`None` without a cluster).
    cluster: Option<Arc<crate::cluster::Cluster>>,
    /// The last hour of counter samples, for the dashboard (filled by the
    /// sampler [`crate::start`] runs).
    history: History,
    /// The exclusive lock on `cache_dir`, held while the engine lives.
    _cache_dir_lock: std::fs::File,
}

impl Engine {
    /// Builds the engine over `tiers`, with every configured table and view
    /// in the catalog as *not registered yet*: registration
    /// ([`Engine::start_registration`]) is the caller's next step, and tables
    /// that cannot be reached stay unavailable (queries naming them get the
    /// cause) and are retried.
    pub fn new(
        config: ServerConfig,
        metrics: Arc<ServerMetrics>,
        tiers: ServerTiers,
    ) -> Result<Arc<Self>, ServerError> {
        let ServerTiers {
            tiers,
            disk,
            metadata,
            cache_dir_lock,
        } = tiers;
        let spill_dir = config.cache_dir.join("spill");
        crate::server_tiers::create_dir(&spill_dir)?;
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
        let catalog_tables = config.catalog_tables()?;
        for (index, (name, table)) in config.tables.iter().chain(&catalog_tables).enumerate() {
            catalog.insert(
                name.clone(),
                CatalogEntry {
                    kind: EntryKind::Table {
                        index,
                        config: table.clone(),
                    },
                    unavailable: Some(UnavailableCause::NotRegisteredYet),
                    tables: vec![name.clone()],
                },
            );
        }
        for (name, sql) in &config.views {
            catalog.insert(
                name.clone(),
                CatalogEntry {
                    kind: EntryKind::View { sql: sql.clone() },
                    unavailable: Some(UnavailableCause::NotRegisteredYet),
                    tables: Vec::new(),
                },
            );
        }
        let query_slots = QuerySlots::new(config.max_concurrent_queries, metrics.queued_queries.clone());
        let listing_state = state.clone();
        let cluster = crate::cluster::Cluster::start(&config.cluster, config.listen)?;
        let base = SessionContext::new_with_state(state);
        // Tables are registered in a schema that also answers `TABLE@SNAPSHOT`
        // names of lakehouse tables (time travel).
        if let Some(catalog) = base.catalog(CATALOG) {
            let tables = Arc::new(MemorySchemaProvider::new());
            catalog.register_schema(SCHEMA, Arc::new(TimeTravelSchema::new(tables)))?;
        }
        // A REST catalog's tables are `catalog.namespace.table`: a catalog
        // of that name, a schema per namespace (time travel too).
        for table in catalog_tables.values().filter_map(|t| t.catalog.as_ref()) {
            let rest = match base.catalog(&table.catalog) {
                Some(rest) => rest,
                None => {
                    let rest: Arc<dyn CatalogProvider> = Arc::new(MemoryCatalogProvider::new());
                    base.register_catalog(&table.catalog, rest.clone());
                    rest
                }
            };
            if rest.schema(&table.namespace).is_none() {
                let tables = Arc::new(MemorySchemaProvider::new());
                rest.register_schema(&table.namespace, Arc::new(TimeTravelSchema::new(tables)))?;
            }
        }
        let engine = Arc::new(Engine {
            base,
            config,
            metrics,
            memory_store: Arc::new(InMemory::new()),
            tiers,
            disk,
            metadata,
            catalog: Arc::new(Catalog::new(catalog)),
            registering: tokio::sync::Mutex::new(()),
            lookup_indexes: LookupIndexes::new(LOOKUP_INDEX_BUDGET, LOOKUP_KEYS_BUDGET),
            listing_state,
            query_slots,
            drain: crate::drain::Drain::new(),
            cluster,
            history: History::default(),
            _cache_dir_lock: cache_dir_lock,
        });
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
    pub fn history(&self) -> &History {
        &self.history
    }

    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The cluster this server is a member of, as it is now.
    pub fn cluster(&self) -> Option<&Arc<crate::cluster::Cluster>> {
        self.cluster.as_ref()
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
    /// Whether the server is draining, and its running requests
    /// ([`crate::drain`]).
    pub fn drain(&self) -> &Arc<crate::drain::Drain> {
        &self.drain
    }

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

    /// Arrow schema of a registered table or view.
    pub async fn table_schema(&self, name: &str) -> Option<SchemaRef> {
        self.base
            .table_provider(crate::catalog::table_reference(name))
            .await
            .ok()
            .map(|t| t.schema())
    }
}
