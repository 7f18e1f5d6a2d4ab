//! `silt_system`: read-only tables about the cache itself, queryable through
//! Flight SQL like any table (DuckDB's cache_httpfs answers SQL about its
//! cache the same way):
//!
//! ```sql
//! SELECT table_name, tier, sum(bytes) FROM silt_system.cache_segments GROUP BY 1, 2;
//! SELECT text, total_ms, scan_ms FROM silt_system.queries ORDER BY total_ms DESC LIMIT 5;
//! ```
//!
//! - `cache_segments`: one row per unit a tier holds: in the memory tier a
//!   column chunk of a row group (its batches summed), in the page buffer
//!   (`pages`) and the disk tier a page of object bytes.
//! - `tables`: the catalog, with each table's lookups and hit ratio.
//! - `queries`: the queries running now and those finished in the last
//!   hour (at most 1,000; [`crate::query::log`]), with their stage times.
//! - `store_requests`: object-store requests per operation since start,
//!   and one `all` row with failures and request latency.
//!
//! Each table is a snapshot taken when a query plans it; they must be named
//! with their schema (`silt_system.queries`), so a table of the lake called
//! `queries` keeps its bare name.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray, UInt32Array, UInt64Array,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{MemTable, SchemaProvider, TableProvider};
use datafusion::error::{DataFusionError, Result};

use silt_cache::{CacheTiers, CachedStore, DiskTier};

use crate::catalog::{CATALOG, Catalog, CatalogEntry};
use crate::engine::Engine;
use crate::error::{ConfigError, ServerError};
use crate::metrics::ServerMetrics;

/// The schema's name.
pub const SYSTEM_SCHEMA: &str = "silt_system";
/// Its tables.
pub const SYSTEM_TABLES: [&str; 4] = ["cache_segments", "tables", "queries", "store_requests"];

/// Whether `schema.table` names a system table.
pub fn is_system_table(schema: Option<&str>, table: &str) -> bool {
    schema == Some(SYSTEM_SCHEMA) && SYSTEM_TABLES.contains(&table)
}

/// Adds the `silt_system` schema to `engine`'s catalog. The schema holds
/// the parts of the engine it reports on (the catalog, the tiers, the
/// metrics), not the engine: the engine's context holds the schema.
pub fn register(engine: &Engine) -> Result<(), ServerError> {
    let catalog = engine
        .base
        .catalog(CATALOG)
        .ok_or(ConfigError::MissingCatalog { catalog: CATALOG })?;
    let sources = Sources {
        catalog: engine.catalog.clone(),
        tiers: engine.tiers().clone(),
        disk: engine.disk_tier().cloned(),
        metrics: engine.metrics().clone(),
    };
    catalog.register_schema(
        SYSTEM_SCHEMA,
        Arc::new(SystemSchema {
            sources: Arc::new(sources),
        }),
    )?;
    Ok(())
}

/// The schema provider: each table is built from the server's state when a
/// query asks for it.
#[derive(Debug)]
struct SystemSchema {
    sources: Arc<Sources>,
}

/// What the system tables report on.
struct Sources {
    catalog: Arc<Catalog>,
    tiers: Arc<CacheTiers>,
    disk: Option<Arc<DiskTier>>,
    metrics: Arc<ServerMetrics>,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("silt_system sources")
    }
}

impl Sources {
    fn catalog(&self) -> BTreeMap<String, CatalogEntry> {
        self.catalog.entries()
    }

    fn table_stores(&self) -> BTreeMap<String, Arc<CachedStore>> {
        self.catalog.table_stores()
    }

    fn tiers(&self) -> &Arc<CacheTiers> {
        &self.tiers
    }

    fn disk_tier(&self) -> Option<&Arc<DiskTier>> {
        self.disk.as_ref()
    }

    fn metrics(&self) -> &Arc<ServerMetrics> {
        &self.metrics
    }
}

#[async_trait]
impl SchemaProvider for SystemSchema {
    fn table_names(&self) -> Vec<String> {
        SYSTEM_TABLES.iter().map(|t| t.to_string()).collect()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if !SYSTEM_TABLES.contains(&name) {
            return Ok(None);
        }
        // Off the async workers: it renders every metric or walks the tiers.
        let (sources, name) = (self.sources.clone(), name.to_string());
        let batch = tokio::task::spawn_blocking(move || snapshot(&sources, &name))
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))??;
        let table = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
        Ok(Some(Arc::new(table)))
    }

    fn table_exist(&self, name: &str) -> bool {
        SYSTEM_TABLES.contains(&name)
    }
}

/// The system table `name` now, as one batch.
fn snapshot(engine: &Sources, name: &str) -> Result<RecordBatch> {
    match name {
        "cache_segments" => cache_segments(engine),
        "tables" => tables(engine),
        "queries" => queries(engine),
        _ => store_requests(engine),
    }
}

fn batch(fields: Vec<Field>, columns: Vec<ArrayRef>) -> Result<RecordBatch> {
    let schema: SchemaRef = Arc::new(Schema::new(fields));
    Ok(RecordBatch::try_new(schema, columns)?)
}

fn utf8(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Utf8, nullable)
}

fn u64f(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::UInt64, nullable)
}

fn f64f(name: &str) -> Field {
    Field::new(name, DataType::Float64, true)
}

fn cache_segments(engine: &Sources) -> Result<RecordBatch> {
    let table_of: std::collections::HashMap<Arc<str>, String> = engine
        .table_stores()
        .into_iter()
        .map(|(name, store)| (store.store_id().clone(), name))
        .collect();
    let tiers = engine.tiers();
    let mut held = tiers.batches().held_units();
    held.extend(tiers.pages().memory().held_units());
    if let Some(disk) = engine.disk_tier() {
        held.extend(disk.held_units());
    }
    let s = &held;
    batch(
        vec![
            utf8("table_name", true),
            utf8("tier", false),
            utf8("object", false),
            utf8("version", false),
            Field::new("row_group", DataType::UInt32, true),
            Field::new("column_index", DataType::UInt32, true),
            utf8("column_name", true),
            u64f("page", true),
            utf8("form", false),
            u64f("batches", false),
            u64f("bytes", false),
            u64f("arrow_bytes", true),
        ],
        vec![
            Arc::new(StringArray::from_iter(
                s.iter().map(|x| table_of.get(&x.object().store).cloned()),
            )),
            Arc::new(StringArray::from_iter_values(s.iter().map(|x| x.tier))),
            Arc::new(StringArray::from_iter_values(
                s.iter().map(|x| x.object().path.as_ref()),
            )),
            Arc::new(StringArray::from_iter_values(
                s.iter().map(|x| x.object().version.as_ref()),
            )),
            Arc::new(UInt32Array::from_iter(s.iter().map(|x| x.row_group()))),
            Arc::new(UInt32Array::from_iter(s.iter().map(|x| x.column()))),
            Arc::new(StringArray::from_iter(s.iter().map(|x| x.column_name.as_deref()))),
            Arc::new(UInt64Array::from_iter(s.iter().map(|x| x.page_number()))),
            Arc::new(StringArray::from_iter_values(s.iter().map(|x| x.form))),
            Arc::new(UInt64Array::from_iter_values(s.iter().map(|x| x.batches))),
            Arc::new(UInt64Array::from_iter_values(s.iter().map(|x| x.bytes))),
            Arc::new(UInt64Array::from_iter(
                s.iter().map(|x| (x.tier == "memory").then_some(x.arrow_bytes)),
            )),
        ],
    )
}

/// One table's lookups and bytes, for `silt_system.tables`.
#[derive(Clone, Copy)]
struct TableCounts {
    memory_hits: u64,
    memory_misses: u64,
    page_hits: u64,
    page_misses: u64,
    chunk_bytes: u64,
    memory_bytes: u64,
}

impl TableCounts {
    /// (memory + page hits) / (those + page misses), once looked up
    /// ([`silt_cache::TableCounters::lookups`]).
    fn hit_ratio(&self) -> Option<f64> {
        silt_cache::hit_ratio(self.memory_hits + self.page_hits, self.page_misses)
    }
}

fn tables(engine: &Sources) -> Result<RecordBatch> {
    let catalog = engine.catalog();
    let stores = engine.table_stores();
    let mut memory: std::collections::HashMap<Arc<str>, u64> = Default::default();
    for u in engine.tiers().batches().usage_by_column() {
        *memory.entry(u.store).or_default() += u.bytes;
    }
    let rows: Vec<_> = catalog
        .iter()
        .map(|(name, entry)| {
            let (url, definition) = match &entry.kind {
                crate::catalog::EntryKind::Table { config, .. } => (Some(config.url.clone()), None),
                crate::catalog::EntryKind::View { sql } => (None, Some(sql.clone())),
            };
            let counts = stores.get(name).map(|s| {
                let c = s.counters();
                let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
                TableCounts {
                    memory_hits: load(&c.batch_hits),
                    memory_misses: load(&c.batch_misses),
                    page_hits: load(&c.hits),
                    page_misses: load(&c.misses),
                    chunk_bytes: load(&c.chunk_bytes),
                    memory_bytes: memory.get(s.store_id()).copied().unwrap_or(0),
                }
            });
            (
                name.clone(),
                entry.type_name(),
                url,
                entry.unavailable.as_ref().map(ToString::to_string),
                counts,
                definition,
                engine.catalog.snapshot_id(name),
            )
        })
        .collect();
    let col = |f: fn(&TableCounts) -> u64| -> ArrayRef {
        Arc::new(UInt64Array::from_iter(rows.iter().map(|r| r.4.as_ref().map(f))))
    };
    let ratio = Float64Array::from_iter(rows.iter().map(|r| r.4.and_then(|c| c.hit_ratio())));
    batch(
        vec![
            utf8("table_name", false),
            utf8("kind", false),
            utf8("url", true),
            utf8("unavailable", true),
            u64f("memory_hits", true),
            u64f("memory_misses", true),
            u64f("page_hits", true),
            u64f("page_misses", true),
            f64f("hit_ratio"),
            u64f("column_chunk_bytes", true),
            u64f("memory_bytes", true),
            utf8("definition", true),
            Field::new("snapshot_id", DataType::Int64, true),
        ],
        vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0.as_str()))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.2.as_deref()))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.3.as_deref()))),
            col(|c| c.memory_hits),
            col(|c| c.memory_misses),
            col(|c| c.page_hits),
            col(|c| c.page_misses),
            Arc::new(ratio),
            col(|c| c.chunk_bytes),
            col(|c| c.memory_bytes),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.5.as_deref()))),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.6))),
        ],
    )
}

fn queries(engine: &Sources) -> Result<RecordBatch> {
    use crate::query::log::unix_ms;
    use crate::query::stage::Stage;
    let log = &engine.metrics().query_log;
    let finished = log.finished();
    let running = log.running();
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let n = finished.len() + running.len();
    let mut id = Vec::with_capacity(n);
    let mut kind = Vec::with_capacity(n);
    let mut text = Vec::with_capacity(n);
    let mut state = Vec::with_capacity(n);
    let mut started = Vec::with_capacity(n);
    let mut total = Vec::with_capacity(n);
    let mut stages: [Vec<Option<f64>>; 5] = Default::default();
    let mut rows = Vec::with_capacity(n);
    let mut bytes = Vec::with_capacity(n);
    let mut error = Vec::with_capacity(n);
    for q in &finished {
        id.push(q.id);
        kind.push(q.kind);
        text.push(q.text.clone());
        state.push(if q.error.is_some() { "failed" } else { "finished" });
        started.push(unix_ms(q.started) as i64);
        total.push(ms(q.total));
        for s in Stage::ALL {
            stages[s as usize].push(Some(ms(q.stage(s))));
        }
        rows.push(Some(q.rows));
        bytes.push(Some(q.bytes));
        error.push(q.error.clone());
    }
    for q in &running {
        id.push(q.id);
        kind.push(q.kind);
        text.push(q.text.clone());
        state.push("running");
        started.push(unix_ms(q.started) as i64);
        total.push(ms(q.elapsed));
        for s in &mut stages {
            s.push(None);
        }
        rows.push(None);
        bytes.push(None);
        error.push(None);
    }
    let mut fields = vec![
        u64f("id", false),
        utf8("kind", false),
        utf8("text", false),
        utf8("state", false),
        Field::new(
            "started",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            false,
        ),
        Field::new("total_ms", DataType::Float64, false),
    ];
    fields.extend(Stage::ALL.iter().map(|s| f64f(&format!("{}_ms", s.name()))));
    fields.extend([u64f("rows", true), u64f("bytes", true), utf8("error", true)]);
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from(id)),
        Arc::new(StringArray::from_iter_values(kind)),
        Arc::new(StringArray::from_iter_values(text.iter().map(|t| t.as_ref()))),
        Arc::new(StringArray::from_iter_values(state)),
        Arc::new(TimestampMillisecondArray::from(started).with_timezone("UTC")),
        Arc::new(Float64Array::from(total)),
    ];
    columns.extend(stages.into_iter().map(|s| Arc::new(Float64Array::from(s)) as ArrayRef));
    columns.extend([
        Arc::new(UInt64Array::from(rows)) as ArrayRef,
        Arc::new(UInt64Array::from(bytes)),
        Arc::new(StringArray::from(error)),
    ]);
    batch(fields, columns)
}

fn store_requests(engine: &Sources) -> Result<RecordBatch> {
    let snapshot = engine.metrics().snapshot();
    let get = |series: &str| crate::stats::value(&snapshot, series);
    let (gets, heads, lists) = (
        get("silt_object_store_get_requests_total"),
        get("silt_object_store_head_requests_total"),
        get("silt_object_store_list_requests_total"),
    );
    let latency = crate::stats::StoreLatency::from_snapshot(&snapshot);
    let only_all = |v: Option<f64>| Float64Array::from(vec![None, None, None, v]);
    let only_all_u = |v: u64| UInt64Array::from(vec![None, None, None, Some(v)]);
    batch(
        vec![
            utf8("operation", false),
            u64f("requests", false),
            u64f("bytes", true),
            u64f("errors", true),
            u64f("retries", true),
            u64f("failed", true),
            f64f("latency_mean_ms"),
            f64f("latency_p50_ms"),
            f64f("latency_p99_ms"),
        ],
        vec![
            Arc::new(StringArray::from(vec!["get", "head", "list", "all"])),
            Arc::new(UInt64Array::from(vec![gets, heads, lists, gets + heads + lists])),
            Arc::new(UInt64Array::from(vec![
                Some(get("silt_object_store_get_bytes_total")),
                None,
                None,
                Some(get("silt_object_store_get_bytes_total")),
            ])),
            Arc::new(only_all_u(get("silt_object_store_errors_total"))),
            Arc::new(only_all_u(get("silt_object_store_retries_total"))),
            Arc::new(only_all_u(get("silt_object_store_failed_requests_total"))),
            Arc::new(only_all(latency.mean)),
            Arc::new(only_all(latency.p50)),
            Arc::new(only_all(latency.p99)),
        ],
    )
}
