//! Retries with exponential backoff and jitter, and a per-request timeout,
//! around every read Silt makes of an object store.
//!
//! object_store's own HTTP retry covers the S3 client's connection errors and
//! 5xx answers while the response headers arrive; it does not cover a body
//! cut short half way, a store that hangs, or stores that are not HTTP. This
//! wrapper sits above all of them: every attempt gets a deadline, a ranged GET
//! counts as done only when its whole body has arrived with the length asked
//! for, and transient failures are retried. Permanent answers (not found,
//! precondition failed, permission denied) are returned at once.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{GetOptions, GetResult, ListResult, ObjectMeta, ObjectStore, Result};
use tracing::debug;

use crate::error::RequestTimeout;

/// How reads are retried.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts per request, the first included (1 = no retry).
    pub attempts: u32,
    /// Backoff before the second attempt; doubles per attempt.
    pub base_backoff: Duration,
    /// Upper bound of one backoff.
    pub max_backoff: Duration,
    /// Deadline of one attempt (request and whole body).
    pub request_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 5,
            base_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// Whether an error may go away on retry: store failures (5xx, resets,
/// timeouts, cut bodies) may; answers about the object (not found, version
/// changed, not modified, permission denied) and errors in the request
/// itself (bad range, bad path) will not.
fn is_transient(e: &object_store::Error) -> bool {
    match e {
        object_store::Error::Generic { .. } => !is_range_not_satisfiable(e),
        object_store::Error::JoinError { .. } => true,
        _ => false,
    }
}

/// Whether the store answered 416 (the range is past the object's end: the
/// object shrank, retrying cannot help). object_store keeps the HTTP status
/// in a private type, so it is read from the message.
fn is_range_not_satisfiable(e: &object_store::Error) -> bool {
    e.to_string().contains("416 Range Not Satisfiable")
}

/// Names the object and the attempts in an error that exhausted its
/// retries, keeping its kind: only `Generic` errors are retried, so only
/// they are re-wrapped (with the last failure as the source, so a typed
/// source such as [`RequestTimeout`] is still found by walking sources).
fn exhausted(what: &str, location: &Path, attempts: u32, e: object_store::Error) -> object_store::Error {
    match e {
        object_store::Error::Generic { store, source } => object_store::Error::Generic {
            store,
            source: Box::new(Exhausted {
                summary: format!("{what} {location} failed after {attempts} attempts"),
                source,
            }),
        },
        other => other,
    }
}

/// The last failure of a request whose retries ran out.
#[derive(Debug, thiserror::Error)]
#[error("{summary}: {source}")]
struct Exhausted {
    summary: String,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

/// Retries reads of the wrapped store per a [`RetryPolicy`].
pub struct RetryingStore {
    inner: Arc<dyn ObjectStore>,
    policy: RetryPolicy,
    jitter: Arc<AtomicU64>,
}

impl RetryingStore {
    pub fn new(inner: Arc<dyn ObjectStore>, policy: RetryPolicy) -> Self {
        RetryingStore {
            inner,
            policy: RetryPolicy {
                attempts: policy.attempts.max(1),
                ..policy
            },
            jitter: Arc::new(AtomicU64::new(0x5EED)),
        }
    }

    /// Full jitter: a uniform draw in [0, backoff).
    fn backoff(&self, attempt: u32) -> Duration {
        let cap = self
            .policy
            .base_backoff
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.policy.max_backoff);
        let mut z = self.jitter.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        z = (z ^ (z >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let unit = (z >> 11) as f64 / (1u64 << 53) as f64;
        cap.mul_f64(0.5 + unit / 2.0)
    }

    async fn with_retries<T, F, Fut>(&self, what: &str, location: &Path, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let outcome = match tokio::time::timeout(self.policy.request_timeout, op()).await {
                Ok(r) => r,
                Err(_) => Err(object_store::Error::Generic {
                    store: "silt",
                    source: Box::new(RequestTimeout {
                        what: what.to_string(),
                        location: location.to_string(),
                        after: self.policy.request_timeout,
                    }),
                }),
            };
            match outcome {
                Err(e) if is_transient(&e) && attempt < self.policy.attempts => {
                    let wait = self.backoff(attempt - 1);
                    debug!(%location, attempt, ?wait, error = %e, "retrying {what}");
                    tokio::time::sleep(wait).await;
                }
                Err(e) if attempt > 1 => return Err(exhausted(what, location, attempt, e)),
                other => return other,
            }
        }
    }

    /// One GET attempt, with the whole body read and its length checked.
    async fn get_once(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let result = self.inner.get_opts(location, options).await?;
        let meta = result.meta.clone();
        let range = result.range.clone();
        let attributes = result.attributes.clone();
        let body: Bytes = result.bytes().await?;
        let expected = range.end - range.start;
        if body.len() as u64 != expected {
            return Err(object_store::Error::Generic {
                store: "silt",
                source: format!(
                    "short body from {location}: expected {expected} bytes at offset {}, got {}",
                    range.start,
                    body.len()
                )
                .into(),
            });
        }
        Ok(crate::wrapper::buffered_result(meta, range, attributes, body))
    }
}

crate::read_path_store!(RetryingStore, "RetryingStore", {
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        if options.head {
            return self
                .with_retries("HEAD", location, || self.inner.get_opts(location, options.clone()))
                .await;
        }
        self.with_retries("GET", location, || self.get_once(location, options.clone()))
            .await
    }

    /// Listings are collected whole, so a listing that fails half way is
    /// retried from the start instead of being returned incomplete.
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let inner = self.inner.clone();
        let prefix = prefix.cloned();
        // Shares the jitter sequence; the listing outlives `&self`.
        let this = RetryingStore {
            inner: inner.clone(),
            policy: self.policy,
            jitter: self.jitter.clone(),
        };
        futures::stream::once(async move {
            let where_ = prefix.clone().unwrap_or_default();
            let all = this
                .with_retries("LIST", &where_, || {
                    inner.list(prefix.as_ref()).try_collect::<Vec<ObjectMeta>>()
                })
                .await;
            match all {
                Ok(v) => futures::stream::iter(v.into_iter().map(Ok)).boxed(),
                Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
            }
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let where_ = prefix.cloned().unwrap_or_default();
        self.with_retries("LIST", &where_, || self.inner.list_with_delimiter(prefix))
            .await
    }
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::{FaultConfig, FaultyStore};
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    fn quick(attempts: u32) -> RetryPolicy {
        RetryPolicy {
            attempts,
            base_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(2),
            request_timeout: Duration::from_secs(5),
        }
    }

    async fn faulty(config: FaultConfig) -> (Arc<InMemory>, Arc<dyn ObjectStore>, Path) {
        let mem = Arc::new(InMemory::new());
        let p = Path::from("dir/o");
        mem.put(&p, (0..=255u8).cycle().take(4000).collect::<Vec<u8>>().into())
            .await
            .unwrap();
        (mem.clone(), Arc::new(FaultyStore::new(mem, config)), p)
    }

    #[tokio::test]
    async fn transient_failures_and_short_bodies_are_retried() {
        let (mem, flaky, p) = faulty(FaultConfig {
            fail_rate: 0.3,
            truncate_rate: 0.3,
            seed: 7,
            ..Default::default()
        })
        .await;
        let store = RetryingStore::new(flaky, quick(20));
        let want = mem.get_range(&p, 100..3000).await.unwrap();
        for _ in 0..50 {
            assert_eq!(store.get_range(&p, 100..3000).await.unwrap(), want);
            store.head(&p).await.unwrap();
        }
        let listed: Vec<_> = store.list(Some(&Path::from("dir"))).try_collect().await.unwrap();
        assert_eq!(listed.len(), 1);
    }

    #[tokio::test]
    async fn not_found_is_not_retried_and_exhaustion_names_the_object() {
        let (_, flaky, p) = faulty(FaultConfig {
            fail_rate: 1.0,
            ..Default::default()
        })
        .await;
        let store = RetryingStore::new(flaky, quick(3));
        let err = store.get_range(&p, 0..10).await.unwrap_err().to_string();
        assert!(err.contains("dir/o") && err.contains("3 attempts"), "{err}");

        let (_, clean, _) = faulty(FaultConfig::default()).await;
        let store = RetryingStore::new(clean, quick(3));
        let missing = store.get_range(&Path::from("nope"), 0..1).await.unwrap_err();
        assert!(matches!(missing, object_store::Error::NotFound { .. }), "{missing}");
    }

    #[tokio::test]
    async fn kinds_survive_retries() {
        // Fails the first attempts, then answers: NotFound after a retried
        // failure is still NotFound, not a generic error.
        let (_, flaky, _) = faulty(FaultConfig {
            fail_rate: 0.5,
            seed: 3,
            ..Default::default()
        })
        .await;
        let store = RetryingStore::new(flaky, quick(30));
        for i in 0..20 {
            let e = store
                .get_range(&Path::from(format!("missing-{i}")), 0..1)
                .await
                .unwrap_err();
            assert!(matches!(e, object_store::Error::NotFound { .. }), "{e}");
        }
    }

    #[tokio::test]
    async fn timeouts_carry_a_typed_source() {
        let (_, slow, p) = faulty(FaultConfig {
            latency: Duration::from_millis(200),
            ..Default::default()
        })
        .await;
        let store = RetryingStore::new(
            slow,
            RetryPolicy {
                request_timeout: Duration::from_millis(20),
                ..quick(2)
            },
        );
        let e = store.get_range(&p, 0..1).await.unwrap_err();
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        let mut typed = false;
        while let Some(s) = source {
            typed |= s.downcast_ref::<RequestTimeout>().is_some();
            source = s.source();
        }
        assert!(typed, "{e}");
    }
}
