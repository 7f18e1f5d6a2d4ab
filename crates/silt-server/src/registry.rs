//! The table registry: the catalog of tables and views, their registration
//! (and retries while unavailable), and the one resolution of a table name
//! to its cached store and objects that every surface uses — SQL and scans
//! (through DataFusion), lookups, preload and the S3-compatible API — so they
//! agree on what a table is: exactly the objects DataFusion's listing of the
//! table's URL returns (`*.parquet` directly under a prefix, or under
//! `key=value` folders; other nested objects are not the table's).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use datafusion::catalog::TableProvider;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use silt_cache::{CachedStore, ChangeNotices};
use silt_lakehouse::iceberg::rest::{RestCatalog, RestTable};
use silt_scan::{CachedParquetTable, ParquetTable, ScanShared, TableOptions, register_parquet_table};
use silt_store::{FaultyStore, MeteredStore, RetryingStore, TableFormat, TableLocation};
use tracing::{info, warn};

use crate::catalog::{CatalogEntry, EntryKind};
use crate::config::{CatalogTable, TableConfig};
use crate::engine::Engine;
use crate::error::{ConfigError, RequestError, ServerError, UnavailableCause};
use crate::guard;

/// How long registering one table (listing + reading footers) may take.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(60);
/// Tables that failed to register are retried at most this often.
const RETRY_INTERVAL: Duration = Duration::from_secs(5);

/// A registered, available Parquet table: what [`Engine::resolve_table`]
/// gives every surface that reads a table by name.
pub struct ResolvedTable {
    pub name: String,
    pub config: TableConfig,
    /// The cached store its bytes are read through.
    pub store: Arc<CachedStore>,
    provider: Arc<dyn TableProvider>,
    /// The engine's `listing_table_ignore_subdirectory`.
    ignore_subdirectory: bool,
}

impl ResolvedTable {
    /// The cached Parquet table the scans use.
    pub fn parquet(&self) -> Result<&CachedParquetTable, ServerError> {
        self.provider.downcast_ref::<CachedParquetTable>().ok_or_else(|| {
            RequestError::NotCachedParquet {
                table: self.name.clone(),
            }
            .into()
        })
    }

    /// The table's objects as its scans list them (namespaced paths, sorted),
    /// under the table's freshness.
    pub async fn objects(&self, engine: &Engine) -> Result<Vec<ObjectMeta>, ServerError> {
        let state = engine.base_context().state();
        self.parquet()?
            .list_files(&state)
            .await
            .map_err(|e| ServerError::reading(&format!("{}={}", self.name, self.config.url), e))
    }

    /// Whether the namespaced `path` is one of the table's objects by the
    /// listing's rule (without listing).
    pub fn holds(&self, path: &ObjectPath) -> bool {
        self.parquet().is_ok_and(|t| t.holds(path, self.ignore_subdirectory))
    }
}

impl Engine {
    /// The cached store of each registered table.
    pub fn table_stores(&self) -> BTreeMap<String, Arc<CachedStore>> {
        self.catalog.table_stores()
    }

    /// The cached store of registered table `name`.
    pub fn table_store(&self, name: &str) -> Option<Arc<CachedStore>> {
        self.catalog.stores.read().get(name).cloned()
    }

    /// A snapshot of the catalog (tables and views, available or not).
    pub fn catalog(&self) -> BTreeMap<String, CatalogEntry> {
        self.catalog.entries()
    }

    /// The catalog entry of `name`.
    pub fn catalog_entry(&self, name: &str) -> Option<CatalogEntry> {
        self.catalog.entries.read().get(name).cloned()
    }

    pub(crate) fn available(&self) -> BTreeSet<String> {
        self.catalog
            .entries
            .read()
            .iter()
            .filter(|(_, e)| e.unavailable.is_none())
            .map(|(n, _)| n.clone())
            .collect()
    }

    fn set_status(&self, name: &str, unavailable: Option<UnavailableCause>) {
        if let Some(e) = self.catalog.entries.write().get_mut(name) {
            e.unavailable = unavailable;
        }
    }

    /// Tries to register every table and view that is not registered yet:
    /// the tables concurrently (one dead bucket holds up only its own table),
    /// then the views. One pass at a time.
    pub(crate) async fn register_pending(&self) {
        let _one_at_a_time = self.registering.lock().await;
        let pending: Vec<(String, CatalogEntry)> = self
            .catalog()
            .into_iter()
            .filter(|(_, e)| e.unavailable.is_some())
            .collect();
        let tables = pending.iter().filter_map(|(name, entry)| match &entry.kind {
            EntryKind::Table { index, config } => Some(async move {
                let result = tokio::time::timeout(REGISTER_TIMEOUT, self.register_table(*index, name, config))
                    .await
                    .unwrap_or_else(|_| {
                        Err(ServerError::StoreTimeout {
                            url: config.url.clone(),
                            after: REGISTER_TIMEOUT,
                        })
                    });
                match &result {
                    Ok(()) => info!(table = %name, url = %config.url, "registered table"),
                    Err(e) => {
                        warn!(table = %name, error = %e, "table unavailable");
                        // Failed or timed out part way: no store of it stays
                        // listed (stats) or HEADed.
                        self.catalog.stores.write().remove(name.as_str());
                        self.catalog.single_files.write().remove(name.as_str());
                        self.catalog.lakehouse.write().remove(name.as_str());
                    }
                }
                self.set_status(name, result.err().map(UnavailableCause::from));
            }),
            EntryKind::View { .. } => None,
        });
        futures::future::join_all(tables).await;
        // Views may build on each other: repeat while progress is made.
        loop {
            let mut progressed = false;
            for (name, entry) in self.catalog() {
                if let (EntryKind::View { sql }, Some(_)) = (&entry.kind, &entry.unavailable) {
                    match self.register_view(&name, sql).await {
                        Ok(()) => {
                            info!(view = %name, "registered view");
                            self.set_status(&name, None);
                            progressed = true;
                        }
                        Err(e) => self.set_status(&name, Some(e.into())),
                    }
                }
            }
            if !progressed {
                break;
            }
        }
    }

    async fn register_table(&self, index: usize, name: &str, config: &TableConfig) -> Result<(), ServerError> {
        // A REST catalog's table: where it is now is the catalog's answer.
        let catalog = match &config.catalog {
            Some(table) => Some(rest_table(table).await?),
            None => None,
        };
        let location = match &catalog {
            Some((_, metadata)) => TableLocation::parse(&format!("iceberg+{metadata}"))?,
            None => TableLocation::parse(&config.url)?,
        };
        let mut raw = location.open(&self.config.store_settings(config), &self.memory_store)?;
        let mut faults = self.config.store.faults();
        // Each table's store draws its own fault sequence.
        faults.seed ^= (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        if faults.is_active() {
            raw = Arc::new(FaultyStore::new(raw, faults));
        }
        let metered: Arc<dyn ObjectStore> = Arc::new(MeteredStore::new(raw, self.metrics.store.clone()));
        let metered: Arc<dyn ObjectStore> = Arc::new(RetryingStore::with_metrics(
            metered,
            self.config.store.retry_policy(),
            self.metrics.store.clone(),
        ));
        let notices = ChangeNotices::new(self.metrics.validation_sweeps.clone());
        let cached = Arc::new(
            CachedStore::new(metered, self.tiers.clone(), format!("t{index}"), config.validation)
                .with_change_notices(Arc::new(notices)),
        );
        if !location.is_prefix && location.format == TableFormat::Parquet {
            // Checked through the cache, so the table's validation mode decides
            // whether each query sends a HEAD.
            let path = cached.qualify(&ObjectPath::from(location.path.as_str()));
            cached.head(&path).await.map_err(|e| match e {
                object_store::Error::NotFound { .. } => ServerError::ObjectNotFound {
                    table: name.to_string(),
                    url: config.url.clone(),
                },
                other => ServerError::reading(&config.url, other.into()),
            })?;
            self.catalog
                .single_files
                .write()
                .insert(name.to_string(), (cached.clone() as Arc<dyn ObjectStore>, path));
        }
        self.catalog.stores.write().insert(name.to_string(), cached.clone());
        let table = ParquetTable {
            name,
            location: &location,
            store: cached,
            options: TableOptions {
                binary_as_string: config.binary_as_string,
            },
            catalog: catalog.map(|(table, _)| table),
        };
        let shared = ScanShared {
            batches: self.tiers.batches().clone(),
            metrics: self.metrics.scan.clone(),
        };
        let _ = self.base.deregister_table(name);
        register_parquet_table(&self.base, table, &shared)
            .await
            .map_err(ServerError::from)?;
        if location.format != TableFormat::Parquet
            && let Ok(provider) = self.base.table_provider(name).await
        {
            self.catalog.lakehouse.write().insert(name.to_string(), provider);
        }
        Ok(())
    }

    async fn register_view(&self, name: &str, sql: &str) -> Result<(), ServerError> {
        // A view's SQL is configuration: its failures say which view.
        let invalid = |e: ServerError| ConfigError::View {
            name: name.to_string(),
            source: Box::new(e),
        };
        let statement = guard::parse_single_query(sql).map_err(invalid)?;
        let state = self.base.state();
        let refs = state
            .resolve_table_references(&statement)
            .map_err(|e| invalid(e.into()))?;
        let registered: BTreeSet<String> = self.available().into_iter().filter(|n| n != name).collect();
        guard::check_references(&refs, &registered).map_err(invalid)?;
        let catalog = self.catalog();
        let mut tables: Vec<String> = refs
            .iter()
            .flat_map(|r| {
                guard::registered_ref(r, &registered)
                    .and_then(|n| catalog.get(&n).map(|e| e.tables.clone()))
                    .unwrap_or_default()
            })
            .collect();
        tables.sort();
        tables.dedup();
        if let Some(e) = self.catalog.entries.write().get_mut(name) {
            e.tables = tables;
        }
        let plan = state
            .statement_to_plan(statement)
            .await
            .map_err(|e| invalid(e.into()))?;
        let view = datafusion::catalog::view::ViewTable::new(plan, Some(sql.to_string()));
        let _ = self.base.deregister_table(name);
        self.base
            .register_table(name, Arc::new(view))
            .map_err(|e| invalid(e.into()))?;
        Ok(())
    }

    /// Registers the catalog in the background: a first pass now, awaited
    /// for at most `wait` (what is not registered by then goes on in the
    /// background, and queries naming it get "unavailable" at once), then a
    /// pass every [`RETRY_INTERVAL`] while anything is unavailable. Requests
    /// never register anything nor wait on a registration. The task ends
    /// when the engine is dropped.
    pub async fn start_registration(self: &Arc<Self>, wait: Duration) {
        let engine = Arc::downgrade(self);
        let (first_done_tx, first_done) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let mut first_done_tx = Some(first_done_tx);
            loop {
                match engine.upgrade() {
                    Some(engine) if engine.any_unavailable() => engine.register_pending().await,
                    Some(_) => {}
                    None => return,
                }
                if let Some(tx) = first_done_tx.take() {
                    let _ = tx.send(());
                }
                tokio::time::sleep(RETRY_INTERVAL).await;
            }
        });
        if tokio::time::timeout(wait, first_done).await.is_err() {
            let pending: Vec<String> = self
                .catalog()
                .into_iter()
                .filter(|(_, e)| e.unavailable.is_some())
                .map(|(n, _)| n)
                .collect();
            warn!(
                ?pending,
                "serving before every table registered; the rest register in the background"
            );
        }
    }

    fn any_unavailable(&self) -> bool {
        self.catalog.entries.read().values().any(|e| e.unavailable.is_some())
    }

    /// Resolves `name` to an available Parquet table: unknown names, views
    /// and unavailable tables are errors that say so. `uses` names what the
    /// caller does with tables, for the view error (e.g. "lookups read").
    pub async fn resolve_table(&self, name: &str, uses: &str) -> Result<ResolvedTable, ServerError> {
        let entry = self.catalog_entry(name).ok_or_else(|| ServerError::UnknownTable {
            name: name.to_string(),
            registered: self.catalog().keys().cloned().collect::<Vec<_>>().join(", "),
        })?;
        if let Some(cause) = &entry.unavailable {
            return Err(ServerError::Unavailable {
                name: name.to_string(),
                cause: cause.clone(),
            });
        }
        let EntryKind::Table { config, .. } = entry.kind else {
            return Err(RequestError::IsAView {
                uses: uses.to_string(),
                name: name.to_string(),
            }
            .into());
        };
        let store = self.table_store(name).ok_or_else(|| ServerError::Unavailable {
            name: name.to_string(),
            cause: UnavailableCause::NotRegistered,
        })?;
        let provider = self
            .base_context()
            .table_provider(crate::catalog::table_reference(name))
            .await?;
        let ignore_subdirectory = self
            .base_context()
            .state_ref()
            .read()
            .config()
            .options()
            .execution
            .listing_table_ignore_subdirectory;
        Ok(ResolvedTable {
            name: name.to_string(),
            config,
            store,
            provider,
            ignore_subdirectory,
        })
    }
}

/// The REST catalog's table `table` names, and the URL of its current
/// metadata file (the catalog's answer now).
async fn rest_table(table: &CatalogTable) -> Result<(RestTable, String), ServerError> {
    let unavailable = |e: silt_lakehouse::LakehouseError| ServerError::Catalog {
        catalog: table.catalog.clone(),
        reason: e.to_string(),
    };
    let catalog = RestCatalog::connect(&table.uri, table.warehouse.as_deref(), table.token.as_deref())
        .await
        .map_err(unavailable)?;
    let rest = RestTable {
        catalog,
        namespace: table.namespace.clone(),
        table: table.table.clone(),
    };
    let metadata = rest.metadata_location().await.map_err(unavailable)?;
    Ok((rest, metadata))
}
