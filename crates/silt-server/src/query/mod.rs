//! A query's life on the server, for every entry point: Flight SQL
//! statements (and through them the `silt_system` tables), prepared
//! statements, Silt's pushed-down scans and point lookups.
//!
//! [`QueryRunner`] owns that life from the request to the last batch:
//!
//! 1. **trace and query log**: a [`trace::QueryTrace`] per query (made by a
//!    statement's `GetFlightInfo` and kept with its plan for the `DoGet`),
//!    registered in the [`log::QueryLog`], timing each [`stage::Stage`];
//! 2. **deadline**: one per query (`query_timeout` from the call that runs
//!    it), over planning, admission, validation and every batch;
//! 3. **validation gate**: each attempt plans on listings that may be
//!    speculative under `always` ([`ValidationGate`]); its first result is
//!    held until the gate confirms them;
//! 4. **restart once on a changed version**: when the validation found an
//!    object added, deleted or overwritten, or planning or the first result
//!    failed with [`silt_cache::CacheError::Changed`], the query is planned
//!    again on the new listing, once ([`QueryRunner::confirmed`]);
//! 5. **admission**: a planned query waits for an execution slot
//!    ([`slots::QuerySlots`], `max_concurrent_queries`) and holds it until
//!    its stream is dropped;
//! 6. **errors**: every failure is a [`ServerError`], counted once
//!    (`silt_query_errors_total`) and recorded on the trace; the transport
//!    maps it to its own status ([`ServerError::to_status`]).
//!
//! The transport (`crate::flight`) only decodes requests, calls the runner
//! and encodes its [`Answer`]s.

pub mod clock;
pub mod log;
pub mod lookup;
pub mod lookup_shape;
pub mod parameters;
pub mod pending;
pub mod plan;
pub mod ranges;
pub mod slots;
pub mod stage;
pub mod trace;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;
use futures::stream::BoxStream;
use silt_cache::{CacheError, ValidationGate};
use silt_core::restart::restart_once_on_change;
use silt_proto::ScanRequest;
use tokio::time::Instant;
use tracing::{Instrument, debug, warn};

use crate::engine::Engine;
use crate::error::ServerError;
use crate::metrics::ServerMetrics;
use clock::QueryClock;
use lookup::LookupQuery;
use pending::{KeptPlan, PendingPlans};
use plan::PlannedQuery;
use stage::Stage;
use trace::{QueryTrace, ScanClock};

/// Kept plans never redeemed are dropped this often, even on a quiet
/// server, so their queries leave the running list.
const EXPIRE_PLANS_EVERY: Duration = Duration::from_secs(10);

/// What a client asked to run.
pub enum Request {
    /// One SQL statement (a lookup's shape is recognized by the caller:
    /// [`QueryRunner::sql_lookup`]).
    Sql(String),
    /// A pushed-down scan from Silt's client.
    Scan(ScanRequest),
    /// A point lookup by key.
    Lookup(LookupQuery),
    /// Byte ranges of one object version, as stored.
    Ranges(silt_proto::RangesRequest),
}

impl Request {
    /// The client query this request is part of, when it says.
    fn query_id(&self) -> Option<&str> {
        match self {
            Request::Scan(scan) => scan.query.as_ref().map(|q| q.id.as_str()),
            Request::Ranges(ranges) => ranges.query.as_ref().map(|q| q.id.as_str()),
            Request::Sql(_) | Request::Lookup(_) => None,
        }
    }
}

/// A query's answer: its schema and its batches, each failure already
/// counted and traced. The trace goes on to time the encoding and sending
/// the transport does.
pub struct Answer {
    pub schema: SchemaRef,
    pub batches: BoxStream<'static, Result<RecordBatch, ServerError>>,
    pub trace: QueryTrace,
}

impl Answer {
    /// This answer, holding `guard` until its batches end (or are dropped).
    fn holding(self, guard: impl Send + 'static) -> Answer {
        let end = futures::stream::once(async move { drop(guard) }).filter_map(|()| async { None });
        Answer {
            batches: self.batches.chain(end).boxed(),
            ..self
        }
    }
}

/// What a query would answer, without running it.
pub struct Description {
    pub schema: SchemaRef,
    /// Rows it would return, when the files' statistics say (scans only).
    pub rows: Option<usize>,
    /// The values it takes, one field per placeholder (SQL only; empty
    /// for a statement without placeholders).
    pub parameters: SchemaRef,
}

impl Description {
    /// A description of `schema` and `rows` that takes no parameters.
    fn of(schema: SchemaRef, rows: Option<usize>) -> Self {
        Description {
            schema,
            rows,
            parameters: Arc::new(datafusion::arrow::datatypes::Schema::empty()),
        }
    }
}

/// Runs every query of one server (see the module docs).
pub struct QueryRunner {
    engine: Arc<Engine>,
    /// Plans made by `GetFlightInfo`, for the `DoGet` that follows.
    pending: PendingPlans,
    /// When each client query was first seen.
    clock: QueryClock,
}

impl QueryRunner {
    /// The runner of `engine`'s queries: one per server, shared by every
    /// transport that runs queries.
    pub fn new(engine: Arc<Engine>) -> Arc<Self> {
        Arc::new(QueryRunner {
            engine,
            pending: PendingPlans::default(),
            clock: QueryClock::default(),
        })
    }

    /// The engine the queries run on (the transport's metadata calls read
    /// its catalog).
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Drops kept plans never redeemed, every [`EXPIRE_PLANS_EVERY`], for as
    /// long as the runner lives (started by the server's start-up).
    pub fn spawn_plan_expiry(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let runner = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(EXPIRE_PLANS_EVERY);
            loop {
                tick.tick().await;
                match runner.upgrade() {
                    Some(runner) => runner.pending.expire(),
                    None => return,
                }
            }
        })
    }

    /// The lookup `sql` is, when it has exactly a lookup's shape.
    pub async fn sql_lookup(&self, sql: &str) -> Option<LookupQuery> {
        let statement = crate::guard::parse_single_query(sql).ok()?;
        lookup_shape::lookup_shape(&self.engine, &statement).await
    }

    /// The schema `request` answers with (and, for a scan, its row count),
    /// planned but not run: a scan's or lookup's `GetFlightInfo`, a
    /// prepared statement's creation.
    pub async fn describe(&self, request: &Request) -> Result<Description, ServerError> {
        self.engine.drain().check(request.query_id(), false)?;
        let trace = QueryTrace::schema_only(self.engine.metrics().clone());
        let deadline = self.deadline();
        let described = async {
            let planned = match request {
                Request::Lookup(lookup) => {
                    let schema = lookup::schema(&self.engine, lookup).await?;
                    return Ok(Description::of(schema, None));
                }
                Request::Ranges(_) => {
                    return Ok(Description::of(silt_proto::ranges_schema(), None));
                }
                Request::Sql(sql) => Planned::Sql(sql.clone()),
                Request::Scan(scan) => Planned::Scan(scan.clone()),
            };
            let plan = self.plan(&planned, None, deadline, &trace).await?;
            match planned {
                Planned::Scan(_) => Ok(Description::of(plan.schema(), plan.row_count().await)),
                Planned::Sql(_) => Ok(Description {
                    parameters: plan.parameter_schema()?,
                    ..Description::of(plan.schema(), None)
                }),
            }
        };
        described.await.map_err(|e| self.failed(&trace, e))
    }

    /// A statement's `GetFlightInfo`: its schema, and the handle its ticket
    /// carries. A lookup's shape is planned at its `DoGet` (nothing to keep);
    /// any other statement's plan is kept for the `DoGet`, with its gate
    /// (its speculative listings are confirmed by validations sent after
    /// this call started) and its trace.
    pub async fn prepare_statement(&self, sql: &str) -> Result<(SchemaRef, String), ServerError> {
        self.engine.drain().check(None, false)?;
        if let Some(lookup) = self.sql_lookup(sql).await {
            let schema = self.describe(&Request::Lookup(lookup)).await?.schema;
            return Ok((schema, sql.to_string()));
        }
        let gate = ValidationGate::new();
        let trace = QueryTrace::new("sql", sql, self.engine.metrics().clone());
        let planned = Planned::Sql(sql.to_string());
        let plan = self
            .plan(&planned, Some(&gate), self.deadline(), &trace)
            .await
            .map_err(|e| self.failed(&trace, e))?;
        let schema = plan.schema();
        let handle = self.pending.keep(sql, KeptPlan { plan, gate, trace });
        Ok((schema, handle))
    }

    /// A statement's `DoGet`: runs the plan `GetFlightInfo` kept under
    /// `handle`, or (expired, or made by another server) the statement the
    /// handle carries.
    /// A plan kept before a drain began still runs during it ([`crate::drain`]).
    pub async fn run_statement(&self, handle: &str) -> Result<Answer, ServerError> {
        let (sql, kept) = self.pending.redeem(handle);
        let running = self.engine.drain().admit(None, kept.is_some())?;
        let answer = if kept.is_none()
            && let Some(lookup) = self.sql_lookup(&sql).await
        {
            self.run_lookup(lookup).await
        } else {
            self.run_planned(Planned::Sql(sql), kept).await
        };
        answer.map(|a| a.holding(running))
    }

    /// Runs `request` to its answer (refused while the server drains,
    /// unless it belongs to a client query that started before).
    pub async fn run(&self, request: Request) -> Result<Answer, ServerError> {
        let running = self.engine.drain().admit(request.query_id(), false)?;
        let answer = match request {
            Request::Sql(sql) => self.run_planned(Planned::Sql(sql), None).await,
            Request::Scan(scan) => self.run_planned(Planned::Scan(scan), None).await,
            Request::Lookup(lookup) => self.run_lookup(lookup).await,
            Request::Ranges(ranges) => self.run_ranges(ranges).await,
        };
        answer.map(|a| a.holding(running))
    }

    /// The deadline of a query starting now.
    fn deadline(&self) -> Instant {
        Instant::now() + self.engine.config().query_timeout
    }

    /// A failure of the query `trace` follows: counted, recorded, returned.
    fn failed(&self, trace: &QueryTrace, e: ServerError) -> ServerError {
        self.engine.metrics().query_errors.increment(1);
        trace.failed(&e);
        debug!(error = %e, "request failed");
        e
    }

    /// The query ran past its deadline.
    fn timed_out(&self) -> ServerError {
        ServerError::Timeout(self.engine.config().query_timeout)
    }

    /// Runs a SQL statement or a scan (`kept`: the plan and gate its
    /// `GetFlightInfo` made, run as the first attempt) and streams it,
    /// enforcing the deadline on every batch.
    async fn run_planned(&self, query: Planned, kept: Option<KeptPlan>) -> Result<Answer, ServerError> {
        let metrics = self.engine.metrics().clone();
        // Counted once per query run, whatever planned it (a statement's
        // GetFlightInfo, or a scan's GetFlightInfo for its schema, runs nothing).
        metrics.queries.increment(1);
        let deadline = self.deadline();
        let trace = match &kept {
            Some(kept) => kept.trace.clone(),
            None => QueryTrace::new(query.kind(), &query.text(), metrics.clone()),
        };
        let Started {
            schema,
            sources,
            first,
            rest,
            slot,
            plan,
        } = self
            .start(&query, deadline, kept, &trace)
            .await
            .map_err(|e| self.failed(&trace, e))?;
        let batches = futures::stream::iter(first).chain(rest);
        let held = (ActiveQuery::new(metrics.clone()), slot, plan);
        let timeout = self.engine.config().query_timeout;
        let stream_trace = trace.clone();
        let batches = futures::stream::unfold((batches, false, held), move |(mut s, done, held)| {
            let metrics = metrics.clone();
            let trace = stream_trace.clone();
            let sources = sources.clone();
            async move {
                if done {
                    return None;
                }
                let fail = |e: ServerError| {
                    metrics.query_errors.increment(1);
                    trace.failed(&e);
                    warn!(error = %e, "query failed while streaming");
                    e
                };
                match tokio::time::timeout_at(deadline, s.next()).await {
                    Ok(Some(Ok(batch))) => Some((Ok(batch), (s, false, held))),
                    Ok(Some(Err(e))) => Some((Err(fail(ServerError::reading(&sources, e))), (s, true, held))),
                    Ok(None) => {
                        // The plan ran to its end: what its scans read.
                        let (rows, bytes) = plan::scanned(&held.2);
                        trace.scanned(rows, bytes);
                        None
                    }
                    Err(_) => Some((Err(fail(ServerError::Timeout(timeout))), (s, true, held))),
                }
            }
        });
        Ok(Answer {
            schema,
            batches: batches.boxed(),
            trace,
        })
    }

    /// Plans and executes `query` and takes its first result, confirmed
    /// ([`QueryRunner::confirmed`]): under `always`, a warm query runs on
    /// the last validated listing while its LIST/HEAD is in flight, and
    /// nothing reaches the client before the validation agrees.
    async fn start(
        &self,
        query: &Planned,
        deadline: Instant,
        mut kept: Option<KeptPlan>,
        trace: &QueryTrace,
    ) -> Result<Started, ServerError> {
        self.confirmed(deadline, trace, "", |restarted| {
            let kept = kept.take();
            async move {
                match kept {
                    Some(KeptPlan { plan, gate, .. }) => {
                        let started = self.execute(query, plan, deadline, trace).await;
                        (gate, started)
                    }
                    None => {
                        // A scan of a client query starts when the query did
                        // (`clock`); a restart starts now.
                        let gate = match self.started_at(query) {
                            _ if restarted => ValidationGate::without_speculation(),
                            Some(at) => ValidationGate::starting_at(at),
                            None => ValidationGate::new(),
                        };
                        // Planning reads footers too: a version gone by then
                        // is a changed version as well.
                        let started = async {
                            let planned = self.plan(query, Some(&gate), deadline, trace).await?;
                            self.execute(query, planned, deadline, trace).await
                        };
                        let started = started.await;
                        (gate, started)
                    }
                }
            }
        })
        .await
    }

    /// Answers a lookup: found rows, confirmed like any query's.
    async fn run_lookup(&self, query: LookupQuery) -> Result<Answer, ServerError> {
        let metrics = self.engine.metrics().clone();
        metrics.queries.increment(1);
        metrics.lookups.increment(1);
        let text = format!(
            "lookup {} by {} ({} keys)",
            query.table,
            query.key_column,
            query.keys.len()
        );
        let trace = QueryTrace::new("lookup", &text, metrics.clone());
        let deadline = self.deadline();
        let found = self
            .confirmed(deadline, &trace, &query.table, |_| async {
                let gate = ValidationGate::new();
                let attempt = tokio::time::timeout_at(deadline, lookup::attempt(&self.engine, &query, gate.clone()));
                let found = trace.time(Stage::Scan, attempt).await.unwrap_or(Err(self.timed_out()));
                (gate, found)
            })
            .await
            .map_err(|e| self.failed(&trace, e))?;
        found.count(&metrics);
        Ok(Answer {
            schema: found.schema,
            batches: futures::stream::iter(found.batches.into_iter().map(Ok)).boxed(),
            trace,
        })
    }

    /// Answers a byte-ranges request ([`ranges`]): read once a query slot
    /// is free (held until the answer is sent), by the query deadline,
    /// confirmed and restarted once on a changed version like any query
    /// (a restart that finds the object still changed refuses with
    /// `ABORTED`, and the client plans again).
    async fn run_ranges(&self, request: silt_proto::RangesRequest) -> Result<Answer, ServerError> {
        let metrics = self.engine.metrics().clone();
        metrics.queries.increment(1);
        let trace = QueryTrace::new("ranges", &ranges::text(&request), metrics.clone());
        let deadline = self.deadline();
        let client_query = request.query.as_ref().filter(|q| !q.id.is_empty());
        let slot = tokio::time::timeout_at(
            deadline,
            self.engine.query_slots().acquire(client_query.map(|q| q.id.as_str())),
        )
        .await
        .map_err(|_| self.failed(&trace, self.timed_out()))?;
        let read = self
            .confirmed(deadline, &trace, &request.table, |_| async {
                let gate = ValidationGate::new();
                let attempt = tokio::time::timeout_at(deadline, ranges::attempt(&self.engine, &request, gate.clone()));
                let read = trace.time(Stage::Scan, attempt).await.unwrap_or(Err(self.timed_out()));
                (gate, read)
            })
            .await
            .map_err(|e| self.failed(&trace, e))?;
        debug!(bytes = read.bytes, path = %request.path, "byte ranges read");
        metrics.byte_ranges.increment(1);
        metrics.byte_ranges_bytes.increment(read.bytes);
        let held = (ActiveQuery::new(metrics), slot);
        let batches = futures::stream::iter(read.batches.into_iter().map(Ok)).chain(
            futures::stream::once(async move {
                drop(held);
            })
            .filter_map(|()| async { None }),
        );
        Ok(Answer {
            schema: silt_proto::ranges_schema(),
            batches: batches.boxed(),
            trace,
        })
    }

    /// Runs attempts of one query until one is confirmed: each `attempt`
    /// makes its own gate (its validations must be sent after it started)
    /// and its result, whose release waits for the gate's confirmation.
    ///
    /// The query is restarted, once ([`restart_once_on_change`], the one
    /// restart policy, the client's scans' too), when the validation found
    /// an object added, deleted or overwritten, or when the attempt failed
    /// (or its first result did) with a changed version. A validation that fails
    /// otherwise fails the query with it: rows read on a listing the
    /// validation did not confirm never go out. `sources`: what the query
    /// reads, for that error when the attempt does not say.
    async fn confirmed<T, F, Fut>(
        &self,
        deadline: Instant,
        trace: &QueryTrace,
        sources: &str,
        mut attempt: F,
    ) -> Result<T, ServerError>
    where
        T: Attempt,
        F: FnMut(bool) -> Fut,
        Fut: Future<Output = (Arc<ValidationGate>, Result<T, ServerError>)>,
    {
        let metrics = self.engine.metrics();
        let outcome = restart_once_on_change(
            |restarted| {
                if restarted {
                    metrics.query_restarts.increment(1);
                    debug!("an object changed under the query before it answered; restarting it once");
                }
                let attempted = attempt(restarted);
                async move {
                    let (gate, result) = attempted.await;
                    let confirmation = tokio::time::timeout_at(deadline, gate.confirm());
                    let confirmed = trace
                        .time(Stage::Validation, confirmation)
                        .await
                        .map_err(|_| self.timed_out())?;
                    if gate.is_speculative() {
                        metrics.validations_speculative.increment(1);
                    }
                    if confirmed.as_ref().is_err_and(|e| e.is_changed()) {
                        metrics.validation_mismatches.increment(1);
                    }
                    Ok::<_, ServerError>((confirmed, result))
                }
            },
            |outcome| match outcome {
                Err(_) => false, // timed out
                Ok((Err(e), _)) => e.is_changed(),
                Ok((Ok(()), Err(e))) => e.is_version_changed(),
                Ok((Ok(()), Ok(answer))) => answer.saw_change(),
            },
        )
        .await;
        let (confirmed, result) = outcome?;
        if let Err(e) = confirmed {
            let sources = result.as_ref().ok().and_then(Attempt::sources).unwrap_or(sources);
            return Err(ServerError::reading(sources, DataFusionError::External(Box::new(e))));
        }
        result
    }

    /// When the client query `query` is a scan of started, if it says
    /// ([`clock`]).
    fn started_at(&self, query: &Planned) -> Option<std::time::Instant> {
        let context = query.client_query()?;
        Some(self.clock.query_started(&self.engine, context))
    }

    /// Plans `query` for the attempt that owns `gate`, by `deadline`. `trace`
    /// gets the time: the inline validation the gate counted as
    /// `validation`, the rest as `planning`.
    async fn plan(
        &self,
        query: &Planned,
        gate: Option<&Arc<ValidationGate>>,
        deadline: Instant,
        trace: &QueryTrace,
    ) -> Result<PlannedQuery, ServerError> {
        self.engine.metrics().plans.increment(1);
        let planning = async {
            match query {
                Planned::Sql(sql) => plan::sql(&self.engine, sql, gate).await,
                Planned::Scan(scan) => plan::scan(&self.engine, scan, gate).await,
            }
        };
        let inline_wait = || gate.map_or(Duration::ZERO, |g| g.inline_wait());
        let (waited_before, start) = (inline_wait(), Instant::now());
        let planned = tokio::time::timeout_at(deadline, planning.instrument(trace.span(Stage::Planning)))
            .await
            .unwrap_or_else(|_| Err(self.timed_out()));
        let waited = inline_wait().saturating_sub(waited_before);
        trace.add(Stage::Validation, waited);
        trace.add(Stage::Planning, start.elapsed().saturating_sub(waited));
        planned
    }

    /// Executes a planned query once a slot is free (its scan sets were
    /// registered when it was planned), and takes its first result (not yet
    /// confirmed), all of it `scan` time in `trace`.
    async fn execute(
        &self,
        query: &Planned,
        planned: PlannedQuery,
        deadline: Instant,
        trace: &QueryTrace,
    ) -> Result<Started, ServerError> {
        let schema = planned.schema();
        let sources = planned.sources.clone();
        let slots = self.engine.query_slots();
        let slot = tokio::time::timeout_at(deadline, slots.acquire(query.client_query().map(|q| q.id.as_str())))
            .await
            .map_err(|_| self.timed_out())?;
        let first_batch = async {
            let (mut batches, plan) = tokio::time::timeout_at(deadline, planned.execute_plan())
                .await
                .map_err(|_| self.timed_out())??;
            let first = tokio::time::timeout_at(deadline, batches.next())
                .await
                .map_err(|_| self.timed_out())?;
            Ok::<_, ServerError>((first, batches, plan))
        };
        let (first, rest, plan) = trace.time(Stage::Scan, first_batch).await?;
        Ok(Started {
            schema,
            sources,
            first,
            rest: trace.scanning(rest),
            slot,
            plan,
        })
    }
}

/// A query that is planned before it runs: SQL, or a pushdown scan.
/// Planned again on a restart.
enum Planned {
    Sql(String),
    Scan(ScanRequest),
}

impl Planned {
    /// The client query this is a scan of, if it says
    /// ([`silt_proto::QueryContext`]).
    fn client_query(&self) -> Option<&silt_proto::QueryContext> {
        match self {
            Planned::Scan(ScanRequest { query: Some(q), .. }) if !q.id.is_empty() => Some(q),
            _ => None,
        }
    }

    /// What the query log shows of it: the SQL, or what a scan reads.
    fn text(&self) -> String {
        match self {
            Planned::Sql(sql) => sql.clone(),
            Planned::Scan(scan) => {
                let columns = match &scan.projection {
                    Some(p) => format!("[{}]", p.columns.join(", ")),
                    None => "*".to_string(),
                };
                let mut text = format!("scan {} columns {columns}", scan.table);
                if !scan.filters.is_empty() {
                    text.push_str(&format!(" ({} filters)", scan.filters.len()));
                }
                if scan.layout_only {
                    text.push_str(" (layout)");
                }
                text
            }
        }
    }

    /// The `kind` of its trace.
    fn kind(&self) -> &'static str {
        match self {
            Planned::Sql(_) => "sql",
            Planned::Scan(_) => "scan",
        }
    }
}

/// What the restart rule needs to see of one attempt's (unconfirmed) result.
trait Attempt {
    /// Whether the result shows an object changed under the attempt.
    fn saw_change(&self) -> bool;
    /// The objects the attempt read, when it knows them.
    fn sources(&self) -> Option<&str>;
}

/// A query executing, with its first result already taken.
struct Started {
    schema: SchemaRef,
    sources: String,
    first: Option<datafusion::error::Result<RecordBatch>>,
    rest: ScanClock<SendableRecordBatchStream>,
    /// The query's execution slot, held until its stream is dropped.
    slot: Option<Arc<slots::Slot>>,
    /// The physical plan running: its metrics say what it scanned.
    plan: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
}

impl Attempt for Started {
    fn saw_change(&self) -> bool {
        matches!(&self.first, Some(Err(e)) if CacheError::find(e).is_some_and(CacheError::is_changed))
    }

    fn sources(&self) -> Option<&str> {
        Some(&self.sources)
    }
}

impl Attempt for ranges::Read {
    fn saw_change(&self) -> bool {
        false
    }

    fn sources(&self) -> Option<&str> {
        None
    }
}

impl Attempt for lookup::Found {
    fn saw_change(&self) -> bool {
        false
    }

    fn sources(&self) -> Option<&str> {
        None
    }
}

/// Keeps `silt_queries_active` right however a stream ends.
struct ActiveQuery(Arc<ServerMetrics>);

impl ActiveQuery {
    fn new(m: Arc<ServerMetrics>) -> Self {
        m.active_queries.increment(1.0);
        ActiveQuery(m)
    }
}

impl Drop for ActiveQuery {
    fn drop(&mut self) {
        self.0.active_queries.decrement(1.0);
    }
}
