//! Running a client's partial aggregate on a pushed-down scan.
//!
//! Silt's DataFusion client may push the partial half of an aggregate into
//! a scan (`silt_client::partial_aggregate`): `ScanRequest::partial_aggregate`
//! carries a `datafusion-proto` physical plan fragment — a `Partial`
//! aggregate over projections and filters — whose one leaf stands for the
//! scan. The server runs that fragment on its own physical scan and sends
//! the fragment's output (per-group accumulator states) instead of rows.
//!
//! A fragment is untrusted input. Its node types are checked on the
//! protobuf, before anything is decoded: a partial aggregate at the root,
//! then only projections and filters, down to exactly one
//! leaf, the scan. No other operator (a file scan naming a path, a join, a
//! sink) can be smuggled in. Functions are resolved in the server's own
//! registry, as pushed filters are.

use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use datafusion_proto::protobuf::physical_plan_node::PhysicalPlanType;
use datafusion_proto::protobuf::{self, PhysicalPlanNode};
use prost::Message;
use silt_proto::ROW_MARKER_COLUMN;

use crate::error::{FragmentError, RequestError, ServerError};

/// `scan` with the partial aggregate `fragment` (the encoded plan of
/// `ScanRequest::partial_aggregate`) on top; `table` names the scan in
/// errors.
pub fn attach(
    fragment: &[u8],
    scan: Arc<dyn ExecutionPlan>,
    task: &TaskContext,
    table: &str,
) -> Result<Arc<dyn ExecutionPlan>, ServerError> {
    let invalid = |reason| -> ServerError {
        RequestError::PartialAggregate {
            table: table.to_string(),
            reason,
        }
        .into()
    };
    let node = PhysicalPlanNode::decode(fragment).map_err(|e| invalid(FragmentError::NotAPlan(e)))?;
    check_shape(&node).map_err(invalid)?;
    let codec = ScanLeafCodec { scan };
    let plan = datafusion_proto::bytes::physical_plan_from_bytes_with_extension_codec(fragment, task, &codec)
        .map_err(|e| invalid(FragmentError::Decode(e)))?;
    let partial = plan
        .downcast_ref::<AggregateExec>()
        .is_some_and(|a| matches!(a.mode(), AggregateMode::Partial));
    if !partial {
        return Err(invalid(FragmentError::RootIs {
            root: plan.name().to_string(),
        }));
    }
    Ok(plan)
}

/// Checks, on the protobuf, that the fragment is a partial aggregate over a
/// chain of projections and filters ending in one leaf.
fn check_shape(root: &PhysicalPlanNode) -> Result<(), FragmentError> {
    let Some(PhysicalPlanType::Aggregate(agg)) = &root.physical_plan_type else {
        return Err(FragmentError::RootNotAggregate);
    };
    if agg.mode != protobuf::AggregateMode::Partial as i32 {
        return Err(FragmentError::NotPartial);
    }
    let mut next = agg.input.as_deref();
    loop {
        let node = next.ok_or(FragmentError::NoInput)?;
        next = match &node.physical_plan_type {
            Some(PhysicalPlanType::Projection(p)) => p.input.as_deref(),
            Some(PhysicalPlanType::Filter(f)) => f.input.as_deref(),
            Some(PhysicalPlanType::Extension(leaf)) if leaf.inputs.is_empty() => return Ok(()),
            Some(other) => {
                return Err(FragmentError::Operator {
                    operator: variant(other),
                });
            }
            None => return Err(FragmentError::EmptyOperator),
        };
    }
}

/// The protobuf variant's name, for errors.
fn variant(node: &PhysicalPlanType) -> String {
    let debug = format!("{node:?}");
    debug.split(['(', ' ']).next().unwrap_or_default().to_string()
}

/// Decodes the fragment's leaf as the server's own scan, once its schema is
/// the one the client planned the fragment for.
#[derive(Debug)]
struct ScanLeafCodec {
    scan: Arc<dyn ExecutionPlan>,
}

impl PhysicalExtensionCodec for ScanLeafCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !inputs.is_empty() {
            return Err(DataFusionError::Plan("the scan leaf has inputs".into()));
        }
        let proto =
            protobuf::Schema::decode(buf).map_err(|e| DataFusionError::Plan(format!("the scan leaf's schema: {e}")))?;
        let planned = Schema::try_from(&proto)?;
        let actual = self.scan.schema();
        // A scan of no columns (`count(*)`) answers one marker column per
        // row; the fragment was planned on zero columns: drop the marker.
        let marker_only = actual.fields().len() == 1 && actual.field(0).name() == ROW_MARKER_COLUMN;
        if planned.fields().is_empty() && marker_only {
            let no_columns = ProjectionExec::try_new(Vec::<ProjectionExpr>::new(), self.scan.clone())?;
            return Ok(Arc::new(no_columns));
        }
        let same = planned.fields().len() == actual.fields().len()
            && planned
                .fields()
                .iter()
                .zip(actual.fields())
                .all(|(p, a)| p.name() == a.name() && p.data_type() == a.data_type());
        if !same {
            return Err(DataFusionError::Plan(format!(
                "the aggregate was planned for columns {} but the scan gives {} (has the table changed?)",
                describe(&planned),
                describe(&actual)
            )));
        }
        Ok(self.scan.clone())
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        _buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        Err(DataFusionError::NotImplemented(format!(
            "the server does not encode fragments ({})",
            node.name()
        )))
    }
}

/// `name: type, ...` of a schema, for errors.
fn describe(schema: &Schema) -> String {
    let fields: Vec<_> = schema
        .fields()
        .iter()
        .map(|f| format!("{}: {}", f.name(), f.data_type()))
        .collect();
    format!("({})", fields.join(", "))
}
