//! The one retry layer of every read Silt makes of an object store:
//! exponential backoff with jitter, a deadline per attempt and a total
//! deadline per request.
//!
//! object_store's own HTTP retries are switched off (`location.rs`), so a
//! request costs at most [`RetryPolicy::attempts`] HTTP requests and
//! [`RetryPolicy::total_timeout`] of time, whatever the store. This layer
//! covers what the HTTP client's retry could not anyway: a body cut short
//! half way, a store that hangs, stores that are not HTTP. A ranged GET counts
//! as done only when its whole body has arrived with the length asked for.
//! Only transient failures are retried (see [`is_transient`]): timeouts,
//! connection errors and resets, 5xx and 429 answers, cut bodies. Permanent
//! answers (not found, precondition failed, permission denied, a bad range)
//! and errors that are not the store's are returned at once. Retries and
//! requests that failed for good are counted (`silt_object_store_retries_total`,
//! `silt_object_store_failed_requests_total`).

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
use crate::metered::StoreMetrics;

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
    /// Deadline of the whole request: every attempt and backoff. No retry
    /// starts that could not finish before it.
    pub total_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 5,
            base_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            request_timeout: Duration::from_secs(30),
            total_timeout: Duration::from_secs(90),
        }
    }
}

/// Whether an error may go away on retry. Only store failures may: an
/// attempt that timed out ([`RequestTimeout`]), a connection that could not
/// be made or broke ([`object_store::client::HttpError`] of kind connect,
/// request, timeout, interrupted or decode), a 5xx or 429 answer, a body cut
/// short. Answers about the object (not found, version changed, not
/// modified, permission denied, a range past its end) and every other error
/// (a bad request, an error that is not the store's) will not.
pub fn is_transient(e: &object_store::Error) -> bool {
    use object_store::client::{HttpError, HttpErrorKind};
    match e {
        object_store::Error::JoinError { .. } => true,
        object_store::Error::Generic { .. } => {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
            while let Some(s) = source {
                if s.downcast_ref::<RequestTimeout>().is_some()
                    || s.downcast_ref::<ShortBody>().is_some()
                    || s.downcast_ref::<BodyInterrupted>().is_some()
                {
                    return true;
                }
                if let Some(http) = s.downcast_ref::<HttpError>() {
                    return matches!(
                        http.kind(),
                        HttpErrorKind::Connect
                            | HttpErrorKind::Request
                            | HttpErrorKind::Timeout
                            | HttpErrorKind::Interrupted
                            | HttpErrorKind::Decode
                    );
                }
                source = s.source();
            }
            http_status(e).is_some_and(|status| status == 429 || (500..600).contains(&status))
        }
        _ => false,
    }
}

/// The HTTP status a store answered with, when the error carries one.
/// object_store keeps it in a private type, so it is read from the message
/// ("... status code: 503 Service Unavailable ...").
fn http_status(e: &object_store::Error) -> Option<u16> {
    let text = e.to_string();
    let at = text.find("status code: ")? + "status code: ".len();
    text[at..].get(..3)?.parse().ok()
}

/// A GET whose body failed to arrive after its headers did (the transfer
/// broke): transient.
#[derive(Debug, thiserror::Error)]
#[error("reading the body of {location}: {source}")]
pub struct BodyInterrupted {
    pub location: String,
    #[source]
    pub source: object_store::Error,
}

/// A GET whose body ended before the length asked for (a connection cut
/// half way): transient.
#[derive(Debug, thiserror::Error)]
#[error("short body from {location}: expected {expected} bytes at offset {offset}, got {got}")]
pub struct ShortBody {
    pub location: String,
    pub expected: u64,
    pub offset: u64,
    pub got: u64,
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

/// Retries reads of the wrapped store per a [`RetryPolicy`]. Cloning is
/// cheap and clones share the jitter sequence and counters.
#[derive(Clone)]
pub struct RetryingStore {
    inner: Arc<dyn ObjectStore>,
    state: Arc<Retrying>,
}

/// What the clones of a [`RetryingStore`] share.
struct Retrying {
    policy: RetryPolicy,
    jitter: AtomicU64,
    metrics: StoreMetrics,
}

impl RetryingStore {
    pub fn new(inner: Arc<dyn ObjectStore>, policy: RetryPolicy) -> Self {
        Self::with_metrics(inner, policy, StoreMetrics::noop())
    }

    /// Counting retries and failed requests in `metrics`.
    pub fn with_metrics(inner: Arc<dyn ObjectStore>, policy: RetryPolicy, metrics: StoreMetrics) -> Self {
        RetryingStore {
            inner,
            state: Arc::new(Retrying {
                policy: RetryPolicy {
                    attempts: policy.attempts.max(1),
                    ..policy
                },
                jitter: AtomicU64::new(0x5EED),
                metrics,
            }),
        }
    }

    /// Full jitter: a uniform draw in [backoff / 2, backoff).
    fn backoff(&self, attempt: u32) -> Duration {
        let cap = self
            .state
            .policy
            .base_backoff
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.state.policy.max_backoff);
        let mut z = self.state.jitter.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        z = (z ^ (z >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let unit = (z >> 11) as f64 / (1u64 << 53) as f64;
        cap.mul_f64(0.5 + unit / 2.0)
    }

    async fn with_retries<T, F, Fut>(&self, what: &str, location: &Path, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let policy = &self.state.policy;
        let deadline = tokio::time::Instant::now() + policy.total_timeout;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let limit = policy.request_timeout.min(left);
            let outcome = match tokio::time::timeout(limit, op()).await {
                Ok(r) => r,
                Err(_) => Err(object_store::Error::Generic {
                    store: "silt",
                    source: Box::new(RequestTimeout {
                        what: what.to_string(),
                        location: location.to_string(),
                        after: limit,
                    }),
                }),
            };
            let e = match outcome {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            let wait = self.backoff(attempt - 1);
            // A retry must have a fair part of an attempt's time left after
            // its backoff (else it is a request sure to time out).
            let fair_attempt = policy.request_timeout / 4;
            let time_left = tokio::time::Instant::now() + wait + fair_attempt < deadline;
            if is_transient(&e) && attempt < policy.attempts && time_left {
                self.state.metrics.retries.increment(1);
                debug!(%location, attempt, ?wait, error = %e, "retrying {what}");
                tokio::time::sleep(wait).await;
                continue;
            }
            self.state.metrics.failed_requests.increment(1);
            return Err(if attempt > 1 {
                exhausted(what, location, attempt, e)
            } else {
                e
            });
        }
    }

    /// One GET attempt, with the whole body read and its length checked.
    async fn get_once(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let result = self.inner.get_opts(location, options).await?;
        let meta = result.meta.clone();
        let range = result.range.clone();
        let attributes = result.attributes.clone();
        // The headers arrived: whatever fails now is the transfer (a reset
        // stream, a broken connection), which a new attempt may not meet.
        let body: Bytes = result.bytes().await.map_err(|e| object_store::Error::Generic {
            store: "silt",
            source: Box::new(BodyInterrupted {
                location: location.to_string(),
                source: e,
            }),
        })?;
        let expected = range.end - range.start;
        if body.len() as u64 != expected {
            return Err(object_store::Error::Generic {
                store: "silt",
                source: Box::new(ShortBody {
                    location: location.to_string(),
                    expected,
                    offset: range.start,
                    got: body.len() as u64,
                }),
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
        // The listing outlives `&self`.
        let this = self.clone();
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
            total_timeout: Duration::from_secs(60),
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

    #[test]
    fn only_store_failures_are_transient() {
        use object_store::client::{HttpError, HttpErrorKind};
        let generic =
            |source: Box<dyn std::error::Error + Send + Sync>| object_store::Error::Generic { store: "test", source };
        let status = |code: &str| generic(format!("Server returned non-2xx status code: {code}: body").into());
        assert!(is_transient(&status("503 Service Unavailable")));
        assert!(is_transient(&status("500 Internal Server Error")));
        assert!(is_transient(&status("429 Too Many Requests")));
        assert!(!is_transient(&status("403 Forbidden")));
        assert!(!is_transient(&status("416 Range Not Satisfiable")));
        assert!(!is_transient(&generic(
            "invalid range 5..3 of an object of 4 bytes".into()
        )));
        let timeout = RequestTimeout {
            what: "GET".into(),
            location: "o".into(),
            after: Duration::from_secs(1),
        };
        assert!(is_transient(&generic(Box::new(timeout))));
        let short = ShortBody {
            location: "o".into(),
            expected: 10,
            offset: 0,
            got: 3,
        };
        assert!(is_transient(&generic(Box::new(short))));
        let broken = BodyInterrupted {
            location: "o".into(),
            source: generic("stream reset".into()),
        };
        assert!(is_transient(&generic(Box::new(broken))));
        let http = |kind| generic(Box::new(HttpError::new(kind, std::io::Error::other("reset"))));
        assert!(is_transient(&http(HttpErrorKind::Connect)));
        assert!(is_transient(&http(HttpErrorKind::Interrupted)));
        assert!(!is_transient(&http(HttpErrorKind::Unknown)));
        let not_found = object_store::Error::NotFound {
            path: "o".into(),
            source: "gone".into(),
        };
        assert!(!is_transient(&not_found));
    }

    #[tokio::test]
    async fn retries_stop_at_the_total_deadline_and_are_counted() {
        let (_, slow, p) = faulty(FaultConfig {
            latency: Duration::from_millis(200),
            ..Default::default()
        })
        .await;
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let metrics = StoreMetrics::register(&recorder);
        let store = RetryingStore::with_metrics(
            slow,
            RetryPolicy {
                attempts: 1000,
                request_timeout: Duration::from_millis(20),
                total_timeout: Duration::from_millis(150),
                ..quick(1000)
            },
            metrics,
        );
        let e = store.get_range(&p, 0..1).await.unwrap_err();
        let text = recorder.handle().render();
        let value = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let retries = value("silt_object_store_retries_total");
        // 20 ms attempts and ~2 ms backoffs within 150 ms: a handful at
        // most, never the 999 the attempts would allow.
        assert!(retries < 20.0, "{retries} retries: {e}");
        assert_eq!(value("silt_object_store_failed_requests_total"), 1.0);
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
