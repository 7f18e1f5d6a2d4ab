//! A scan's filters, compiled once per scan: the columns they read, the
//! conjuncts over just those columns (evaluated per batch, on liquid columns
//! without decoding where the encoding can), a pruning predicate over the
//! table schema (evaluated per row group on statistics and on bloom
//! filters), and its single-column conjuncts for the page index.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::BooleanBufferBuilder;
use datafusion::arrow::array::UInt64Array;
use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::datatypes::{FieldRef, Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::pruning::PruningStatistics;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema, Result, ScalarValue};
use datafusion::datasource::physical_plan::parquet::{
    BloomFilterStatistics, PagePruningAccessPlanFilter, ParquetAccessPlan, ParquetFileMetrics, RowGroupAccess,
    RowGroupAccessPlanFilter,
};
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::expr_rewriter::unnormalize_col;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::parquet::arrow::parquet_to_arrow_schema;
use datafusion::parquet::file::metadata::ParquetMetaData;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column as BoundColumn;
use datafusion::physical_optimizer::pruning::{PruningPredicate, PruningPredicateBuilder};
use silt_cache::CachedColumn;
use silt_liquid::LiquidPredicate;

use crate::file_columns::{file_columns, in_table_order};
use crate::lakehouse::bucket::bucket_of;
use crate::liquid_predicate;

/// A predicate bound to one file's column order.
struct FilePruning {
    schema: SchemaRef,
    pruning: Option<Arc<PruningPredicate>>,
    pages: Option<PagePruningAccessPlanFilter>,
}

/// The schema a file's statistics and page index are read in, when its
/// columns are not the table's in the table's order (a schema change, a
/// column kept outside the files); `None` when they are. DataFusion's
/// pruning finds a column's statistics by its position among the Arrow
/// fields, so with the table's schema such a file would be pruned by
/// another column's statistics (wrong answers). This is the file's own
/// columns in the file's order, each as the table column it holds
/// ([`file_columns`]: its name and type; a file column the table does not
/// have keeps a name no table column has), then the table's columns the
/// file lacks (no statistics: they prune nothing).
fn pruning_schema(table_schema: &Schema, metadata: &ParquetMetaData) -> Option<Result<Schema>> {
    let descr = metadata.file_metadata().schema_descr();
    let columns = file_columns(table_schema, metadata);
    if in_table_order(&columns, descr.root_schema().get_fields().len()) {
        return None;
    }
    let file = match parquet_to_arrow_schema(descr, None) {
        Ok(file) => file,
        Err(e) => return Some(Err(e.into())),
    };
    let mut fields: Vec<FieldRef> = file
        .fields()
        .iter()
        .enumerate()
        .map(|(root, f)| match columns.iter().position(|&c| c == Some(root)) {
            Some(t) => Arc::new(table_schema.field(t).clone()),
            None => Arc::new(
                f.as_ref()
                    .clone()
                    .with_name(format!("{} (file column {root})", f.name())),
            ),
        })
        .collect();
    for (field, column) in table_schema.fields().iter().zip(&columns) {
        if column.is_none() {
            fields.push(field.clone());
        }
    }
    Some(Ok(Schema::new(fields)))
}

/// What a table's metadata knows of one file's columns before its footer
/// is read (per table column): a Delta partition column's one value
/// (minimum = maximum, no nulls unless it is null), or the log's minimum,
/// maximum and null count; `None` where nothing is known.
#[derive(Debug, Clone, Default)]
pub struct FileStatistics {
    pub min: Vec<Option<ScalarValue>>,
    pub max: Vec<Option<ScalarValue>>,
    pub nulls: Vec<Option<u64>>,
    pub rows: Option<u64>,
    /// Per column, the one `bucket[N]` bucket `(N, bucket)` all its values
    /// are in (an Iceberg bucket partition), if known
    /// ([`crate::lakehouse::bucket`]).
    pub buckets: Vec<Option<(u32, i32)>>,
}

impl FileStatistics {
    /// Whether column `column` of the file may hold one of `keys` (non-null
    /// values of the column's type): some key within its bounds and its
    /// bucket, unknown ones admitting it. What a lookup skips a file by
    /// before reading its footer.
    pub fn may_hold(&self, column: usize, keys: &[ScalarValue]) -> bool {
        let known = |of: &[Option<ScalarValue>]| of.get(column).cloned().flatten();
        let (min, max) = (known(&self.min), known(&self.max));
        let bucket = self.buckets.get(column).copied().flatten();
        keys.iter().any(|k| {
            let above_min = min.as_ref().is_none_or(|m| m.partial_cmp(k).is_none_or(|o| o.is_le()));
            let below_max = max.as_ref().is_none_or(|m| m.partial_cmp(k).is_none_or(|o| o.is_ge()));
            let in_bucket = bucket.is_none_or(|(n, b)| bucket_of(k, n).is_none_or(|kb| kb == b));
            above_min && below_max && in_bucket
        })
    }

    /// Whether nothing is known of any column.
    pub fn is_empty(&self) -> bool {
        self.min.iter().chain(&self.max).all(Option::is_none)
            && self.nulls.iter().all(Option::is_none)
            && self.buckets.iter().all(Option::is_none)
    }
}

/// [`FileStatistics`] as DataFusion's pruning reads them: one container.
struct OneFile<'a> {
    schema: &'a Schema,
    file: &'a FileStatistics,
}

impl OneFile<'_> {
    fn index(&self, column: &Column) -> Option<usize> {
        self.schema.index_of(column.name()).ok()
    }

    fn value(&self, column: &Column, of: &[Option<ScalarValue>]) -> Option<ArrayRef> {
        of.get(self.index(column)?)?.as_ref()?.to_array_of_size(1).ok()
    }
}

impl PruningStatistics for OneFile<'_> {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        self.value(column, &self.file.min)
    }

    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        self.value(column, &self.file.max)
    }

    fn num_containers(&self) -> usize {
        1
    }

    fn null_counts(&self, column: &Column) -> Option<ArrayRef> {
        let nulls = (*self.file.nulls.get(self.index(column)?)?)?;
        Some(Arc::new(UInt64Array::from(vec![nulls])) as ArrayRef)
    }

    fn row_counts(&self) -> Option<ArrayRef> {
        self.file
            .rows
            .map(|rows| Arc::new(UInt64Array::from(vec![rows])) as ArrayRef)
    }

    #[allow(clippy::mutable_key_type)] // ScalarValue as a key, as the trait has it
    fn contained(&self, column: &Column, values: &HashSet<ScalarValue>) -> Option<BooleanArray> {
        let index = self.index(column)?;
        if let Some(Some((n, bucket))) = self.file.buckets.get(index) {
            // Every value is in one bucket: none of the literals may be.
            let column_type = self.schema.field(index).data_type();
            // A literal cast to the column's type only if nothing is lost.
            let exact = |v: &ScalarValue| {
                let cast = v.cast_to(column_type).ok()?;
                (cast.cast_to(&v.data_type()).ok()? == *v).then_some(cast)
            };
            let theirs: Option<Vec<i32>> = values.iter().map(|v| bucket_of(&exact(v)?, *n)).collect();
            if theirs.is_some_and(|b| !b.contains(bucket)) {
                return Some(BooleanArray::from(vec![false]));
            }
        }
        // Only a column with one value (min = max, no nulls) is contained
        // or not; values of another type (they should not be) decide nothing.
        let (min, max) = (self.file.min.get(index)?.as_ref()?, self.file.max.get(index)?.as_ref()?);
        let one = min == max && !min.is_null() && self.file.nulls.get(index).copied().flatten() == Some(0);
        let comparable = one && values.iter().all(|v| v.data_type() == min.data_type());
        comparable.then(|| BooleanArray::from(vec![values.contains(min)]))
    }
}

/// One conjunct of the filter.
#[derive(Debug)]
struct Conjunct {
    /// Positions in [`ScanFilter::columns`] of the columns it reads.
    slots: Vec<usize>,
    /// Those columns' schema.
    schema: SchemaRef,
    /// The conjunct, bound to `schema`.
    expr: Arc<dyn PhysicalExpr>,
    /// The conjunct as a predicate on encoded values of `slots[0]`, when
    /// the liquid encoding may evaluate it.
    liquid: Option<LiquidPredicate>,
}

/// The filters of one scan.
#[derive(Debug)]
pub struct ScanFilter {
    /// Table column indices the predicate reads, ascending.
    columns: Vec<usize>,
    /// The conjuncts, in evaluation order: liquid-evaluable ones first,
    /// cheapest kinds first; the rest after.
    conjuncts: Vec<Conjunct>,
    /// The same conjunction for row-group pruning, when statistics can help.
    pruning: Option<Arc<PruningPredicate>>,
    /// Its single-column conjuncts, for page pruning with the page index
    /// (`None` when no conjunct can use it).
    pages: Option<PagePruningAccessPlanFilter>,
    /// The whole predicate, bound to the table schema: rebound per file
    /// whose columns are in another order ([`FilePruning`]).
    full: Arc<dyn PhysicalExpr>,
    /// The filters as text, for `EXPLAIN`.
    text: String,
}

impl ScanFilter {
    /// Compiles `filters` against `table_schema`; `None` when there are none.
    pub fn try_new(state: &dyn Session, table_schema: &SchemaRef, filters: &[Expr]) -> Result<Option<Self>> {
        let Some(expr) = conjunction(filters.iter().cloned().map(unnormalize_col)) else {
            return Ok(None);
        };
        let columns = column_indices(&expr, table_schema)?;
        let mut conjuncts = split_conjunction(&expr)
            .into_iter()
            .map(|c| Conjunct::try_new(state, table_schema, &columns, c))
            .collect::<Result<Vec<_>>>()?;
        conjuncts.sort_by_key(|c| c.liquid.as_ref().map_or(u8::MAX, liquid_predicate::rank));
        let full = state.create_physical_expr(expr.clone(), &DFSchema::try_from(table_schema.as_ref().clone())?)?;
        // A predicate statistics cannot decide (e.g. a UDF) just prunes nothing.
        let pages =
            Some(PagePruningAccessPlanFilter::new(&full, table_schema.clone())).filter(|p| p.filter_number() > 0);
        let pruning = PruningPredicateBuilder::new()
            .with_file_schema(table_schema.clone())
            .build(full.clone());
        Ok(Some(ScanFilter {
            columns,
            conjuncts,
            pruning,
            pages,
            full,
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

    /// Table columns whose every conjunct is a predicate that keeps few
    /// entries of a typical column (`=`, `IN`, `LIKE`; not `<>`, `NOT LIKE`
    /// or a range): the rows the filter keeps are then among the entries
    /// those predicates matched ([`silt_liquid::ValueUse::Filtered`]).
    pub fn matching_columns(&self) -> Vec<usize> {
        let matching = |c: &Conjunct| {
            matches!(
                &c.liquid,
                Some(
                    LiquidPredicate::Compare {
                        op: silt_liquid::CmpOp::Eq,
                        ..
                    } | LiquidPredicate::InList { negated: false, .. }
                        | LiquidPredicate::Like { negated: false, .. }
                )
            )
        };
        (0..self.columns.len())
            .filter(|slot| {
                let on_it = self.conjuncts.iter().filter(|c| c.slots.contains(slot));
                on_it.clone().count() > 0 && on_it.clone().all(|c| c.slots.len() == 1 && matching(c))
            })
            .map(|slot| self.columns[slot])
            .collect()
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
        let rebound = self.for_file(table_schema, metadata);
        let (schema, pruning) = match &rebound {
            Some(file) => (file.schema.as_ref(), &file.pruning),
            None => (table_schema, &self.pruning),
        };
        if let Some(pruning) = pruning {
            plan.prune_by_statistics(
                schema,
                metadata.file_metadata().schema_descr(),
                groups,
                pruning,
                file_metrics,
            );
        }
        plan.row_group_indexes().collect()
    }

    /// The predicate rebound for a file whose columns are not the table's
    /// in the table's order; `None` for one whose are (the usual case). A
    /// file whose schema cannot be read this way is pruned by nothing.
    fn for_file(&self, table_schema: &Schema, metadata: &ParquetMetaData) -> Option<FilePruning> {
        let nothing = || FilePruning {
            schema: Arc::new(Schema::empty()),
            pruning: None,
            pages: None,
        };
        let schema = match pruning_schema(table_schema, metadata)? {
            Ok(schema) => schema,
            Err(_) => return Some(nothing()),
        };
        let rebound = Arc::clone(&self.full)
            .transform(|e| {
                let Some(column) = e.downcast_ref::<BoundColumn>() else {
                    return Ok(Transformed::no(e));
                };
                let index = schema.index_of(column.name())?;
                Ok(Transformed::yes(
                    Arc::new(BoundColumn::new(column.name(), index)) as Arc<dyn PhysicalExpr>
                ))
            })
            .map(|t| t.data);
        let Ok(rebound) = rebound else {
            return Some(nothing());
        };
        let schema = Arc::new(schema);
        let pages = Some(PagePruningAccessPlanFilter::new(&rebound, schema.clone())).filter(|p| p.filter_number() > 0);
        let pruning = PruningPredicateBuilder::new()
            .with_file_schema(schema.clone())
            .build(rebound);
        Some(FilePruning { schema, pruning, pages })
    }

    /// Whether a file of which the table's metadata knows `file` (per
    /// column of `table_schema`) may hold a matching row: false only when
    /// those values rule the filter out (partition pruning and the log's
    /// statistics, before the file's footer is read).
    pub fn may_match_file(&self, table_schema: &Schema, file: &FileStatistics) -> bool {
        let Some(pruning) = &self.pruning else {
            return true;
        };
        if file.is_empty() {
            return true;
        }
        let statistics = OneFile {
            schema: table_schema,
            file,
        };
        pruning
            .prune(&statistics)
            .map_or(true, |keep| keep.first().copied().unwrap_or(true))
    }

    /// Table columns the filter compares with literals (`c = 5`,
    /// `c IN ('a', 'b')`): the columns whose bloom filters can prune.
    pub fn bloom_columns(&self) -> Vec<String> {
        self.pruning.as_ref().map(|p| p.literal_columns()).unwrap_or_default()
    }

    /// Whether a row group whose bloom filters are `filters` may hold a
    /// matching row (false only when every value some conjunct needs is
    /// certainly absent). Counted in `file_metrics` as DataFusion does.
    pub fn bloom_may_match(&self, filters: &BloomFilterStatistics, file_metrics: &ParquetFileMetrics) -> bool {
        let Some(pruning) = &self.pruning else {
            return true;
        };
        let mut plan = RowGroupAccessPlanFilter::new(ParquetAccessPlan::new_all(1));
        plan.prune_by_bloom_filters(pruning, file_metrics, std::slice::from_ref(filters));
        plan.remaining_row_group_count() > 0
    }

    /// For each of `groups` (row groups of the file `metadata` describes),
    /// which rows the page index does not rule out: `Scan` (all),
    /// `Selection`, or `Skip` (no page can match). Without a page index
    /// (or a conjunct that can use one) every group is `Scan`. Pages pruned
    /// are counted in `file_metrics.page_index_pages_pruned`.
    pub fn page_selections(
        &self,
        table_schema: &Schema,
        metadata: &ParquetMetaData,
        groups: &[usize],
        file_metrics: &ParquetFileMetrics,
    ) -> Vec<RowGroupAccess> {
        let rebound = self.for_file(table_schema, metadata);
        let (schema, pages) = match &rebound {
            Some(file) => (file.schema.as_ref(), &file.pages),
            None => (table_schema, &self.pages),
        };
        let Some(pages) = pages else {
            return vec![RowGroupAccess::Scan; groups.len()];
        };
        let mut plan = ParquetAccessPlan::new_none(metadata.num_row_groups());
        for &rg in groups {
            plan.scan(rg);
        }
        let plan = pages.prune_plan_with_page_index(
            plan,
            schema,
            metadata.file_metadata().schema_descr(),
            metadata,
            file_metrics,
        );
        let mut access = plan.into_inner();
        groups
            .iter()
            .map(|&rg| std::mem::replace(&mut access[rg], RowGroupAccess::Skip))
            .collect()
    }

    /// Which rows of one batch pass, given the predicate's columns (in the
    /// order of [`Self::columns`]) as the memory tier holds them. Null counts
    /// as false, as in SQL.
    ///
    /// Conjuncts run in order, each only on the rows earlier ones kept (late
    /// materialization): a liquid column evaluates a translatable conjunct on
    /// its encoded values; any other conjunct gets its columns decoded for
    /// just the surviving rows and is evaluated by DataFusion.
    pub fn evaluate(&self, columns: &[CachedColumn], num_rows: usize) -> Result<BooleanArray> {
        let mut mask: Option<BooleanArray> = None;
        for c in &self.conjuncts {
            if mask.as_ref().is_some_and(|m| m.true_count() == 0) {
                break;
            }
            // Encoded evaluation looks at every row; once earlier conjuncts
            // left few, decoding just those rows is cheaper (late
            // materialization) — unless the encoding evaluates per dictionary
            // entry, where the rows cost only a key lookup each.
            let sparse = mask.as_ref().is_some_and(|m| m.true_count() * SPARSE < num_rows);
            let encoded = match (&c.liquid, c.slots.first().map(|&s| &columns[s])) {
                (Some(p), Some(CachedColumn::Liquid { array, .. })) if !sparse || array.evaluates_per_entry() => {
                    array.evaluate(p)
                }
                _ => None,
            };
            let passed = match encoded {
                Some(result) => and(mask.as_ref(), &without_nulls(result))?,
                None => c.evaluate_on(columns, mask.as_ref(), num_rows, &self.text)?,
            };
            mask = Some(passed);
        }
        Ok(mask.unwrap_or_else(|| BooleanArray::from(BooleanBuffer::new_set(num_rows))))
    }
}

impl Conjunct {
    fn try_new(state: &dyn Session, table_schema: &SchemaRef, columns: &[usize], expr: &Expr) -> Result<Self> {
        let own = column_indices(expr, table_schema)?;
        let slots = own
            .iter()
            .map(|c| columns.iter().position(|x| x == c).unwrap_or_default())
            .collect();
        let schema = Arc::new(table_schema.project(&own)?);
        let bound = state.create_physical_expr(expr.clone(), &DFSchema::try_from(schema.as_ref().clone())?)?;
        let liquid = match liquid_predicate::to_liquid(&bound, &schema) {
            Some((0, p)) if own.len() == 1 => Some(p),
            _ => None,
        };
        Ok(Conjunct {
            slots,
            schema,
            expr: bound,
            liquid,
        })
    }

    /// Evaluates the conjunct with DataFusion on the rows `mask` keeps (all
    /// rows without one), decoding only those rows, and returns the rows of
    /// the whole batch that pass both.
    fn evaluate_on(
        &self,
        columns: &[CachedColumn],
        mask: Option<&BooleanArray>,
        num_rows: usize,
        text: &str,
    ) -> Result<BooleanArray> {
        let arrays: Vec<ArrayRef> = self
            .slots
            .iter()
            .map(|&s| match mask {
                Some(m) => columns[s].filter(m),
                None => Ok(columns[s].to_arrow()),
            })
            .collect::<std::result::Result<_, _>>()?;
        let rows = mask.map_or(num_rows, BooleanArray::true_count);
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        let batch = RecordBatch::try_new_with_options(self.schema.clone(), arrays, &options)?;
        let value = self.expr.evaluate(&batch)?.into_array(rows)?;
        let result = value.as_any().downcast_ref::<BooleanArray>().cloned().ok_or_else(|| {
            datafusion::error::DataFusionError::Internal(format!(
                "filter {text} returned {}, not booleans",
                value.data_type()
            ))
        })?;
        let result = without_nulls(result);
        Ok(match mask {
            None => result,
            Some(m) => scatter(m, &result, num_rows),
        })
    }
}

/// Table column indices `expr` reads, ascending.
fn column_indices(expr: &Expr, table_schema: &SchemaRef) -> Result<Vec<usize>> {
    let mut columns: Vec<usize> = expr
        .column_refs()
        .into_iter()
        .map(|c| table_schema.index_of(&c.name))
        .collect::<std::result::Result<_, _>>()?;
    columns.sort_unstable();
    columns.dedup();
    Ok(columns)
}

/// A later conjunct runs on decoded surviving rows, not on the whole encoded
/// batch, once fewer than 1 row in `SPARSE` survives. Encoded evaluation of a
/// flat (high-cardinality) string column decompresses every value, so with a
/// quarter of the rows left selective decoding does a quarter of that work.
const SPARSE: usize = 4;

/// Nulls as false.
fn without_nulls(mask: BooleanArray) -> BooleanArray {
    match mask.nulls() {
        Some(_) => datafusion::arrow::compute::prep_null_mask_filter(&mask),
        None => mask,
    }
}

fn and(mask: Option<&BooleanArray>, result: &BooleanArray) -> Result<BooleanArray> {
    Ok(match mask {
        Some(m) => datafusion::arrow::compute::and(m, result)?,
        None => result.clone(),
    })
}

/// The whole-batch mask of rows `mask` keeps whose entry in `result` (one per
/// kept row, in order) is true. Sets bits in place (a `Vec<bool>` turned
/// into a mask cost ~3% of a cold TPC-H Q6's server CPU).
fn scatter(mask: &BooleanArray, result: &BooleanArray, num_rows: usize) -> BooleanArray {
    let mut out = BooleanBufferBuilder::new(num_rows);
    out.append_n(num_rows, false);
    let kept = result.values();
    for (j, i) in mask.values().set_indices().enumerate() {
        if kept.value(j) {
            out.set_bit(i, true);
        }
    }
    BooleanArray::new(out.finish(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scatter_puts_each_kept_rows_result_at_its_row() {
        let mask = BooleanArray::from(vec![true, false, true, true, false, true]);
        // One result per kept row (rows 0, 2, 3, 5).
        let result = BooleanArray::from(vec![true, false, false, true]);
        let out = scatter(&mask, &result, 6);
        assert_eq!(out, BooleanArray::from(vec![true, false, false, false, false, true]));
        assert_eq!(out.null_count(), 0);
    }

    /// The columns a filter matches few entries of: those whose every
    /// conjunct is a `LIKE`, `=` or `IN` on them alone (ClickBench q22:
    /// `Title`, not `URL` or `SearchPhrase`).
    #[test]
    fn matching_columns_are_those_only_like_eq_or_in_filters() {
        use datafusion::arrow::datatypes::{DataType, Field};
        use datafusion::prelude::{SessionContext, col, lit};
        let table = Arc::new(Schema::new(
            ["a", "title", "url", "phrase", "n"]
                .map(|n| Field::new(n, if n == "n" { DataType::Int64 } else { DataType::Utf8 }, true))
                .to_vec(),
        ));
        let ctx = SessionContext::new();
        let filters = [
            col("title").like(lit("%Google%")),
            col("url").not_like(lit("%.google.%")),
            col("phrase").not_eq(lit("")),
            col("n").eq(lit(3i64)),
            col("n").in_list(vec![lit(3i64), lit(4i64)], false),
            col("a").eq(lit("x")).or(col("title").eq(lit("y"))),
        ];
        let matching = |filters: &[Expr]| {
            let filter = ScanFilter::try_new(&ctx.state(), &table, filters).unwrap().unwrap();
            filter.matching_columns()
        };
        assert_eq!(matching(&filters[..5]), vec![1, 4]);
        assert_eq!(matching(&filters), vec![4], "a disjunction matches no column alone");
        assert_eq!(matching(&[col("n").gt(lit(3i64))]), Vec::<usize>::new());
    }

    /// A file's footer, written with `columns` in that order.
    fn footer(columns: Vec<(&str, ArrayRef)>) -> ParquetMetaData {
        use datafusion::parquet::arrow::ArrowWriter;
        use datafusion::parquet::file::metadata::ParquetMetaDataReader;
        let batch = RecordBatch::try_from_iter(columns).unwrap();
        let mut bytes = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut bytes, batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        ParquetMetaDataReader::new()
            .parse_and_finish(&bytes::Bytes::from(bytes))
            .unwrap()
    }

    #[test]
    fn files_with_columns_in_another_order_are_pruned_by_their_own_statistics() {
        use datafusion::arrow::array::Int64Array;
        use datafusion::arrow::datatypes::{DataType, Field};
        use datafusion::prelude::{SessionContext, col, lit};
        let table = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
        ]));
        let ctx = SessionContext::new();
        let state = ctx.state();
        let filter = ScanFilter::try_new(&state, &table, &[col("b").eq(lit(5i64))])
            .unwrap()
            .unwrap();
        let scratch = ParquetFileMetrics::new(
            0,
            "",
            &datafusion::physical_plan::metrics::ExecutionPlanMetricsSet::new(),
        );
        let ints = |v: Vec<i64>| Arc::new(Int64Array::from(v)) as ArrayRef;
        // `b` holds 5; `a` (first in this file) does not.
        let reordered = footer(vec![("b", ints(vec![5, 6])), ("a", ints(vec![100, 200]))]);
        assert_eq!(filter.row_groups(&table, &reordered, &scratch), vec![0]);
        let without_b = footer(vec![("a", ints(vec![5, 6]))]);
        assert_eq!(
            filter.row_groups(&table, &without_b, &scratch),
            vec![0],
            "no statistics, no pruning"
        );
        let in_order = footer(vec![("a", ints(vec![5, 6])), ("b", ints(vec![7, 8]))]);
        assert!(filter.row_groups(&table, &in_order, &scratch).is_empty());

        // What the table's metadata knows of a file: `b` is 5 throughout
        // (a partition value), or between bounds (the log's statistics).
        let int = |v| Some(ScalarValue::Int64(Some(v)));
        let file = |b_min, b_max, a: Option<ScalarValue>| FileStatistics {
            min: vec![a.clone(), b_min],
            max: vec![a, b_max],
            nulls: vec![None, Some(0)],
            rows: Some(10),
            buckets: Vec::new(),
        };
        assert!(filter.may_match_file(&table, &file(int(5), int(5), None)));
        assert!(!filter.may_match_file(&table, &file(int(6), int(6), None)));
        assert!(filter.may_match_file(&table, &file(int(1), int(9), None)));
        assert!(!filter.may_match_file(&table, &file(int(6), int(9), None)));
        assert!(
            filter.may_match_file(&table, &file(None, None, int(6))),
            "nothing known of b"
        );
        // `b` is in one bucket of 4 (an Iceberg bucket partition): only
        // the file of 5's bucket may hold it.
        let five = crate::lakehouse::bucket::bucket_of(&ScalarValue::Int64(Some(5)), 4).unwrap();
        let in_bucket = |bucket| FileStatistics {
            buckets: vec![None, Some((4, bucket))],
            ..file(None, None, None)
        };
        assert!(filter.may_match_file(&table, &in_bucket(five)));
        assert!(!filter.may_match_file(&table, &in_bucket((five + 1) % 4)));

        // What a lookup of keys skips files by.
        let keys = |v: &[i64]| v.iter().map(|&k| ScalarValue::Int64(Some(k))).collect::<Vec<_>>();
        assert!(file(int(1), int(9), None).may_hold(1, &keys(&[0, 5])));
        assert!(!file(int(1), int(9), None).may_hold(1, &keys(&[0, 10])));
        assert!(file(None, None, None).may_hold(1, &keys(&[0])), "nothing known");
        assert!(in_bucket(five).may_hold(1, &keys(&[5])));
        assert!(!in_bucket((five + 1) % 4).may_hold(1, &keys(&[5])));
        assert!(!file(int(1), int(9), None).may_hold(1, &[]), "no key");
    }
}
