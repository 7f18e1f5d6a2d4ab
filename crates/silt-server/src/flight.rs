//! The Arrow Flight SQL service: standard Flight SQL for any client, plus
//! Silt's pushdown scans (`silt.ScanRequest` commands) and point lookups
//! (`silt.LookupRequest`) for Silt's clients.
//!
//! This file is a query's life on the server: planning, speculative
//! validation and restarts, execution, encoding and tracing; the Flight SQL
//! endpoints that call it are in `flight/sql_service.rs`.
//!
//! Tickets carry their whole request (a statement ticket its SQL, a scan
//! ticket the scan), so any server can answer any ticket. A statement's plan
//! made by `GetFlightInfo` is kept for its `DoGet` (`PendingPlans`); a plan
//! lives until the `DoGet` stream that executes it ends or the client goes
//! away, which drops it and cancels its tasks.

use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult,
    Any, Command, CommandGetCatalogs, CommandGetDbSchemas, CommandGetSqlInfo, CommandGetTables,
    CommandPreparedStatementQuery, CommandStatementQuery, ProstMessageExt, SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    Action, FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, IpcMessage, SchemaAsIpc,
    Ticket,
};
use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::ipc::writer::IpcWriteOptions;
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use silt_proto::{ACTION_PRELOAD, ACTION_STATS, LookupRequest, ScanRequest};
use tokio::time::Instant;
use tonic::{Request, Response, Status, Streaming};
use tracing::{Instrument, debug, warn};

use crate::engine::{CATALOG, Engine, PlannedQuery, SCHEMA};
use crate::error::ServerError;
use crate::lookup::{LookupQuery, lookup_shape};
use crate::pending_plans::{KeptPlan, PendingPlans};
use crate::query_trace::{QueryTrace, ScanClock, Stage};

mod sql_service;
use silt_cache::ValidationGate;

type DoGetStream = Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send + 'static>>;

/// Flight SQL front end of an [`Engine`].
#[derive(Clone)]
pub struct SiltFlightService {
    engine: Arc<Engine>,
    /// Plans made by `GetFlightInfo`, for the `DoGet` that follows.
    pending: Arc<PendingPlans>,
}

impl SiltFlightService {
    pub fn new(engine: Arc<Engine>) -> Self {
        let pending = Arc::new(PendingPlans::default());
        // Plans never redeemed are dropped within ~10 s of expiring, even on a
        // quiet server, so their queries leave the running list.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&pending);
            runtime.spawn(async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_secs(10));
                loop {
                    tick.tick().await;
                    match weak.upgrade() {
                        Some(pending) => pending.expire(),
                        None => return,
                    }
                }
            });
        }
        SiltFlightService { engine, pending }
    }

    fn counted<T>(&self, r: Result<T, ServerError>) -> Result<T, Status> {
        r.map_err(|e| {
            self.engine.metrics().query_errors.increment(1);
            debug!(error = %e, "request failed");
            e.to_status()
        })
    }

    /// Plans `sql` for its schema only (nothing will run this plan).
    async fn plan_statement(&self, sql: &str) -> Result<PlannedQuery, Status> {
        let trace = QueryTrace::schema_only(self.engine.metrics().clone());
        self.plan(&Query::Sql(sql.to_string()), None, &trace).await
    }

    /// Plans `scan` for its schema and row count only.
    async fn plan_scan(&self, scan: ScanRequest) -> Result<PlannedQuery, Status> {
        let trace = QueryTrace::schema_only(self.engine.metrics().clone());
        self.plan(&Query::Scan(scan), None, &trace).await
    }

    /// Plans `query` (SQL or a pushdown scan) for the attempt that owns
    /// `gate`, within the query timeout. `trace` gets the time: the inline
    /// validation the gate counted as `validation`, the rest as `planning`.
    async fn plan(
        &self,
        query: &Query,
        gate: Option<&Arc<ValidationGate>>,
        trace: &QueryTrace,
    ) -> Result<PlannedQuery, Status> {
        self.engine.metrics().plans.increment(1);
        let timeout = self.engine.config().query_timeout;
        let planning = async {
            match query {
                Query::Sql(sql) => self.engine.plan_sql_gated(sql, gate).await,
                Query::Scan(scan) => self.engine.plan_scan_gated(scan, gate).await,
            }
        };
        let inline_wait = || gate.map_or(Duration::ZERO, |g| g.inline_wait());
        let (waited_before, start) = (inline_wait(), Instant::now());
        let planned = tokio::time::timeout(timeout, planning.instrument(trace.span(Stage::Planning)))
            .await
            .unwrap_or(Err(ServerError::Timeout(timeout)));
        let waited = inline_wait().saturating_sub(waited_before);
        trace.add(Stage::Validation, waited);
        trace.add(Stage::Planning, start.elapsed().saturating_sub(waited));
        self.counted(planned)
    }

    /// Plans and executes `query` and waits for its first batch, which is
    /// held until every validation the query's listings were speculative on
    /// has confirmed them (see [`ValidationGate`]: under `always`, a warm
    /// query runs on the last validated listing while its LIST/HEAD is in
    /// flight).
    ///
    /// Nothing reaches the client before that, so the query is planned again
    /// (on the new listing) and restarted, once, if the validation found an
    /// object added, deleted or overwritten, or if planning or that first
    /// result fails with [`silt_cache::CacheError::Changed`] (an object was
    /// overwritten between the planning's validation and the read). A
    /// validation that fails with a store error fails the query with it.
    ///
    /// `kept`: the plan (and its gate) `GetFlightInfo` made, run as the
    /// first attempt instead of planning again.
    async fn start(
        &self,
        query: &Query,
        deadline: Instant,
        mut kept: Option<KeptPlan>,
        trace: &QueryTrace,
    ) -> Result<Started, Status> {
        let metrics = self.engine.metrics().clone();
        let mut restarted = false;
        loop {
            // Each attempt has its own gate: its validations must be sent after it started.
            let (gate, attempt) = match kept.take() {
                Some(KeptPlan { plan, gate, .. }) => (gate, self.run(query, plan, deadline, trace).await),
                None => {
                    // A scan of a client query starts when the query did
                    // (crate::query_clock); a restart starts now.
                    let gate = match query.started(&self.engine) {
                        Some(at) if !restarted => ValidationGate::starting_at(at),
                        _ => ValidationGate::new(),
                    };
                    let attempt = self.attempt(query, &gate, deadline, trace).await;
                    (gate, attempt)
                }
            };
            let confirmation = tokio::time::timeout_at(deadline, gate.confirm());
            let confirmed = match trace.time(Stage::Validation, confirmation).await {
                Ok(confirmed) => confirmed,
                Err(_) => return Err(self.timed_out()),
            };
            if gate.is_speculative() {
                metrics.validations_speculative.increment(1);
            }
            match confirmed {
                Ok(()) => {}
                Err(e) if e.is_changed() => {
                    metrics.validation_mismatches.increment(1);
                    if !restarted {
                        metrics.query_restarts.increment(1);
                        debug!(error = %e, "the query's speculative listing was stale; restarting it once");
                        restarted = true;
                        continue;
                    }
                    return Err(self.validation_failed(&attempt, e));
                }
                Err(e) => return Err(self.validation_failed(&attempt, e)),
            }
            let changed = match &attempt {
                Err(status) => status.code() == tonic::Code::Aborted,
                Ok(started) => matches!(&started.first, Some(Err(e))
                    if silt_cache::CacheError::find(e).is_some_and(silt_cache::CacheError::is_changed)),
            };
            if changed && !restarted {
                metrics.query_restarts.increment(1);
                debug!("an object changed under the query before it answered; restarting it once");
                restarted = true;
                continue;
            }
            return attempt;
        }
    }

    /// One attempt of [`SiltFlightService::start`]: plan, execute, take the
    /// first result (not yet confirmed).
    async fn attempt(
        &self,
        query: &Query,
        gate: &Arc<ValidationGate>,
        deadline: Instant,
        trace: &QueryTrace,
    ) -> Result<Started, Status> {
        // Planning reads footers too: a version gone by then is `ABORTED`.
        let planned = self.plan(query, Some(gate), trace).await?;
        self.run(query, planned, deadline, trace).await
    }

    /// Executes a planned query, once a slot is free (`max_concurrent_queries`;
    /// its scan sets were registered when it was planned), and takes its first
    /// result (not yet confirmed), all of it `scan` time in `trace`.
    async fn run(
        &self,
        query: &Query,
        planned: PlannedQuery,
        deadline: Instant,
        trace: &QueryTrace,
    ) -> Result<Started, Status> {
        let schema = planned.schema();
        let sources = planned.sources.clone();
        let slots = self.engine.query_slots();
        let slot = match tokio::time::timeout_at(deadline, slots.acquire(query.client_query_id())).await {
            Ok(slot) => slot,
            Err(_) => return Err(self.timed_out()),
        };
        let first_batch = async {
            let mut batches = match tokio::time::timeout_at(deadline, planned.execute()).await {
                Ok(r) => self.counted(r)?,
                Err(_) => return Err(self.timed_out()),
            };
            match tokio::time::timeout_at(deadline, batches.next()).await {
                Ok(first) => Ok((first, batches)),
                Err(_) => Err(self.timed_out()),
            }
        };
        let (first, rest) = trace.time(Stage::Scan, first_batch).await?;
        Ok(Started {
            schema,
            sources,
            first,
            rest: trace.scanned(rest),
            slot,
        })
    }

    /// The query timed out (counted).
    fn timed_out(&self) -> Status {
        let timeout = self.engine.config().query_timeout;
        self.counted::<()>(Err(ServerError::Timeout(timeout))).unwrap_err()
    }

    /// The status of a query whose validation failed with `e` (counted
    /// unless the attempt had already failed, which was counted).
    fn validation_failed(&self, attempt: &Result<Started, Status>, e: silt_cache::CacheError) -> Status {
        let sources = attempt.as_ref().map(|s| s.sources.as_str()).unwrap_or_default();
        let e = ServerError::reading(sources, datafusion::error::DataFusionError::External(Box::new(e)));
        if attempt.is_err() {
            return e.to_status();
        }
        self.counted::<()>(Err(e)).unwrap_err()
    }

    /// Runs `query` and streams it as Flight data, enforcing the query
    /// timeout and counting what is sent.
    async fn stream(&self, query: Query, planned: Option<KeptPlan>) -> Result<Response<DoGetStream>, Status> {
        let metrics = self.engine.metrics().clone();
        // Counted once per query run, whatever planned it (a statement's
        // GetFlightInfo, or a scan's GetFlightInfo for its schema, runs nothing).
        metrics.queries.increment(1);
        let timeout = self.engine.config().query_timeout;
        let deadline = Instant::now() + timeout;
        let trace = match &planned {
            Some(kept) => kept.trace.clone(),
            None => QueryTrace::new(query.kind(), &query.text(), metrics.clone()),
        };
        let Started {
            schema,
            sources,
            first,
            rest,
            slot,
        } = self
            .start(&query, deadline, planned, &trace)
            .await
            .inspect_err(|status| trace.failed(&status.message()))?;
        let batches = futures::stream::iter(first).chain(rest);
        let active = (ActiveQuery::new(metrics.clone()), slot);
        let err_metrics = metrics.clone();
        let err_trace = trace.clone();
        let batches = futures::stream::unfold((batches, false, active), move |(mut s, done, active)| {
            let err_metrics = err_metrics.clone();
            let err_trace = err_trace.clone();
            let sources = sources.clone();
            async move {
                if done {
                    return None;
                }
                let fail = |e: ServerError| {
                    err_metrics.query_errors.increment(1);
                    err_trace.failed(&e);
                    warn!(error = %e, "query failed while streaming");
                    FlightError::Tonic(Box::new(e.to_status()))
                };
                match tokio::time::timeout_at(deadline, s.next()).await {
                    Ok(Some(Ok(batch))) => Some((Ok(batch), (s, false, active))),
                    Ok(Some(Err(e))) => Some((Err(fail(ServerError::reading(&sources, e))), (s, true, active))),
                    Ok(None) => None,
                    Err(_) => Some((Err(fail(ServerError::Timeout(timeout))), (s, true, active))),
                }
            }
        });
        Ok(Response::new(Box::pin(trace.responding(encode(
            schema,
            batches,
            metrics,
            trace.clone(),
        )))))
    }

    /// The lookup `sql` is, when it has exactly a lookup's shape.
    async fn sql_lookup(&self, sql: &str) -> Option<LookupQuery> {
        let statement = crate::guard::parse_single_query(sql).ok()?;
        lookup_shape(&self.engine, &statement).await
    }

    /// Answers a lookup in this one call: found rows, encoded and counted
    /// like a query's.
    async fn stream_lookup(&self, query: &LookupQuery) -> Result<Response<DoGetStream>, Status> {
        let metrics = self.engine.metrics().clone();
        metrics.queries.increment(1);
        let text = format!(
            "lookup {} by {} ({} keys)",
            query.table,
            query.key_column,
            query.keys.len()
        );
        let trace = QueryTrace::new("lookup", &text, metrics.clone());
        let timeout = self.engine.config().query_timeout;
        let answer = tokio::time::timeout(timeout, self.engine.lookup(query));
        let answer = trace
            .time(Stage::Scan, answer)
            .await
            .unwrap_or(Err(ServerError::Timeout(timeout)));
        let (schema, batches) = self
            .counted(answer)
            .inspect_err(|status| trace.failed(&status.message()))?;
        let batches = futures::stream::iter(batches.into_iter().map(Ok));
        Ok(Response::new(Box::pin(trace.responding(encode(
            schema,
            batches,
            metrics,
            trace.clone(),
        )))))
    }

    /// `GetFlightInfo` of a SQL statement: a lookup's schema (nothing
    /// planned), or the plan's, kept for the `DoGet` its ticket names.
    async fn statement_info(&self, sql: &str, descriptor: FlightDescriptor) -> Result<Response<FlightInfo>, Status> {
        if let Some(lookup) = self.sql_lookup(sql).await {
            let schema = self.counted(self.engine.lookup_schema(&lookup).await)?;
            let ticket = TicketStatementQuery {
                statement_handle: sql.to_string().into_bytes().into(),
            };
            return self.info(&schema, ticket.as_any(), None, &descriptor);
        }
        // The gate goes with the plan: its speculative listings are confirmed
        // by validations sent after this call started.
        let gate = ValidationGate::new();
        let trace = QueryTrace::new("sql", sql, self.engine.metrics().clone());
        let plan = self
            .plan(&Query::Sql(sql.to_string()), Some(&gate), &trace)
            .await
            .inspect_err(|status| trace.failed(&status.message()))?;
        let schema = plan.schema();
        let kept = KeptPlan { plan, gate, trace };
        let ticket = TicketStatementQuery {
            statement_handle: self.pending.keep(sql, kept).into_bytes().into(),
        };
        self.info(&schema, ticket.as_any(), None, &descriptor)
    }

    /// The `FlightInfo` answering `descriptor`: one endpoint with `ticket`.
    /// The descriptor goes back in it (clients such as pyarrow refuse an
    /// answer without one).
    fn info(
        &self,
        schema: &Schema,
        ticket: Any,
        total_records: Option<usize>,
        descriptor: &FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let endpoint = FlightEndpoint::new().with_ticket(Ticket::new(ticket.encode_to_vec()));
        let info = FlightInfo::new()
            .try_with_schema(schema)
            .map_err(|e| Status::internal(format!("encoding schema: {e}")))?
            .with_descriptor(descriptor.clone())
            .with_endpoint(endpoint)
            .with_total_records(total_records.map_or(-1, |n| n as i64))
            .with_ordered(false);
        Ok(Response::new(info))
    }
}

/// What a query is: SQL, or a pushdown scan. Planned again on a restart.
enum Query {
    Sql(String),
    Scan(ScanRequest),
}

impl Query {
    /// When the client query this is a scan of started, if it says
    /// ([`crate::query_clock`]).
    fn started(&self, engine: &Arc<Engine>) -> Option<std::time::Instant> {
        match self {
            Query::Scan(ScanRequest { query: Some(q), .. }) if !q.id.is_empty() => Some(engine.query_started(q)),
            _ => None,
        }
    }

    /// The id of the client query this is a scan of, if it says.
    fn client_query_id(&self) -> Option<&str> {
        match self {
            Query::Scan(ScanRequest { query: Some(q), .. }) if !q.id.is_empty() => Some(&q.id),
            _ => None,
        }
    }

    /// What the query log shows of it: the SQL, or what a scan reads.
    fn text(&self) -> String {
        match self {
            Query::Sql(sql) => sql.clone(),
            Query::Scan(scan) => {
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
            Query::Sql(_) => "sql",
            Query::Scan(_) => "scan",
        }
    }
}

/// A query executing, with its first result already taken.
struct Started {
    schema: Arc<Schema>,
    sources: String,
    first: Option<datafusion::error::Result<datafusion::arrow::array::RecordBatch>>,
    rest: ScanClock<datafusion::execution::SendableRecordBatchStream>,
    /// The query's execution slot, held until its stream is dropped.
    slot: Option<Arc<crate::query_slots::Slot>>,
}

/// Keeps `silt_queries_active` right however a stream ends.
struct ActiveQuery(Arc<crate::metrics::ServerMetrics>);

impl ActiveQuery {
    fn new(m: Arc<crate::metrics::ServerMetrics>) -> Self {
        m.active_queries.increment(1.0);
        ActiveQuery(m)
    }
}

impl Drop for ActiveQuery {
    fn drop(&mut self) {
        self.0.active_queries.decrement(1.0);
    }
}

/// `batches` as Flight data, counting the rows and bytes sent.
fn encode(
    schema: Arc<Schema>,
    batches: impl Stream<Item = Result<datafusion::arrow::array::RecordBatch, FlightError>> + Send + 'static,
    metrics: Arc<crate::metrics::ServerMetrics>,
    trace: QueryTrace,
) -> DoGetStream {
    let sent = metrics.clone();
    let rows_trace = trace.clone();
    let flight = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(batches.inspect_ok(move |b| {
            sent.flight_rows_sent.increment(b.num_rows() as u64);
            rows_trace.sent(b.num_rows() as u64, 0);
        }))
        .map(move |r| {
            r.inspect(|fd| {
                let bytes = (fd.data_header.len() + fd.data_body.len()) as u64;
                metrics.flight_bytes_sent.increment(bytes);
                trace.sent(0, bytes);
            })
            .map_err(Status::from)
        });
    Box::pin(flight)
}

fn one_batch(schema: Arc<Schema>, batch: Result<datafusion::arrow::array::RecordBatch, FlightError>) -> DoGetStream {
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(futures::stream::once(async move { batch }))
        .map_err(Status::from);
    Box::pin(stream)
}
