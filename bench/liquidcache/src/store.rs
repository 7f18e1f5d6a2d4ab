//! The object store LiquidCache reads: the loopback S3 server, behind a
//! throttle with the semantics of Silt's `FaultyStore` (every request waits
//! `latency` first; GET bodies then cross one link of `mbps` MB/s shared by
//! all requests of the store), and counted (GETs and their body bytes).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult, Result,
};
use tokio::sync::Mutex;
use tokio::time::Instant;

/// Credentials of the loopback S3 server (`crates/silt-bench/src/local_s3.rs`).
pub const ACCESS_KEY: &str = "silt-test-access";
/// See [`ACCESS_KEY`].
pub const SECRET_KEY: &str = "silt-test-secret";
/// See [`ACCESS_KEY`].
pub const REGION: &str = "us-east-1";

/// `object_store::parse_url_opts` options reaching bucket URLs on the loopback S3 at `endpoint`.
pub fn s3_options(endpoint: &str) -> Vec<(String, String)> {
    [
        ("aws_endpoint", endpoint),
        ("aws_access_key_id", ACCESS_KEY),
        ("aws_secret_access_key", SECRET_KEY),
        ("aws_region", REGION),
        ("aws_allow_http", "true"),
        ("aws_virtual_hosted_style_request", "false"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The S3 store of `bucket` on the loopback server at `endpoint` (path style, HTTP allowed).
pub fn loopback_s3(endpoint: &str, bucket: &str) -> anyhow::Result<Arc<dyn ObjectStore>> {
    let store = AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_bucket_name(bucket)
        .with_access_key_id(ACCESS_KEY)
        .with_secret_access_key(SECRET_KEY)
        .with_region(REGION)
        .with_allow_http(true)
        .with_virtual_hosted_style_request(false)
        .build()
        .map_err(|e| anyhow::anyhow!("opening s3://{bucket} at {endpoint}: {e}"))?;
    Ok(Arc::new(store))
}

/// How slow the store is.
#[derive(Debug, Clone, Copy, Default)]
pub struct Throttle {
    /// Added before every request (GET, HEAD, LIST).
    pub latency: Duration,
    /// Bandwidth of the link shared by all GET bodies, bytes per second; 0 is unlimited.
    pub bytes_per_second: u64,
}

/// GETs (ranged or not, HEADs excluded) and their body bytes, shared by the stores that count into them.
#[derive(Debug, Default)]
pub struct StoreCounters {
    pub get_requests: AtomicU64,
    pub get_bytes: AtomicU64,
    pub head_requests: AtomicU64,
}

impl StoreCounters {
    /// (GET requests, GET bytes) so far.
    pub fn read(&self) -> (u64, u64) {
        (
            self.get_requests.load(Ordering::Relaxed),
            self.get_bytes.load(Ordering::Relaxed),
        )
    }
}

/// A store made slow by a [`Throttle`] and counted into [`StoreCounters`].
pub struct SlowStore {
    inner: Arc<dyn ObjectStore>,
    throttle: Throttle,
    counters: Arc<StoreCounters>,
    /// When the shared link is next free.
    link_free_at: Mutex<Instant>,
}

impl SlowStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>, throttle: Throttle, counters: Arc<StoreCounters>) -> Self {
        SlowStore {
            inner,
            throttle,
            counters,
            link_free_at: Mutex::new(Instant::now()),
        }
    }

    async fn delay(&self) {
        if !self.throttle.latency.is_zero() {
            tokio::time::sleep(self.throttle.latency).await;
        }
    }

    /// Holds the caller until `len` bytes have crossed the shared link.
    async fn transfer(&self, len: u64) {
        if self.throttle.bytes_per_second == 0 {
            return;
        }
        let needed = Duration::from_secs_f64(len as f64 / self.throttle.bytes_per_second as f64);
        let done_at = {
            let mut free_at = self.link_free_at.lock().await;
            let start = (*free_at).max(Instant::now());
            *free_at = start + needed;
            *free_at
        };
        tokio::time::sleep_until(done_at).await;
    }
}

impl fmt::Debug for SlowStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SlowStore({:?}, {})", self.throttle, self.inner)
    }
}

impl fmt::Display for SlowStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SlowStore({})", self.inner)
    }
}

/// A result whose body is already in memory.
fn buffered(
    result_meta: ObjectMeta,
    range: std::ops::Range<u64>,
    attributes: object_store::Attributes,
    body: Bytes,
) -> GetResult {
    GetResult {
        payload: GetResultPayload::Stream(futures::stream::once(async move { Ok(body) }).boxed()),
        meta: result_meta,
        range,
        attributes,
    }
}

#[async_trait]
impl ObjectStore for SlowStore {
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.delay().await;
        let head = options.head;
        let result = self.inner.get_opts(location, options).await?;
        if head {
            self.counters.head_requests.fetch_add(1, Ordering::Relaxed);
            return Ok(result);
        }
        let (meta, range, attributes) = (result.meta.clone(), result.range.clone(), result.attributes.clone());
        let body = result.bytes().await?;
        self.transfer(body.len() as u64).await;
        self.counters.get_requests.fetch_add(1, Ordering::Relaxed);
        self.counters.get_bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
        Ok(buffered(meta, range, attributes, body))
    }

    async fn head(&self, location: &Path) -> Result<ObjectMeta> {
        self.delay().await;
        self.counters.head_requests.fetch_add(1, Ordering::Relaxed);
        self.inner.head(location).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let latency = self.throttle.latency;
        let inner = self.inner.list(prefix);
        futures::stream::once(async move {
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            inner
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.delay().await;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn delete(&self, location: &Path) -> Result<()> {
        self.inner.delete(location).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.copy_if_not_exists(from, to).await
    }
}
