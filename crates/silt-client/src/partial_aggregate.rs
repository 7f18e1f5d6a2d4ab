//! Partial aggregation pushed to the server.
//!
//! A query that aggregates one Silt table (`SELECT k, sum(x) ... GROUP BY k`)
//! would otherwise bring every matching row across Flight for the client to
//! aggregate: TPC-H Q1 keeps 98% of `lineitem`, ~6M rows. DataFusion already
//! splits such an aggregate in two: a *partial* aggregate per input
//! partition, whose rows are per-group accumulator states, and a *final*
//! aggregate that merges them. [`PushPartialAggregate`] moves the partial
//! half, with the projections and filters between it and the scan, into the
//! scan: the server runs exactly that fragment of the client's physical plan
//! on its own scan and sends the states (a few rows per group), and the
//! client's final aggregate merges them as it would have merged its own.
//!
//! The answer is the one the client would have computed, because the server
//! runs the client's own planned operators, and only these:
//! - aggregates `count`, `sum`, `min`, `max`, `avg` (not `DISTINCT`, no
//!   `ORDER BY` inside the aggregate, no grouping sets);
//! - expressions that evaluate the same on any DataFusion
//!   ([`crate::pushable::is_exact_physical`]);
//! - between the aggregate and the scan, only projections and filters
//!   (round-robin repartitions and cooperative wrappers, which do not
//!   change rows, are dropped).
//!
//! Anything else keeps today's plan. The fragment travels as a
//! `datafusion-proto` physical plan whose one leaf is the scan itself
//! ([`FragmentCodec`] encodes it as the schema the fragment was planned
//! for); the server checks the fragment's node types against its own
//! allow-list before decoding it.

use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::Partitioning;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::prelude::SessionContext;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use prost::Message;

use crate::exec::SiltScanExec;
use crate::pushable::is_exact_physical;

/// Aggregate functions whose partial state the server computes exactly as
/// the client would.
const AGGREGATES: &[&str] = &["count", "sum", "min", "max", "avg"];

/// The physical optimizer rule that pushes partial aggregates into Silt
/// scans (see the module docs). Installed by [`install`].
#[derive(Debug, Default)]
pub struct PushPartialAggregate;

/// Adds [`PushPartialAggregate`] to `ctx`'s physical optimizer rules, once.
/// It runs last, on the plan DataFusion's own rules have settled.
pub fn install(ctx: &SessionContext) {
    crate::install_rule_last(ctx, Arc::new(PushPartialAggregate));
}

impl PhysicalOptimizerRule for PushPartialAggregate {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            Ok(match push_into_scan(&node)? {
                Some(pushed) => Transformed::yes(pushed),
                None => Transformed::no(node),
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "silt_push_partial_aggregate"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The replacement for `node` when it is a pushable aggregate over a Silt
/// scan: for a `Partial` aggregate, the scan carrying it; for a `Single`
/// one, a `Final` aggregate over that scan.
fn push_into_scan(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(agg) = node.downcast_ref::<AggregateExec>() else {
        return Ok(None);
    };
    if !matches!(agg.mode(), AggregateMode::Partial | AggregateMode::Single) || !aggregate_pushable(agg) {
        return Ok(None);
    }
    let Some((input, scan)) = fragment_input(agg.input())? else {
        return Ok(None);
    };
    let Some(scan) = scan.downcast_ref::<SiltScanExec>() else {
        return Ok(None);
    };
    let partial = AggregateExec::try_new(
        AggregateMode::Partial,
        agg.group_expr().clone(),
        agg.aggr_expr().to_vec(),
        agg.filter_expr().to_vec(),
        input,
        agg.input_schema(),
    )?
    .with_limit_options(agg.limit_options());
    let partial: Arc<dyn ExecutionPlan> = Arc::new(partial);
    let description = describe(&partial);
    let encoded =
        datafusion_proto::bytes::physical_plan_to_bytes_with_extension_codec(partial.clone(), &FragmentCodec)?;
    let pushed: Arc<dyn ExecutionPlan> =
        Arc::new(scan.with_partial_aggregate(encoded.to_vec(), partial.clone(), description));
    if matches!(agg.mode(), AggregateMode::Partial) {
        return Ok(Some(pushed));
    }
    let fin = AggregateExec::try_new(
        AggregateMode::Final,
        agg.group_expr().as_final(),
        agg.aggr_expr().to_vec(),
        agg.filter_expr().to_vec(),
        pushed,
        agg.input_schema(),
    )?
    .with_limit_options(agg.limit_options());
    Ok(Some(Arc::new(fin)))
}

/// Whether the aggregate's functions, groups and filters are all exact on
/// the server.
fn aggregate_pushable(agg: &AggregateExec) -> bool {
    let group = agg.group_expr();
    if group.has_grouping_set() {
        return false;
    }
    let functions_ok = agg.aggr_expr().iter().all(|a| {
        AGGREGATES.contains(&a.fun().name())
            && !a.is_distinct()
            && a.order_bys().is_empty()
            && a.expressions().iter().all(is_exact_physical)
    });
    let groups_ok = group.expr().iter().all(|(e, _)| is_exact_physical(e));
    let filters_ok = agg.filter_expr().iter().flatten().all(is_exact_physical);
    functions_ok && groups_ok && filters_ok
}

/// The chain from an aggregate's input down to a Silt scan, rebuilt with
/// only what the server will run (projections and filters), and
/// that scan.
type FragmentInput = (Arc<dyn ExecutionPlan>, Arc<dyn ExecutionPlan>);

/// The [`FragmentInput`] below an aggregate; `None` when the input is
/// anything but projections and filters over a Silt scan.
fn fragment_input(plan: &Arc<dyn ExecutionPlan>) -> Result<Option<FragmentInput>> {
    if let Some(scan) = plan.downcast_ref::<SiltScanExec>() {
        // Dynamic filters on the scan (a join's on group keys, the
        // aggregate's own for min/max) are not carried into the pushed scan:
        // they only ever narrow what the server sends, never the answer.
        if scan.has_partial_aggregate() {
            return Ok(None);
        }
        return Ok(Some((plan.clone(), plan.clone())));
    }
    let passes_rows_through = plan.downcast_ref::<CooperativeExec>().is_some()
        || plan
            .downcast_ref::<RepartitionExec>()
            .is_some_and(|r| matches!(r.partitioning(), Partitioning::RoundRobinBatch(_)) && !r.preserve_order());
    if passes_rows_through {
        return fragment_input(plan.children()[0]);
    }
    let exprs_ok = if let Some(p) = plan.downcast_ref::<ProjectionExec>() {
        p.expr().iter().all(|e| is_exact_physical(&e.expr))
    } else if let Some(f) = plan.downcast_ref::<FilterExec>() {
        is_exact_physical(f.predicate())
    } else {
        false
    };
    if !exprs_ok {
        return Ok(None);
    }
    let Some((input, scan)) = fragment_input(plan.children()[0])? else {
        return Ok(None);
    };
    let recompute = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
    Ok(Some((plan.clone().replace_children(vec![input], recompute)?, scan)))
}

/// One line for `EXPLAIN`: what the server computes per group.
fn describe(partial: &Arc<dyn ExecutionPlan>) -> String {
    let Some(agg) = partial.downcast_ref::<AggregateExec>() else {
        return String::new();
    };
    let groups: Vec<_> = agg.group_expr().expr().iter().map(|(e, _)| e.to_string()).collect();
    let aggs: Vec<_> = agg.aggr_expr().iter().map(|a| a.name().to_string()).collect();
    format!("gby=[{}] aggr=[{}]", groups.join(", "), aggs.join(", "))
}

/// Encodes the fragment's one leaf, the Silt scan, as the Arrow schema the
/// fragment was planned for (a `datafusion-proto` schema message); the
/// server decodes that leaf as its own scan, after checking the schemas
/// agree. Any other extension node is refused.
#[derive(Debug)]
pub struct FragmentCodec;

impl PhysicalExtensionCodec for FragmentCodec {
    fn try_decode(
        &self,
        _buf: &[u8],
        _inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Err(DataFusionError::NotImplemented(
            "a client does not decode pushed fragments".into(),
        ))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        if node.downcast_ref::<SiltScanExec>().is_none() {
            return Err(DataFusionError::NotImplemented(format!(
                "{} cannot be part of a fragment pushed to a Silt server",
                node.name()
            )));
        }
        let schema: &Schema = &node.schema();
        let proto = datafusion_proto::protobuf::Schema::try_from(schema)?;
        proto
            .encode(buf)
            .map_err(|e| DataFusionError::Internal(format!("encoding the scan's schema: {e}")))
    }
}
