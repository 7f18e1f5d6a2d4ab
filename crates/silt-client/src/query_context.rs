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
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;

use crate::exec::SiltScanExec;

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

/// Executions seen, by their `TaskContext` (dead ones are dropped).
type Executions = Mutex<Vec<(Weak<TaskContext>, String)>>;

/// The id of the execution `context` belongs to: the same for every scan
/// of one execution of a plan, different for every other execution (in
/// this process or another).
pub fn execution_id(context: &Arc<TaskContext>) -> String {
    static EXECUTIONS: OnceLock<Executions> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static PROCESS: OnceLock<u64> = OnceLock::new();
    let process = *PROCESS.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.finish()
    });
    let executions = EXECUTIONS.get_or_init(Executions::default);
    let mut executions = executions.lock().unwrap_or_else(|p| p.into_inner());
    executions.retain(|(w, _)| w.strong_count() > 0);
    if let Some((_, id)) = executions
        .iter()
        .find(|(w, _)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(context)))
    {
        return id.clone();
    }
    let id = format!("{process:016x}-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    executions.push((Arc::downgrade(context), id.clone()));
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_id_per_execution() {
        let a = Arc::new(TaskContext::default());
        let b = Arc::new(TaskContext::default());
        assert_eq!(execution_id(&a), execution_id(&a.clone()));
        assert_ne!(execution_id(&a), execution_id(&b));
        let first = execution_id(&a);
        drop(a);
        let c = Arc::new(TaskContext::default());
        assert_ne!(execution_id(&c), first);
    }
}
