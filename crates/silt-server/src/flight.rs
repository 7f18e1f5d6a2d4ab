//! The Arrow Flight SQL transport: standard Flight SQL for any client, plus
//! Silt's pushdown scans (`silt.ScanRequest` commands), point lookups
//! (`silt.LookupRequest`) and byte ranges of objects as stored
//! (`silt.RangesRequest`) for Silt's clients.
//!
//! Transport only: requests are decoded and handed to the
//! [`QueryRunner`], which owns a query's life; its answers are encoded as
//! Flight data here (counting what is sent), and its errors become a Flight
//! status in one place ([`ServerError::to_status`]). The Flight SQL
//! endpoints are in `flight/sql_service.rs`.
//!
//! Tickets carry their whole request (a statement ticket its SQL, a scan
//! ticket the scan), so any server can answer any ticket. A statement's plan
//! made by `GetFlightInfo` is kept for its `DoGet` (the runner's pending
//! plans); a plan lives until the `DoGet` stream that executes it ends or
//! the client goes away, which drops it and cancels its tasks.

use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::time::Instant;

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
use silt_proto::{ACTION_PRELOAD, ACTION_STATS, IpcCompression, LookupRequest, RangesRequest, ScanRequest};
use tonic::{Request, Response, Status, Streaming};

use crate::catalog::{CATALOG, SCHEMA};
use crate::engine::Engine;
use crate::error::{ProtocolError, ServerError};
use crate::query::lookup::LookupQuery;
use crate::query::{Answer, QueryRunner};

mod compact_views;
mod metadata;
mod prepared;
mod sql_service;
mod wire_types;

use wire_types::WireTypes;

type DoGetStream = Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send + 'static>>;

/// Flight SQL front end of a [`QueryRunner`].
#[derive(Clone)]
pub struct SiltFlightService {
    runner: Arc<QueryRunner>,
}

impl SiltFlightService {
    pub fn new(runner: Arc<QueryRunner>) -> Self {
        SiltFlightService { runner }
    }

    fn engine(&self) -> &Arc<Engine> {
        self.runner.engine()
    }

    /// A query's answer (or failure) as a `DoGet` response, sent as
    /// `delivery` says (a scan's compression and report).
    fn deliver(
        &self,
        answer: Result<Answer, ServerError>,
        delivery: Delivery,
    ) -> Result<Response<DoGetStream>, Status> {
        let Answer { schema, batches, trace } = answer?;
        let batches = batches.map_err(|e| FlightError::Tonic(Box::new(e.to_status())));
        let metrics = self.engine().metrics().clone();
        Ok(Response::new(Box::pin(trace.responding(encode(
            schema,
            batches,
            metrics,
            trace.clone(),
            delivery,
        )?))))
    }

    /// `GetFlightInfo` of a SQL statement: the runner plans it (keeping the
    /// plan for the `DoGet`) and the ticket names it; its schema in `types`.
    async fn statement_info(
        &self,
        sql: &str,
        descriptor: &FlightDescriptor,
        types: WireTypes,
    ) -> Result<Response<FlightInfo>, Status> {
        let (schema, handle) = self.runner.prepare_statement(sql).await?;
        let ticket = TicketStatementQuery {
            statement_handle: handle.into_bytes().into(),
        };
        self.info(&types.schema(&schema), ticket.as_any(), None, descriptor)
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
            .map_err(ProtocolError::EncodingSchema)?
            .with_descriptor(descriptor.clone())
            .with_endpoint(endpoint)
            .with_total_records(total_records.map_or(-1, |n| n as i64))
            .with_ordered(false);
        Ok(Response::new(info))
    }
}

/// How an answer goes out: uncompressed for SQL and lookups, in the types
/// the call asked for ([`WireTypes`]); a pushed-down scan's as its request
/// asks ([`ScanRequest::compression`], [`ScanRequest::report`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Delivery {
    /// The Arrow types the batches are sent in.
    pub types: WireTypes,
    /// Arrow IPC buffer compression of the batches.
    pub compression: IpcCompression,
    /// Send a [`silt_proto::ScanReport`] after the last batch.
    pub report: bool,
    /// When the request came (the report's time to the first message).
    pub since: Option<Instant>,
}

impl Delivery {
    /// The delivery `scan` asks for, the request having come at `since`. An
    /// unknown compression (a newer client) is none.
    pub(crate) fn of_scan(scan: &ScanRequest, since: Instant) -> Self {
        Delivery {
            types: WireTypes::Engine,
            compression: IpcCompression::try_from(scan.compression).unwrap_or_default(),
            report: scan.report,
            since: Some(since),
        }
    }

    /// The delivery of a SQL statement's answer to a call with `metadata`.
    pub(crate) fn of_statement(metadata: &tonic::metadata::MetadataMap) -> Self {
        Delivery {
            types: WireTypes::asked(metadata),
            ..Delivery::default()
        }
    }
}

/// The bytes of `batch`'s Arrow buffers (what its IPC body holds uncompressed).
fn arrow_bytes(batch: &datafusion::arrow::array::RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0) as u64)
        .sum()
}

/// `batches` as Flight data (view columns compacted first:
/// [`compact_views`]), counting the rows and bytes sent; compressed and
/// followed by a report when `delivery` says.
fn encode(
    schema: Arc<Schema>,
    batches: impl Stream<Item = Result<datafusion::arrow::array::RecordBatch, FlightError>> + Send + 'static,
    metrics: Arc<crate::metrics::ServerMetrics>,
    trace: crate::query::trace::QueryTrace,
    delivery: Delivery,
) -> Result<DoGetStream, Status> {
    let options = IpcWriteOptions::default()
        .try_with_compression(delivery.compression.arrow())
        .map_err(|e| Status::internal(format!("IPC compression {:?}: {e}", delivery.compression)))?;
    let schema = delivery.types.schema(&schema);
    let typed = schema.clone();
    let batches = batches.and_then(move |b| {
        let b = delivery
            .types
            .batch(b, &typed)
            .map_err(|e| FlightError::Tonic(Box::new(ServerError::from(ProtocolError::PlainTypes(e)).to_status())));
        futures::future::ready(b)
    });
    let sent = metrics.clone();
    let rows_trace = trace.clone();
    let report_trace = trace.clone();
    let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let saw_failure = failed.clone();
    let flight = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .with_options(options)
        .build(
            batches
                .map(|b| b.and_then(|b| Ok(compact_views::compact(b)?)))
                .inspect_ok(move |b| {
                    sent.flight_rows_sent.increment(b.num_rows() as u64);
                    rows_trace.sent(b.num_rows() as u64, 0);
                    rows_trace.sent_arrow(arrow_bytes(b));
                }),
        )
        .map(move |r| {
            if let (Some(since), Ok(_)) = (delivery.since, &r) {
                trace.first_message(since.elapsed());
            }
            r.inspect(|fd| {
                let bytes = (fd.data_header.len() + fd.data_body.len()) as u64;
                metrics.flight_bytes_sent.increment(bytes);
                trace.sent(0, bytes);
            })
            .inspect_err(|_| failed.store(true, std::sync::atomic::Ordering::Relaxed))
            .map_err(Status::from)
        });
    if !delivery.report {
        return Ok(Box::pin(flight));
    }
    // The report follows a complete answer only.
    let report = futures::stream::once(async move {
        let failed = saw_failure.load(std::sync::atomic::Ordering::Relaxed);
        (!failed).then(|| Ok(report_trace.report(delivery.compression).to_flight_data()))
    })
    .filter_map(|r| async move { r });
    Ok(Box::pin(flight.chain(report)))
}

fn one_batch(schema: Arc<Schema>, batch: Result<datafusion::arrow::array::RecordBatch, FlightError>) -> DoGetStream {
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(futures::stream::once(async move { batch }))
        .map_err(Status::from);
    Box::pin(stream)
}
