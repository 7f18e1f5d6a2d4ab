//! A thin Flight client for Silt's pushdown protocol and Flight SQL metadata.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use arrow_flight::decode::{DecodedPayload, FlightDataDecoder, FlightRecordBatchStream};
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::sql::{CommandGetTables, CommandStatementQuery, ProstMessageExt};
use arrow_flight::{Action, FlightDescriptor, FlightInfo, Ticket};
use datafusion::arrow::array::{Array, RecordBatch, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::error::DataFusionError;
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use silt_proto::{ACTION_PRELOAD, ACTION_STATS, LookupRequest, Projection, RangesRequest, ScanReport, ScanRequest};
use tonic::transport::{Channel, Endpoint};

use crate::path_cost::{Calibration, Transfer};

/// Errors talking to a Silt server.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to Silt server at {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("invalid server URL '{0}'")]
    Url(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("Silt server {url}: {message} ({code:?})")]
    Server {
        url: String,
        /// The server's own message, as it sent it.
        message: String,
        /// The gRPC status code the server answered with.
        code: tonic::Code,
        /// Whether the status was made by this client's transport from a
        /// broken HTTP/2 stream or connection (a server that went away
        /// mid-response resets its streams: tonic reports `INTERNAL`,
        /// "h2 protocol error"), not sent by the server as its verdict.
        in_transport: bool,
    },
    #[error("Silt server {url} sent a malformed response: {message}")]
    Protocol { url: String, message: String },
    /// A scan's stream failed after it had started: kept typed (not
    /// flattened into the query's error text) so a caller can still read the
    /// server's status code and message. The text is the one these errors
    /// always had, when the failure was a DataFusion external error.
    #[error("scan of '{table}' on {url}: External error: {source}")]
    Scan {
        table: String,
        url: String,
        #[source]
        source: Box<ClientError>,
    },
}

impl ClientError {
    /// The first `ClientError` in `e` or its chain of sources: what a query
    /// that failed on a server's answer keeps of it (see [`Self::status`]).
    pub fn find<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a ClientError> {
        let mut next = Some(e);
        while let Some(err) = next {
            if let Some(found) = err.downcast_ref::<ClientError>() {
                return Some(found);
            }
            // DataFusion's external errors hold theirs as a box, not a source.
            if let Some(DataFusionError::External(inner)) = err.downcast_ref::<DataFusionError>()
                && let Some(found) = inner.downcast_ref::<ClientError>()
            {
                return Some(found);
            }
            next = err.source();
        }
        None
    }

    /// The status code and message the server answered with, also when it
    /// came mid-stream ([`ClientError::Scan`]); `None` for errors that are
    /// not the server's answer (connection, URL, TLS, malformed response).
    pub fn status(&self) -> Option<(tonic::Code, &str)> {
        match self {
            ClientError::Server { code, message, .. } => Some((*code, message)),
            ClientError::Scan { source, .. } => source.status(),
            _ => None,
        }
    }

    /// Whether the server refused because an object changed under the
    /// request (`ABORTED`): a scan scoped to object versions that are gone.
    pub fn is_changed(&self) -> bool {
        self.status().is_some_and(|(code, _)| code == tonic::Code::Aborted)
    }

    /// Whether the server could not be reached or failed in transport (as
    /// opposed to refusing the request): another server of a fleet may
    /// answer ([`crate::fleet`]). Not the server's own verdicts on a query
    /// (its query timeout, `DEADLINE_EXCEEDED`; its memory limit,
    /// `RESOURCE_EXHAUSTED`), which another server would repeat. A server
    /// also says `UNAVAILABLE` when the object store times out; that is
    /// retried elsewhere too (the store may answer another server).
    pub fn is_unavailable(&self) -> bool {
        use tonic::Code;
        match self {
            ClientError::Connect { .. } => true,
            ClientError::Server { in_transport: true, .. } => true,
            ClientError::Server { code, .. } => matches!(code, Code::Unavailable | Code::Unknown | Code::Cancelled),
            ClientError::Scan { source, .. } => source.is_unavailable(),
            _ => false,
        }
    }
}

/// Whether `status` carries an HTTP/2 error in its source chain: tonic made
/// it from a reset stream or a dropped connection. Statuses a server sends
/// (in trailers) have no source.
fn failed_in_transport(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        if e.is::<h2::Error>() {
            return true;
        }
        source = e.source();
    }
    false
}

impl From<silt_proto::membership::MembershipError> for ClientError {
    fn from(e: silt_proto::membership::MembershipError) -> Self {
        ClientError::Url(e.0)
    }
}

impl From<ClientError> for DataFusionError {
    fn from(e: ClientError) -> Self {
        DataFusionError::External(Box::new(e))
    }
}

/// A connection to one Silt server. Cheap to clone (shares the channel and
/// what it learned of the server: [`SiltClient::calibration`]).
#[derive(Clone, Debug)]
pub struct SiltClient {
    url: String,
    channel: Channel,
    token: Option<String>,
    calibration: Arc<Calibration>,
}

/// Reset streams a connection remembers (see [`SiltClient::connect`]).
const RESET_STREAMS_REMEMBERED: usize = 4096;

impl SiltClient {
    /// Connect to `url` (`http://host:port`; `grpc://` is accepted too;
    /// `grpc+tls://` or `https://` for TLS, see [`crate::tls`]).
    pub async fn connect(url: &str) -> Result<Self, ClientError> {
        let (http_url, endpoint) = Self::endpoint(url)?;
        let channel = endpoint.connect().await.map_err(|source| ClientError::Connect {
            url: http_url.clone(),
            source,
        })?;
        Ok(SiltClient {
            url: http_url,
            channel,
            token: None,
            calibration: Arc::default(),
        })
    }

    /// A client of `url` that connects on its first call (and reconnects
    /// after the server comes back), so it can be made while the server is
    /// down: a fleet's members ([`crate::fleet`]).
    pub fn connect_lazy(url: &str) -> Result<Self, ClientError> {
        let (http_url, endpoint) = Self::endpoint(url)?;
        Ok(SiltClient {
            url: http_url,
            channel: endpoint.connect_lazy(),
            token: None,
            calibration: Arc::default(),
        })
    }

    /// The normalized URL and the endpoint settings of `url`.
    fn endpoint(url: &str) -> Result<(String, Endpoint), ClientError> {
        let http_url = silt_proto::placement::member_name(url);
        let mut endpoint = Endpoint::from_shared(http_url.clone()).map_err(|_| ClientError::Url(url.to_string()))?;
        if http_url.starts_with("https://") {
            endpoint = endpoint
                .tls_config(crate::tls::client_config()?)
                .map_err(|e| ClientError::Tls(e.to_string()))?;
        }
        let endpoint = endpoint
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            // Streams are stopped early all the time (a LIMIT satisfied, a
            // cancelled query). HTTP/2 remembers only 10 reset streams by
            // default; the server's frames still in flight for a forgotten
            // one count as errors, and after 1024 of those the connection is
            // closed with every query on it. Remember enough of them.
            .http2_max_concurrent_reset_streams(RESET_STREAMS_REMEMBERED)
            // A server that vanishes without closing its connections (a
            // host down, a network cut) is noticed within ~20 s instead of
            // when TCP gives up, so calls fail and fleets fail over.
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(10))
            .keep_alive_while_idle(true);
        Ok((http_url, endpoint))
    }

    /// Send `authorization: Bearer <token>` with every call.
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// What this client learned of the server and the link to it from its
    /// scans, for the path cost model ([`crate::path_cost`]).
    pub fn calibration(&self) -> &Arc<Calibration> {
        &self.calibration
    }

    fn flight(&self) -> FlightServiceClient<Channel> {
        FlightServiceClient::new(self.channel.clone()).max_decoding_message_size(usize::MAX)
    }

    /// `message` as a call: with the token, and asking for view types (Silt's
    /// own client reads them without a copy; see
    /// [`silt_proto::VIEW_TYPES_HEADER`]).
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(message);
        req.metadata_mut().insert(
            silt_proto::VIEW_TYPES_HEADER,
            tonic::metadata::MetadataValue::from_static("true"),
        );
        if let Some(t) = &self.token
            && let Ok(v) = format!("Bearer {t}").parse()
        {
            req.metadata_mut().insert("authorization", v);
        }
        req
    }

    fn server_error(&self, status: tonic::Status) -> ClientError {
        ClientError::Server {
            url: self.url.clone(),
            message: status.message().to_string(),
            code: status.code(),
            in_transport: failed_in_transport(&status),
        }
    }

    fn flight_error(&self, e: FlightError) -> ClientError {
        match e {
            FlightError::Tonic(status) => self.server_error(*status),
            other => ClientError::Protocol {
                url: self.url.clone(),
                message: other.to_string(),
            },
        }
    }

    async fn flight_info(&self, command: Vec<u8>) -> Result<FlightInfo, ClientError> {
        let descriptor = FlightDescriptor::new_cmd(command);
        let info = self
            .flight()
            .get_flight_info(self.request(descriptor))
            .await
            .map_err(|s| self.server_error(s))?;
        Ok(info.into_inner())
    }

    /// Stream the results of `ticket`.
    async fn do_get(&self, ticket: Ticket) -> Result<FlightRecordBatchStream, ClientError> {
        let response = self
            .flight()
            .do_get(self.request(ticket))
            .await
            .map_err(|s| self.server_error(s))?;
        let stream = response.into_inner().map_err(|s| FlightError::Tonic(Box::new(s)));
        Ok(FlightRecordBatchStream::new_from_flight_data(stream))
    }

    async fn collect(&self, info: FlightInfo) -> Result<Vec<RecordBatch>, ClientError> {
        let mut batches = Vec::new();
        for endpoint in info.endpoint {
            let ticket = endpoint.ticket.ok_or_else(|| ClientError::Protocol {
                url: self.url.clone(),
                message: "endpoint without ticket".into(),
            })?;
            let stream = self.do_get(ticket).await?;
            batches.extend(self.drain(stream).await?);
        }
        Ok(batches)
    }

    /// Every batch of `stream`; a result without rows is one empty batch of
    /// the stream's schema, so every result carries its schema.
    async fn drain(&self, mut stream: FlightRecordBatchStream) -> Result<Vec<RecordBatch>, ClientError> {
        let mut batches = Vec::new();
        while let Some(b) = stream.next().await {
            batches.push(b.map_err(|e| self.flight_error(e))?);
        }
        if batches.is_empty()
            && let Some(schema) = stream.schema()
        {
            batches.push(RecordBatch::new_empty(schema.clone()));
        }
        Ok(batches)
    }

    /// Names of the tables and views the server serves (Flight SQL `GetTables`).
    pub async fn list_tables(&self) -> Result<Vec<String>, ClientError> {
        Ok(self.list_entries().await?.into_iter().map(|(name, _)| name).collect())
    }

    /// Names of the tables and views the server serves, each with its
    /// type (`TABLE` or `VIEW`).
    pub async fn list_entries(&self) -> Result<Vec<(String, String)>, ClientError> {
        let cmd = CommandGetTables {
            include_schema: false,
            ..Default::default()
        };
        let info = self.flight_info(cmd.as_any().encode_to_vec()).await?;
        let mut entries = Vec::new();
        for batch in self.collect(info).await? {
            let names = self.string_column(&batch, "table_name")?;
            let types = self.string_column(&batch, "table_type")?;
            for (name, kind) in names.iter().zip(types.iter()) {
                if let Some(name) = name {
                    entries.push((name.to_string(), kind.unwrap_or_default().to_string()));
                }
            }
        }
        Ok(entries)
    }

    /// Column `name` of a metadata answer, as strings.
    fn string_column(&self, batch: &RecordBatch, name: &str) -> Result<StringArray, ClientError> {
        let col = batch.column_by_name(name).ok_or_else(|| ClientError::Protocol {
            url: self.url.clone(),
            message: format!("GetTables result has no {name} column"),
        })?;
        let col = cast(col, &DataType::Utf8).map_err(|e| ClientError::Protocol {
            url: self.url.clone(),
            message: e.to_string(),
        })?;
        col.as_any()
            .downcast_ref::<StringArray>()
            .cloned()
            .ok_or_else(|| ClientError::Protocol {
                url: self.url.clone(),
                message: format!("{name} is not a string column"),
            })
    }

    /// Output schema and estimated row count of `scan`, without running it.
    pub async fn scan_info(&self, scan: &ScanRequest) -> Result<(SchemaRef, Option<usize>), ClientError> {
        let info = self.flight_info(scan.as_any().encode_to_vec()).await?;
        let rows = usize::try_from(info.total_records).ok();
        let schema = info.try_decode_schema().map_err(|e| ClientError::Protocol {
            url: self.url.clone(),
            message: format!("schema of scan on '{}': {e}", scan.table),
        })?;
        Ok((std::sync::Arc::new(schema), rows))
    }

    /// Run a pushdown scan and collect all its batches.
    pub async fn scan_all(&self, scan: &ScanRequest) -> Result<Vec<RecordBatch>, ClientError> {
        Ok(self.scan_all_measured(scan).await?.0)
    }

    /// Run a pushdown scan and collect all its batches, with what the
    /// transfer showed (the server's report among it).
    pub async fn scan_all_measured(&self, scan: &ScanRequest) -> Result<(Vec<RecordBatch>, Transfer), ClientError> {
        let mut stream = self.scan(scan).await?;
        let mut batches = Vec::new();
        while let Some(b) = stream.next().await {
            batches.push(b.map_err(|e| self.flight_error(e))?);
        }
        if batches.is_empty()
            && let Some(schema) = stream.schema()
        {
            batches.push(RecordBatch::new_empty(schema.clone()));
        }
        let transfer = stream.transfer().unwrap_or_default();
        Ok((batches, transfer))
    }

    /// Run a pushdown scan and stream its batches. The server is asked for
    /// its [`silt_proto::ScanReport`], which the stream takes in (with its
    /// own clock) and this client learns from ([`Self::calibration`]).
    pub async fn scan(&self, scan: &ScanRequest) -> Result<ScanStream, ClientError> {
        let mut scan = scan.clone();
        scan.report = true;
        let started = Instant::now();
        let response = self
            .flight()
            .do_get(self.request(Ticket::new(scan.as_any().encode_to_vec())))
            .await
            .map_err(|s| self.server_error(s))?;
        let data = response.into_inner().map_err(|s| FlightError::Tonic(Box::new(s)));
        Ok(ScanStream {
            inner: FlightDataDecoder::new(data),
            schema: None,
            started,
            first_message: None,
            waited: Duration::ZERO,
            wait_started: None,
            bytes: 0,
            report: None,
            done: Arc::default(),
            calibration: self.calibration.clone(),
        })
    }

    /// Bytes of one object version as stored ([`RangesRequest`]): the
    /// answer's batches (`silt_proto::ranges_schema`), pieces in request
    /// order.
    pub async fn ranges(&self, request: &RangesRequest) -> Result<Vec<RecordBatch>, ClientError> {
        let stream = self.do_get(Ticket::new(request.as_any().encode_to_vec())).await?;
        self.drain(stream).await
    }

    /// The rows of `table` whose `key_column` equals one of `keys` (SQL's
    /// `key_column IN (keys)`: each row once, nulls match nothing), with
    /// `columns` (all when `None`), in one round trip: the server plans
    /// nothing and reads only the pages that may hold the keys.
    pub async fn lookup(
        &self,
        table: &str,
        key_column: &str,
        keys: datafusion::arrow::array::ArrayRef,
        columns: Option<Vec<String>>,
    ) -> Result<Vec<RecordBatch>, ClientError> {
        let protocol = |message: String| ClientError::Protocol {
            url: self.url.clone(),
            message,
        };
        let encoded = LookupRequest::encode_keys(keys).map_err(|e| protocol(format!("encoding lookup keys: {e}")))?;
        let request = LookupRequest {
            table: table.to_string(),
            key_column: key_column.to_string(),
            keys: encoded,
            projection: columns.map(|columns| Projection { columns }),
        };
        let stream = self.do_get(Ticket::new(request.as_any().encode_to_vec())).await?;
        self.drain(stream).await
    }

    /// Run SQL entirely on the server (plain Flight SQL) and collect it.
    pub async fn sql(&self, sql: &str) -> Result<Vec<RecordBatch>, ClientError> {
        let cmd = CommandStatementQuery {
            query: sql.to_string(),
            transaction_id: None,
        };
        let info = self.flight_info(cmd.as_any().encode_to_vec()).await?;
        self.collect(info).await
    }

    /// Map a streaming error to something that names this server.
    pub fn describe_error(&self, e: FlightError) -> DataFusionError {
        self.flight_error(e).into()
    }

    /// A scan of `table` whose stream failed with `e` after it started.
    pub fn scan_error(&self, table: &str, e: FlightError) -> ClientError {
        ClientError::Scan {
            table: table.to_string(),
            url: self.url.clone(),
            source: Box::new(self.flight_error(e)),
        }
    }

    /// Server statistics as a JSON string (the `silt.stats` action).
    /// Runs a Silt action and returns each result message's body.
    async fn action_stream(
        &self,
        kind: &str,
        body: Vec<u8>,
    ) -> Result<impl futures::Stream<Item = Result<bytes::Bytes, ClientError>> + '_, ClientError> {
        let action = Action {
            r#type: kind.to_string(),
            body: body.into(),
        };
        let stream = self
            .flight()
            .do_action(self.request(action))
            .await
            .map_err(|s| self.server_error(s))?
            .into_inner();
        Ok(stream.map(move |r| r.map(|r| r.body).map_err(|s| self.server_error(s))))
    }

    /// The server's statistics (`silt.stats`) as JSON text.
    pub async fn stats_json(&self) -> Result<String, ClientError> {
        self.action_text(ACTION_STATS).await
    }

    /// Every member of the server's fleet as it sees them (`silt.fleet`:
    /// state, tiers, hit ratio, queries) as JSON text.
    pub async fn fleet_json(&self) -> Result<String, ClientError> {
        self.action_text(silt_proto::ACTION_FLEET).await
    }

    /// The whole answer of the body-less action `action`, as text.
    async fn action_text(&self, action: &str) -> Result<String, ClientError> {
        let mut stream = std::pin::pin!(self.action_stream(action, Vec::new()).await?);
        let mut body = Vec::new();
        while let Some(r) = stream.next().await {
            body.extend_from_slice(&r?);
        }
        String::from_utf8(body).map_err(|e| ClientError::Protocol {
            url: self.url.clone(),
            message: e.to_string(),
        })
    }

    /// Warms the server's tiers with `table` (`silt.preload`), calling
    /// `on_progress` with each JSON progress report; returns the last one.
    pub async fn preload(
        &self,
        table: &str,
        columns: Option<Vec<String>>,
        memory: bool,
        on_progress: impl FnMut(&serde_json::Value),
    ) -> Result<serde_json::Value, ClientError> {
        self.preload_scoped(table, columns, memory, None, on_progress).await
    }

    /// [`SiltClient::preload`] of only the row groups `scope` names (object
    /// versions and row groups, as the table's layout gives them): what a
    /// fleet sends each member ([`crate::fleet::Fleet::preload`]).
    pub async fn preload_scoped(
        &self,
        table: &str,
        columns: Option<Vec<String>>,
        memory: bool,
        scope: Option<&silt_proto::SegmentScope>,
        mut on_progress: impl FnMut(&serde_json::Value),
    ) -> Result<serde_json::Value, ClientError> {
        let scope = scope.map(|s| {
            s.objects
                .iter()
                .map(|o| serde_json::json!({"path": o.path, "version": o.version, "row_groups": o.row_groups}))
                .collect::<Vec<_>>()
        });
        let body = serde_json::json!({"table": table, "columns": columns, "memory": memory, "scope": scope});
        let mut stream = std::pin::pin!(
            self.action_stream(ACTION_PRELOAD, body.to_string().into_bytes())
                .await?
        );
        let mut last = serde_json::Value::Null;
        while let Some(r) = stream.next().await {
            last = serde_json::from_slice(&r?).map_err(|e| ClientError::Protocol {
                url: self.url.clone(),
                message: format!("malformed preload progress: {e}"),
            })?;
            on_progress(&last);
        }
        Ok(last)
    }
}

/// The batches of a pushed-down scan ([`SiltClient::scan`]), decoded from
/// its Flight data, timed on this client's clock, with the server's
/// [`ScanReport`] taken from the last message. When the answer ends the
/// client's [`Calibration`] learns from it, and [`ScanStream::transfer`]
/// tells what it was (also through [`ScanStream::transfer_handle`], for
/// whoever consumes the stream elsewhere).
pub struct ScanStream {
    inner: FlightDataDecoder,
    schema: Option<SchemaRef>,
    started: Instant,
    first_message: Option<Duration>,
    /// Time the consumer spent blocked on this stream (from a poll that
    /// found nothing ready to the message that came): the link and the
    /// server, not the consumer's own work between polls.
    waited: Duration,
    wait_started: Option<Instant>,
    /// Flight data of the schema and batches received.
    bytes: u64,
    report: Option<ScanReport>,
    /// Set when the answer ended.
    done: TransferHandle,
    calibration: Arc<Calibration>,
}

/// Where a [`ScanStream`] leaves its [`Transfer`] when its answer ends.
pub type TransferHandle = Arc<Mutex<Option<Transfer>>>;

impl ScanStream {
    /// The answer's schema, once its first message came.
    pub fn schema(&self) -> Option<&SchemaRef> {
        self.schema.as_ref()
    }

    /// What the transfer showed, once the answer ended (`None` before, or
    /// when the stream failed or was dropped early).
    pub fn transfer(&self) -> Option<Transfer> {
        self.done.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A handle to [`Self::transfer`] that outlives the stream.
    pub fn transfer_handle(&self) -> TransferHandle {
        self.done.clone()
    }

    fn finish(&mut self) {
        let transfer = Transfer {
            first_message: self.first_message,
            elapsed: self.started.elapsed(),
            waited: self.waited,
            bytes_received: self.bytes,
            report: self.report.take(),
        };
        self.calibration.observe_transfer(&transfer);
        *self.done.lock().unwrap_or_else(|e| e.into_inner()) = Some(transfer);
    }
}

impl Stream for ScanStream {
    type Item = Result<RecordBatch, FlightError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let wait_started = *this.wait_started.get_or_insert_with(Instant::now);
        let polled = this.poll_message(cx);
        if polled.is_ready() {
            this.waited += wait_started.elapsed();
            this.wait_started = None;
        }
        polled
    }
}

impl ScanStream {
    /// The next batch (schema and report messages taken in passing).
    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<RecordBatch, FlightError>>> {
        let this = self;
        loop {
            let data = match futures::ready!(this.inner.poll_next_unpin(cx)) {
                None => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                Some(Ok(data)) => data,
            };
            this.first_message.get_or_insert_with(|| this.started.elapsed());
            let size = (data.inner.data_header.len() + data.inner.data_body.len()) as u64;
            match data.payload {
                DecodedPayload::Schema(_) if this.schema.is_some() => {
                    return Poll::Ready(Some(Err(FlightError::protocol(
                        "Unexpectedly saw multiple Schema messages in FlightData stream",
                    ))));
                }
                DecodedPayload::Schema(schema) => {
                    this.bytes += size;
                    this.schema = Some(schema);
                }
                DecodedPayload::RecordBatch(batch) => {
                    this.bytes += size;
                    return Poll::Ready(Some(Ok(batch)));
                }
                DecodedPayload::None => match ScanReport::from_app_metadata(&data.inner.app_metadata) {
                    Ok(Some(report)) => this.report = Some(report),
                    Ok(None) => {}
                    // A report this client cannot read teaches it nothing.
                    Err(e) => tracing::debug!(error = %e, "unreadable scan report"),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ClientError, failed_in_transport};
    use arrow_flight::error::FlightError;
    use datafusion::error::DataFusionError;

    #[tokio::test]
    async fn a_failed_stream_keeps_the_servers_code_and_message_under_the_same_text() {
        let client = super::SiltClient::connect_lazy("http://127.0.0.1:1").unwrap();
        let status = tonic::Status::aborted("object changed");
        let e = DataFusionError::from(client.scan_error("t", FlightError::Tonic(Box::new(status))));
        assert_eq!(
            e.to_string(),
            "External error: scan of 't' on http://127.0.0.1:1: External error: \
             Silt server http://127.0.0.1:1: object changed (Aborted)"
        );
        let kept = ClientError::find(&e).expect("the client error is kept");
        assert_eq!(kept.status(), Some((tonic::Code::Aborted, "object changed")));
        assert!(kept.is_changed());
    }

    #[test]
    fn a_reset_stream_is_a_transport_failure_and_a_server_verdict_is_not() {
        // What tonic makes of a stream the server reset by going away.
        let reset = tonic::Status::from_error(Box::new(h2::Error::from(h2::Reason::INTERNAL_ERROR)));
        assert_eq!(reset.code(), tonic::Code::Internal);
        assert!(failed_in_transport(&reset));
        // What a server sends for a query it failed.
        assert!(!failed_in_transport(&tonic::Status::internal("execution failed")));
    }
}
