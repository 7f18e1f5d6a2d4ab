//! What a scan needs to run its row groups here ([`LocalPlan`]): built
//! by the table when the session has a compute-side cache, read by the
//! hybrid route and the bytes fetch. A leaf.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::common::exec_err;
use datafusion::error::Result;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::utils::{collect_columns, reassign_expr_columns};
use datafusion::physical_plan::ExecutionPlan;
use silt_core::CachedColumn;

use crate::local_cache::LocalCache;

/// What a scan needs to run its row groups locally.
#[derive(Debug, Clone)]
pub struct LocalPlan {
    pub cache: Arc<LocalCache>,
    /// Table columns read, in the order of `wide_schema`: the projected
    /// ones, then those only the filters read.
    pub needed: Vec<String>,
    /// The index in the table's schema of each of `needed`: the column of
    /// its cached chunks' [`ChunkKey`](silt_core::ChunkKey)s.
    pub columns: Vec<u32>,
    /// How many of `needed` (its first ones) are projected.
    pub projected: usize,
    pub wide_schema: SchemaRef,
    /// The conjunction of the scan's filters.
    pub filter: Option<LocalFilter>,
    /// The table and filters, the key of observed selectivity.
    pub filters_key: String,
    /// The partial aggregate pushed into the scan (its leaf: the scan
    /// without it), run on local rows too.
    pub fragment: Option<Arc<dyn ExecutionPlan>>,
    /// The table's row count, as the server estimates it.
    pub table_rows: Option<usize>,
}

/// A scan's filters, run on a row group's cached columns.
#[derive(Debug, Clone)]
pub struct LocalFilter {
    /// Positions in [`LocalPlan::needed`] of the columns the predicate reads.
    pub(crate) columns: Vec<usize>,
    /// The predicate over a batch of just those columns, in that order.
    predicate: Arc<dyn PhysicalExpr>,
    schema: SchemaRef,
}

impl LocalFilter {
    /// `predicate` (over `wide_schema`), evaluated on its own columns only.
    pub fn try_new(predicate: Arc<dyn PhysicalExpr>, wide_schema: &Schema) -> Result<Self> {
        let mut columns: Vec<usize> = collect_columns(&predicate).iter().map(|c| c.index()).collect();
        columns.sort_unstable();
        columns.dedup();
        let schema = Arc::new(Schema::new(
            columns
                .iter()
                .map(|&i| wide_schema.field(i).clone())
                .collect::<Vec<_>>(),
        ));
        let predicate = reassign_expr_columns(predicate, &schema)?;
        Ok(LocalFilter {
            columns,
            predicate,
            schema,
        })
    }

    /// The rows of a row group of `rows` rows that pass, nulls folded to
    /// false, from its `segments` (per needed column; the filter's must be
    /// there). Also returns the filter's columns decoded, for reuse.
    pub(crate) fn evaluate(
        &self,
        segments: &[Option<CachedColumn>],
        rows: usize,
    ) -> Result<(BooleanArray, Vec<(usize, ArrayRef)>)> {
        let decoded: Vec<(usize, ArrayRef)> = self
            .columns
            .iter()
            .map(|&c| match &segments[c] {
                Some(s) => Ok((c, s.to_arrow())),
                None => exec_err!("the filter's column #{c} is not cached"),
            })
            .collect::<Result<_>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        let batch = RecordBatch::try_new_with_options(
            self.schema.clone(),
            decoded.iter().map(|(_, a)| a.clone()).collect(),
            &options,
        )?;
        let mask = self.predicate.evaluate(&batch)?.into_array(rows)?;
        let mask = mask.as_boolean();
        let bits = match mask.nulls() {
            Some(n) => mask.values() & n.inner(),
            None => mask.values().clone(),
        };
        Ok((BooleanArray::from(bits), decoded))
    }

    /// Whether the filter reads needed column `c`.
    pub(crate) fn reads(&self, c: usize) -> bool {
        self.columns.contains(&c)
    }
}
