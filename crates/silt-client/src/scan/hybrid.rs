//! A scan answered per row group: from the compute-side cache, by fetching
//! the row group's columns into it, by filtering here and fetching only the
//! surviving rows of what is missing, or by pushdown (FlexPushdownDB's
//! hybrid execution, per row group instead of per partition).
//!
//! 1. Ask the server for the table's layout ([`ScanRequest::layout_only`]):
//!    its object versions, as the server's listing validated them (the same
//!    gated validation a scan gets), their row groups and the sizes of the
//!    needed columns. One round trip; nothing is scanned.
//! 2. Per row group choose a path ([`choose`]):
//!    - **local**: every needed column is in the [`LocalCache`](crate::LocalCache) at that
//!      version: filter and project here, nothing travels;
//!    - **fetch**: the cache would admit the row group's columns (they have
//!      been used [`crate::local_cache::ADMIT_AFTER_USES`] times and fit in
//!      free space or in place of segments worth less): fetch them whole,
//!      unfiltered (one scoped scan, or, when the link is the bottleneck,
//!      their column chunks as stored, decoded here: [`super::bytes`]),
//!      admit them, then run them locally;
//!    - **hybrid**: the filter's columns are cached here, and some projected
//!      ones: filter here, and fetch only the surviving rows of the missing
//!      projected columns (a scan scoped to the row group with a row
//!      bitmap), when the [`crate::path_cost`] model says that moves less
//!      than pushdown;
//!    - **pushdown**: everything else, in one scan scoped to those row
//!      groups, with the filters, join filters and any partial aggregate.
//! 3. Row groups run here evaluate the scan's own predicate (a DataFusion
//!    physical expression) on decoded filter columns, decode only the
//!    surviving rows of the projected ones (liquid segments decode
//!    selectively) and, when a partial aggregate was pushed into the scan,
//!    run the same partial aggregate, so their output is exactly what the
//!    server would have sent. Their output and the pushed scan's are merged
//!    as they come; the plan above never relied on order.
//!
//! If an object changed between the layout and a scoped scan, the server
//! refuses (`ABORTED`) and, on one server, the whole scan starts again
//! from a new layout, once ([`silt_core::restart`]): rows of two versions
//! never meet in one answer. Over a fleet the pushed row groups' runs
//! stream as they complete, so a refusal there fails the query with the
//! server's "changed" error instead, as the fleet route does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::concat;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::exec_datafusion_err;
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use silt_core::restart::restart_once_on_change;
use silt_proto::{Projection, ScanRequest};

use super::fleet::place;
use super::layout::{RowGroup, parse_layout, scope_of, within_scope};
use super::local_plan::LocalPlan;
use super::metrics::PathCounters;
use super::pushdown::{push_whole, server_scan, with_compression};
use super::servers::{Servers, placement_name};
use super::{SCAN_NODE, Scan, ScanRoute};
use crate::aggregate_placement::{Placement, RunBytes};
use crate::client::{ClientError, SiltClient};
use crate::local_cache::benefit_per_byte;
use crate::path_cost::{Estimates, PathCost, RowGroupSizes};
use silt_core::{CachedColumn, ChunkKey, ObjectKey};

/// Row groups answered per row group over the compute-side cache `plan`
/// and `servers` (one, or a fleet's members, each row group on its owner:
/// [`super::servers`]) (module docs). A table the server gave no layout
/// (nested columns) is pushed down whole.
#[derive(Debug)]
pub struct HybridRoute {
    pub servers: Servers,
    pub plan: Arc<LocalPlan>,
}

#[async_trait]
impl ScanRoute for HybridRoute {
    async fn open(&self, scan: Scan) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        if self.plan.cache.lacks_layout(&scan.request.table) {
            return push_whole_to(&self.servers, &scan.request, &scan.out, &scan.counters)
                .await
                .map_err(Failure::into_error);
        }
        let Scan {
            request,
            layout_filters,
            out,
            context,
            counters,
        } = scan;
        run(
            self.servers.clone(),
            request,
            layout_filters,
            self.plan.clone(),
            out,
            context,
            counters,
        )
        .await
    }
}

enum Choice {
    /// Every needed segment is cached.
    Local(Vec<Option<CachedColumn>>),
    /// The filter's segments are cached, and some projected ones.
    Hybrid(Vec<Option<CachedColumn>>),
    Fetch,
    Pushdown,
}

/// Runs `request` (filters and join filters included) over `plan` and the
/// server; `out` is the scan's output schema. `layout_filters` (encoded
/// like `request.filters`) go with the layout request, for the server to
/// leave out row groups their statistics rule out.
pub async fn run(
    servers: Servers,
    request: ScanRequest,
    layout_filters: Vec<Vec<u8>>,
    plan: Arc<LocalPlan>,
    out: SchemaRef,
    context: Arc<TaskContext>,
    counters: PathCounters,
) -> Result<BoxStream<'static, Result<RecordBatch>>> {
    let started = Instant::now();
    if pushed_whole(&plan) {
        counters.pushed_whole.add(1);
        let stream = push_whole_to(&servers, &request, &out, &counters)
            .await
            .map_err(Failure::into_error)?;
        let stream = observed(stream, &plan, plan.table_rows.unwrap_or(0), true);
        // What the server scanned for it prices a try here.
        let scanned = counters.pushdown_cost.server_scanned.clone();
        let bytes = move || RunBytes {
            needed: scanned.value() as u64,
            fetched: 0,
        };
        return Ok(timed(stream, &plan, Placement::PushedWhole, started, bytes));
    }
    let attempted = restart_once_on_change(
        |_| attempt(&servers, &request, &layout_filters, &plan, &out, &context, &counters),
        |a| matches!(a, Err(Failure::Changed(_))),
    )
    .await;
    match attempted {
        Err(failure) => Err(failure.into_error()),
        Ok((stream, placement, bytes)) => Ok(timed(stream, &plan, placement, started, move || bytes)),
    }
}

/// `stream`, timing the run in `placement` from `started` to its end for
/// [`crate::aggregate_placement`], with what it read (`bytes`, asked at
/// the end).
fn timed(
    stream: BoxStream<'static, Result<RecordBatch>>,
    plan: &LocalPlan,
    placement: Placement,
    started: Instant,
    bytes: impl FnOnce() -> RunBytes + Send + 'static,
) -> BoxStream<'static, Result<RecordBatch>> {
    let (cache, key) = (plan.cache.clone(), plan.filters_key.clone());
    stream
        .chain(
            futures::stream::once(async move {
                cache.observe_placement(&key, placement, started.elapsed(), bytes());
            })
            .filter_map(|()| async { None }),
        )
        .boxed()
}

enum Failure {
    /// An object is no longer at the layout's version.
    Changed(ClientError),
    /// The server could not be reached or failed in transport: a fleet's
    /// next member may answer ([`Servers::on_owner_of`]).
    Unavailable(ClientError),
    Other(DataFusionError),
}

impl Failure {
    fn into_error(self) -> DataFusionError {
        match self {
            Failure::Changed(e) | Failure::Unavailable(e) => e.into(),
            Failure::Other(e) => e,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Changed(e) | Failure::Unavailable(e) => e.fmt(f),
            Failure::Other(e) => e.fmt(f),
        }
    }
}

impl crate::fleet::Unavailable for Failure {
    fn is_unavailable(&self) -> bool {
        matches!(self, Failure::Unavailable(_))
    }
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        if e.is_changed() {
            Failure::Changed(e)
        } else if e.is_unavailable() {
            Failure::Unavailable(e)
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

/// `request` pushed down whole: to the one server (compressed as its
/// model says), or across a fleet's members by the fleet's own layout (or
/// the request's scope), each row group on its owner (the fleet route's
/// placement).
async fn push_whole_to(
    servers: &Servers,
    request: &ScanRequest,
    out: &SchemaRef,
    counters: &PathCounters,
) -> std::result::Result<BoxStream<'static, Result<RecordBatch>>, Failure> {
    match servers {
        Servers::One(client) => Ok(push_whole(client, request, out, &counters.pushdown_cost).await?),
        Servers::Fleet { fleet, members } => {
            // A scoped scan (a worker's share) reads just its scope.
            let groups = match &request.scope {
                Some(scope) => Some(RowGroup::of_scope(scope)),
                None => fleet.layout(&request.table, request.query.clone()).await?,
            };
            Ok(place(members.clone(), groups, request.clone(), out.clone()).await?)
        }
    }
}

/// Row groups `groups` of `request` pushed down: in one scan scoped to
/// them on the one server (compressed as the model says of an answer of
/// about `expected_bytes`), or each on its owner in a fleet.
async fn push_groups(
    servers: &Servers,
    groups: Vec<RowGroup>,
    request: &ScanRequest,
    out: &SchemaRef,
    counters: &PathCounters,
    expected_bytes: f64,
) -> std::result::Result<BoxStream<'static, Result<RecordBatch>>, Failure> {
    match servers {
        Servers::One(client) => {
            let scoped = ScanRequest {
                scope: Some(scope_of(groups.iter())),
                ..request.clone()
            };
            let scoped = with_compression(client, &scoped, Some(expected_bytes));
            Ok(server_scan(client, &scoped, out, Some(&counters.pushdown_cost)).await?)
        }
        Servers::Fleet { members, .. } => Ok(place(members.clone(), Some(groups), request.clone(), out.clone()).await?),
    }
}

/// The model's estimates of each server a scan's row groups go to, read
/// once per server per scan.
#[derive(Default)]
struct EstimatesByServer(Vec<(String, Estimates)>);

impl EstimatesByServer {
    fn of(&mut self, client: &SiltClient) -> Estimates {
        if let Some((_, e)) = self.0.iter().find(|(url, _)| url == client.url()) {
            return *e;
        }
        let e = client.calibration().estimates();
        self.0.push((client.url().to_string(), e));
        e
    }
}

/// Whether the scan goes to the server whole, without a layout, by its
/// measured placements ([`crate::aggregate_placement`]): the other
/// placement is tried once the runs in the first have repaid the try, the
/// faster wins; a partial aggregate with few groups and a plain
/// scan that keeps next to nothing start pushed whole, the rest start per
/// row group. Never under caching-only.
fn pushed_whole(plan: &LocalPlan) -> bool {
    if plan.cache.is_caching_only() {
        return false;
    }
    let pushed_selectivity = plan.cache.pushed_selectivity(&plan.filters_key);
    let (times, rates) = plan.cache.placement_times(&plan.filters_key);
    match plan.fragment {
        Some(_) => times.push_whole(pushed_selectivity, &rates),
        None => times.push_scan_whole(pushed_selectivity, plan.cache.selectivity(&plan.filters_key), &rates),
    }
}

/// Row groups fetched at once.
pub(crate) const FETCH_CONCURRENCY: usize = 4;

async fn attempt(
    servers: &Servers,
    request: &ScanRequest,
    layout_filters: &[Vec<u8>],
    plan: &Arc<LocalPlan>,
    out: &SchemaRef,
    context: &Arc<TaskContext>,
    counters: &PathCounters,
) -> std::result::Result<(BoxStream<'static, Result<RecordBatch>>, Placement, RunBytes), Failure> {
    // The server leaves out row groups the filters' statistics rule out,
    // as the scan itself would.
    let layout_request = ScanRequest {
        table: request.table.clone(),
        projection: Some(Projection {
            columns: plan.needed.clone(),
        }),
        filters: layout_filters.to_vec(),
        filter_sql: request.filter_sql.clone(),
        layout_only: true,
        honors_server_only: true,
        query: request.query.clone(),
        ..Default::default()
    };
    let layout = servers
        .on_owner_of(&request.table, |c| {
            let layout_request = &layout_request;
            async move { c.scan_all(layout_request).await }
        })
        .await;
    let layout = match layout {
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
            let stream = push_whole_to(servers, request, out, counters).await?;
            return Ok((stream, Placement::PartlyLocal, RunBytes::default()));
        }
        Err(e) => return Err(e.into()),
    };
    // A scope (a worker's share of a distributed query): only its row
    // groups; those of versions the layout does not list go to the server.
    let (layout, unlisted) = match &request.scope {
        Some(scope) => within_scope(layout, scope),
        None => (layout, Vec::new()),
    };
    let mut pending = 0;
    let mut here = Vec::new();
    counters.pushed.add(unlisted.len());
    // Row groups of unlisted versions have no sizes: a run with them is
    // neither all here nor a measure of what pushing keeps.
    let measurable = unlisted.is_empty();
    let mut pushed = unlisted;
    // Whether every row group is answered from the cache (nothing fetched
    // or pushed): such a run times the local placement.
    let mut all_cached = measurable;
    // The model's estimates of each server, once per scan.
    let mut estimates = EstimatesByServer::default();
    // Tried here on purpose: fetch what fits now, so the next run is timed.
    let fetch_now = {
        let (times, rates) = plan.cache.placement_times(&plan.filters_key);
        times.trying_here(&rates)
    };
    // The needed bytes of every row group (what a try of pushing prices),
    // and of those fetched (what a fetching run's rate is learned on).
    let mut needed_bytes = 0;
    let mut fetched_bytes = 0;
    // What the pushed row groups are expected to send, and the round trip
    // of their scan (the slowest owner's, with a fleet).
    let mut pushed_bytes = 0.0;
    let mut pushed_round_trip: f64 = 0.0;
    for group in layout {
        let server = estimates.of(servers.owner(&group));
        let (choice, cost) = choose(plan, &request.table, &group, &mut pending, &server, fetch_now);
        let g = sizes_of(plan, &group, None);
        let group_bytes = g.total();
        needed_bytes += group_bytes;
        match choice {
            Choice::Local(segments) => {
                counters.local.add(1);
                counters.local_cost.estimate(cost.local(&g));
                here.push((group, Some(segments)));
            }
            Choice::Hybrid(segments) => {
                counters.hybrid.add(1);
                counters
                    .hybrid_cost
                    .estimate(cost.hybrid(&sizes_of(plan, &group, Some(&segments))));
                here.push((group, Some(segments)));
            }
            Choice::Fetch => {
                counters.fetched.add(1);
                fetched_bytes += group_bytes;
                all_cached = false;
                counters.fetched_cost.estimate(cost.fetch(&g));
                here.push((group, None));
            }
            Choice::Pushdown => {
                counters.pushed.add(1);
                all_cached = false;
                counters.pushdown_cost.estimate(cost.pushdown(&g));
                pushed_bytes += cost.pushdown_bytes(&g);
                pushed_round_trip = pushed_round_trip.max(server.round_trip_seconds);
                pushed.push(group);
            }
        }
    }

    // The pushed part first: on one server its refusal (a version gone)
    // restarts the scan before any row is out (over a fleet it fails the
    // query mid-stream: module docs). Its rows then stream while this side
    // fetches and filters (the two streams are merged as they come).
    let pushed_any = !pushed.is_empty();
    let remote = if pushed.is_empty() {
        None
    } else {
        let rows_read: usize = pushed.iter().map(|g| g.rows).sum();
        counters.pushdown_cost.estimate(pushed_round_trip);
        let stream = push_groups(servers, pushed, request, out, counters, pushed_bytes).await?;
        Some(match measurable {
            true => observed(stream, plan, rows_read, true),
            false => stream,
        })
    };

    // Row groups run here, lazily: a row group is fetched (if it must be),
    // run and let go a few at a time, so a scan never holds more than a few
    // row groups besides the cache. A version gone under a fetch fails the
    // scan with the server's "changed" error: rows may already be out.
    let rows_read: usize = here.iter().map(|(g, _)| g.rows).sum();
    let run = LocalRun {
        servers: servers.clone(),
        request: request.clone(),
        plan: plan.clone(),
        out: out.clone(),
        context: context.clone(),
        counters: counters.clone(),
    };
    // Each row group on a task of its own: a scan is one partition of the
    // client's plan, and its row groups are what keeps every core busy.
    let local = futures::stream::iter(here)
        .map(move |(group, segments)| {
            let task = SpawnedTask::spawn(run.clone().row_group(group, segments));
            async move {
                task.join_unwind()
                    .await
                    .map_err(|e| exec_datafusion_err!("a row group's run failed: {e}"))?
            }
        })
        .buffered(FETCH_CONCURRENCY)
        .map_ok(|rows| futures::stream::iter(rows.into_iter().map(Ok)))
        .try_flatten()
        .boxed();
    let local = observed(local, plan, rows_read, false);
    let stream = match remote {
        Some(remote) => futures::stream::select(local, remote).boxed(),
        None => local,
    };
    let placement = match (all_cached, pushed_any) {
        (true, _) => Placement::Local,
        (false, false) => Placement::Fetched,
        (false, true) => Placement::PartlyLocal,
    };
    let bytes = RunBytes {
        needed: needed_bytes as u64,
        fetched: fetched_bytes as u64,
    };
    Ok((stream, placement, bytes))
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
    servers: Servers,
    request: ScanRequest,
    plan: Arc<LocalPlan>,
    out: SchemaRef,
    context: Arc<TaskContext>,
    counters: PathCounters,
}

impl LocalRun {
    /// The output of one row group run here: from its cached `segments`
    /// (per needed column; the missing ones fetched after filtering), or
    /// (`None`) with its columns fetched and admitted first.
    async fn row_group(self, group: RowGroup, segments: Option<Vec<Option<CachedColumn>>>) -> Result<Vec<RecordBatch>> {
        let started = Instant::now();
        // Which path this is, for its metrics: fetched (nothing cached),
        // hybrid (some projected column missing) or local.
        let cost = match &segments {
            None => &self.counters.fetched_cost,
            Some(s) if s.iter().any(Option::is_none) => &self.counters.hybrid_cost,
            Some(_) => &self.counters.local_cost,
        };
        // The cached bytes scanned here (what the client's rate is learned on).
        let cached_bytes: u64 = segments.as_ref().map_or(0, |s| {
            s.iter()
                .zip(&self.plan.needed)
                .filter(|(segment, _)| segment.is_some())
                .map(|(_, name)| group.bytes.get(name).copied().unwrap_or(0) as u64)
                .sum()
        });
        let mut meter = Meter::default();
        let out = self.run_group(&group, segments, &mut meter).await;
        let elapsed = started.elapsed();
        if out.is_ok() {
            cost.measured(elapsed, meter.bytes, 0);
            if cached_bytes > 0 {
                // Filtering and decoding only: not the fetches, not a partial aggregate.
                let computing = meter.computed.unwrap_or(elapsed).saturating_sub(meter.waited);
                self.servers
                    .owner(&group)
                    .calibration()
                    .observe_client_scan(computing.as_secs_f64(), cached_bytes);
            }
        }
        out
    }

    async fn run_group(
        &self,
        group: &RowGroup,
        segments: Option<Vec<Option<CachedColumn>>>,
        meter: &mut Meter,
    ) -> Result<Vec<RecordBatch>> {
        let started = Instant::now();
        let plan = &self.plan;
        let segments = match segments {
            Some(segments) => segments,
            None => {
                let fetching = Instant::now();
                let (request, counters) = (&self.request, &self.counters);
                let (arrays, bytes) = self
                    .servers
                    .on_owner_of(&placement_name(group), |c| async move {
                        fetch_row_group(&c, request, plan, group, counters).await
                    })
                    .await
                    .map_err(Failure::into_error)?;
                meter.fetched(fetching.elapsed(), bytes);
                let keys = keys_of(&self.request.table, plan, group);
                plan.cache
                    .insert_group(keys.into_iter().zip(arrays.iter().cloned()).collect());
                arrays.into_iter().map(|a| Some(CachedColumn::Arrow(a))).collect()
            }
        };
        let (mask, decoded) = match &plan.filter {
            None => (None, Vec::new()),
            Some(filter) => {
                let (mask, decoded) = filter.evaluate(&segments, group.rows)?;
                (Some(mask), decoded)
            }
        };
        let kept = mask.as_ref().map_or(group.rows, |m| m.true_count());
        if kept == 0 {
            return Ok(Vec::new());
        }
        let missing: Vec<usize> = (0..plan.projected).filter(|&c| segments[c].is_none()).collect();
        let mut fetched = if missing.is_empty() {
            Vec::new()
        } else {
            let fetching = Instant::now();
            let (request, missing, mask) = (&self.request, &missing, mask.as_ref());
            let (arrays, bytes) = self
                .servers
                .on_owner_of(&placement_name(group), |c| async move {
                    fetch_rows(&c, request, plan, group, missing, mask, kept).await
                })
                .await
                .map_err(Failure::into_error)?;
            meter.fetched(fetching.elapsed(), bytes);
            arrays
        }
        .into_iter();
        let all = mask.as_ref().filter(|_| kept < group.rows);
        let columns: Vec<ArrayRef> = (0..plan.projected)
            .map(|c| {
                if let Some((_, array)) = decoded.iter().find(|(d, _)| *d == c) {
                    return Ok(match all {
                        Some(m) => datafusion::arrow::compute::filter(array, m)?,
                        None => array.clone(),
                    });
                }
                match (&segments[c], all) {
                    (Some(segment), Some(m)) => Ok(segment.filter(m)?),
                    (Some(segment), None) => Ok(segment.to_arrow()),
                    (None, _) => fetched
                        .next()
                        .ok_or_else(|| exec_datafusion_err!("column #{c} was not fetched")),
                }
            })
            .collect::<Result<_>>()?;
        let batch_size = self.context.session_config().batch_size();
        let rows = batches_of(plan, &self.out, columns, kept, batch_size)?;
        meter.computed = Some(started.elapsed());
        // A partial aggregate per row group: its states merge in the
        // client's final aggregate like the server's do.
        match &plan.fragment {
            Some(fragment) if !rows.is_empty() => aggregate_locally(fragment, rows, self.context.clone()).await,
            _ => Ok(rows),
        }
    }
}

/// What a row group's run here spent waiting on the server and moved, and
/// when its own rows were ready (before any partial aggregate).
#[derive(Default)]
struct Meter {
    waited: Duration,
    bytes: u64,
    computed: Option<Duration>,
}

impl Meter {
    fn fetched(&mut self, waited: Duration, bytes: u64) {
        self.waited += waited;
        self.bytes += bytes;
    }
}

/// The cache keys of `group`'s needed columns, in `plan.needed` order.
fn keys_of(table: &str, plan: &LocalPlan, group: &RowGroup) -> Vec<ChunkKey> {
    let object = ObjectKey::new(table, group.object.clone(), group.version.clone());
    plan.columns
        .iter()
        .map(|&c| ChunkKey::new(object.clone(), group.index, c))
        .collect()
}

/// The path of one row group (module docs), recording the use of its
/// segments with their benefit under the scan's observed selectivity, and
/// the model that priced it (its `estimates` of the server, the scan's
/// selectivity). `pending`: the bytes this scan already chose to fetch;
/// `fetch_now`: the scan is being tried here on purpose, so what fits is
/// fetched without waiting for repeated uses.
fn choose(
    plan: &LocalPlan,
    table: &str,
    group: &RowGroup,
    pending: &mut usize,
    estimates: &Estimates,
    fetch_now: bool,
) -> (Choice, PathCost) {
    // Until observed: a partial aggregate sends states (next to nothing),
    // a filter keeps DataFusion's default 20%, else everything.
    let unobserved = match (&plan.fragment, &plan.filter) {
        (Some(_), _) => 0.0,
        (None, Some(_)) => 0.2,
        (None, None) => 1.0,
    };
    let selectivity = plan.cache.selectivity(&plan.filters_key).unwrap_or(unobserved);
    let model = PathCost {
        estimates: *estimates,
        selectivity,
    };
    if group.server_only {
        return (Choice::Pushdown, model); // the snapshot deletes rows of it: the server applies that
    }
    if plan.needed.iter().any(|c| !group.bytes.contains_key(c)) {
        return (Choice::Pushdown, model); // the object lacks a column: the server fills it in
    }
    let keys = keys_of(table, plan, group);
    let uses: Vec<(ChunkKey, f64)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (k.clone(), benefit_per_byte(i < plan.projected, selectivity)))
        .collect();
    plan.cache.record_use(&uses);
    let segments = plan.cache.get_each(&keys);
    if segments.iter().all(Option::is_some) {
        return (Choice::Local(segments), model);
    }
    // Arrow in memory is about the uncompressed chunk size.
    let sized: Vec<(ChunkKey, usize)> = keys
        .into_iter()
        .zip(&plan.needed)
        .map(|(k, c)| (k, group.bytes[c]))
        .collect();
    let admitted = if fetch_now {
        plan.cache.admission_now(&sized, *pending)
    } else {
        plan.cache.admission(&sized, *pending)
    };
    if let Some(bytes) = admitted {
        *pending += bytes;
        return (Choice::Fetch, model);
    }
    if plan.cache.is_caching_only() {
        // Caching-only fetches it anyway, and admits it if it fits then.
        return (Choice::Fetch, model);
    }
    let filter_cached = plan
        .filter
        .as_ref()
        .is_none_or(|f| f.columns.iter().all(|&c| segments[c].is_some()));
    if filter_cached && plan.fragment.is_none() && model.prefers_hybrid(&sizes_of(plan, group, Some(&segments))) {
        return (Choice::Hybrid(segments), model);
    }
    (Choice::Pushdown, model)
}

/// `group`'s needed bytes by where they are, for the cost model: by the
/// cached `segments`, or (`None`) as if all were held (where they are does
/// not change the local, fetch and pushdown prices). A column the object
/// lacks counts nothing.
fn sizes_of(plan: &LocalPlan, group: &RowGroup, segments: Option<&[Option<CachedColumn>]>) -> RowGroupSizes {
    let mut sizes = RowGroupSizes {
        rows: group.rows,
        ..Default::default()
    };
    for (c, name) in plan.needed.iter().enumerate() {
        let bytes = group.bytes.get(name).copied().unwrap_or(0);
        let held = segments.is_none_or(|s| s[c].is_some());
        if c >= plan.projected {
            sizes.filter_only += bytes;
        } else if !held {
            sizes.projected_missing += bytes;
        } else if plan.filter.as_ref().is_some_and(|f| f.reads(c)) {
            // Scanned for the filter on either side anyway.
            sizes.filter_only += bytes;
        } else {
            sizes.projected_local += bytes;
        }
    }
    sizes
}

/// The needed columns of one row group, whole and unfiltered, from the
/// server: as stored and decoded here when the link is the bottleneck
/// ([`super::bytes`]), else as Arrow.
async fn fetch_row_group(
    client: &SiltClient,
    scan: &ScanRequest,
    plan: &LocalPlan,
    group: &RowGroup,
    counters: &PathCounters,
) -> std::result::Result<(Vec<ArrayRef>, u64), Failure> {
    if let Some(fetched) = super::bytes::fetch(client, scan, plan, group, counters).await? {
        return Ok(fetched);
    }
    let all: Vec<usize> = (0..plan.needed.len()).collect();
    fetch_rows(client, scan, plan, group, &all, None, group.rows).await
}

/// Columns `missing` (positions in `plan.needed`) of the rows of `group`
/// that `mask` keeps (`kept` of them; `None`: every row), from the server:
/// a scan scoped to the row group with a row bitmap, no filters,
/// compressed when the model says the link is slower than compressing.
/// Also returns the bytes that came over the link.
async fn fetch_rows(
    client: &SiltClient,
    scan: &ScanRequest,
    plan: &LocalPlan,
    group: &RowGroup,
    missing: &[usize],
    mask: Option<&BooleanArray>,
    kept: usize,
) -> std::result::Result<(Vec<ArrayRef>, u64), Failure> {
    let mut scope = scope_of(std::iter::once(group));
    if let Some(mask) = mask.filter(|_| kept < group.rows) {
        let bits = mask.values().sliced();
        scope.objects[0].selections = vec![bits.as_slice()[..group.rows.div_ceil(8)].to_vec()];
    }
    let request = ScanRequest {
        table: scan.table.clone(),
        projection: Some(Projection {
            columns: missing.iter().map(|&c| plan.needed[c].clone()).collect(),
        }),
        scope: Some(scope),
        query: scan.query.clone(),
        ..Default::default()
    };
    let share = kept as f64 / group.rows.max(1) as f64;
    let expected: usize = missing
        .iter()
        .map(|&c| group.bytes.get(&plan.needed[c]).copied().unwrap_or(0))
        .sum();
    let request = with_compression(client, &request, Some(expected as f64 * share));
    let (batches, transfer) = client.scan_all_measured(&request).await?;
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if rows != kept {
        return Err(Failure::Other(exec_datafusion_err!(
            "row group {} of {} came back with {rows} of the {kept} rows asked for",
            group.index,
            group.object
        )));
    }
    Ok((columns_of(&batches, missing.len())?, transfer.bytes_received))
}

/// Each of the first `count` columns of `batches`, concatenated.
fn columns_of(batches: &[RecordBatch], count: usize) -> std::result::Result<Vec<ArrayRef>, Failure> {
    (0..count)
        .map(|c| {
            let parts: Vec<&dyn Array> = batches.iter().map(|b| b.column(c).as_ref()).collect();
            concat(&parts).map_err(|e| Failure::Other(e.into()))
        })
        .collect()
}

/// A row group's projected `columns` (`rows` rows each) as batches of
/// `out` of at most `batch_size` rows (before any partial aggregate: the
/// scan's own rows).
fn batches_of(
    plan: &LocalPlan,
    out: &SchemaRef,
    columns: Vec<ArrayRef>,
    rows: usize,
    batch_size: usize,
) -> Result<Vec<RecordBatch>> {
    let scan_schema = match &plan.fragment {
        Some(fragment) => leaf_schema(fragment)?,
        None => out.clone(),
    };
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    let whole = RecordBatch::try_new_with_options(scan_schema, columns, &options)?;
    let size = batch_size.max(1);
    Ok((0..rows.div_ceil(size))
        .map(|b| whole.slice(b * size, size.min(rows - b * size)))
        .collect())
}

/// The schema of the scan at the leaf of a partial-aggregate fragment.
fn leaf_schema(fragment: &Arc<dyn ExecutionPlan>) -> Result<SchemaRef> {
    let mut found = None;
    fragment.apply(|node| {
        if node.name() == SCAN_NODE {
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
            Ok(if node.name() == SCAN_NODE {
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
