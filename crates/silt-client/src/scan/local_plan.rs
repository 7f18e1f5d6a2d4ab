//! What a scan needs to run its row groups here ([`LocalPlan`]): built
//! from its [`ScanShape`] by the table when the session has a compute-side
//! cache, or by a worker of a distributed query, read by the hybrid route
//! and the bytes fetch. A leaf.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::common::{DFSchema, exec_err};
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::utils::conjunction;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::utils::{collect_columns, reassign_expr_columns};
use datafusion::physical_plan::ExecutionPlan;
use silt_core::CachedColumn;
use silt_proto::Projection;

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

/// What defines a scan's [`LocalPlan`], wherever the scan is planned: by
/// the table ([`crate::SiltTable`]) or rebuilt on a worker of a
/// distributed query ([`crate::distributed::SiltScanCodec`]).
pub struct ScanShape<'a> {
    pub table: &'a str,
    /// The table's whole schema: cached chunks are named by a column's
    /// index in it.
    pub schema: &'a SchemaRef,
    /// The table's row count, as the server estimates it.
    pub table_rows: Option<usize>,
    /// The projected columns (`None`: all).
    pub projection: Option<&'a Projection>,
    /// The scan's filters, their columns unqualified (as sent to the server).
    pub filters: Vec<Expr>,
    /// The filters as the client shows them: the key of observed selectivity.
    pub filter_text: &'a [String],
}

impl ScanShape<'_> {
    /// How the scan runs its row groups over `cache`, its filters made
    /// physical by `physical`; `None` when it cannot (an empty cache,
    /// nothing to cache, a column or filter that cannot be planned here).
    pub fn local_plan(
        self,
        cache: Arc<LocalCache>,
        physical: impl Fn(Expr, &DFSchema) -> Result<Arc<dyn PhysicalExpr>>,
    ) -> Option<LocalPlan> {
        if cache.budget() == 0 {
            return None;
        }
        let mut needed: Vec<String> = match self.projection {
            Some(p) => p.columns.clone(),
            None => self.schema.fields().iter().map(|f| f.name().clone()).collect(),
        };
        let projected = needed.len();
        for f in &self.filters {
            for c in f.column_refs() {
                if !needed.contains(&c.name) {
                    needed.push(c.name.clone());
                }
            }
        }
        if needed.is_empty() {
            return None;
        }
        let fields: Vec<_> = needed
            .iter()
            .map(|n| self.schema.field_with_name(n).ok().cloned())
            .collect::<Option<_>>()?;
        let columns: Vec<u32> = needed
            .iter()
            .map(|n| self.schema.index_of(n).ok().map(|i| i as u32))
            .collect::<Option<_>>()?;
        let wide_schema = Arc::new(Schema::new(fields));
        let filter = match conjunction(self.filters) {
            None => None,
            Some(expr) => {
                let df_schema = DFSchema::try_from(wide_schema.as_ref().clone()).ok()?;
                let predicate = physical(expr, &df_schema).ok()?;
                Some(LocalFilter::try_new(predicate, &wide_schema).ok()?)
            }
        };
        Some(LocalPlan {
            cache,
            needed,
            columns,
            projected,
            wide_schema,
            filter,
            filters_key: format!("{}: {}", self.table, self.filter_text.join(" AND ")),
            fragment: None,
            table_rows: self.table_rows,
        })
    }
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
