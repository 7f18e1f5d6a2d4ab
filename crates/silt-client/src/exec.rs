//! `SiltScanExec`: the physical operator that runs a scan on the server.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Statistics, exec_err};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties};
use futures::{StreamExt, TryStreamExt};
use silt_proto::ScanRequest;

use crate::client::SiltClient;

/// Streams the result of a pushed-down scan from a Silt server. In `EXPLAIN`
/// it shows exactly what ran remotely: table, columns, filters and limit.
#[derive(Debug)]
pub struct SiltScanExec {
    client: SiltClient,
    request: ScanRequest,
    schema: SchemaRef,
    filter_text: Vec<String>,
    num_rows: Option<usize>,
    properties: Arc<PlanProperties>,
}

impl SiltScanExec {
    pub fn new(
        client: SiltClient,
        request: ScanRequest,
        schema: SchemaRef,
        filter_text: Vec<String>,
        num_rows: Option<usize>,
    ) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        SiltScanExec {
            client,
            request,
            schema,
            filter_text,
            num_rows,
            properties,
        }
    }

    /// The scan as it is sent to the server.
    pub fn request(&self) -> &ScanRequest {
        &self.request
    }
}

impl DisplayAs for SiltScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let columns = match &self.request.projection {
            None => "*".to_string(),
            Some(p) if p.columns.is_empty() => "<row count only>".to_string(),
            Some(p) => p.columns.join(", "),
        };
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => {
                write!(
                    f,
                    "SiltScanExec: pushed down to {} table={} projection=[{}]",
                    self.client.url(),
                    self.request.table,
                    columns
                )?;
                if !self.filter_text.is_empty() {
                    write!(f, " filters=[{}]", self.filter_text.join(", "))?;
                }
                if let Some(l) = self.request.limit {
                    write!(f, " limit={l}")?;
                }
                Ok(())
            }
            DisplayFormatType::TreeRender => write!(f, "table={}", self.request.table),
        }
    }
}

/// Give a batch from the server the schema the client planned with. A scan
/// with no columns comes back as one boolean marker column: keep only the
/// row count.
fn adapt(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if schema.fields().is_empty() {
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        return Ok(RecordBatch::try_new_with_options(schema.clone(), vec![], &options)?);
    }
    if batch.num_columns() != schema.fields().len() {
        return exec_err!(
            "server returned {} columns, expected {}",
            batch.num_columns(),
            schema.fields().len()
        );
    }
    Ok(RecordBatch::try_new(schema.clone(), batch.columns().to_vec())?)
}

impl ExecutionPlan for SiltScanExec {
    fn name(&self) -> &'static str {
        "SiltScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            exec_err!("SiltScanExec has no children")
        }
    }

    fn execute(&self, partition: usize, _context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return exec_err!("SiltScanExec has one partition, asked for {partition}");
        }
        let client = self.client.clone();
        let request = self.request.clone();
        let schema = self.schema.clone();
        let out_schema = schema.clone();
        let stream = futures::stream::once(async move {
            let batches = client.scan(&request).await.map_err(DataFusionError::from)?;
            let table = request.table.clone();
            Ok::<_, DataFusionError>(batches.map(move |r| {
                r.map_err(|e| {
                    DataFusionError::External(
                        format!("scan of '{table}' on {}: {}", client.url(), client.describe_error(e)).into(),
                    )
                })
                .and_then(|b| adapt(b, &schema))
            }))
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(out_schema, stream)))
    }

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        let mut stats = Statistics::new_unknown(&self.schema);
        stats.num_rows = self.num_rows.map_or(Precision::Absent, Precision::Inexact);
        Ok(Arc::new(stats))
    }
}
