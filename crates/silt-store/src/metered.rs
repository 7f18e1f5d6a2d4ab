//! An `ObjectStore` wrapper that counts what reaches the real store.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use metrics::{Counter, Histogram, Key, Level, Metadata, Recorder};
use object_store::path::Path;
use object_store::{GetOptions, GetResult, GetResultPayload, ListResult, ObjectMeta, ObjectStore, Result};
use tracing::Instrument;

static METADATA: Metadata<'static> = Metadata::new("silt_store", Level::INFO, None);

/// Counters for requests that reach the object store (after every cache).
#[derive(Clone)]
pub struct StoreMetrics {
    /// `silt_object_store_get_requests_total`: GETs with or without a range.
    pub get_requests: Counter,
    /// `silt_object_store_get_bytes_total`: body bytes those GETs returned.
    pub get_bytes: Counter,
    /// `silt_object_store_head_requests_total`.
    pub head_requests: Counter,
    /// `silt_object_store_list_requests_total`.
    pub list_requests: Counter,
    /// `silt_object_store_errors_total`: requests that failed (each attempt).
    pub errors: Counter,
    /// `silt_object_store_retries_total`: attempts repeated after a
    /// transient failure (`RetryingStore`).
    pub retries: Counter,
    /// `silt_object_store_failed_requests_total`: requests that failed for
    /// good, after their retries (`RetryingStore`).
    pub failed_requests: Counter,
    /// `silt_object_store_request_seconds`: wall time of each GET, HEAD and
    /// delimited LIST, failures too. A GET is timed until its body stream
    /// is dropped, so a slow consumer's back-pressure counts as latency.
    /// Rendered as a summary whose quantiles cover a recent window.
    pub request_seconds: Histogram,
}

impl StoreMetrics {
    /// Register the counters with `recorder` (one per server, so several
    /// servers in one process keep separate figures).
    pub fn register(recorder: &dyn Recorder) -> Self {
        let c = |name: &'static str| recorder.register_counter(&Key::from_static_name(name), &METADATA);
        StoreMetrics {
            get_requests: c("silt_object_store_get_requests_total"),
            get_bytes: c("silt_object_store_get_bytes_total"),
            head_requests: c("silt_object_store_head_requests_total"),
            list_requests: c("silt_object_store_list_requests_total"),
            errors: c("silt_object_store_errors_total"),
            retries: c("silt_object_store_retries_total"),
            failed_requests: c("silt_object_store_failed_requests_total"),
            request_seconds: recorder
                .register_histogram(&Key::from_static_name("silt_object_store_request_seconds"), &METADATA),
        }
    }

    /// Counters that record nothing (for tools that do not report).
    pub fn noop() -> Self {
        StoreMetrics {
            get_requests: Counter::noop(),
            get_bytes: Counter::noop(),
            head_requests: Counter::noop(),
            list_requests: Counter::noop(),
            errors: Counter::noop(),
            retries: Counter::noop(),
            failed_requests: Counter::noop(),
            request_seconds: Histogram::noop(),
        }
    }
}

/// Records the time from a GET's start to its body stream's drop.
struct RequestTimer(std::time::Instant, Histogram);

impl Drop for RequestTimer {
    fn drop(&mut self) {
        self.1.record(self.0.elapsed().as_secs_f64());
    }
}

/// Counts requests and bytes, then forwards to the wrapped store.
pub struct MeteredStore {
    inner: Arc<dyn ObjectStore>,
    metrics: StoreMetrics,
}

impl MeteredStore {
    pub fn new(inner: Arc<dyn ObjectStore>, metrics: StoreMetrics) -> Self {
        MeteredStore { inner, metrics }
    }

    fn count<T>(&self, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.metrics.errors.increment(1);
        }
        r
    }

    /// A GET or HEAD, counted and timed (see [`RequestTimer`]).
    async fn counted_get(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let start = std::time::Instant::now();
        if options.head {
            self.metrics.head_requests.increment(1);
            let result = self.count(self.inner.get_opts(location, options).await);
            self.metrics.request_seconds.record(start.elapsed().as_secs_f64());
            return result;
        }
        self.metrics.get_requests.increment(1);
        let mut result = self.count(self.inner.get_opts(location, options).await);
        match &mut result {
            // The body is what takes the time: the request is timed until
            // its body stream is dropped (read to the end, or abandoned).
            Ok(r) => {
                if let GetResultPayload::Stream(body) = &mut r.payload {
                    let timer = RequestTimer(start, self.metrics.request_seconds.clone());
                    let taken = std::mem::replace(body, futures::stream::empty().boxed());
                    *body = taken
                        .map(move |chunk| {
                            let _ = &timer;
                            chunk
                        })
                        .boxed();
                } else {
                    self.metrics.request_seconds.record(start.elapsed().as_secs_f64());
                }
            }
            Err(_) => self.metrics.request_seconds.record(start.elapsed().as_secs_f64()),
        }
        let result = result?;
        self.metrics.get_bytes.increment(result.range.end - result.range.start);
        Ok(result)
    }
}

crate::read_path_store!(MeteredStore, "MeteredStore", {
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let span = tracing::info_span!(
            "store_request",
            op = if options.head { "head" } else { "get" },
            path = location.as_ref(),
            range = ?options.range,
        );
        self.counted_get(location, options).instrument(span).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.metrics.list_requests.increment(1);
        self.inner.list(prefix)
    }

    fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> BoxStream<'static, Result<ObjectMeta>> {
        self.metrics.list_requests.increment(1);
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.metrics.list_requests.increment(1);
        let start = std::time::Instant::now();
        let result = self.count(self.inner.list_with_delimiter(prefix).await);
        self.metrics.request_seconds.record(start.elapsed().as_secs_f64());
        result
    }
});
