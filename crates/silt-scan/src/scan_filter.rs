//! A scan's filters, compiled once per scan: the columns they read, a
//! predicate over just those columns (evaluated per batch), and a pruning
//! predicate over the table schema (evaluated per row group on statistics).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::{DFSchema, Result};
use datafusion::datasource::physical_plan::parquet::{ParquetAccessPlan, ParquetFileMetrics, RowGroupAccessPlanFilter};
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::expr_rewriter::unnormalize_col;
use datafusion::logical_expr::utils::conjunction;
use datafusion::parquet::file::metadata::ParquetMetaData;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::pruning::{PruningPredicate, PruningPredicateBuilder};

/// The filters of one scan.
#[derive(Debug)]
pub struct ScanFilter {
    /// Table column indices the predicate reads, ascending.
    columns: Vec<usize>,
    /// The schema of those columns, in that order.
    schema: SchemaRef,
    /// The conjunction of the filters, bound to `schema`.
    predicate: Arc<dyn PhysicalExpr>,
    /// The same conjunction for row-group pruning, when statistics can help.
    pruning: Option<Arc<PruningPredicate>>,
    /// The filters as text, for `EXPLAIN`.
    text: String,
}

impl ScanFilter {
    /// Compiles `filters` against `table_schema`; `None` when there are none.
    pub fn try_new(state: &dyn Session, table_schema: &SchemaRef, filters: &[Expr]) -> Result<Option<Self>> {
        let Some(expr) = conjunction(filters.iter().cloned().map(unnormalize_col)) else {
            return Ok(None);
        };
        let mut columns: Vec<usize> = expr
            .column_refs()
            .into_iter()
            .map(|c| table_schema.index_of(&c.name))
            .collect::<std::result::Result<_, _>>()?;
        columns.sort_unstable();
        columns.dedup();
        let schema = Arc::new(table_schema.project(&columns)?);
        let predicate = state.create_physical_expr(expr.clone(), &DFSchema::try_from(schema.as_ref().clone())?)?;
        let full = state.create_physical_expr(expr.clone(), &DFSchema::try_from(table_schema.as_ref().clone())?)?;
        // A predicate statistics cannot decide (e.g. a UDF) just prunes nothing.
        let pruning = PruningPredicateBuilder::new()
            .with_file_schema(table_schema.clone())
            .build(full);
        Ok(Some(ScanFilter {
            columns,
            schema,
            predicate,
            pruning,
            text: expr.to_string(),
        }))
    }

    /// Table column indices the predicate reads.
    pub fn columns(&self) -> &[usize] {
        &self.columns
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// The row groups of a file that statistics do not rule out.
    pub fn row_groups(
        &self,
        table_schema: &Schema,
        metadata: &ParquetMetaData,
        file_metrics: &ParquetFileMetrics,
    ) -> Vec<usize> {
        let groups = metadata.row_groups();
        let mut plan = RowGroupAccessPlanFilter::new(ParquetAccessPlan::new_all(groups.len()));
        if let Some(pruning) = &self.pruning {
            plan.prune_by_statistics(
                table_schema,
                metadata.file_metadata().schema_descr(),
                groups,
                pruning,
                file_metrics,
            );
        }
        plan.row_group_indexes().collect()
    }

    /// Which rows of one batch pass, given the predicate's columns (in the
    /// order of [`Self::columns`]). Null counts as false, as in SQL.
    pub fn evaluate(&self, columns: Vec<ArrayRef>, num_rows: usize) -> Result<BooleanArray> {
        let options = RecordBatchOptions::new().with_row_count(Some(num_rows));
        let batch = RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)?;
        let value = self.predicate.evaluate(&batch)?.into_array(num_rows)?;
        let mask = value.as_any().downcast_ref::<BooleanArray>().cloned().ok_or_else(|| {
            datafusion::error::DataFusionError::Internal(format!(
                "filter {} returned {}, not booleans",
                self.text,
                value.data_type()
            ))
        })?;
        Ok(match mask.nulls() {
            Some(_) => datafusion::arrow::compute::prep_null_mask_filter(&mask),
            None => mask,
        })
    }
}
