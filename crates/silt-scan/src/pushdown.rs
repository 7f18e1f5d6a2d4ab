//! Planning a pushed-down scan on the server.

use datafusion::common::Column;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{Expr, lit};
use datafusion::prelude::{DataFrame, SessionContext};

/// A scan sent by a client: read `table`, keep rows where every filter holds,
/// return `projection` (all columns when `None`), at most `limit` rows.
#[derive(Debug, Clone)]
pub struct PushdownScan {
    pub table: String,
    /// `Some(vec![])` asks for no columns: the result then has the single
    /// boolean column `row_marker` so the client can count rows.
    pub projection: Option<Vec<String>>,
    pub filters: Vec<Expr>,
    pub limit: Option<usize>,
}

/// Build the DataFrame for `scan`. Filters are applied before projection, so
/// they may use columns that are not returned; DataFusion's optimizer then
/// pushes them into the Parquet scan (row-group and page pruning).
pub async fn plan_pushdown(ctx: &SessionContext, scan: PushdownScan, row_marker: &str) -> Result<DataFrame> {
    let mut df = ctx
        .table(datafusion::common::TableReference::bare(scan.table.as_str()))
        .await?;
    if let Some(filter) = scan.filters.into_iter().reduce(Expr::and) {
        df = df.filter(filter)?;
    }
    match scan.projection {
        None => {}
        Some(cols) if cols.is_empty() => {
            df = df.select(vec![lit(true).alias(row_marker)])?;
        }
        Some(cols) => {
            let schema = df.schema().clone();
            let exprs = cols
                .into_iter()
                .map(|c| {
                    if schema.field_with_unqualified_name(&c).is_err() {
                        return Err(DataFusionError::Plan(format!(
                            "column '{c}' not found in table '{}'",
                            scan.table
                        )));
                    }
                    Ok(Expr::Column(Column::new_unqualified(c)))
                })
                .collect::<Result<Vec<_>>>()?;
            df = df.select(exprs)?;
        }
    }
    if let Some(n) = scan.limit {
        df = df.limit(0, Some(n))?;
    }
    Ok(df)
}
