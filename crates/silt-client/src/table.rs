//! `SiltTable`: a DataFusion table whose scans run on a Silt server.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::stats::Precision;
use datafusion::common::{Statistics, project_schema};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use silt_proto::{Projection, ScanRequest};

use crate::client::SiltClient;
use crate::exec::SiltScanExec;
use crate::fleet::Fleet;
use crate::local_cache::LocalCache;
use crate::pushable::{serialize_filter, unqualify};
use crate::scan::local_plan::{LocalPlan, ScanShape};

/// The share of rows a pushed filter is assumed to keep in row estimates
/// (DataFusion's `default_filter_selectivity`).
const FILTER_SELECTIVITY: f64 = 0.2;

/// A table served by a Silt cache server.
///
/// Filters DataFusion offers are evaluated *exactly* on the server when they
/// evaluate the same there as here ([`crate::pushable`]: columns, literals,
/// comparisons, boolean logic, `LIKE`/`IN`/`BETWEEN`, zone-free casts and
/// allow-listed built-in functions); the rest (client UDFs, functions of the
/// session's time zone or clock, subqueries) stay local. Projection and
/// limit are always pushed.
#[derive(Debug)]
pub struct SiltTable {
    client: SiltClient,
    name: String,
    schema: SchemaRef,
    num_rows: Option<usize>,
    /// The session's compute-side cache, when it has one.
    local_cache: Option<Arc<LocalCache>>,
    /// The fleet serving it, when there is one ([`crate::fleet`]).
    fleet: Option<Arc<Fleet>>,
}

impl SiltTable {
    /// Fetch the schema and row count of `name` from the server.
    pub async fn try_new(client: SiltClient, name: &str) -> Result<Self> {
        let probe = ScanRequest {
            table: name.to_string(),
            ..Default::default()
        };
        let (schema, num_rows) = client.scan_info(&probe).await?;
        Ok(SiltTable {
            client,
            name: name.to_string(),
            schema,
            num_rows,
            local_cache: None,
            fleet: None,
        })
    }

    /// This table with its scans' row groups answered from `cache` when
    /// it holds them ([`crate::scan::hybrid`]).
    pub fn with_local_cache(mut self, cache: Option<Arc<LocalCache>>) -> Self {
        self.local_cache = cache;
        self
    }

    /// This table with its scans spread over `fleet` (`client` then only
    /// answered the schema).
    pub fn with_fleet(mut self, fleet: Option<Arc<Fleet>>) -> Self {
        self.fleet = fleet;
        self
    }

    /// The compute-side cache this table's scans use, if any.
    pub fn local_cache(&self) -> Option<&Arc<LocalCache>> {
        self.local_cache.as_ref()
    }

    /// How a scan of `columns` (`None`: all) with `filters` runs its row
    /// groups locally; `None` when it cannot (no cache, a limit, nothing
    /// to cache, a filter DataFusion cannot plan here).
    fn local_plan(
        &self,
        state: &dyn Session,
        columns: Option<&Projection>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Option<Arc<LocalPlan>> {
        let cache = self.local_cache.clone().filter(|_| limit.is_none())?;
        let bare: Vec<Expr> = filters.iter().map(unqualify).collect::<Result<_>>().ok()?;
        let filter_text: Vec<String> = filters.iter().map(|f| f.to_string()).collect();
        let scan = ScanShape {
            table: &self.name,
            schema: &self.schema,
            table_rows: self.num_rows,
            projection: columns,
            filters: bare,
            filter_text: &filter_text,
        };
        scan.local_plan(cache, |expr, schema| state.create_physical_expr(expr, schema))
            .map(Arc::new)
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

#[async_trait]
impl TableProvider for SiltTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| match serialize_filter(f) {
                Some(_) => TableProviderFilterPushDown::Exact,
                None => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    fn statistics(&self) -> Option<Statistics> {
        let mut stats = Statistics::new_unknown(&self.schema);
        stats.num_rows = self.num_rows.map_or(Precision::Absent, Precision::Inexact);
        Some(stats)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let schema = project_schema(&self.schema, projection)?;
        let columns = projection.map(|p| Projection {
            columns: p.iter().map(|&i| self.schema.field(i).name().clone()).collect(),
        });
        let mut encoded = Vec::with_capacity(filters.len());
        for f in filters {
            encoded.push(serialize_filter(f).ok_or_else(|| {
                datafusion::error::DataFusionError::Internal(format!(
                    "filter {f} was accepted for pushdown but cannot be serialized"
                ))
            })?);
        }
        let local = self.local_plan(state, columns.as_ref(), filters, limit);
        let request = ScanRequest {
            table: self.name.clone(),
            projection: columns,
            filters: encoded,
            limit: limit.map(|l| l as u64),
            partial_aggregate: None,
            ..Default::default()
        };
        // Filtered scans are estimated as DataFusion estimates a filter it
        // cannot analyse (its default selectivity, 20%), so a join puts the
        // filtered side on the build side as it would over plain Parquet.
        let rows = self.num_rows.map(|n| {
            let n = if filters.is_empty() {
                n
            } else {
                (n as f64 * FILTER_SELECTIVITY).ceil() as usize
            };
            limit.map_or(n, |l| l.min(n))
        });
        // A distributed query splits the scan by one layout, taken here.
        let planned = match &self.fleet {
            Some(fleet) if state.config().get_extension::<crate::distributed::Workers>().is_some() => fleet
                .layout(&self.name, None)
                .await?
                .map(|groups| Arc::from(groups.into_boxed_slice())),
            _ => None,
        };
        Ok(Arc::new(
            SiltScanExec::new(
                self.client.clone(),
                request,
                schema,
                filters.iter().map(|f| f.to_string()).collect(),
                rows,
            )
            .with_local(local)
            .with_fleet(self.fleet.clone())
            .with_planned_layout(planned)
            .with_table(self.schema.clone(), self.num_rows),
        ))
    }
}
