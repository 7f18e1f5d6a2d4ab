//! Which client query a scan belongs to ([`silt_proto::QueryContext`]).
//!
//! Under `validation = "always"` every scan of a query must see object
//! versions validated after the query began. Sent as independent scans,
//! a join of eight tables waits for eight validations one after the other
//! (a join's probe side starts only once its build side is read). So
//! each scan tells the server which query it is part of and which tables
//! that query reads: the server validates them all when the query's first
//! scan arrives, and the later scans find their validations done.
//!
//! - [`AnnounceQueryTables`], a physical optimizer rule run after every
//!   other, gives each [`SiltScanExec`] of a plan the names of all the
//!   plan's Silt tables.
//! - [`execution_id`] names one execution of a plan: DataFusion hands the
//!   same `TaskContext` to every operator of one execution, so scans that
//!   share it share the id.

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;

use crate::exec::SiltScanExec;
pub use crate::scan::query_id::execution_id;

/// The physical optimizer rule that tells each Silt scan every table its
/// plan scans (module docs). Installed by [`crate::register_tables_with`].
#[derive(Debug, Default)]
pub struct AnnounceQueryTables;

impl PhysicalOptimizerRule for AnnounceQueryTables {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let mut tables = BTreeSet::new();
        plan.apply(|node| {
            if let Some(scan) = node.downcast_ref::<SiltScanExec>() {
                tables.insert(scan.request().table.clone());
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        if tables.is_empty() {
            return Ok(plan);
        }
        let tables: Arc<[String]> = tables.into_iter().collect();
        plan.transform_up(|node| {
            Ok(match node.downcast_ref::<SiltScanExec>() {
                Some(scan) => {
                    Transformed::yes(Arc::new(scan.with_query_tables(tables.clone())) as Arc<dyn ExecutionPlan>)
                }
                None => Transformed::no(node),
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "silt_announce_query_tables"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Adds [`AnnounceQueryTables`] to `ctx`'s physical optimizer rules, once,
/// after every rule already there (it must see the final scans).
pub fn install(ctx: &datafusion::prelude::SessionContext) {
    crate::install_rule_last(ctx, Arc::new(AnnounceQueryTables));
}
