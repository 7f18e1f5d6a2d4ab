//! `SiltTable`: a DataFusion table whose scans run on a Silt server.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, Statistics, project_schema};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::bytes::Serializeable;
use silt_proto::{Projection, ScanRequest};

use crate::client::SiltClient;
use crate::exec::SiltScanExec;
use crate::pushable::is_exact_on_server;

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
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Columns in filters are qualified by the client's table name or alias; the
/// server resolves them against its own table, so send bare names.
fn unqualify(expr: &Expr) -> Result<Expr> {
    expr.clone()
        .transform(|e| {
            Ok(match e {
                Expr::Column(c) if c.relation.is_some() => {
                    Transformed::yes(Expr::Column(Column::new_unqualified(c.name)))
                }
                other => Transformed::no(other),
            })
        })
        .map(|t| t.data)
}

/// The filter as the server decodes it, when it may be pushed (see
/// [`crate::pushable`]).
pub(crate) fn serialize_filter(expr: &Expr) -> Option<Vec<u8>> {
    if !is_exact_on_server(expr) {
        return None;
    }
    let bare = unqualify(expr).ok()?;
    bare.to_bytes().ok().map(|b| b.to_vec())
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
        _state: &dyn Session,
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
        let request = ScanRequest {
            table: self.name.clone(),
            projection: columns,
            filters: encoded,
            limit: limit.map(|l| l as u64),
            partial_aggregate: None,
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
        Ok(Arc::new(SiltScanExec::new(
            self.client.clone(),
            request,
            schema,
            filters.iter().map(|f| f.to_string()).collect(),
            rows,
        )))
    }
}
