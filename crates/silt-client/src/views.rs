//! A server's views, planned on the client over the tables under them.
//!
//! Pushed whole, a view's rows are computed on the server and the client
//! sees one opaque table: no row groups, so no compute-side cache and no
//! per-row-group choice (ClickBench's `hits` view over `hits_raw`). With a
//! cache, the client reads each view's SQL from `silt_system.tables` and
//! plans it here, over its own [`crate::SiltTable`]s of the server's
//! tables, so every scan under the view decides per row group like a scan
//! of a table. The view is planned here only when that gives exactly the
//! server's view: its SQL plans against the client's tables and its schema
//! (names and types) equals the one the server reports; else it stays a
//! pushed table.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Schema;
use datafusion::catalog::TableProvider;
use datafusion::datasource::ViewTable;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;

use crate::SiltTable;
use crate::client::SiltClient;

/// The SQL of each view the server serves, from `silt_system.tables`
/// (empty if the server does not say: an older server).
pub async fn definitions(client: &SiltClient) -> HashMap<String, String> {
    let sql = "SELECT table_name, definition FROM silt_system.tables \
               WHERE kind = 'VIEW' AND definition IS NOT NULL";
    let batches = match client.sql(sql).await {
        Ok(batches) => batches,
        Err(e) => {
            tracing::debug!(error = %e, "no view definitions; views are pushed down whole");
            return HashMap::new();
        }
    };
    let mut out = HashMap::new();
    for batch in &batches {
        let (Some(names), Some(sqls)) = (
            batch.column(0).as_string_opt::<i32>(),
            batch.column(1).as_string_opt::<i32>(),
        ) else {
            continue;
        };
        for (name, sql) in names.iter().zip(sqls.iter()) {
            if let (Some(name), Some(sql)) = (name, sql) {
                out.insert(name.to_string(), sql.to_string());
            }
        }
    }
    out
}

/// `server_view` planned in `ctx` from its `definition`, when that is
/// exactly the server's view (module docs); `None`: push it whole.
pub async fn plan_here(
    ctx: &SessionContext,
    server_view: &SiltTable,
    definition: Option<&String>,
) -> Option<Arc<dyn TableProvider>> {
    let sql = definition?;
    let name = server_view.name();
    let plan = match ctx.state().create_logical_plan(sql).await {
        Ok(plan @ LogicalPlan::Projection(_))
        | Ok(plan @ LogicalPlan::Filter(_))
        | Ok(plan @ LogicalPlan::Aggregate(_))
        | Ok(plan @ LogicalPlan::Sort(_))
        | Ok(plan @ LogicalPlan::Limit(_))
        | Ok(plan @ LogicalPlan::Union(_))
        | Ok(plan @ LogicalPlan::Distinct(_))
        | Ok(plan @ LogicalPlan::Join(_))
        | Ok(plan @ LogicalPlan::SubqueryAlias(_))
        | Ok(plan @ LogicalPlan::TableScan(_)) => plan,
        Ok(other) => {
            tracing::debug!(
                view = name,
                plan = other.display().to_string(),
                "not a query; pushed whole"
            );
            return None;
        }
        Err(e) => {
            tracing::debug!(view = name, error = %e, "does not plan here; pushed whole");
            return None;
        }
    };
    let local: Arc<dyn TableProvider> = Arc::new(ViewTable::new(plan, Some(sql.clone())));
    if !same_columns(&local.schema(), &server_view.schema()) {
        tracing::debug!(view = name, "planned here it has another schema; pushed whole");
        return None;
    }
    Some(local)
}

/// Whether `a` and `b` have the same column names and types, in order
/// (nullability aside: a view's is derived, and either is exact for rows).
fn same_columns(a: &Schema, b: &Schema) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields()
            .iter()
            .zip(b.fields())
            .all(|(x, y)| x.name() == y.name() && x.data_type() == y.data_type())
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::{DataType, Field};

    use super::*;

    #[test]
    fn same_columns_compares_names_and_types_not_nullability() {
        let a = Schema::new(vec![Field::new("x", DataType::Int64, true)]);
        let b = Schema::new(vec![Field::new("x", DataType::Int64, false)]);
        let c = Schema::new(vec![Field::new("x", DataType::Int32, true)]);
        let d = Schema::new(vec![Field::new("y", DataType::Int64, true)]);
        assert!(same_columns(&a, &b));
        assert!(!same_columns(&a, &c));
        assert!(!same_columns(&a, &d));
        assert!(!same_columns(&a, &Schema::empty()));
    }
}
