//! A scan answered per row group: from the compute-side cache, by fetching
//! the row group's columns into it, or by pushdown (FlexPushdownDB's hybrid
//! execution, per row group instead of per partition).
//!
//! 1. Ask the server for the table's layout ([`ScanRequest::layout_only`]):
//!    its object versions, as the server's listing validated them (the same
//!    gated validation a scan gets), their row groups and the sizes of the
//!    needed columns. One round trip; nothing is scanned.
//! 2. Per row group choose a path ([`choose`]):
//!    - **local**: every needed column is in the [`LocalCache`] at that
//!      version: filter and project here, nothing travels;
//!    - **fetch**: the cache would admit the row group's columns (they have
//!      been used [`crate::local_cache::ADMIT_AFTER_USES`] times and fit in
//!      free space or in place of segments worth less): fetch them whole,
//!      unfiltered (one scoped scan), admit them, then run them locally;
//!    - **pushdown**: everything else, in one scan scoped to those row
//!      groups, with the filters, join filters and any partial aggregate.
//! 3. Local row groups run the scan's own predicate (a DataFusion physical
//!    expression) and, when a partial aggregate was pushed into the scan,
//!    the same partial aggregate, so their output is exactly what the
//!    server would have sent; the stream is the local outputs, then the
//!    pushed scan's. The plan above never relied on order.
//!
//! If an object changed between the layout and a scoped scan, the server
//! refuses (`ABORTED`) and the whole scan starts again from a new layout,
//! once: rows of two versions never meet in one answer.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::{concat, filter_record_batch};
use datafusion::arrow::datatypes::{SchemaRef, UInt32Type, UInt64Type};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{exec_datafusion_err, exec_err};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::metrics::Count;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use silt_proto::{ObjectSegments, Projection, ScanRequest, SegmentScope, layout};

use crate::client::{ClientError, SiltClient};
use crate::exec::{SiltScanExec, server_scan};
use crate::local_cache::{LocalCache, SegmentKey, benefit_per_byte};

/// What a scan needs to run its row groups locally.
#[derive(Debug, Clone)]
pub struct LocalPlan {
    pub cache: Arc<LocalCache>,
    /// Table columns read, in the order of `wide_schema`: the projected
    /// ones, then those only the filters read.
    pub needed: Vec<String>,
    /// How many of `needed` (its first ones) are projected.
    pub projected: usize,
    pub wide_schema: SchemaRef,
    /// The conjunction of the scan's filters over `wide_schema`.
    pub predicate: Option<Arc<dyn PhysicalExpr>>,
    /// The table and filters, the key of observed selectivity.
    pub filters_key: String,
    /// The partial aggregate pushed into the scan (its leaf: the scan
    /// without it), run on local rows too.
    pub fragment: Option<Arc<dyn ExecutionPlan>>,
    /// The table's row count, as the server estimates it.
    pub table_rows: Option<usize>,
}

/// Counters of the paths row groups took, for `EXPLAIN ANALYZE`.
#[derive(Debug, Clone, Default)]
pub struct PathCounters {
    pub local: Count,
    pub fetched: Count,
    pub pushed: Count,
    /// Scans pushed down whole, without a layout (partial aggregates).
    pub pushed_whole: Count,
}

/// One row group of the layout.
#[derive(Debug, Clone)]
struct RowGroup {
    object: Arc<str>,
    version: Arc<str>,
    index: u32,
    rows: usize,
    /// Uncompressed size per needed column the object has.
    bytes: HashMap<String, usize>,
}

enum Choice {
    Local(Vec<ArrayRef>),
    Fetch,
    Pushdown,
}

/// Runs `request` (filters and join filters included) over `plan` and the
/// server; `out` is the scan's output schema.
pub async fn run(
    client: SiltClient,
    request: ScanRequest,
    plan: Arc<LocalPlan>,
    out: SchemaRef,
    context: Arc<TaskContext>,
    counters: PathCounters,
) -> Result<BoxStream<'static, Result<RecordBatch>>> {
    if pushed_whole(&plan) {
        counters.pushed_whole.add(1);
        let stream = server_scan(&client, &request, &out).await?;
        return Ok(observed(stream, &plan, plan.table_rows.unwrap_or(0), true));
    }
    let mut retried = false;
    loop {
        match attempt(&client, &request, &plan, &out, &context, &counters).await {
            Err(Failure::Changed(_)) if !retried => retried = true,
            Err(Failure::Changed(e)) => return Err(e.into()),
            Err(Failure::Other(e)) => return Err(e),
            Ok(stream) => return Ok(stream),
        }
    }
}

enum Failure {
    /// An object is no longer at the layout's version.
    Changed(ClientError),
    Other(DataFusionError),
}

impl Failure {
    fn into_error(self) -> DataFusionError {
        match self {
            Failure::Changed(e) => e.into(),
            Failure::Other(e) => e,
        }
    }
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        if e.is_changed() {
            Failure::Changed(e)
        } else {
            Failure::Other(e.into())
        }
    }
}

impl From<DataFusionError> for Failure {
    fn from(e: DataFusionError) -> Self {
        Failure::Other(e)
    }
}

/// A plain scan whose pushed runs sent fewer rows than this share of the
/// rows they read is pushed down whole, without a layout, even when its row
/// groups are cached. Its filters (with a join's keys) keep next to nothing,
/// and the server filters on every core it has, with the page index and
/// bloom filters, while a local scan is one partition of the client's plan
/// and sees no join keys. Measured on TPC-H SF 1 (`docs/results/`): Q12,
/// Q17 and Q19 (pushed selectivity ~0.1-0.5%) ran 1.5-2.2x slower local than
/// pushed; Q3, Q8 and Q9 (tens of percent) ran 2-3x faster local.
pub const PUSH_WHOLE_BELOW: f64 = 0.01;

/// Whether the scan goes to the server whole, without a layout: a partial
/// aggregate (its states are few, or as many as the groups, and the server
/// aggregates on all its cores: TPC-H Q1, Q6 and Q18 ran 1.1-2x slower
/// aggregated locally), or a scan that keeps next to nothing
/// ([`PUSH_WHOLE_BELOW`]). Never under caching-only.
fn pushed_whole(plan: &LocalPlan) -> bool {
    if plan.cache.is_caching_only() {
        return false;
    }
    plan.fragment.is_some()
        || plan
            .cache
            .pushed_selectivity(&plan.filters_key)
            .is_some_and(|s| s < PUSH_WHOLE_BELOW)
}

/// Row groups fetched at once.
const FETCH_CONCURRENCY: usize = 4;

async fn attempt(
    client: &SiltClient,
    request: &ScanRequest,
    plan: &Arc<LocalPlan>,
    out: &SchemaRef,
    context: &Arc<TaskContext>,
    counters: &PathCounters,
) -> std::result::Result<BoxStream<'static, Result<RecordBatch>>, Failure> {
    let layout_request = ScanRequest {
        table: request.table.clone(),
        projection: Some(Projection {
            columns: plan.needed.clone(),
        }),
        layout_only: true,
        query: request.query.clone(),
        ..Default::default()
    };
    let layout = match client.scan_all(&layout_request).await {
        Ok(batches) => parse_layout(&batches)?,
        Err(
            e @ ClientError::Server {
                code: tonic::Code::InvalidArgument,
                ..
            },
        ) => {
            // A table with nested columns: no row groups to cache.
            tracing::debug!(table = %request.table, error = %e, "no layout; the scan is pushed down whole");
            plan.cache.mark_no_layout(&request.table);
            return Ok(server_scan(client, request, out).await?);
        }
        Err(e) => return Err(e.into()),
    };
    let mut local = Vec::new();
    let mut fetch = Vec::new();
    let mut pushed = Vec::new();
    let mut pending = 0;
    for group in layout {
        match choose(plan, &request.table, &group, &mut pending) {
            Choice::Local(arrays) => local.push((group, arrays)),
            Choice::Fetch => fetch.push(group),
            Choice::Pushdown => pushed.push(group),
        }
    }
    counters.local.add(local.len());
    counters.fetched.add(fetch.len());
    counters.pushed.add(pushed.len());

    // The pushed part first: its refusal (a version gone) restarts the
    // scan before any row is out. Its rows then stream while this side
    // fetches and filters (the two streams are merged as they come).
    let remote = if pushed.is_empty() {
        None
    } else {
        let rows_read: usize = pushed.iter().map(|g| g.rows).sum();
        let scoped = ScanRequest {
            scope: Some(scope_of(pushed.iter())),
            ..request.clone()
        };
        let stream = server_scan(client, &scoped, out).await?;
        Some(observed(stream, plan, rows_read, true))
    };

    // Local row groups, lazily: a row group is fetched (if it must be), run
    // and let go one at a time, so a scan never holds more than a few row
    // groups besides the cache. A version gone under a fetch fails the scan
    // with the server's "changed" error: rows may already be out.
    let rows_read: usize =
        local.iter().map(|(g, _)| g.rows).sum::<usize>() + fetch.iter().map(|g| g.rows).sum::<usize>();
    let work = local
        .into_iter()
        .map(|(group, arrays)| (group, Some(arrays)))
        .chain(fetch.into_iter().map(|group| (group, None)));
    let run = LocalRun {
        client: client.clone(),
        request: request.clone(),
        plan: plan.clone(),
        out: out.clone(),
        context: context.clone(),
    };
    let local = futures::stream::iter(work)
        .map(move |(group, arrays)| run.clone().row_group(group, arrays))
        .buffered(FETCH_CONCURRENCY)
        .map_ok(|rows| futures::stream::iter(rows.into_iter().map(Ok)))
        .try_flatten()
        .boxed();
    let local = observed(local, plan, rows_read, false);
    Ok(match remote {
        Some(remote) => futures::stream::select(local, remote).boxed(),
        None => local,
    })
}

/// `stream` (the answer for `rows_read` rows of the table, `pushed` or
/// local), recording at its end what it gave per row read: the scan's
/// observed selectivity, which weighs the benefit of caching its columns
/// (and, for pushed answers, which include join filters, decides
/// [`pushed_whole`]).
fn observed(
    stream: BoxStream<'static, Result<RecordBatch>>,
    plan: &LocalPlan,
    rows_read: usize,
    pushed: bool,
) -> BoxStream<'static, Result<RecordBatch>> {
    let (cache, key) = (plan.cache.clone(), plan.filters_key.clone());
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = sent.clone();
    stream
        .inspect_ok(move |b| {
            counted.fetch_add(b.num_rows(), std::sync::atomic::Ordering::Relaxed);
        })
        .chain(
            futures::stream::once(async move {
                let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
                cache.observe_selectivity(&key, sent, rows_read);
                if pushed {
                    cache.observe_pushed_selectivity(&key, sent, rows_read);
                }
            })
            .filter_map(|()| async { None }),
        )
        .boxed()
}

/// What a scan's local row groups run with (each row group gets a clone).
#[derive(Clone)]
struct LocalRun {
    client: SiltClient,
    request: ScanRequest,
    plan: Arc<LocalPlan>,
    out: SchemaRef,
    context: Arc<TaskContext>,
}

impl LocalRun {
    /// The output of one row group: its cached `arrays`, or (`None`) its
    /// columns fetched and admitted first.
    async fn row_group(self, group: RowGroup, arrays: Option<Vec<ArrayRef>>) -> Result<Vec<RecordBatch>> {
        let plan = &self.plan;
        let arrays = match arrays {
            Some(arrays) => arrays,
            None => {
                let arrays = fetch_row_group(&self.client, &self.request, plan, &group)
                    .await
                    .map_err(Failure::into_error)?;
                let keys = keys_of(&self.request.table, plan, &group);
                plan.cache
                    .insert_group(keys.into_iter().zip(arrays.iter().cloned()).collect());
                arrays
            }
        };
        let batch_size = self.context.session_config().batch_size();
        let rows = run_local(plan, &self.out, &arrays, group.rows, batch_size)?;
        // A partial aggregate per row group: its states merge in the
        // client's final aggregate like the server's do.
        match &plan.fragment {
            Some(fragment) if !rows.is_empty() => aggregate_locally(fragment, rows, self.context.clone()).await,
            _ => Ok(rows),
        }
    }
}

/// The cache keys of `group`'s needed columns, in `plan.needed` order.
fn keys_of(table: &str, plan: &LocalPlan, group: &RowGroup) -> Vec<SegmentKey> {
    let table: Arc<str> = Arc::from(table);
    plan.needed
        .iter()
        .map(|c| SegmentKey {
            table: table.clone(),
            object: group.object.clone(),
            version: group.version.clone(),
            row_group: group.index,
            column: Arc::from(c.as_str()),
        })
        .collect()
}

/// The path of one row group (module docs), recording the use of its
/// segments with their benefit under the scan's observed selectivity.
/// `pending`: the bytes this scan already chose to fetch.
fn choose(plan: &LocalPlan, table: &str, group: &RowGroup, pending: &mut usize) -> Choice {
    if plan.needed.iter().any(|c| !group.bytes.contains_key(c)) {
        return Choice::Pushdown; // the object lacks a column: the server fills it in
    }
    let keys = keys_of(table, plan, group);
    // Until observed: a partial aggregate sends states (next to nothing),
    // a filter keeps DataFusion's default 20%, else everything.
    let unobserved = match (&plan.fragment, &plan.predicate) {
        (Some(_), _) => 0.0,
        (None, Some(_)) => 0.2,
        (None, None) => 1.0,
    };
    let selectivity = plan.cache.selectivity(&plan.filters_key).unwrap_or(unobserved);
    let uses: Vec<(SegmentKey, f64)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (k.clone(), benefit_per_byte(i < plan.projected, selectivity)))
        .collect();
    plan.cache.record_use(&uses);
    if let Some(arrays) = plan.cache.get_all(&keys) {
        return Choice::Local(arrays);
    }
    // Arrow in memory is about the uncompressed chunk size.
    let sized: Vec<(SegmentKey, usize)> = keys
        .into_iter()
        .zip(&plan.needed)
        .map(|(k, c)| (k, group.bytes[c]))
        .collect();
    match plan.cache.admission(&sized, *pending) {
        Some(bytes) => {
            *pending += bytes;
            Choice::Fetch
        }
        // Caching-only fetches it anyway, and admits it if it fits then.
        None if plan.cache.is_caching_only() => Choice::Fetch,
        None => Choice::Pushdown,
    }
}

/// A scope of `groups`, grouped by object version.
fn scope_of<'a>(groups: impl Iterator<Item = &'a RowGroup>) -> SegmentScope {
    let mut objects: Vec<ObjectSegments> = Vec::new();
    for g in groups {
        match objects.iter_mut().find(|o| *o.path == *g.object) {
            Some(o) => o.row_groups.push(g.index),
            None => objects.push(ObjectSegments {
                path: g.object.to_string(),
                version: g.version.to_string(),
                row_groups: vec![g.index],
            }),
        }
    }
    SegmentScope { objects }
}

/// The needed columns of one row group, whole and unfiltered, from the server.
async fn fetch_row_group(
    client: &SiltClient,
    scan: &ScanRequest,
    plan: &LocalPlan,
    group: &RowGroup,
) -> std::result::Result<Vec<ArrayRef>, Failure> {
    let request = ScanRequest {
        table: scan.table.clone(),
        projection: Some(Projection {
            columns: plan.needed.clone(),
        }),
        scope: Some(scope_of(std::iter::once(group))),
        query: scan.query.clone(),
        ..Default::default()
    };
    let batches = client.scan_all(&request).await?;
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if rows != group.rows {
        return Err(Failure::Other(exec_datafusion_err!(
            "row group {} of {} came back with {rows} rows, its footer says {}",
            group.index,
            group.object,
            group.rows
        )));
    }
    (0..plan.needed.len())
        .map(|c| {
            let parts: Vec<&dyn Array> = batches.iter().map(|b| b.column(c).as_ref()).collect();
            concat(&parts).map_err(|e| Failure::Other(e.into()))
        })
        .collect()
}

/// Filters and projects one cached row group into batches of `out`
/// (before any partial aggregate: the scan's own rows).
fn run_local(
    plan: &LocalPlan,
    out: &SchemaRef,
    arrays: &[ArrayRef],
    rows: usize,
    batch_size: usize,
) -> Result<Vec<RecordBatch>> {
    let scan_schema = match &plan.fragment {
        Some(fragment) => leaf_schema(fragment)?,
        None => out.clone(),
    };
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    let wide = RecordBatch::try_new_with_options(plan.wide_schema.clone(), arrays.to_vec(), &options)?;
    let mut batches = Vec::new();
    let mut offset = 0;
    while offset < rows {
        let len = batch_size.max(1).min(rows - offset);
        let slice = wide.slice(offset, len);
        offset += len;
        let kept = match &plan.predicate {
            None => slice,
            Some(predicate) => {
                let mask = predicate.evaluate(&slice)?.into_array(len)?;
                filter_record_batch(&slice, mask.as_boolean())?
            }
        };
        if kept.num_rows() == 0 {
            continue;
        }
        let columns: Vec<ArrayRef> = kept.columns()[..plan.projected].to_vec();
        let options = RecordBatchOptions::new().with_row_count(Some(kept.num_rows()));
        batches.push(RecordBatch::try_new_with_options(
            scan_schema.clone(),
            columns,
            &options,
        )?);
    }
    Ok(batches)
}

/// The schema of the scan at the leaf of a partial-aggregate fragment.
fn leaf_schema(fragment: &Arc<dyn ExecutionPlan>) -> Result<SchemaRef> {
    let mut found = None;
    fragment.apply(|node| {
        if node.is::<SiltScanExec>() {
            found = Some(node.schema());
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    })?;
    found.ok_or_else(|| exec_datafusion_err!("partial aggregate fragment without a Silt scan"))
}

/// Runs the partial aggregate `fragment` over `rows` (the scan's own rows)
/// in place of its scan leaf.
async fn aggregate_locally(
    fragment: &Arc<dyn ExecutionPlan>,
    rows: Vec<RecordBatch>,
    context: Arc<TaskContext>,
) -> Result<Vec<RecordBatch>> {
    let schema = leaf_schema(fragment)?;
    let plan = fragment
        .clone()
        .transform_up(|node| {
            Ok(if node.is::<SiltScanExec>() {
                let source: Arc<dyn ExecutionPlan> =
                    MemorySourceConfig::try_new_exec(std::slice::from_ref(&rows), schema.clone(), None)?;
                Transformed::yes(source)
            } else {
                Transformed::no(node)
            })
        })?
        .data;
    datafusion::physical_plan::collect(plan, context).await
}

/// The layout answer as row groups, in the server's order.
fn parse_layout(batches: &[RecordBatch]) -> Result<Vec<RowGroup>> {
    let mut groups: Vec<RowGroup> = Vec::new();
    for batch in batches {
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .ok_or_else(|| exec_datafusion_err!("the server's layout lacks column '{name}'"))
        };
        let (object, version, row_group, rows, col, bytes) = (
            column(layout::OBJECT)?.as_string_opt::<i32>(),
            column(layout::VERSION)?.as_string_opt::<i32>(),
            column(layout::ROW_GROUP)?.as_primitive_opt::<UInt32Type>(),
            column(layout::ROWS)?.as_primitive_opt::<UInt64Type>(),
            column(layout::COLUMN)?.as_string_opt::<i32>(),
            column(layout::BYTES)?.as_primitive_opt::<UInt64Type>(),
        );
        let (Some(object), Some(version), Some(row_group), Some(rows), Some(col), Some(bytes)) =
            (object, version, row_group, rows, col, bytes)
        else {
            return exec_err!("the server's layout has unexpected column types");
        };
        for i in 0..batch.num_rows() {
            let same = groups.last().is_some_and(|g| {
                *g.object == *object.value(i) && *g.version == *version.value(i) && g.index == row_group.value(i)
            });
            if !same {
                groups.push(RowGroup {
                    object: Arc::from(object.value(i)),
                    version: Arc::from(version.value(i)),
                    index: row_group.value(i),
                    rows: rows.value(i) as usize,
                    bytes: HashMap::new(),
                });
            }
            if let Some(g) = groups.last_mut() {
                g.bytes.insert(col.value(i).to_string(), bytes.value(i) as usize);
            }
        }
    }
    Ok(groups)
}
