//! Planning: a SQL statement or a pushdown scan to a DataFusion plan, in a
//! context of its own (own memory pool, the query's validation gate and scan
//! scope as session extensions), after checking the names it reads.
//!
//! The query runner ([`super::QueryRunner`]) calls these for every attempt;
//! preload plans a scan with them too.

use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::TableReference;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::memory_pool::{GreedyMemoryPool, TrackConsumersPool};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{DataFrame, SessionContext};
use datafusion_proto::bytes::Serializeable;
use object_store::ObjectStoreExt;
use silt_cache::ValidationGate;
use silt_proto::{ROW_MARKER_COLUMN, ScanRequest, SegmentScope};
use silt_scan::PushdownScan;
use silt_scan::column_loader::Admission;
use silt_scan::plan_pushdown;
use silt_scan::scope::ScanScope;

use crate::catalog::{CatalogEntry, EntryKind};
use crate::engine::Engine;
use crate::error::{RequestError, ServerError, SqlFilterError};
use crate::guard;

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

    /// The placeholders of the statement as a schema (none for a scan; see
    /// [`super::parameters::schema`]).
    pub fn parameter_schema(&self) -> Result<SchemaRef, ServerError> {
        super::parameters::schema(self.df.logical_plan())
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

    /// Like [`Self::execute`], also returning the physical plan that runs,
    /// whose metrics tell at the end what the scan read ([`scanned`]).
    pub async fn execute_plan(self) -> Result<(SendableRecordBatchStream, Arc<dyn ExecutionPlan>), ServerError> {
        let sources = self.sources;
        let (plan, context) = match self.physical {
            Some(plan) => (plan, self.ctx.task_ctx()),
            None => {
                let context = Arc::new(self.df.task_ctx());
                let plan = self
                    .df
                    .create_physical_plan()
                    .await
                    .map_err(|e| ServerError::reading(&sources, e))?;
                (plan, context)
            }
        };
        let stream = datafusion::physical_plan::execute_stream(plan.clone(), context)
            .map_err(|e| ServerError::reading(&sources, e))?;
        Ok((stream, plan))
    }

    /// Row count of what the plan reads, from Parquet statistics (exact when
    /// the files' footers say so): a scan's `GetFlightInfo` reports it.
    pub async fn row_count(&self) -> Option<usize> {
        let plan = self.df.clone().create_physical_plan().await.ok()?;
        row_count_of(plan.as_ref())
    }
}

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
            return Err(RequestError::ScopeSelections {
                path: o.path.clone(),
                row_groups: o.row_groups.len(),
                selections: o.selections.len(),
            }
            .into());
        }
        for (&group, bitmap) in o.row_groups.iter().zip(&o.selections) {
            if !bitmap.is_empty() {
                scan_scope.select(&o.path, group as usize, bitmap.clone());
            }
        }
    }
    Ok(scan_scope)
}

/// What the scans of `plan` read, as their metrics say once it ran: rows
/// and uncompressed bytes of the row groups read (see [`silt_scan::cached_scan::ROWS_SCANNED`]).
pub fn scanned(plan: &Arc<dyn ExecutionPlan>) -> (u64, u64) {
    use silt_scan::cached_scan::{BYTES_SCANNED, ROWS_SCANNED};
    let (mut rows, mut bytes) = (0u64, 0u64);
    let _ = plan.apply(|node| {
        if let Some(metrics) = node.metrics() {
            let sum = |name: &str| metrics.sum_by_name(name).map_or(0, |v| v.as_usize() as u64);
            rows += sum(ROWS_SCANNED);
            bytes += sum(BYTES_SCANNED);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    (rows, bytes)
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

/// A context for one query: shares tables and caches with every other
/// query, but has its own memory pool so a query over the limit fails alone.
/// A `gate` travels in the session config (see [`ValidationGate`]) so the
/// query's listings may run ahead of their validation.
pub(super) fn query_context(
    engine: &Engine,
    gate: Option<&Arc<ValidationGate>>,
) -> Result<SessionContext, ServerError> {
    let limit = usize::try_from(engine.config.query_memory_limit).unwrap_or(usize::MAX);
    let pool = TrackConsumersPool::new(GreedyMemoryPool::new(limit), NonZeroUsize::new(3).expect("3 > 0"));
    let runtime = RuntimeEnvBuilder::from_runtime_env(engine.base.runtime_env().as_ref())
        .with_memory_pool(Arc::new(pool))
        .build_arc()?;
    let mut state = SessionStateBuilder::new_from_existing(engine.base.state())
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
    engine: &Engine,
    refs: &[TableReference],
    gate: Option<&Arc<ValidationGate>>,
) -> Result<String, ServerError> {
    let catalog = engine.catalog();
    let all: BTreeSet<String> = catalog.keys().cloned().collect();
    guard::check_references(refs, &all)?;
    let mut tables = BTreeSet::new();
    for r in refs.iter().filter(|r| !guard::names_system_table(r)) {
        let name = guard::registered_ref(r, &all);
        let entry = name.as_ref().and_then(|name| catalog.get(name));
        if let Some(cause) = entry.and_then(|e| e.unavailable.clone()) {
            return Err(ServerError::Unavailable {
                name: name.unwrap_or_else(|| r.table().to_string()),
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
        let single = engine.catalog.single_files.read().get(t).cloned();
        if let Some((mut store, path)) = single {
            if let Some(gate) = gate
                && let Some(cached) = engine.catalog.stores.read().get(t)
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

/// Plans one SQL statement from a Flight SQL client, refusing anything but
/// a read-only query over registered tables. With a `gate`, the query's
/// listings may be speculative: its results are held until the gate
/// confirms the versions it read.
pub async fn sql(engine: &Engine, sql: &str, gate: Option<&Arc<ValidationGate>>) -> Result<PlannedQuery, ServerError> {
    let mut statement = guard::parse_single_query(sql)?;
    super::parameters::number_placeholders(&mut statement);
    let ctx = query_context(engine, gate)?;
    let state = ctx.state();
    let refs = state.resolve_table_references(&statement)?;
    let sources = check_names(engine, &refs, gate).await?;
    let plan: LogicalPlan = state
        .statement_to_plan(statement)
        .await
        .map_err(|e| ServerError::reading(&sources, e))?;
    guard::check_plan(&plan, &engine.available())?;
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
async fn parse_scan_filter(ctx: &SessionContext, table: &str, sql: &str) -> Result<Expr, ServerError> {
    let invalid = |reason| RequestError::ScanFilterSql {
        table: table.to_string(),
        sql: sql.to_string(),
        reason,
    };
    let df = ctx
        .table(crate::catalog::table_reference(table))
        .await
        .map_err(|e| invalid(SqlFilterError::Plan(e)))?;
    let expr = df.parse_sql_expr(sql).map_err(|e| invalid(SqlFilterError::Plan(e)))?;
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
    .map_err(|e| invalid(SqlFilterError::Plan(e)))?;
    if nested {
        return Err(invalid(SqlFilterError::NotRowLevel).into());
    }
    Ok(expr)
}

/// Plans a pushdown scan from Silt's client (gated like [`sql`]).
pub async fn scan(
    engine: &Engine,
    request: &ScanRequest,
    gate: Option<&Arc<ValidationGate>>,
) -> Result<PlannedQuery, ServerError> {
    let sources = check_names(engine, &[crate::catalog::table_reference(&request.table)], gate).await?;
    let ctx = query_context(engine, gate)?;
    let task = ctx.task_ctx();
    let filters = request
        .filters
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            Expr::from_bytes_with_ctx(bytes, &task).map_err(|source| RequestError::ScanFilter {
                table: request.table.clone(),
                index: i,
                source,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let filters = match request.filter_sql.as_deref().filter(|f| !f.trim().is_empty()) {
        None => filters,
        Some(sql) => {
            let mut filters = filters;
            filters.push(parse_scan_filter(&ctx, &request.table, sql).await?);
            filters
        }
    };
    let limit = request
        .limit
        .map(|l| usize::try_from(l).map_err(|_| RequestError::LimitTooLarge { limit: l }))
        .transpose()?;
    if let Some(scope) = &request.scope {
        let scope = scan_scope(scope)?;
        ctx.state_ref().write().config_mut().set_extension(Arc::new(scope));
    }
    if request.layout_only {
        let df = layout(engine, request, &ctx, &filters).await?;
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
    guard::check_plan(df.logical_plan(), &engine.available())?;
    let physical = match &request.partial_aggregate {
        None => None,
        Some(fragment) => {
            let scan = df
                .clone()
                .create_physical_plan()
                .await
                .map_err(|e| ServerError::reading(&sources, e))?;
            let plan = crate::partial_aggregate::attach(fragment, scan, &task, &request.table)?;
            engine.metrics().partial_aggregates.increment(1);
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
/// their row groups that `filters` (the scan's) may match by statistics,
/// and the sizes of the projected columns.
async fn layout(
    engine: &Engine,
    request: &ScanRequest,
    ctx: &SessionContext,
    filters: &[Expr],
) -> Result<DataFrame, ServerError> {
    let table = engine.resolve_table(&request.table, "layouts are only of").await?;
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
        .layout(&ctx.state(), &columns, filters, request.honors_server_only)
        .await
        .map_err(|e| ServerError::reading(&sources, e))?;
    Ok(ctx.read_batch(batch)?)
}
