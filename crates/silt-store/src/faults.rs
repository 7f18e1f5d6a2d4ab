//! A fault-injecting `ObjectStore` wrapper: the network between Silt and a
//! cloud object store, simulated on loopback.
//!
//! Tests use it to prove that retries, timeouts and checksums work, and
//! benchmarks use it so that a local S3 endpoint behaves like S3 (100 ms per
//! request, a shared link of bounded bandwidth). `silt serve` exposes it as
//! testing flags (`--store-latency-ms`, `--store-mbps`, `--store-fail-rate`,
//! `--store-truncate-rate`).
//!
//! Every fault is drawn from a seeded generator, so a failing test can be
//! rerun with the same sequence of faults.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{GetOptions, GetResult, ListResult, ObjectMeta, ObjectStore, Result};
use tokio::sync::Mutex;
use tokio::time::Instant;

/// What to inject. The default injects nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultConfig {
    /// Added before every request (GET, HEAD, LIST): time to first byte.
    pub latency: Duration,
    /// Bandwidth of the link shared by all requests, in bytes per second;
    /// `None` for unlimited.
    pub bytes_per_second: Option<u64>,
    /// Fraction of GETs and HEADs (0..=1) that fail with a transient error
    /// (as a 503 or a reset connection would).
    pub fail_rate: f64,
    /// Fraction of GET bodies (0..=1) cut short: the store claims the full
    /// range but delivers only part of it, as a dropped connection would.
    pub truncate_rate: f64,
    /// Seed of the fault sequence.
    pub seed: u64,
}

impl FaultConfig {
    /// Whether this configuration changes anything.
    pub fn is_active(&self) -> bool {
        !self.latency.is_zero() || self.bytes_per_second.is_some() || self.fail_rate > 0.0 || self.truncate_rate > 0.0
    }
}

/// Wraps a store and injects the faults of a [`FaultConfig`].
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    config: FaultConfig,
    rng: AtomicU64,
    /// When the shared link is next free (bandwidth model).
    link_free_at: Mutex<Instant>,
    /// When this store was made: the origin of the times in its
    /// `silt_store::link` debug events.
    created: Instant,
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn ObjectStore>, config: FaultConfig) -> Self {
        let seed = config.seed;
        FaultyStore {
            inner,
            config,
            rng: AtomicU64::new(seed),
            link_free_at: Mutex::new(Instant::now()),
            created: Instant::now(),
        }
    }

    /// A uniform draw in [0, 1) (SplitMix64 over an atomic counter).
    fn draw(&self) -> f64 {
        let mut z = self
            .rng
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    async fn delay(&self) {
        if !self.config.latency.is_zero() {
            tokio::time::sleep(self.config.latency).await;
        }
    }

    fn maybe_fail(&self, what: &str, location: &Path) -> Result<()> {
        if self.config.fail_rate > 0.0 && self.draw() < self.config.fail_rate {
            return Err(object_store::Error::Generic {
                store: "fault-injection",
                // Worded as object_store words a store's 503, which is how
                // the retry layer recognises a transient answer.
                source: format!(
                    "injected transient failure on {what} {location}: Server returned non-2xx status code: 503 Service Unavailable"
                )
                .into(),
            });
        }
        Ok(())
    }

    /// Holds the caller until `len` bytes have crossed the shared link;
    /// returns when they started crossing it.
    async fn transfer(&self, len: u64) -> Instant {
        let Some(bps) = self.config.bytes_per_second.filter(|b| *b > 0) else {
            return Instant::now();
        };
        let needed = Duration::from_secs_f64(len as f64 / bps as f64);
        let (start, done_at) = {
            let mut free_at = self.link_free_at.lock().await;
            let start = (*free_at).max(Instant::now());
            *free_at = start + needed;
            (start, *free_at)
        };
        tokio::time::sleep_until(done_at).await;
        start
    }
}

crate::read_path_store!(FaultyStore, "FaultyStore", {
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let asked = Instant::now();
        self.delay().await;
        let head = options.head;
        self.maybe_fail(if head { "HEAD" } else { "GET" }, location)?;
        let result = self.inner.get_opts(location, options).await?;
        if head {
            return Ok(result);
        }
        let meta = result.meta.clone();
        let range = result.range.clone();
        let attributes = result.attributes.clone();
        let mut body: Bytes = result.bytes().await?;
        let sent = self.transfer(body.len() as u64).await;
        // The request's life on the simulated link, for working out how
        // busy a scan keeps the store (`SILT_LOG=silt_store::link=debug`).
        let ms = |t: Instant| t.duration_since(self.created).as_secs_f64() * 1e3;
        tracing::debug!(
            target: "silt_store::link",
            %location,
            bytes = body.len(),
            asked_ms = ms(asked),
            sent_ms = ms(sent),
            done_ms = ms(Instant::now()),
            "GET"
        );
        if self.config.truncate_rate > 0.0 && !body.is_empty() && self.draw() < self.config.truncate_rate {
            body.truncate(body.len() / 2);
        }
        Ok(crate::wrapper::buffered_result(meta, range, attributes, body))
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let latency = self.config.latency;
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
});

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    async fn store_with(config: FaultConfig) -> (FaultyStore, Path) {
        let mem = Arc::new(InMemory::new());
        let p = Path::from("o");
        mem.put(&p, vec![7u8; 1000].into()).await.unwrap();
        (FaultyStore::new(mem, config), p)
    }

    #[tokio::test]
    async fn fail_rate_fails_about_that_fraction() {
        let (store, p) = store_with(FaultConfig {
            fail_rate: 0.2,
            seed: 42,
            ..Default::default()
        })
        .await;
        let mut failed = 0;
        for _ in 0..1000 {
            if store.get_range(&p, 0..10).await.is_err() {
                failed += 1;
            }
        }
        assert!((120..=280).contains(&failed), "{failed} of 1000 failed");
    }

    #[tokio::test]
    async fn truncation_delivers_a_short_body() {
        let (store, p) = store_with(FaultConfig {
            truncate_rate: 1.0,
            ..Default::default()
        })
        .await;
        let got = store.get_range(&p, 0..100).await.unwrap();
        assert_eq!(got.len(), 50);
    }

    #[tokio::test]
    async fn bandwidth_is_shared_by_concurrent_requests() {
        let (store, p) = store_with(FaultConfig {
            bytes_per_second: Some(10_000),
            ..Default::default()
        })
        .await;
        let start = Instant::now();
        let (a, b) = tokio::join!(store.get_range(&p, 0..500), store.get_range(&p, 0..500));
        a.unwrap();
        b.unwrap();
        // Two 500-byte bodies over one 10 kB/s link take at least 0.1 s
        // together (a timer never fires early); each alone would take 0.05 s.
        assert!(start.elapsed() >= Duration::from_millis(100), "{:?}", start.elapsed());
    }
}
