//! Distributed compute over Silt scans, on `datafusion-distributed`.
//!
//! A *coordinator* ([`coordinator_context`]) plans a query with
//! DataFusion and the distributed planner; its leaf scans are
//! [`SiltScanExec`]s over a [`Fleet`] of cache servers. The planner splits
//! each leaf into one task per worker ([`scale_up_scan`]): task `i` reads
//! the row groups its [`TaskShare`] gives it, which are those owned (by the
//! fleet's rendezvous hash, [`crate::fleet`]) by the cache server beside
//! worker `i`, and [`route_scan_tasks`] sends task `i` to worker `i`. So a
//! worker scans its own cache server's segments, and the layer above the
//! scan (joins, aggregates, shuffles) is `datafusion-distributed`'s.
//!
//! *Workers* ([`worker`], `silt worker`) run the stages they are sent. A
//! leaf scan crosses the network through [`SiltScanCodec`], registered on
//! both sides: it carries the scan request, its schema, the fleet's URLs
//! and the task's share, and a worker rebuilds the scan over a fleet of
//! those URLs (one per list, connected lazily, kept for later queries).
//!
//! **Pairing.** Worker `i` of `--workers` is beside fleet member
//! `i mod N` of `--server` (N members): give both lists in the same order,
//! one worker per cache server. A member with no worker beside it still
//! owns its segments: they go to the task whose home comes next in their
//! rendezvous order, and that worker reads them from their owner.
//!
//! **A worker's compute-side cache.** A worker keeps one by default,
//! shared by its tasks ([`SiltScanCodec::with_local_cache`]): the scan on
//! the wire carries its table's schema, the worker rebuilds the scan's
//! [`LocalPlan`] and the task answers its share per row group (local,
//! fetched, hybrid or pushed, each on its owner) as a fleet client does.
//! Scans with a partial aggregate or a limit, and tasks without a planned
//! layout, are pushed to the owners. The coordinator keeps none.
//!
//! Not carried across: hash joins' dynamic filters on a scan (the join
//! still checks every key; the scan then reads rows the filter would have
//! dropped).
//!
//! **Dead workers.** Before a query, [`with_worker_retry`] probes the
//! workers; only those that answer get tasks (their shares go to the live
//! workers' homes, so a dead worker's row groups are read beside the next
//! home in their rendezvous order). A worker that dies under a query fails
//! it (`datafusion-distributed` has no task retries): the query is planned
//! again on the workers left and run again (at most [`MAX_RUNS`] runs),
//! its answer collected before it is returned, so never partial or
//! duplicated. A restarted worker gets tasks again from the next query's
//! probe. A cache server that is down fails over as in any fleet scan.
//! Scripts ([`run_script_retrying`]) retry statement by statement, so a
//! statement that already took effect (TPC-H Q15's `CREATE VIEW`) never
//! runs twice, and only queries are retried: a write runs once. Retries
//! are counted ([`Workers::retries`], the metric
//! `silt_distributed_query_retries_total` where the process exports
//! metrics) and shown by `EXPLAIN ANALYZE` (a `Worker retries` row).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{exec_datafusion_err, internal_err};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SessionStateBuilder, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::physical_expr::create_physical_expr;
use datafusion::physical_expr::execution_props::ExecutionProps;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::{DFParser, Statement as DfStatement};
use datafusion_distributed::{
    DesiredTaskCountEvent, DesiredTaskCountEventResponse, DistributedExt, DistributedLeafExec, RouteTasksEvent,
    RouteTasksEventResponse, ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse, SessionStateBuilderExt, Worker,
    WorkerQueryContext, WorkerResolver,
};
use datafusion_proto::bytes::Serializeable;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use prost::Message;
use silt_proto::ScanRequest;
use silt_proto::placement::member_name;
use url::Url;

use crate::exec::{ScanParts, SiltScanExec};
use crate::fleet::{Fleet, TaskShare};
use crate::local_cache::LocalCache;
use crate::scan::local_plan::{LocalPlan, ScanShape};
use crate::script::{StatementResult, run_statement};

/// The workers of a coordinator and the fleet member beside each: what
/// the task handlers read from the session's config. Clones share which
/// workers answered the last [`Workers::probe`]: only those get tasks.
#[derive(Debug, Clone)]
pub struct Workers {
    /// Worker URLs (`http://host:port`), in task order.
    urls: Vec<Url>,
    /// Per worker, the fleet member beside it ([`SiltClient::url`]).
    homes: Vec<String>,
    /// Per worker, whether it answered the last probe (all, before one).
    live: Arc<Mutex<Vec<bool>>>,
    /// Runs repeated after a worker failed under them.
    retries: Arc<AtomicU64>,
}

/// A run repeated on the workers left: what failed the run before and how
/// many workers answered the probe after it.
#[derive(Debug, Clone)]
pub struct WorkerRetry {
    /// The first run's error.
    pub error: String,
    /// Workers that answered the probe before the repeated run, and in all.
    pub live: usize,
    pub workers: usize,
}

impl std::fmt::Display for WorkerRetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "run again on {} of {} workers after: {}",
            self.live, self.workers, self.error
        )
    }
}

/// How long a probe waits for a worker to accept a connection.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

impl Workers {
    /// `workers` paired in order with `fleet`'s members (worker `i` beside
    /// member `i mod N`).
    pub fn pair(workers: &[String], fleet: &Fleet) -> Result<Self> {
        if workers.is_empty() {
            return Err(exec_datafusion_err!("a distributed query needs at least one worker"));
        }
        let members: Vec<String> = fleet.clients().iter().map(|c| c.url().to_string()).collect();
        let urls = workers
            .iter()
            .map(|w| {
                let w = member_name(w);
                Url::parse(&w).map_err(|e| exec_datafusion_err!("worker URL {w:?}: {e}"))
            })
            .collect::<Result<Vec<_>>>()?;
        let homes = (0..urls.len()).map(|i| members[i % members.len()].clone()).collect();
        let live = Arc::new(Mutex::new(vec![true; urls.len()]));
        Ok(Workers {
            urls,
            homes,
            live,
            retries: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The workers that answered the last probe, in task order (all of
    /// them when none did: the query then fails with the workers' error).
    fn live(&self) -> Vec<usize> {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let up: Vec<usize> = (0..self.urls.len()).filter(|&i| live[i]).collect();
        if up.is_empty() {
            (0..self.urls.len()).collect()
        } else {
            up
        }
    }

    /// The URLs of [`Workers::live`].
    fn live_urls(&self) -> Vec<Url> {
        self.live().into_iter().map(|i| self.urls[i].clone()).collect()
    }

    /// Connects to every worker at once (a TCP connect, at most
    /// [`PROBE_TIMEOUT`] each) and keeps which answered; how many did.
    pub async fn probe(&self) -> usize {
        let answered = futures::future::join_all(self.urls.iter().map(|url| async move {
            let Some(addr) = url.socket_addrs(|| None).ok().and_then(|a| a.into_iter().next()) else {
                return false;
            };
            matches!(
                tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(addr)).await,
                Ok(Ok(_))
            )
        }))
        .await;
        let up = answered.iter().filter(|a| **a).count();
        *self.live.lock().unwrap_or_else(|p| p.into_inner()) = answered;
        up
    }

    /// Runs repeated because a worker failed under them.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// The share of task `task` of `tasks`: tasks go to the live workers in
    /// order (the planner may use fewer tasks than there are: then the
    /// first `tasks`), each beside its home member.
    fn share(&self, task: usize, tasks: usize) -> TaskShare {
        TaskShare {
            task,
            homes: self
                .live()
                .into_iter()
                .take(tasks.max(1))
                .map(|i| self.homes[i].clone())
                .collect(),
        }
    }
}

impl WorkerResolver for Workers {
    fn get_urls(&self) -> Result<Vec<Url>> {
        Ok(self.live_urls())
    }
}

/// Runs `run` (which plans and collects a query of the coordinating
/// context `ctx`) on the workers that answer a probe; if it fails and a
/// worker no longer answers, or the failure is one of transport, probes
/// again and runs it again on the workers left (at most [`MAX_RUNS`]
/// runs in all). `datafusion-distributed`
/// has no task retries, so the unit of retry is the query: its answer is
/// collected before it is returned, so a retried query never returns
/// partial or duplicated rows. Each retry is counted ([`Workers::retries`]).
pub async fn with_worker_retry<T, F, Fut>(ctx: &SessionContext, run: F) -> Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    Ok(retrying(ctx, MAX_RUNS, run).await?.0)
}

/// [`with_worker_retry`] with at most `max_runs` runs, also saying which
/// runs were repeated and why.
async fn retrying<T, F, Fut>(ctx: &SessionContext, max_runs: usize, run: F) -> Result<(T, Vec<WorkerRetry>)>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let Some(workers) = ctx.state().config().get_extension::<Workers>() else {
        return Ok((run().await?, Vec::new()));
    };
    let mut before = workers.probe().await;
    let mut retries = Vec::new();
    for attempt in 1.. {
        let failure = match run().await {
            Ok(answer) => return Ok((answer, retries)),
            Err(e) => e,
        };
        if attempt >= max_runs {
            return Err(failure);
        }
        // A worker being killed may still accept a connection for a moment:
        // let it finish dying before asking who is left.
        tokio::time::sleep(SETTLE).await;
        let after = workers.probe().await;
        if after == 0 || (after >= before && !is_transport_failure(&failure)) {
            return Err(failure);
        }
        before = after;
        workers.retries.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("silt_distributed_query_retries_total").increment(1);
        let again = WorkerRetry {
            error: failure.to_string(),
            live: after,
            workers: workers.urls.len(),
        };
        tracing::warn!(retry = %again, "a worker failed under the query; running it again");
        retries.push(again);
    }
    unreachable!("the loop returns by its last run")
}

/// Runs of one query at most: a second when a worker died under the
/// first, a third when another (or the same, still dying at the probe)
/// failed the second.
const MAX_RUNS: usize = 3;

/// How long a failed run waits before probing the workers.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(200);

/// Runs each statement of `sql` in `ctx` (a [`coordinator_context`]) on
/// the workers that answer a probe. A query (`SELECT`, `WITH`, `VALUES`,
/// their `EXPLAIN`) a dying worker fails runs again ([`with_worker_retry`]);
/// the statements before it, which took effect, do not. Any other statement
/// runs once: a write (`INSERT ... SELECT`, `COPY`) a worker failed under may
/// have written part of its output, and a second run would write it again.
/// An `EXPLAIN ANALYZE` answer gains a row `Worker retries`: `0`, or how
/// many runs were repeated and why.
pub async fn run_script_retrying(ctx: &SessionContext, sql: &str) -> Result<Vec<StatementResult>> {
    let mut out = Vec::new();
    for statement in DFParser::parse_sql(sql)? {
        let analyze = matches!(&statement, DfStatement::Explain(e) if e.options.analyze);
        let max_runs = if is_query(&statement) { MAX_RUNS } else { 1 };
        let (mut result, retries) = retrying(ctx, max_runs, || run_statement(ctx, statement.clone())).await?;
        if analyze {
            let note = match retries.last() {
                None => "0".to_string(),
                Some(last) => format!("{}: {last}", retries.len()),
            };
            result.batches = with_plan_row(&result.batches, "Worker retries", &note)?;
        }
        out.push(result);
    }
    Ok(out)
}

/// Whether `statement` only reads (a query, or the `EXPLAIN` of one), so
/// running it twice gives the same answer and changes nothing.
fn is_query(statement: &DfStatement) -> bool {
    use datafusion::sql::sqlparser::ast::Statement as Sql;
    match statement {
        DfStatement::Statement(s) => matches!(**s, Sql::Query(_)),
        DfStatement::Explain(e) => is_query(&e.statement),
        _ => false,
    }
}

/// `batches` (an `EXPLAIN` answer: `plan_type`, `plan`) with one more row.
fn with_plan_row(batches: &[RecordBatch], plan_type: &str, plan: &str) -> Result<Vec<RecordBatch>> {
    let Some(schema) = batches.first().map(|b| b.schema()) else {
        return Ok(Vec::new());
    };
    let row = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(vec![plan_type])),
            Arc::new(StringArray::from(vec![plan])),
        ],
    )?;
    let mut out = batches.to_vec();
    out.push(row);
    Ok(out)
}

/// Whether `e` reads as a connection failing (a worker gone mid-query)
/// rather than an error of the query.
fn is_transport_failure(e: &DataFusionError) -> bool {
    let text = e.to_string().to_lowercase();
    [
        "transport error",
        "connection refused",
        "connection reset",
        "broken pipe",
        "error trying to connect",
        "unavailable",
        "h2 protocol error",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

/// A coordinating context over `fleet` and `workers`: the fleet's tables
/// registered, the distributed planner on, Silt scans split by
/// [`TaskShare`] and routed to the workers beside their cache servers.
pub async fn coordinator_context(
    fleet: Arc<Fleet>,
    workers: &[String],
    token: Option<String>,
) -> Result<SessionContext> {
    let workers = Workers::pair(workers, &fleet)?;
    let config = SessionConfig::new()
        .with_information_schema(true)
        .with_extension(Arc::new(workers.clone()));
    let state = SessionStateBuilder::new()
        .with_default_features()
        .with_config(config)
        .with_distributed_worker_resolver(workers)
        .with_distributed_planner()
        .with_distributed_user_codec_arc(Arc::new(SiltScanCodec::new(token)))
        .with_distributed_desired_task_count_handler(desired_scan_tasks)
        .with_distributed_scale_up_leaf_node_handler(scale_up_scan)
        .with_distributed_route_tasks_handler(route_scan_tasks)
        .build();
    let ctx = SessionContext::new_with_state(state);
    // The coordinator keeps no compute-side cache: its scans run as tasks
    // on the workers (module docs).
    let options = crate::SiltTableOptions {
        local_cache_bytes: 0,
        ..Default::default()
    };
    crate::register_fleet_tables_with_options(&ctx, fleet, &options).await?;
    Ok(ctx)
}

/// The distributed plan of `sql` in `ctx` (a [`coordinator_context`]), as
/// text: its stages, their tasks and the workers they run on. (`EXPLAIN`
/// shows DataFusion's plan before the distributed planner splits it.)
pub async fn explain(ctx: &SessionContext, sql: &str) -> Result<String> {
    let plan = ctx.sql(sql).await?.create_physical_plan().await?;
    Ok(datafusion_distributed::display_plan_ascii(plan.as_ref(), false))
}

/// A worker that runs distributed stages whose leaves are Silt scans,
/// reading from the cache servers with `token`. With `servers`, it reads
/// only from those (a plan naming others is refused): a worker with a
/// token must be given them, or any plan could send the token anywhere.
/// Serve it with [`serve_worker_with`].
pub fn worker(token: Option<String>, servers: Option<Vec<String>>) -> (Worker, Arc<SiltScanCodec>) {
    worker_with(token, servers, &crate::SiltTableOptions::default())
}

/// A [`worker`] whose tasks share the compute-side cache `options` ask
/// for ([`SiltScanCodec::with_local_cache`]; the default: a quarter of the
/// machine's memory, at most 4 GiB, as any client of Silt keeps).
pub fn worker_with(
    token: Option<String>,
    servers: Option<Vec<String>>,
    options: &crate::SiltTableOptions,
) -> (Worker, Arc<SiltScanCodec>) {
    let codec = Arc::new(
        SiltScanCodec::new(token)
            .serving_only(servers)
            .with_local_cache(options),
    );
    let shared = codec.clone();
    let worker = Worker::from_session_builder(move |ctx: WorkerQueryContext| {
        let codec: Arc<dyn PhysicalExtensionCodec> = shared.clone();
        async move { Ok(ctx.builder.with_distributed_user_codec_arc(codec).build()) }
    });
    (worker, codec)
}

/// Serves a [`worker_with`] `options` on `listener` until `shutdown` completes.
pub async fn serve_worker(
    listener: tokio::net::TcpListener,
    token: Option<String>,
    servers: Option<Vec<String>>,
    options: &crate::SiltTableOptions,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> std::result::Result<(), tonic::transport::Error> {
    let (worker, _codec) = worker_with(token, servers, options);
    serve_worker_with(listener, worker, shutdown).await
}

/// Serves `worker` on `listener` until `shutdown` completes.
pub async fn serve_worker_with(
    listener: tokio::net::TcpListener,
    worker: Worker,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> std::result::Result<(), tonic::transport::Error> {
    tonic::transport::Server::builder()
        .add_service(worker.into_worker_server())
        .serve_with_incoming_shutdown(tokio_stream::wrappers::TcpListenerStream::new(listener), shutdown)
        .await
}

/// Every Silt scan runs on as many tasks as there are live workers.
fn desired_scan_tasks(event: DesiredTaskCountEvent) -> Option<Result<DesiredTaskCountEventResponse>> {
    event.plan.downcast_ref::<SiltScanExec>()?;
    let workers = event.session_config.get_extension::<Workers>()?;
    Some(Ok(DesiredTaskCountEventResponse::desired(workers.live().len())))
}

/// A Silt scan becomes one variant per task, each reading its share.
fn scale_up_scan(event: ScaleUpLeafNodeEvent) -> Option<Result<ScaleUpLeafNodeEventResponse>> {
    let scan = event.plan.downcast_ref::<SiltScanExec>()?;
    let Some(workers) = event.session_config.get_extension::<Workers>() else {
        return Some(internal_err!(
            "a distributed Silt scan without its workers in the session"
        ));
    };
    if scan.fleet().is_none() {
        return Some(internal_err!("a distributed Silt scan needs a fleet table"));
    }
    let variants = (0..event.task_count)
        .map(|task| Arc::new(scan.with_share(workers.share(task, event.task_count))) as Arc<dyn ExecutionPlan>);
    Some(
        DistributedLeafExec::try_new(Arc::clone(event.plan), variants)
            .map(|leaf| ScaleUpLeafNodeEventResponse::new(Arc::new(leaf))),
    )
}

/// A stage whose leaf is a split Silt scan sends task `i` to worker `i`,
/// the one beside the cache server that owns its share.
fn route_scan_tasks(event: RouteTasksEvent) -> Option<Result<RouteTasksEventResponse>> {
    let workers = event.task_ctx.session_config().get_extension::<Workers>()?;
    let mut scans = false;
    let walk = event.plan.apply(|node| {
        if let Some(leaf) = node.downcast_ref::<DistributedLeafExec>()
            && leaf.original().downcast_ref::<SiltScanExec>().is_some()
        {
            scans = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    if let Err(e) = walk {
        return Some(Err(e));
    }
    if !scans {
        return None;
    }
    let live = workers.live_urls();
    let urls = (0..event.task_count).map(|i| live[i % live.len()].clone()).collect();
    Some(Ok(RouteTasksEventResponse::new(urls)))
}

/// A Silt scan on the wire between coordinator and worker.
#[derive(Clone, PartialEq, Message)]
struct DistributedScan {
    /// The [`ScanRequest`], encoded.
    #[prost(bytes = "vec", tag = "1")]
    request: Vec<u8>,
    /// The output schema, a `datafusion_proto` `Schema`.
    #[prost(bytes = "vec", tag = "2")]
    schema: Vec<u8>,
    #[prost(string, repeated, tag = "3")]
    filter_text: Vec<String>,
    #[prost(string, optional, tag = "4")]
    aggregate_text: Option<String>,
    #[prost(uint64, optional, tag = "5")]
    num_rows: Option<u64>,
    /// The fleet's members, in the coordinator's order.
    #[prost(string, repeated, tag = "6")]
    servers: Vec<String>,
    #[prost(uint64, optional, tag = "7")]
    task: Option<u64>,
    #[prost(string, repeated, tag = "8")]
    homes: Vec<String>,
    #[prost(string, repeated, tag = "9")]
    query_tables: Vec<String>,
    /// The table's whole schema (a `datafusion_proto` `Schema`), when the
    /// table planned the scan: a worker's compute-side cache names chunks
    /// by a column's index in it.
    #[prost(bytes = "vec", optional, tag = "10")]
    table_schema: Option<Vec<u8>>,
    #[prost(uint64, optional, tag = "11")]
    table_rows: Option<u64>,
}

/// Encodes [`SiltScanExec`] for `datafusion-distributed` and rebuilds it
/// on a worker over a fleet of the coordinator's servers.
#[derive(Debug)]
pub struct SiltScanCodec {
    token: Option<String>,
    /// The servers a worker may read from ([`member_name`]s); `None`: any.
    allowed: Option<Vec<String>>,
    /// One fleet per list of servers seen, so a worker keeps its
    /// connections (and its members' health) across queries.
    fleets: Mutex<HashMap<Vec<String>, Arc<Fleet>>>,
    decoded: AtomicU64,
    /// The worker's compute-side cache, shared by every task it runs
    /// (`None`: every task's share pushed to its owners).
    local_cache: Option<Arc<LocalCache>>,
}

/// Fleets a codec keeps at most (lists of servers seen); past that they
/// are dropped and made again on use.
const MAX_FLEETS: usize = 16;

impl SiltScanCodec {
    /// A codec whose scans read the servers with `token`.
    pub fn new(token: Option<String>) -> Self {
        SiltScanCodec {
            token,
            allowed: None,
            fleets: Mutex::new(HashMap::new()),
            decoded: AtomicU64::new(0),
            local_cache: None,
        }
    }

    /// This codec's scans with the compute-side cache `options` ask for
    /// (`local_cache_bytes = 0`: none):
    /// a task's share of a table's row groups is then answered per row
    /// group (local, fetched, hybrid or pushed, each on its owner) as a
    /// fleet client's scan is ([`crate::scan::hybrid`]). Scans with a
    /// partial aggregate or a limit, and tasks planned without a layout
    /// (views), are pushed to the owners as before.
    pub fn with_local_cache(mut self, options: &crate::SiltTableOptions) -> Self {
        self.local_cache = crate::local_cache_of(options);
        self
    }

    /// The worker's compute-side cache, if it keeps one.
    pub fn local_cache(&self) -> Option<&Arc<LocalCache>> {
        self.local_cache.as_ref()
    }

    /// How a scan rebuilt on this worker runs its share here, over the
    /// table `table` (its schema and rows, from the wire): `None` when the
    /// worker keeps no cache, the scan is one it pushes (see
    /// [`Self::with_local_cache`]), or its filters cannot be read or
    /// planned here (the share is then pushed to its owners, who read
    /// them as the server reads any scan's).
    fn local_plan(
        &self,
        request: &ScanRequest,
        wire: &DistributedScan,
        table: Option<&(SchemaRef, Option<usize>)>,
        ctx: &TaskContext,
    ) -> Option<Arc<LocalPlan>> {
        let cache = self.local_cache.clone()?;
        let (schema, table_rows) = table?;
        if request.scope.is_none() || request.partial_aggregate.is_some() || request.limit.is_some() {
            return None;
        }
        let filters = request
            .filters
            .iter()
            .map(|bytes| Expr::from_bytes_with_ctx(bytes, ctx))
            .collect::<Result<Vec<_>>>();
        let filters = match filters {
            Ok(filters) => filters,
            Err(e) => {
                tracing::debug!(table = %request.table, error = %e, "a filter not read here; the share is pushed");
                return None;
            }
        };
        let shape = ScanShape {
            table: &request.table,
            schema,
            table_rows: *table_rows,
            projection: request.projection.as_ref(),
            filters,
            filter_text: &wire.filter_text,
        };
        let props = ExecutionProps::new();
        shape
            .local_plan(cache, |expr, df_schema| {
                create_physical_expr(&expr, df_schema, &props, &PhysicalPlanningContext::default())
            })
            .map(Arc::new)
    }

    /// Silt scans this codec has rebuilt (on a worker: tasks it ran).
    pub fn scans_decoded(&self) -> u64 {
        self.decoded.load(Ordering::Relaxed)
    }

    /// This codec reading only from `servers` (`None`: from any).
    pub fn serving_only(mut self, servers: Option<Vec<String>>) -> Self {
        self.allowed = servers.map(|s| s.iter().map(|u| member_name(u)).collect());
        self
    }

    fn fleet(&self, servers: Vec<String>) -> Result<Arc<Fleet>> {
        if let Some(allowed) = &self.allowed
            && let Some(other) = servers.iter().find(|s| !allowed.contains(&member_name(s)))
        {
            return Err(exec_datafusion_err!(
                "this worker reads only from the servers it was started with (--servers), not {other}"
            ));
        }
        let mut fleets = self.fleets.lock().unwrap_or_else(|p| p.into_inner());
        if fleets.len() >= MAX_FLEETS && !fleets.contains_key(&servers) {
            fleets.clear();
        }
        if let Some(fleet) = fleets.get(&servers) {
            return Ok(fleet.clone());
        }
        let fleet = Arc::new(Fleet::connect(&servers, self.token.clone())?);
        fleets.insert(servers, fleet.clone());
        Ok(fleet)
    }
}

impl PhysicalExtensionCodec for SiltScanCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        _inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let wire = DistributedScan::decode(buf).map_err(|e| DataFusionError::External(Box::new(e)))?;
        let request =
            ScanRequest::decode(wire.request.as_slice()).map_err(|e| DataFusionError::External(Box::new(e)))?;
        let schema = datafusion_proto::protobuf::Schema::decode(wire.schema.as_slice())
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let schema = Arc::new(Schema::try_from(&schema)?);
        let share = wire.task.map(|task| TaskShare {
            task: task as usize,
            homes: wire.homes.clone(),
        });
        // The table's schema only serves a compute-side cache: one that
        // does not decode leaves the scan as it was without one.
        let table = wire
            .table_schema
            .as_ref()
            .and_then(|bytes| datafusion_proto::protobuf::Schema::decode(bytes.as_slice()).ok())
            .and_then(|schema| Schema::try_from(&schema).ok())
            .map(|schema| (Arc::new(schema), wire.table_rows.map(|n| n as usize)));
        let local = self.local_plan(&request, &wire, table.as_ref(), ctx);
        let query_tables: Arc<[String]> = Arc::from(wire.query_tables);
        let scan = SiltScanExec::from_parts(
            self.fleet(wire.servers)?,
            ScanParts {
                request: &request,
                schema: &schema,
                filter_text: &wire.filter_text,
                aggregate_text: wire.aggregate_text.as_deref(),
                num_rows: wire.num_rows.map(|n| n as usize),
                share: share.as_ref(),
                query_tables: &query_tables,
                table: table.as_ref(),
            },
            local,
        )?;
        self.decoded.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(scan))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let Some(scan) = node.downcast_ref::<SiltScanExec>() else {
            return internal_err!("SiltScanCodec cannot encode {}", node.name());
        };
        let Some(fleet) = scan.fleet() else {
            return internal_err!("a Silt scan sent to a worker needs a fleet table");
        };
        let parts = scan.parts();
        let schema = datafusion_proto::protobuf::Schema::try_from(parts.schema.as_ref())?;
        let wire = DistributedScan {
            request: parts.request.encode_to_vec(),
            schema: schema.encode_to_vec(),
            filter_text: parts.filter_text.to_vec(),
            aggregate_text: parts.aggregate_text.map(str::to_string),
            num_rows: parts.num_rows.map(|n| n as u64),
            servers: fleet.clients().iter().map(|c| c.url().to_string()).collect(),
            task: parts.share.map(|s| s.task as u64),
            homes: parts.share.map(|s| s.homes.clone()).unwrap_or_default(),
            query_tables: parts.query_tables.to_vec(),
            // Only for a worker's cache: a schema that does not encode is left out.
            table_schema: parts
                .table
                .and_then(|(schema, _)| datafusion_proto::protobuf::Schema::try_from(schema.as_ref()).ok())
                .map(|schema| schema.encode_to_vec()),
            table_rows: parts.table.and_then(|(_, rows)| rows.map(|n| n as u64)),
        };
        wire.encode(buf).map_err(|e| DataFusionError::External(Box::new(e)))
    }
}
