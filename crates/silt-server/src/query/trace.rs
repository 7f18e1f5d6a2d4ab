//! Where a query's time goes on the server: validation, planning, scan,
//! encode and send, as tracing spans and as the histogram
//! `silt_query_stage_seconds{stage}`.
//!
//! One [`QueryTrace`] follows a query from its first RPC to the end of its
//! result stream (a statement's trace is made by `GetFlightInfo` and kept
//! with its plan for the `DoGet`). What each stage counts:
//!
//! - `validation`: time the query waited on the object store's LIST/HEAD:
//!   inline during planning (cold, or a listing no longer trusted) and on
//!   the speculative validation before results are released. A validation
//!   that runs while the query computes costs nothing here.
//! - `planning`: SQL or scan request to a physical plan, minus the inline
//!   validation inside it.
//! - `scan`: producing result batches (polling the DataFusion stream:
//!   reading tiers, decoding, filtering).
//! - `encode`: Arrow IPC encoding of the batches for Flight.
//! - `send`: the rest of the result stream's life: waiting for gRPC and the
//!   client to take the data (flow control, the network).
//!
//! The stages are exclusive, so their sum is the server's share of the
//! query's latency; the harness reads the histogram's `_sum` per stage
//! around each query (`silt bench`'s "Where warm time goes" table). With
//! `SILT_LOG=silt::query=debug` each finished query logs its stages, and its
//! spans (`query` > `planning`, `validation`, `scan`, `encode`, `send`) go to
//! any tracing subscriber.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::Stream;
use tracing::{Instrument, Span};

use super::log::Outcome;
pub use super::stage::Stage;
use crate::metrics::ServerMetrics;

/// One query's stage clock. Cheap to clone (shared); the stages are
/// recorded once, when the last clone is dropped (the result stream ended,
/// or the query failed).
#[derive(Clone)]
pub struct QueryTrace(Arc<TraceInner>);

struct TraceInner {
    span: Span,
    nanos: [AtomicU64; 5],
    metrics: Arc<ServerMetrics>,
    /// The query's id in the server's [`crate::query_log::QueryLog`];
    /// `None` for a plan made only for its schema: it runs nothing, so it
    /// is no query of the histogram or the log.
    log_id: Option<u64>,
    /// Rows and Arrow IPC bytes sent.
    rows: AtomicU64,
    bytes: AtomicU64,
    /// The uncompressed Arrow buffers of the batches sent, what the scans
    /// read (rows, uncompressed bytes), and when the first message left
    /// (nanoseconds after the request came; 0 until then): a scan's report.
    arrow_bytes: AtomicU64,
    rows_scanned: AtomicU64,
    bytes_scanned: AtomicU64,
    first_message_nanos: AtomicU64,
    /// Why the query failed, if it did.
    error: parking_lot::Mutex<Option<String>>,
}

impl QueryTrace {
    /// A trace for a query of `kind` (`sql`, `scan`, `lookup`) starting now;
    /// `text` (the SQL, or what a scan reads) goes to the query log.
    pub fn new(kind: &'static str, text: &str, metrics: Arc<ServerMetrics>) -> Self {
        // The span gets the text as the log keeps it (cut at 4 KiB).
        let (id, text) = metrics.query_log.begin(kind, text);
        let span = tracing::info_span!(
            target: "silt::query",
            "query",
            kind,
            query_id = id,
            text = text.as_ref(),
            trace_id = tracing::field::Empty
        );
        record_trace_id(&span);
        QueryTrace(Arc::new(TraceInner {
            span,
            nanos: Default::default(),
            metrics,
            log_id: Some(id),
            rows: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            arrow_bytes: AtomicU64::new(0),
            rows_scanned: AtomicU64::new(0),
            bytes_scanned: AtomicU64::new(0),
            first_message_nanos: AtomicU64::new(0),
            error: parking_lot::Mutex::new(None),
        }))
    }

    /// The query's span (stage spans are its children).
    pub fn query_span(&self) -> &Span {
        &self.0.span
    }

    /// Counts a batch of `rows` rows sent as `bytes` Arrow IPC bytes.
    pub fn sent(&self, rows: u64, bytes: u64) {
        self.0.rows.fetch_add(rows, Ordering::Relaxed);
        self.0.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts `bytes` of uncompressed Arrow buffers sent (a batch's).
    pub fn sent_arrow(&self, bytes: u64) {
        self.0.arrow_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Records what the query's scans read, once its stream ended.
    pub fn scanned(&self, rows: u64, bytes: u64) {
        self.0.rows_scanned.store(rows, Ordering::Relaxed);
        self.0.bytes_scanned.store(bytes, Ordering::Relaxed);
    }

    /// Records that the first message left `since` after the request came
    /// (the first call counts).
    pub fn first_message(&self, since: Duration) {
        let nanos = (since.as_nanos() as u64).max(1);
        let _ = self
            .0
            .first_message_nanos
            .compare_exchange(0, nanos, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// What the query spent and moved so far, as a scan reports it
    /// ([`silt_proto::ScanReport`]); `compression`: how its batches were encoded.
    pub fn report(&self, compression: silt_proto::IpcCompression) -> silt_proto::ScanReport {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        silt_proto::ScanReport {
            version: silt_proto::SCAN_REPORT_VERSION,
            scan_seconds: self.get(Stage::Scan).as_secs_f64(),
            encode_seconds: self.get(Stage::Encode).as_secs_f64(),
            first_message_seconds: Duration::from_nanos(load(&self.0.first_message_nanos)).as_secs_f64(),
            planning_seconds: (self.get(Stage::Planning) + self.get(Stage::Validation)).as_secs_f64(),
            rows_scanned: load(&self.0.rows_scanned),
            bytes_scanned: load(&self.0.bytes_scanned),
            rows_sent: load(&self.0.rows),
            bytes_sent: load(&self.0.bytes),
            arrow_bytes_sent: load(&self.0.arrow_bytes),
            compression: compression as i32,
        }
    }

    /// Marks the query failed with `error` (the first failure is kept).
    pub fn failed(&self, error: &dyn std::fmt::Display) {
        self.0.error.lock().get_or_insert_with(|| error.to_string());
    }

    /// A trace for planning that runs nothing (a schema for `GetFlightInfo`
    /// of a scan, a prepared statement): spans only, nothing recorded.
    pub fn schema_only(metrics: Arc<ServerMetrics>) -> Self {
        let span = tracing::info_span!(target: "silt::query", "schema");
        QueryTrace(Arc::new(TraceInner {
            span,
            nanos: Default::default(),
            metrics,
            log_id: None,
            rows: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            arrow_bytes: AtomicU64::new(0),
            rows_scanned: AtomicU64::new(0),
            bytes_scanned: AtomicU64::new(0),
            first_message_nanos: AtomicU64::new(0),
            error: parking_lot::Mutex::new(None),
        }))
    }

    /// A span for `stage` under this query's.
    pub fn span(&self, stage: Stage) -> Span {
        stage.span(&self.0.span)
    }

    /// Adds `d` to `stage`.
    pub fn add(&self, stage: Stage, d: Duration) {
        self.0.nanos[stage as usize].fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Time in `stage` so far.
    pub fn get(&self, stage: Stage) -> Duration {
        Duration::from_nanos(self.0.nanos[stage as usize].load(Ordering::Relaxed))
    }

    /// Runs `f` as `stage` (in its span), adding its wall time.
    pub async fn time<F: Future>(&self, stage: Stage, f: F) -> F::Output {
        let start = Instant::now();
        let out = f.instrument(stage.span(&self.0.span)).await;
        self.add(stage, start.elapsed());
        out
    }

    /// `batches` with the time spent polling them counted as `scan` (their
    /// waits are counted by the [`SendClock`] above them).
    pub fn scanning<S: Stream + Unpin>(&self, batches: S) -> ScanClock<S> {
        ScanClock {
            inner: batches,
            trace: self.clone(),
            span: Stage::Scan.span(&self.0.span),
        }
    }

    /// The encoded response `stream` (whose input went through
    /// [`QueryTrace::scanning`]): see [`SendClock`].
    pub fn responding<S: Stream + Unpin>(&self, stream: S) -> SendClock<S> {
        SendClock {
            inner: stream,
            trace: self.clone(),
            span: Stage::Encode.span(&self.0.span),
            handed_out: None,
            pending_since: None,
        }
    }
}

/// Records the OpenTelemetry trace id of `span` (when traces are exported)
/// as its `trace_id` field, so log lines inside the query name the trace.
fn record_trace_id(span: &Span) {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let context = span.context();
    let span_context = context.span().span_context().clone();
    if span_context.is_valid() {
        span.record("trace_id", span_context.trace_id().to_string());
    }
}

impl Drop for TraceInner {
    fn drop(&mut self) {
        let Some(id) = self.log_id else {
            return;
        };
        let ms = |s: Stage| self.nanos[s as usize].load(Ordering::Relaxed) as f64 / 1e6;
        for stage in Stage::ALL {
            self.metrics.query_stage(stage).record(ms(stage) / 1e3);
        }
        self.metrics.query_log.end(
            id,
            Outcome {
                stages: Stage::ALL.map(|s| Duration::from_nanos(self.nanos[s as usize].load(Ordering::Relaxed))),
                rows: self.rows.load(Ordering::Relaxed),
                bytes: self.bytes.load(Ordering::Relaxed),
                error: self.error.lock().take(),
            },
        );
        tracing::debug!(
            target: "silt::query",
            parent: &self.span,
            validation_ms = ms(Stage::Validation),
            planning_ms = ms(Stage::Planning),
            scan_ms = ms(Stage::Scan),
            encode_ms = ms(Stage::Encode),
            send_ms = ms(Stage::Send),
            "query finished"
        );
    }
}

/// A result stream whose poll time is the query's `scan` stage.
pub struct ScanClock<S> {
    inner: S,
    trace: QueryTrace,
    span: Span,
}

impl<S: Stream + Unpin> Stream for ScanClock<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let this = &mut *self;
        let start = Instant::now();
        let out = this.span.in_scope(|| Pin::new(&mut this.inner).poll_next(cx));
        this.trace.add(Stage::Scan, start.elapsed());
        out
    }
}

/// The response stream. Its poll time beyond the scan's is `encode`; the
/// time from a `Pending` to the next poll is the scan waiting (on the tiers
/// or the store: the encoder itself never waits), and from handing out a
/// message to the next poll is `send` (gRPC and the client taking it).
pub struct SendClock<S> {
    inner: S,
    trace: QueryTrace,
    span: Span,
    /// When the last message was handed out.
    handed_out: Option<Instant>,
    /// When the last poll returned `Pending`.
    pending_since: Option<Instant>,
}

impl<S> SendClock<S> {
    /// Counts the gap since the last poll returned: `send` after a message,
    /// `scan` after a `Pending`.
    fn close_gap(&mut self, now: Instant) {
        if let Some(t) = self.handed_out.take() {
            let _span = Stage::Send.span(&self.trace.0.span).entered();
            self.trace.add(Stage::Send, now - t);
        }
        if let Some(t) = self.pending_since.take() {
            self.trace.add(Stage::Scan, now - t);
        }
    }
}

impl<S: Stream + Unpin> Stream for SendClock<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let this = &mut *self;
        let start = Instant::now();
        this.close_gap(start);
        let scan_before = this.trace.get(Stage::Scan);
        let out = this.span.in_scope(|| Pin::new(&mut this.inner).poll_next(cx));
        let end = Instant::now();
        let scanned = this.trace.get(Stage::Scan).saturating_sub(scan_before);
        this.trace.add(Stage::Encode, (end - start).saturating_sub(scanned));
        match &out {
            Poll::Ready(Some(_)) => this.handed_out = Some(end),
            Poll::Pending => this.pending_since = Some(end),
            Poll::Ready(None) => {}
        }
        out
    }
}

impl<S> Drop for SendClock<S> {
    /// A stream dropped before its end (the client went away, or gRPC
    /// finished sending the last message) closes its last gap.
    fn drop(&mut self) {
        self.close_gap(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn stages_are_exclusive_and_recorded_once() {
        let metrics = ServerMetrics::new();
        let trace = QueryTrace::new("sql", "SELECT 1", metrics.clone());
        trace
            .time(Stage::Planning, tokio::time::sleep(Duration::from_millis(5)))
            .await;
        // A "scan" that takes 3 ms per item, under an "encoder" that adds 2 ms.
        let scan = futures::stream::iter(0..3).then(|i| async move {
            tokio::time::sleep(Duration::from_millis(3)).await;
            i
        });
        let scanned = trace.scanning(Box::pin(scan));
        let encoded = scanned.then(|i| async move {
            std::thread::sleep(Duration::from_millis(2));
            i
        });
        let mut response = trace.responding(Box::pin(encoded));
        while let Some(_item) = response.next().await {
            tokio::time::sleep(Duration::from_millis(4)).await; // the client
        }
        drop(response);
        let (plan, scan, enc, send) = (
            trace.get(Stage::Planning),
            trace.get(Stage::Scan),
            trace.get(Stage::Encode),
            trace.get(Stage::Send),
        );
        assert!(plan >= Duration::from_millis(5), "{plan:?}");
        assert!(scan >= Duration::from_millis(9), "{scan:?}");
        assert!(enc >= Duration::from_millis(6), "{enc:?}");
        assert!(send >= Duration::from_millis(12), "{send:?}");
        let count = |snap: &std::collections::BTreeMap<String, f64>| {
            snap.get("silt_query_stage_seconds_count{stage=\"scan\"}")
                .copied()
                .unwrap_or(0.0)
        };
        assert_eq!(count(&metrics.snapshot()), 0.0, "recorded only when the trace ends");
        drop(trace);
        let snap = metrics.snapshot();
        for stage in Stage::ALL {
            let count = snap[&format!("silt_query_stage_seconds_count{{stage=\"{}\"}}", stage.name())];
            assert_eq!(count, 1.0, "{}", stage.name());
        }
        let sum = snap["silt_query_stage_seconds_sum{stage=\"scan\"}"];
        assert!((sum - scan.as_secs_f64()).abs() < 1e-6, "{sum} vs {scan:?}");
    }
}
